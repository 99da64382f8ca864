/* The option layer of the qvl commands (qvl_options.h): values from text, the environment, argv
 * and --help, all driven by a command's bindings. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/status.h"
#include "qvl_options.h"

#define NAME_MAX_LEN 96

void qvl_opt_flag_name(const qvl_opt *o, char *out, size_t n) {
  snprintf(out, n, "--%s", o->key);
  for (char *p = out + 2; *p; p++)
    if (*p == '_')
      *p = '-';
}

void qvl_opt_env_name(const qvl_opt *o, char *out, size_t n) {
  snprintf(out, n, "QVL_%s", o->key);
  for (char *p = out; *p; p++)
    *p = (char)toupper((unsigned char)*p);
}

qvl_status qvl_opts_fail(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return qvl_errorf(QVL_ERR_INVALID_ARG, "%s", msg);
}

static const char *env_default(const char *name) { return getenv(name); }

/* ---- one value ------------------------------------------------------------------------------- */

qvl_status qvl_opt_int(const qvl_opt *o, const char *v, const char *where, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  while (*end == ' ')
    end++;
  if (errno || end == v || *end || x < o->min || x > o->max)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s expects an integer in [%lld, %lld], got '%s'", where, o->key,
                      (long long)o->min, (long long)o->max, v);
  *out = x;
  return QVL_OK;
}

static qvl_status parse_num(const qvl_opt *o, const char *v, const char *where, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  while (*end == ' ')
    end++;
  if (errno || end == v || *end || !isfinite(x) || x < o->lo || x > o->hi)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s expects a number in [%g, %g], got '%s'", where, o->key, o->lo, o->hi,
                      v);
  *out = x;
  return QVL_OK;
}

static qvl_status parse_bool(const qvl_opt *o, const char *v, const char *where, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
      *out = !strcasecmp(v, yes[i]);
      return QVL_OK;
    }
  }
  return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s expects true or false, got '%s'", where, o->key, v);
}

/* "a, b or c" */
static void choices_text(const qvl_opt *o, buf *b) {
  for (int i = 0; o->choices[i]; i++)
    buf_printf(b, "%s%s", i == 0 ? "" : o->choices[i + 1] ? ", " : " or ", o->choices[i]);
}

static qvl_status check_choice(const qvl_opt *o, const char *v, const char *where) {
  for (int i = 0; o->choices && o->choices[i]; i++)
    if (!strcasecmp(v, o->choices[i]))
      return QVL_OK;
  if (!o->choices)
    return QVL_OK;
  buf b = {0};
  choices_text(o, &b);
  qvl_status st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: expected %s, got '%s'", where, o->key,
                             b.data ? b.data : "", v);
  buf_free(&b);
  return st;
}

static qvl_status set_string(const qvl_opt_cmd *c, char **field, const char *v) {
  if (!c->own_strings) {
    *field = (char *)v;
    return QVL_OK;
  }
  char *copy = strdup(v);
  if (!copy)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  free(*field);
  *field = copy;
  return QVL_OK;
}

static qvl_status list_add(const qvl_opt_cmd *c, const qvl_opt_bind *b, void *dst, const char *v, const char *where) {
  char ***items = (char ***)((char *)dst + b->off);
  int *n = (int *)((char *)dst + b->count_off);
  if (!*v)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: empty value", where, b->opt->key);
  if (*n >= b->opt->max)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: at most %lld values", where, b->opt->key, (long long)b->opt->max);
  char **grown = realloc(*items, (size_t)(*n + 1) * sizeof *grown);
  if (!grown)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  *items = grown;
  grown[*n] = NULL;
  QVL_TRY(set_string(c, &grown[*n], v));
  (*n)++;
  return QVL_OK;
}

void qvl_opts_list_clear(const qvl_opt_cmd *c, const qvl_opt_bind *b, void *dst) {
  char ***items = (char ***)((char *)dst + b->off);
  int *n = (int *)((char *)dst + b->count_off);
  for (int i = 0; c->own_strings && i < *n; i++)
    free((*items)[i]);
  free(*items);
  *items = NULL;
  *n = 0;
}

