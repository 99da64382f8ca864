/* Command-line helpers shared by the qvl subcommands, over the one option table (qvl_options.h). */
#ifndef QVL_APPS_ARGS_H
#define QVL_APPS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl_options.h"

/* Parses argv[2..] with the command's table into dst (qvl_opts_parse: the environment variables the
 * table reads, then the flags; positional arguments into args[0..c->max_args), *n_args how many).
 * Returns -1 to go on, 0 after printing --help (defaults read from dst), or 2 after a message. */
int args_parse(const qvl_opt_cmd *c, int argc, char **argv, void *dst, const char **args, int *n_args);
/* "qvl CMD: what is missing" and the usage on stderr; returns 2. */
int args_usage_error(const qvl_opt_cmd *c, const void *defaults, const char *msg);

/* The model options of run, chat and bench: --model/-m, --mmproj, --hf, --offline, --dtype,
 * --threads/-t (MODEL_ARGS_BINDS), and the process-wide --precision and --kv-type. */
typedef struct model_args {
  const char *model, *mmproj, *hf, *dtype;
  bool offline;
  int64_t threads;
  const char *precision, *kv_type; /* NULL: not given (the environment's, else the default) */
} model_args;

#define MODEL_ARGS_BINDS(type, f)                                                                                    \
  QVL_OPT_FIELD(qvl_opt_model, type, f.model), QVL_OPT_FIELD(qvl_opt_mmproj, type, f.mmproj),                        \
      QVL_OPT_FIELD(qvl_opt_hf, type, f.hf), QVL_OPT_FIELD(qvl_opt_offline, type, f.offline),                        \
      QVL_OPT_FIELD(qvl_opt_dtype, type, f.dtype), QVL_OPT_FIELD(qvl_opt_threads, type, f.threads)
#define PRECISION_BIND(type, f) QVL_OPT_FIELD(qvl_opt_precision, type, f.precision)
#define KV_TYPE_BIND(type, f) QVL_OPT_FIELD(qvl_opt_kv_type, type, f.kv_type)

/* Applies --precision and --kv-type (qvl_set_precision, qvl_set_kv_type) to the models and engines
 * made afterwards. Returns 0, or 2 after a message naming cmd. */
int args_apply_process(const char *cmd, const char *precision, const char *kv_type);
/* Model files: -m, or --hf REPO[:QUANT] (downloaded into the cache, or found there with --offline),
 * not both. On success a->model (and a->mmproj) name files that live until the process ends.
 * Returns 0 or an exit code after a message. */
int args_resolve_model(const char *cmd, model_args *a);
/* Prints "qvl: <msg>: <qvl_last_error()>" and returns the exit code for a status. */
int report_error(const char *what, int status);

#endif
