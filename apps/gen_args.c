#include "gen_args.h"

#include <math.h>
#include <stdio.h>

#include "args.h"

int gen_args_take(int argc, char **argv, int *i, gen_params *gp, const char **stops, int *n_stops, int max_stops,
                  const char *cmd) {
  const char *v;
  sampler_params *sp = &gp->sampling;
  if (arg_value(argc, argv, i, "--max-tokens", "-n", &v))
    gp->max_tokens = arg_int("--max-tokens", v, 1, 1 << 20);
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
    if (*n_stops == max_stops) {
      fprintf(stderr, "%s: at most %d stop strings\n", cmd, max_stops);
      return 2;
    }
    stops[(*n_stops)++] = v;
  } else
    return 0;
  return 1;
}

/* "Not given": NAN for the floats, -1 for top_k (the options accept only values >= 0). */
void gen_args_unset_sampling(gen_params *gp) {
  sampler_params *sp = &gp->sampling;
  sp->temperature = sp->top_p = sp->min_p = NAN;
  sp->repetition_penalty = sp->presence_penalty = sp->frequency_penalty = NAN;
  sp->top_k = -1;
}

void gen_args_model_defaults(gen_params *gp, const sampler_params *model) {
  sampler_params *sp = &gp->sampling;
  if (isnan(sp->temperature))
    sp->temperature = model->temperature;
  if (isnan(sp->top_p))
    sp->top_p = model->top_p;
  if (isnan(sp->min_p))
    sp->min_p = model->min_p;
  if (isnan(sp->repetition_penalty))
    sp->repetition_penalty = model->repetition_penalty;
  if (isnan(sp->presence_penalty))
    sp->presence_penalty = model->presence_penalty;
  if (isnan(sp->frequency_penalty))
    sp->frequency_penalty = model->frequency_penalty;
  if (sp->top_k < 0)
    sp->top_k = model->top_k;
}