qvl_status qvl_opts_set(const qvl_opt_cmd *c, const qvl_opt_bind *b, void *dst, const char *v, const char *where) {
  const qvl_opt *o = b->opt;
  char *field = (char *)dst + b->off;
  switch (o->kind) {
  case QVL_OPT_STR:
    QVL_TRY(check_choice(o, v, where));
    return set_string(c, (char **)field, v);
  case QVL_OPT_INT:
    return qvl_opt_int(o, v, where, (int64_t *)field);
  case QVL_OPT_NUM:
    return parse_num(o, v, where, (double *)field);
  case QVL_OPT_BOOL:
    return parse_bool(o, v, where, (bool *)field);
  case QVL_OPT_LIST:
    return list_add(c, b, dst, v, where);
  case QVL_OPT_CALL:
    return b->fn(dst, b, v, where);
  }
  return qvl_errorf(QVL_ERR_INTERNAL, "%s: option kind %d", o->key, (int)o->kind);
}

/* ---- sources ------------------------------------------------------------------------------- */

const qvl_opt_bind *qvl_opts_find(const qvl_opt_cmd *c, const char *key) {
  for (size_t i = 0; i < c->n_opts; i++)
    if (!strcmp(c->opts[i].opt->key, key))
      return &c->opts[i];
  return NULL;
}

/* Whether c takes o from the environment at all (listed in --help), and whether qvl_opts_apply_env reads it. */
static bool has_env(const qvl_opt_cmd *c, const qvl_opt *o) { return c->env || (o->flags & QVL_OPT_ENV_ALWAYS); }
static bool reads_env(const qvl_opt_cmd *c, const qvl_opt *o) { return has_env(c, o) && !(o->flags & QVL_OPT_ENV_OWN); }

qvl_status qvl_opts_apply_env(const qvl_opt_cmd *c, void *dst, const char *(*env)(const char *)) {
  if (!env)
    env = env_default;
  char name[NAME_MAX_LEN];
  for (size_t i = 0; i < c->n_opts; i++) {
    const qvl_opt_bind *b = &c->opts[i];
    if (!reads_env(c, b->opt))
      continue;
    qvl_opt_env_name(b->opt, name, sizeof name);
    const char *v = env(name);
    if (!v || !*v)
      continue;
    if (b->opt->kind != QVL_OPT_LIST) {
      QVL_TRY(qvl_opts_set(c, b, dst, v, name));
      continue;
    }
    /* comma-separated: QVL_API_KEY=key1,key2 */
    qvl_opts_list_clear(c, b, dst);
    char *copy = strdup(v), *save = NULL;
    if (!copy)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    qvl_status st = QVL_OK;
    /* a command that does not own its strings keeps pointers into this copy: it lives as long as the process */
    for (char *t = strtok_r(copy, ",", &save); t && st == QVL_OK; t = strtok_r(NULL, ",", &save))
      st = qvl_opts_set(c, b, dst, t, name);
    if (c->own_strings)
      free(copy);
    QVL_TRY(st);
  }
  return QVL_OK;
}

qvl_status qvl_opts_match(const qvl_opt_cmd *c, int argc, char **argv, int *i, const qvl_opt_bind **out,
                          const char **value) {
  const char *a = argv[*i];
  char flag[NAME_MAX_LEN];
  *out = NULL;
  *value = NULL;
  for (size_t k = 0; k < c->n_opts; k++) {
    const qvl_opt *o = c->opts[k].opt;
    qvl_opt_flag_name(o, flag, sizeof flag);
    size_t fl = strlen(flag);
    if (!strncmp(a, flag, fl) && a[fl] == '=') {
      *out = &c->opts[k];
      *value = a + fl + 1;
      return QVL_OK;
    }
    if (strcmp(a, flag) && (!o->short_flag || strcmp(a, o->short_flag)))
      continue;
    *out = &c->opts[k];
    if (o->kind == QVL_OPT_BOOL)
      return QVL_OK;
    if (*i + 1 >= argc)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s needs a value", a);
    *value = argv[++*i];
    return QVL_OK;
  }
  return QVL_OK;
}

static bool is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

