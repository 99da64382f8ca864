#include "gen_args.h"

#include <stdio.h>

#include "args.h"

void gen_opts_init(gen_opts *g) {
  qvl_sampling_default(&g->sampling);
  g->max_tokens = 512;
  g->n_stops = 0;
}

int gen_args_take(int argc, char **argv, int *i, gen_opts *g, const char *cmd) {
  const char *v;
  qvl_sampling *sp = &g->sampling;
  if (arg_value(argc, argv, i, "--max-tokens", "-n", &v))
    g->max_tokens = arg_int("--max-tokens", v, 1, 1 << 20);
  else if (arg_value(argc, argv, i, "--temp", NULL, &v))
    sp->temperature = (float)arg_double("--temp", v, 0, 100);
  else if (arg_value(argc, argv, i, "--top-k", NULL, &v))
    sp->top_k = (int32_t)arg_int("--top-k", v, 0, 1 << 30);
  else if (arg_value(argc, argv, i, "--top-p", NULL, &v))
    sp->top_p = (float)arg_double("--top-p", v, 0, 1);
  else if (arg_value(argc, argv, i, "--min-p", NULL, &v))
    sp->min_p = (float)arg_double("--min-p", v, 0, 1);
  else if (arg_value(argc, argv, i, "--seed", NULL, &v))
    sp->seed = (uint64_t)arg_int("--seed", v, 0, INT64_MAX);
  else if (arg_value(argc, argv, i, "--repeat-penalty", NULL, &v))
    sp->repetition_penalty = (float)arg_double("--repeat-penalty", v, 0.01, 100);
  else if (arg_value(argc, argv, i, "--presence-penalty", NULL, &v))
    sp->presence_penalty = (float)arg_double("--presence-penalty", v, -2, 2);
  else if (arg_value(argc, argv, i, "--frequency-penalty", NULL, &v))
    sp->frequency_penalty = (float)arg_double("--frequency-penalty", v, -2, 2);
  else if (arg_value(argc, argv, i, "--stop", NULL, &v)) {
    if (g->n_stops == GEN_MAX_STOPS) {
      fprintf(stderr, "%s: at most %d stop strings\n", cmd, GEN_MAX_STOPS);
      return 2;
    }
    g->stops[g->n_stops++] = v;
  } else
    return 0;
  return 1;
}

qvl_status gen_opts_apply(const gen_opts *g, qvl_request *rq) {
  qvl_request_set_sampling(rq, &g->sampling);
  qvl_request_set_max_tokens(rq, g->max_tokens);
  for (int i = 0; i < g->n_stops; i++) {
    qvl_status s = qvl_request_add_stop(rq, g->stops[i]);
    if (s != QVL_OK)
      return s;
  }
  return QVL_OK;
}
