/*
 * qvl options — the one option table of the qvl commands. An option is declared once (qvl_opt: its
 * name, kind, range or accepted values, help); the name gives its flag (--max-batch-size), its
 * environment variable (QVL_MAX_BATCH_SIZE) and its YAML key (max_batch_size). The options several
 * commands share (model files, threads, ctx, sampling, image and video pixel bounds, precision, ...)
 * are declared here, in the service archive (src/options/common_options.c); a command lists the
 * ones it takes and its own, declared in the same form, as bindings onto the fields of its own
 * struct (qvl_opt_cmd). Parsing, checking, the environment and --help all come from that list, so
 * a range cannot differ between two commands, and --help lists exactly what parses.
 *
 *     typedef struct my_opts { const char *model; int64_t ctx; bool json; } my_opts;
 *     static const qvl_opt o_json = {"json", NULL, QVL_OPT_BOOL, .help = "print JSON"};
 *     static const qvl_opt_bind binds[] = {QVL_OPT_FIELD(qvl_opt_model, my_opts, model),
 *                                          QVL_OPT_FIELD(qvl_opt_ctx, my_opts, ctx),
 *                                          QVL_OPT_FIELD(o_json, my_opts, json)};
 *     static const qvl_opt_cmd cmd = {.name = "qvl mine", .usage = "usage: qvl mine -m MODEL [options]\n",
 *                                     .opts = binds, .n_opts = sizeof binds / sizeof binds[0]};
 *     my_opts o = {0};
 *     bool help;
 *     if (qvl_opts_parse(&cmd, argc, argv, 2, &o, NULL, NULL, NULL, &help) != QVL_OK) -> qvl_last_error(), exit 2
 *     if (help) -> qvl_opts_usage(&cmd, &o, stdout), exit 0
 *
 * Messages name where a value came from and the option's key: "--ctx: ctx expects an integer in
 * [64, 262144], got '5'", "QVL_CTX: ...", "serve.yaml:3: ..." (qvl serve reads YAML with the same
 * bindings, src/server/config/settings.c).
 *
 * Thread safety: the tables are constant; parsing writes only the caller's struct.
 */
#ifndef QVL_OPTIONS_H
#define QVL_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qvl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_opt_kind {
  QVL_OPT_STR,  /* char * (into argv / the environment, or a copy when the command owns its strings) */
  QVL_OPT_INT,  /* int64_t in [min, max] */
  QVL_OPT_NUM,  /* double in [lo, hi] */
  QVL_OPT_BOOL, /* bool: "--flag" alone is true; "--flag=false", YAML and env take 1/0 true/false yes/no on/off */
  QVL_OPT_LIST, /* char ** + int count: a repeatable flag (env: comma-separated), at most max items */
  QVL_OPT_CALL, /* the binding's function takes the text (an ordered list of two kinds, a value list) */
} qvl_opt_kind;

#define QVL_OPT_ENV_ALWAYS 1u /* read from its environment variable by every command that takes it */
#define QVL_OPT_ENV_OWN 2u    /* its variable is read by the command itself (qvl serve's QVL_CONFIG, before the file) */

typedef struct qvl_opt {
  const char *key;            /* YAML key; flag "--" + key with '-' for '_'; env "QVL_" + KEY */
  const char *short_flag;     /* "-m", or NULL */
  qvl_opt_kind kind;
  int64_t min, max;           /* INT: the range; LIST: max = most items */
  double lo, hi;              /* NUM: the range */
  const char *const *choices; /* STR: the accepted values (NULL-terminated, any case); NULL: any text */
  const char *meta;           /* the value in --help ("FILE"); NULL: N, X or VALUE by kind */
  const char *help;
  unsigned flags;             /* QVL_OPT_ENV_ALWAYS, QVL_OPT_ENV_OWN */
} qvl_opt;

typedef struct qvl_opt_bind qvl_opt_bind;
/* A QVL_OPT_CALL option's handler: `where` names the source for messages. */
typedef qvl_status (*qvl_opt_fn)(void *dst, const qvl_opt_bind *b, const char *value, const char *where);

/* An option as one command takes it: where its value goes in the command's struct. */
struct qvl_opt_bind {
  const qvl_opt *opt;
  size_t off;       /* the field */
  size_t count_off; /* LIST: the int count */
  qvl_opt_fn fn;    /* CALL */
  const char *help; /* what it means for this command, when the declaration's help is not enough (NULL) */
};

#define QVL_OPT_FIELD(o, type, field) {&(o), offsetof(type, field), 0, NULL, NULL}
#define QVL_OPT_FIELD_HELP(o, type, field, h) {&(o), offsetof(type, field), 0, NULL, h}
#define QVL_OPT_LIST_FIELD(o, type, field, count) {&(o), offsetof(type, field), offsetof(type, count), NULL, NULL}
#define QVL_OPT_CALL_FN(o, fn) {&(o), 0, 0, fn, NULL}