qvl_status qvl_opts_parse(const qvl_opt_cmd *c, int argc, char **argv, int first, void *dst,
                          const char *(*env)(const char *), const char **args, int *n_args, bool *help) {
  *help = false;
  if (n_args)
    *n_args = 0;
  for (int i = first; i < argc; i++)
    if (is_help(argv[i])) {
      *help = true;
      return QVL_OK;
    }
  QVL_TRY(qvl_opts_apply_env(c, dst, env));
  bool list_seen[c->n_opts + 1];
  memset(list_seen, 0, sizeof list_seen);
  char flag[NAME_MAX_LEN];
  for (int i = first; i < argc; i++) {
    const qvl_opt_bind *b;
    const char *v;
    QVL_TRY(qvl_opts_match(c, argc, argv, &i, &b, &v));
    if (!b) {
      const char *a = argv[i];
      if ((a[0] != '-' || !a[1]) && n_args && *n_args < c->max_args) {
        args[(*n_args)++] = a;
        continue;
      }
      if (a[0] == '-' && a[1])
        return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown option '%s' (%s --help lists them)", a, c->name);
      return qvl_errorf(QVL_ERR_INVALID_ARG, "unexpected argument '%s'", a);
    }
    qvl_opt_flag_name(b->opt, flag, sizeof flag);
    size_t k = (size_t)(b - c->opts);
    if (b->opt->kind == QVL_OPT_LIST && !list_seen[k]) {
      qvl_opts_list_clear(c, b, dst); /* the flags replace the environment's list */
      list_seen[k] = true;
    }
    QVL_TRY(qvl_opts_set(c, b, dst, v ? v : "true", flag));
  }
  return QVL_OK;
}

/* ---- help ---------------------------------------------------------------------------------- */

/* The default when it is a value of the option (a value outside its range means "not given"). */
static void default_text(const qvl_opt_bind *b, const void *defaults, char *out, size_t n) {
  out[0] = '\0';
  if (!defaults || b->opt->kind == QVL_OPT_CALL || b->opt->kind == QVL_OPT_LIST)
    return;
  const qvl_opt *o = b->opt;
  const char *field = (const char *)defaults + b->off;
  if (o->kind == QVL_OPT_INT) {
    int64_t v = *(const int64_t *)field;
    if (v >= o->min && v <= o->max)
      snprintf(out, n, " (default %lld)", (long long)v);
  } else if (o->kind == QVL_OPT_NUM) {
    double v = *(const double *)field;
    if (v >= o->lo && v <= o->hi)
      snprintf(out, n, " (default %g)", v);
  } else if (o->kind == QVL_OPT_STR) {
    const char *v = *(char *const *)field;
    if (v)
      snprintf(out, n, " (default %s)", v);
  }
}

void qvl_opts_usage(const qvl_opt_cmd *c, const void *defaults, FILE *f) {
  if (c->usage)
    fputs(c->usage, f);
  char flag[NAME_MAX_LEN], env[NAME_MAX_LEN + 4], def[96], left[160];
  for (size_t i = 0; i < c->n_opts; i++) {
    const qvl_opt_bind *b = &c->opts[i];
    const qvl_opt *o = b->opt;
    qvl_opt_flag_name(o, flag, sizeof flag);
    const char *meta = o->kind == QVL_OPT_BOOL ? NULL
                       : o->meta              ? o->meta
                       : o->kind == QVL_OPT_INT ? "N"
                       : o->kind == QVL_OPT_NUM ? "X"
                                                : "VALUE";
    snprintf(left, sizeof left, "%s%s%s%s%s", o->short_flag ? o->short_flag : "", o->short_flag ? ", " : "", flag,
             meta ? " " : "", meta ? meta : "");
    default_text(b, defaults, def, sizeof def);
    env[0] = '\0';
    if (has_env(c, o)) {
      char name[NAME_MAX_LEN];
      qvl_opt_env_name(o, name, sizeof name);
      snprintf(env, sizeof env, " [%s]", name);
    }
    const char *help = b->help ? b->help : o->help;
    if (strlen(left) > 30)
      fprintf(f, "  %s\n  %-30s %s%s%s\n", left, "", help, def, env);
    else
      fprintf(f, "  %-30s %s%s%s\n", left, help, def, env);
  }
  if (c->notes)
    fputs(c->notes, f);
}

void qvl_opts_free(const qvl_opt_cmd *c, void *dst) {
  for (size_t i = 0; i < c->n_opts; i++) {
    const qvl_opt_bind *b = &c->opts[i];
    if (b->opt->kind == QVL_OPT_LIST) {
      qvl_opts_list_clear(c, b, dst); /* the array is always the parser's; its strings when own_strings */
    } else if (b->opt->kind == QVL_OPT_STR && c->own_strings) {
      char **field = (char **)((char *)dst + b->off);
      free(*field);
      *field = NULL;
    }
  }
}
