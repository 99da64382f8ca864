/* The option layer (qvl_options.h): values and their messages, the environment, argv, --help. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl_options.h"
#include "server/config/settings.h"
#include "fake_env.h"
#include "test.h"

typedef struct opts {
  const char *model;
  int64_t ctx, threads;
  double temp;
  bool json;
  const char *dtype, *precision;
  char **stops;
  int n_stops;
  char *calls[4];
  int n_calls;
} opts;

static qvl_status record(void *dst, const qvl_opt_bind *b, const char *v, const char *where) {
  opts *o = dst;
  if (o->n_calls == 4)
    return qvl_opts_fail("%s: too many", where);
  o->calls[o->n_calls++] = (char *)v;
  return QVL_OK;
}

static const qvl_opt o_call = {"call", NULL, QVL_OPT_CALL, .meta = "X", .help = "recorded in order"};
static const qvl_opt_bind binds[] = {
    QVL_OPT_FIELD(qvl_opt_model, opts, model),     QVL_OPT_FIELD(qvl_opt_ctx, opts, ctx),
    QVL_OPT_FIELD(qvl_opt_threads, opts, threads), QVL_OPT_FIELD(qvl_opt_temp, opts, temp),
    QVL_OPT_FIELD(qvl_opt_json, opts, json),       QVL_OPT_FIELD(qvl_opt_dtype, opts, dtype),
    QVL_OPT_FIELD(qvl_opt_precision, opts, precision), QVL_OPT_LIST_FIELD(qvl_opt_stop, opts, stops, n_stops),
    QVL_OPT_CALL_FN(o_call, record),
};
static const qvl_opt_cmd cmd = {.name = "qvl test", .usage = "usage: qvl test\n", .notes = "notes\n", .opts = binds,
                                .n_opts = sizeof binds / sizeof binds[0], .max_args = 1};
static const qvl_opt_cmd cmd_env = {.name = "qvl test", .opts = binds, .n_opts = sizeof binds / sizeof binds[0],
                                    .env = true, .own_strings = true};

/* Parses a NULL-terminated argument list (after "qvl test") with cmd. */
static qvl_status parse(const qvl_opt_cmd *c, opts *o, const char **args, int *n_args, bool *help, ...) {
  char *argv[32] = {"qvl", "test"};
  int argc = 2;
  va_list ap;
  va_start(ap, help);
  for (char *a; (a = va_arg(ap, char *)) != NULL;)
    argv[argc++] = a;
  va_end(ap);
  memset(o, 0, sizeof *o);
  o->temp = NAN;
  return qvl_opts_parse(c, argc, argv, 2, o, env_get, args, n_args, help);
}

static bool failed_with(qvl_status st, const char *needle) {
  return st == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), needle) != NULL;
}

static void test_values(void) {
  opts o;
  bool help;
  const char *args[1];
  int n = 0;
  fake_env = NULL;
  qvl_status st = parse(&cmd, &o, args, &n, &help, "-m", "m.gguf", "--ctx=4096", "--threads", "3", "--temp", "0.5",
                        "--json", "--dtype", "BF16", "--stop", "a", "--stop", "b", "--call", "x", "--call=y", "pos",
                        NULL);
  CHECK(st == QVL_OK && !help, "parse: %s", qvl_last_error());
  CHECK(o.model && !strcmp(o.model, "m.gguf") && o.ctx == 4096 && o.threads == 3 && o.temp == 0.5 && o.json,
        "values: model %s ctx %lld", o.model ? o.model : "(null)", (long long)o.ctx);
  CHECK(o.dtype && !strcmp(o.dtype, "BF16"), "a choice in any case");
  CHECK(o.n_stops == 2 && !strcmp(o.stops[0], "a") && !strcmp(o.stops[1], "b"), "repeatable list");
  CHECK(o.n_calls == 2 && !strcmp(o.calls[0], "x") && !strcmp(o.calls[1], "y"), "calls in order");
  CHECK(n == 1 && !strcmp(args[0], "pos"), "one positional argument");
  free(o.stops);

  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--ctx", "5", NULL),
                    "--ctx: ctx expects an integer in [64, 262144], got '5'"), "ctx range: %s", qvl_last_error());
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--ctx", "4096x", NULL), "got '4096x'"), "trailing junk");
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--temp", "3", NULL), "--temp: temp expects a number in [0, 2]"),
        "temp range: %s", qvl_last_error());
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--temp", "nan", NULL), "expects a number"), "nan refused");
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--json=maybe", NULL), "json expects true or false"), "bool");
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--dtype", "q6_k", NULL),
                    "--dtype: dtype: expected f32, bf16, f16, q8_0, q4_0 or q4_k, got 'q6_k'"),
        "choices: %s", qvl_last_error());
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--bogus", NULL), "unknown option '--bogus' (qvl test --help"),
        "unknown option: %s", qvl_last_error());
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--ctx", NULL), "--ctx needs a value"), "missing value");
  CHECK(failed_with(parse(&cmd, &o, args, &n, &help, "a", "b", NULL), "unexpected argument 'b'"), "one positional only");
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, "--call", "1", "--call", "2", "--call", "3", "--call", "4",
                          "--call", "5", NULL),
                    "--call: too many"),
        "a call's own error: %s", qvl_last_error());
}

