/* The generation options that qvl run and qvl chat share (sampling, length, stop strings). */
#ifndef QVL_APPS_GEN_ARGS_H
#define QVL_APPS_GEN_ARGS_H

#include "qvl.h"
#include "qvl_options.h"

typedef struct gen_opts {
  int64_t max_tokens;
  /* sampling: NAN (numbers) or -1 (top_k) when not given, then the model's recommendation */
  double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
  int64_t top_k, seed;
  char **stops;                     /* argv strings */
  int n_stops;
  int64_t reasoning_budget;         /* a reasoning model's think tokens: -1 unbounded, 0 none */
  bool hide_reasoning;
} gen_opts;

/* Sampling options "not given", 512 tokens, no stop strings. */
void gen_opts_init(gen_opts *g);
/* The generation options of run and chat (--max-tokens/-n, --temp, --top-k, --top-p, --min-p,
 * --seed, --repeat-penalty, --presence-penalty, --frequency-penalty, --stop, --reasoning-budget,
 * --hide-reasoning) as bindings onto the gen_opts field f of type. */
#define GEN_OPTS_BINDS(type, f)                                                                                      \
  QVL_OPT_FIELD(qvl_opt_max_tokens, type, f.max_tokens), QVL_OPT_FIELD(qvl_opt_temp, type, f.temp),                  \
      QVL_OPT_FIELD(qvl_opt_top_k, type, f.top_k), QVL_OPT_FIELD(qvl_opt_top_p, type, f.top_p),                      \
      QVL_OPT_FIELD(qvl_opt_min_p, type, f.min_p), QVL_OPT_FIELD(qvl_opt_seed, type, f.seed),                        \
      QVL_OPT_FIELD(qvl_opt_repeat_penalty, type, f.repeat_penalty),                                                 \
      QVL_OPT_FIELD(qvl_opt_presence_penalty, type, f.presence_penalty),                                             \
      QVL_OPT_FIELD(qvl_opt_frequency_penalty, type, f.frequency_penalty),                                           \
      QVL_OPT_LIST_FIELD(qvl_opt_stop, type, f.stops, f.n_stops),                                                    \
      QVL_OPT_FIELD(qvl_opt_reasoning_budget, type, f.reasoning_budget),                                             \
      QVL_OPT_FIELD(qvl_opt_hide_reasoning, type, f.hide_reasoning)
/* What --help says after the options about the sampling defaults. */
#define GEN_OPTS_NOTES                                                                                               \
  "Sampling options not given take the model's recommendation (generation_config.json, GGUF\n"                      \
  "general.sampling.*, else Qwen3-VL's temperature 0.7, top-p 0.8, top-k 20).\n"
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
