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
} gen_opts;

/* The library's sampling defaults, 512 tokens, no stop strings. */
void gen_opts_init(gen_opts *g);
/* Takes argv[*i] when it is one of --max-tokens/-n, --temp, --top-k, --top-p, --min-p, --seed,
 * --repeat-penalty, --presence-penalty, --frequency-penalty or --stop into g. Returns 1 when it
 * was (and advances *i past its value), 0 when not, 2 after a message naming cmd. Bad numbers
 * exit(2) as arg_int does. */
int gen_args_take(int argc, char **argv, int *i, gen_opts *g, const char *cmd);
/* Sampling, max_tokens and stop strings into a request. */
qvl_status gen_opts_apply(const gen_opts *g, qvl_request *rq);

#endif
