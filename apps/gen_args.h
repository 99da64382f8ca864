/* The generation options that qvl run and qvl chat share (sampling, length, stop strings). */
#ifndef QVL_APPS_GEN_ARGS_H
#define QVL_APPS_GEN_ARGS_H

#include "qvl.h"

#define GEN_MAX_STOPS 8

typedef struct gen_opts {
  qvl_sampling sampling;
  int64_t max_tokens;
  const char *stops[GEN_MAX_STOPS]; /* argv strings */
  int n_stops;
  int64_t reasoning_budget;         /* a reasoning model's think tokens: -1 unbounded, 0 none */
  bool hide_reasoning;
} gen_opts;

/* Sampling options "not given" (the model's recommendation at gen_opts_apply), 512 tokens, no
 * stop strings. */
void gen_opts_init(gen_opts *g);
/* Takes argv[*i] when it is one of --max-tokens/-n, --temp, --top-k, --top-p, --min-p, --seed,
 * --repeat-penalty, --presence-penalty, --frequency-penalty, --stop, --reasoning-budget or
 * --hide-reasoning into g. Returns 1 when it
 * was (and advances *i past its value), 0 when not, 2 after a message naming cmd. Bad numbers
 * exit(2) as arg_int does. */
int gen_args_take(int argc, char **argv, int *i, gen_opts *g, const char *cmd);
/* Printing a reasoning model's output: reasoning dimmed (ANSI) when stdout is a terminal, else on
 * stderr so that stdout keeps the answer alone; nothing with --hide-reasoning. Call
 * gen_show_begin before each request, give gen_show_reasoning / gen_show_text as its callbacks
 * (any user pointer) and call gen_show_end after it. One request at a time. */
void gen_show_begin(const gen_opts *g);
bool gen_show_reasoning(void *user, const char *text, size_t len);
bool gen_show_text(void *user, const char *text, size_t len);
void gen_show_end(void);
/* Sampling (the options given, the model's recommendation for the others), max_tokens and stop
 * strings into a request. */
qvl_status gen_opts_apply(const gen_opts *g, const qvl_model *m, qvl_request *rq);

#endif
