#include "gen_args.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "args.h"

void gen_opts_init(gen_opts *g) {
  /* "Not given" (NAN, top_k -1: the options accept only values >= 0): gen_opts_apply takes the
   * model's recommendation for those. */
  qvl_sampling_default(&g->sampling);
  qvl_sampling *sp = &g->sampling;
  sp->temperature = sp->top_p = sp->min_p = NAN;
  sp->repetition_penalty = sp->presence_penalty = sp->frequency_penalty = NAN;
  sp->top_k = -1;
  g->max_tokens = 512;
  g->n_stops = 0;
  g->reasoning_budget = -1;
  g->hide_reasoning = false;
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
  else if (arg_value(argc, argv, i, "--reasoning-budget", NULL, &v))
    g->reasoning_budget = arg_int("--reasoning-budget", v, -1, 1 << 20);
  else if (arg_flag(argv, *i, "--hide-reasoning", NULL))
    g->hide_reasoning = true;
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

qvl_status gen_opts_apply(const gen_opts *g, const qvl_model *m, qvl_request *rq) {
  qvl_sampling sp = g->sampling, rec;
  qvl_model_sampling(m, &rec);
  if (isnan(sp.temperature))
    sp.temperature = rec.temperature;
  if (isnan(sp.top_p))
    sp.top_p = rec.top_p;
  if (isnan(sp.min_p))
    sp.min_p = rec.min_p;
  if (isnan(sp.repetition_penalty))
    sp.repetition_penalty = rec.repetition_penalty;
  if (isnan(sp.presence_penalty))
    sp.presence_penalty = rec.presence_penalty;
  if (isnan(sp.frequency_penalty))
    sp.frequency_penalty = rec.frequency_penalty;
  if (sp.top_k < 0)
    sp.top_k = rec.top_k;
  qvl_request_set_sampling(rq, &sp);
  qvl_request_set_max_tokens(rq, g->max_tokens);
  qvl_request_set_reasoning_budget(rq, g->reasoning_budget);
  for (int i = 0; i < g->n_stops; i++) {
    qvl_status s = qvl_request_add_stop(rq, g->stops[i]);
    if (s != QVL_OK)
      return s;
  }
  return QVL_OK;
}

static struct {
  bool hide, tty, open; /* open: a dimmed reasoning section is being printed */
  bool any;             /* reasoning was shown */
} g_show;

#define DIM "\033[2m"
#define UNDIM "\033[0m"

void gen_show_begin(const gen_opts *g) {
  g_show.hide = g->hide_reasoning;
  g_show.tty = isatty(STDOUT_FILENO);
  g_show.open = g_show.any = false;
}

bool gen_show_reasoning(void *user, const char *text, size_t len) {
  (void)user;
  if (g_show.hide)
    return true;
  FILE *f = g_show.tty ? stdout : stderr;
  if (g_show.tty && !g_show.open)
    fputs(DIM, f);
  g_show.open = g_show.any = true;
  fwrite(text, 1, len, f);
  fflush(f);
  return true;
}

/* Ends the dimmed section, with a blank line between reasoning and answer. */
static void close_reasoning(void) {
  if (!g_show.any)
    return;
  if (g_show.tty) {
    if (g_show.open)
      fputs(UNDIM "\n\n", stdout);
  } else if (g_show.open) {
    fputs("\n", stderr);
    fflush(stderr);
  }
  g_show.open = false;
}

bool gen_show_text(void *user, const char *text, size_t len) {
  (void)user;
  close_reasoning();
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return true;
}

void gen_show_end(void) {
  if (g_show.open && g_show.tty)
    fputs(UNDIM, stdout);
  else if (g_show.open)
    fputs("\n", stderr);
  g_show.open = false;
  fflush(stdout);
}