typedef struct qvl_opt_cmd {
  const char *name;   /* "qvl run", for messages */
  const char *usage;  /* printed before the option list */
  const char *notes;  /* printed after it (NULL: nothing) */
  const qvl_opt_bind *opts;
  size_t n_opts;
  bool env;           /* every option also from its environment variable (qvl serve); else only ENV_ALWAYS ones */
  bool own_strings;   /* STR and LIST values are copies, freed by qvl_opts_free and when replaced */
  int max_args;       /* positional arguments accepted */
} qvl_opt_cmd;

/* ---- the shared options (their ranges are the one rule for every command) ------------------ */

QVL_API extern const char *const qvl_opt_dtype_names[]; /* f32 bf16 f16 q8_0 q4_0 q4_k */

QVL_API extern const qvl_opt qvl_opt_model, qvl_opt_mmproj, qvl_opt_hf, qvl_opt_offline, qvl_opt_dtype,
    qvl_opt_threads, qvl_opt_precision, qvl_opt_kv_type;
QVL_API extern const qvl_opt qvl_opt_ctx, qvl_opt_max_tokens, qvl_opt_reasoning_budget, qvl_opt_hide_reasoning,
    qvl_opt_stop;
QVL_API extern const qvl_opt qvl_opt_temp, qvl_opt_top_k, qvl_opt_top_p, qvl_opt_min_p, qvl_opt_seed,
    qvl_opt_repeat_penalty, qvl_opt_presence_penalty, qvl_opt_frequency_penalty;
QVL_API extern const qvl_opt qvl_opt_min_pixels, qvl_opt_max_pixels, qvl_opt_video_fps, qvl_opt_video_frames,
    qvl_opt_video_min_pixels, qvl_opt_video_max_pixels, qvl_opt_max_batch_size, qvl_opt_json;
QVL_API extern const qvl_opt qvl_opt_out_text, qvl_opt_out_mmproj;

/* ---- parsing ------------------------------------------------------------------------------- */

/* The environment (the options c reads from it, see qvl_opt_cmd.env; env NULL: the process's,
 * getenv), then argv[first..argc): "--flag VALUE", "--flag=VALUE", "-s VALUE", "--bool-flag". The
 * first flag of a LIST replaces what the environment gave. Positional arguments go to
 * args[0..max_args) (*n_args: how many); one more, an unknown option or a bad value fails with
 * QVL_ERR_INVALID_ARG and a message. With -h or --help anywhere, *help is set and nothing is parsed. */
QVL_API qvl_status qvl_opts_parse(const qvl_opt_cmd *c, int argc, char **argv, int first, void *dst,
                                  const char *(*env)(const char *), const char **args, int *n_args, bool *help);

/* The steps on their own (qvl serve reads a YAML file between the environment and the flags). */
/* The binding of argv[*i], and its value (NULL for a BOOL flag without "="; *i is advanced past a
 * separate value). NULL when argv[*i] is no option of c. QVL_ERR_INVALID_ARG when the value is missing. */
QVL_API qvl_status qvl_opts_match(const qvl_opt_cmd *c, int argc, char **argv, int *i, const qvl_opt_bind **b,
                                  const char **value);
QVL_API const qvl_opt_bind *qvl_opts_find(const qvl_opt_cmd *c, const char *key);
/* One value given as text; `where` names its source ("--ctx", "QVL_CTX", "serve.yaml:3"). LIST:
 * appends (qvl_opts_list_clear first when a new source takes over). */
QVL_API qvl_status qvl_opts_set(const qvl_opt_cmd *c, const qvl_opt_bind *b, void *dst, const char *value,
                                const char *where);
QVL_API void qvl_opts_list_clear(const qvl_opt_cmd *c, const qvl_opt_bind *b, void *dst);
/* Every option c reads from the environment (env NULL: getenv). */
QVL_API qvl_status qvl_opts_apply_env(const qvl_opt_cmd *c, void *dst, const char *(*env)(const char *));
/* An INT value on its own (the items of a comma-separated list), with the option's range and message. */
QVL_API qvl_status qvl_opt_int(const qvl_opt *o, const char *value, const char *where, int64_t *out);

/* A QVL_OPT_CALL handler's error: sets the message qvl_last_error() returns, returns QVL_ERR_INVALID_ARG. */
QVL_API qvl_status qvl_opts_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

QVL_API void qvl_opt_flag_name(const qvl_opt *o, char *out, size_t n); /* "--max-batch-size" */
QVL_API void qvl_opt_env_name(const qvl_opt *o, char *out, size_t n);  /* "QVL_MAX_BATCH_SIZE" */

/* --help: c->usage, one line per option (flags, value, help, default from `defaults` when it lies in
 * the option's range, the environment variable where it is read), then c->notes. */
QVL_API void qvl_opts_usage(const qvl_opt_cmd *c, const void *defaults, FILE *f);
/* Frees what parsing allocated: every LIST array, and the STR and LIST strings of an own_strings
 * command. */
QVL_API void qvl_opts_free(const qvl_opt_cmd *c, void *dst);

#ifdef __cplusplus
}
#endif
#endif
