#include "gen_args.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>


void gen_opts_init(gen_opts *g) {
  qvl_sampling d;
  qvl_sampling_default(&d);
  *g = (gen_opts){.max_tokens = 512, .top_k = -1, .seed = (int64_t)d.seed, .reasoning_budget = -1};
  g->temp = g->top_p = g->min_p = NAN;
  g->repeat_penalty = g->presence_penalty = g->frequency_penalty = NAN;
}

static float given_or(double v, float recommended) { return isnan(v) ? recommended : (float)v; }

qvl_status gen_opts_apply(const gen_opts *g, const qvl_model *m, qvl_request *rq) {
  qvl_sampling sp;
  qvl_model_sampling(m, &sp);
  sp.temperature = given_or(g->temp, sp.temperature);
  sp.top_p = given_or(g->top_p, sp.top_p);
  sp.min_p = given_or(g->min_p, sp.min_p);
  sp.repetition_penalty = given_or(g->repeat_penalty, sp.repetition_penalty);
  sp.presence_penalty = given_or(g->presence_penalty, sp.presence_penalty);
  sp.frequency_penalty = given_or(g->frequency_penalty, sp.frequency_penalty);
  if (g->top_k >= 0)
    sp.top_k = (int32_t)g->top_k;
  sp.seed = (uint64_t)g->seed;
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
