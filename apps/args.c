#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "qvl_tools.h"

bool arg_value(int argc, char **argv, int *i, const char *long_name, const char *short_name, const char **out) {
  const char *a = argv[*i];
  size_t ln = strlen(long_name);
  if (!strncmp(a, long_name, ln) && a[ln] == '=') {
    *out = a + ln + 1;
    return true;
  }
  if (strcmp(a, long_name) && (!short_name || strcmp(a, short_name)))
    return false;
  if (*i + 1 >= argc) {
    fprintf(stderr, "qvl: %s needs a value\n", a);
    exit(2);
  }
  *out = argv[++*i];
  return true;
}

bool arg_flag(char **argv, int i, const char *long_name, const char *short_name) {
  return !strcmp(argv[i], long_name) || (short_name && !strcmp(argv[i], short_name));
}

int64_t arg_int(const char *flag, const char *v, int64_t min, int64_t max) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < min || x > max) {
    fprintf(stderr, "qvl: %s expects an integer in [%lld, %lld], got '%s'\n", flag, (long long)min,
            (long long)max, v);
    exit(2);
  }
  return x;
}

double arg_double(const char *flag, const char *v, double min, double max) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < min || x > max) {
    fprintf(stderr, "qvl: %s expects a number in [%g, %g], got '%s'\n", flag, min, max, v);
    exit(2);
  }
  return x;
}

int report_error(const char *what, int status) {
  const char *msg = qvl_last_error();
  fprintf(stderr, "qvl: %s: %s\n", what, msg && *msg ? msg : qvl_status_text((qvl_status)status));
  return 1;
}

int resolve_hf(const char *spec, bool offline, const char **model, const char **mmproj) {
  /* kept for the life of the process: the paths are used until exit */
  static char *files_model, *files_mmproj;
  return qvl_hf_files(spec, offline, model, mmproj, &files_model, &files_mmproj);
}

/* A process-wide setting given as "--FLAG VALUE", "--FLAG=VALUE" or the environment variable env
 * (the flag wins: it is applied after). */
static int take_setting(int *argc, char **argv, int start, const char *cmd, const char *flag, const char *env_name,
                        const char *values, qvl_status (*apply)(const char *)) {
  const char *env = getenv(env_name);
  if (env && *env && apply(env) != QVL_OK) {
    fprintf(stderr, "%s: %s: %s\n", cmd, env_name, qvl_last_error());
    return 2;
  }
  size_t fl = strlen(flag);
  for (int i = start; i < *argc;) {
    const char *v = NULL;
    int take = 0;
    if (!strcmp(argv[i], flag)) {
      if (i + 1 >= *argc) {
        fprintf(stderr, "%s: %s needs a value (%s)\n", cmd, flag, values);
        return 2;
      }
      v = argv[i + 1];
      take = 2;
    } else if (!strncmp(argv[i], flag, fl) && argv[i][fl] == '=') {
      v = argv[i] + fl + 1;
      take = 1;
    }
    if (!take) {
      i++;
      continue;
    }
    if (apply(v) != QVL_OK) {
      fprintf(stderr, "%s: %s: %s\n", cmd, flag, qvl_last_error());
      return 2;
    }
    for (int k = i; k + take <= *argc; k++)
      argv[k] = argv[k + take]; /* argv[argc] is NULL and moves down too */
    *argc -= take;
  }
  return 0;
}

int args_take_precision(int *argc, char **argv, int start, const char *cmd) {
  return take_setting(argc, argv, start, cmd, "--precision", "QVL_PRECISION", "exact or fast", qvl_set_precision);
}

int args_take_kv_type(int *argc, char **argv, int start, const char *cmd) {
  return take_setting(argc, argv, start, cmd, "--kv-type", "QVL_KV_TYPE", "f16 or f32", qvl_set_kv_type);
}