static void test_env(void) {
  opts o;
  bool help;
  /* only the ENV_ALWAYS options come from the environment of an ordinary command */
  static const char *const env1[] = {"QVL_CTX=100", "QVL_PRECISION=exact", NULL};
  fake_env = env1;
  CHECK(parse(&cmd, &o, NULL, NULL, &help, NULL) == QVL_OK && o.ctx == 0 && o.precision &&
            !strcmp(o.precision, "exact"),
        "QVL_PRECISION read, QVL_CTX not: ctx %lld", (long long)o.ctx);
  CHECK(parse(&cmd, &o, NULL, NULL, &help, "--precision", "fast", NULL) == QVL_OK && !strcmp(o.precision, "fast"),
        "the flag wins over the environment");
  static const char *const env2[] = {"QVL_PRECISION=slow", NULL};
  fake_env = env2;
  CHECK(failed_with(parse(&cmd, &o, NULL, NULL, &help, NULL), "QVL_PRECISION: precision: expected exact or fast"),
        "a bad environment value names the variable: %s", qvl_last_error());
  /* a command that reads every option from the environment, owning its strings */
  static const char *const env3[] = {"QVL_CTX=100", "QVL_STOP=x,y,z", "QVL_MODEL=env.gguf", NULL};
  fake_env = env3;
  CHECK(parse(&cmd_env, &o, NULL, NULL, &help, NULL) == QVL_OK && o.ctx == 100 && o.n_stops == 3 &&
            !strcmp(o.stops[2], "z") && !strcmp(o.model, "env.gguf"),
        "every option from the environment, lists comma-separated");
  qvl_opts_free(&cmd_env, &o);
  CHECK(o.stops == NULL && o.n_stops == 0 && o.model == NULL, "freed");
  CHECK(parse(&cmd_env, &o, NULL, NULL, &help, "--stop", "w", "-m", "flag.gguf", NULL) == QVL_OK && o.n_stops == 1 &&
            !strcmp(o.stops[0], "w") && !strcmp(o.model, "flag.gguf"),
        "the flags replace the environment's list and value");
  qvl_opts_free(&cmd_env, &o);
  fake_env = NULL;
}

static void test_help(void) {
  opts o;
  bool help = false;
  CHECK(parse(&cmd, &o, NULL, NULL, &help, "--ctx", "5", "-h", NULL) == QVL_OK && help, "-h anywhere, nothing parsed");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  opts d = {.ctx = 8192, .threads = 0, .temp = NAN};
  qvl_opts_usage(&cmd, &d, f);
  fclose(f);
  CHECK(text && !strncmp(text, "usage: qvl test\n", 16) && strstr(text, "notes\n"), "usage and notes");
  /* every binding is listed, with its value placeholder */
  char flag[96];
  for (size_t i = 0; i < cmd.n_opts; i++) {
    qvl_opt_flag_name(binds[i].opt, flag, sizeof flag);
    CHECK(text && strstr(text, flag), "--help lists %s", flag);
  }
  CHECK(text && strstr(text, "-m, --model VALUE") && strstr(text, "--ctx N") && strstr(text, "--temp T"),
        "placeholders");
  CHECK(text && strstr(text, "(default 8192)") && strstr(text, "(default 0)"), "defaults in range are shown");
  CHECK(text && !strstr(text, "(default nan)"), "a value outside the range is 'not given'");
  CHECK(text && strstr(text, "[QVL_PRECISION]") && !strstr(text, "[QVL_CTX]"), "environment variables where read");
  free(text);
}

/* qvl serve's settings are the same declarations: the shared options have the same range there. */
static void test_serve_shares(void) {
  server_config c;
  server_config_init(&c);
  char *argv[] = {"qvl", "serve", "-m", "x.gguf", "--ctx", "5"};
  CHECK(failed_with(server_config_load(&c, 6, argv, 2, NULL), "--ctx: ctx expects an integer in [64, 262144], got '5'"),
        "serve's ctx: %s", qvl_last_error());
  server_config_free(&c);
  server_config_init(&c);
  char *argv2[] = {"qvl", "serve", "-m", "x.gguf", "--temp", "1"};
  CHECK(failed_with(server_config_load(&c, 6, argv2, 2, NULL), "unknown option '--temp'"),
        "serve takes only its bindings: %s", qvl_last_error());
  server_config_free(&c);
}

int main(void) {
  test_values();
  test_env();
  test_help();
  test_serve_shares();
  return TEST_SUMMARY("options");
}
