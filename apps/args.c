#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/hub.h"
#include "text/kv_cache.h"
#include "vision/vision.h"
#include "qvl.h"

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
  static hub_files files; /* kept for the life of the process: the paths are used until exit */
  hub_opts o = {0};
  o.offline = offline ? 1 : 0;
  qvl_status s = hub_resolve(&o, spec, &files);
  if (s != QVL_OK)
    return report_error("--hf", s);
  if (!files.is_gguf) {
    /* a safetensors repository: the snapshot directory is an HF model directory (vlm_load) */
    if (*mmproj) {
      fprintf(stderr, "qvl: --hf %s is a Hugging Face checkpoint (vision tower included); it takes no --mmproj\n",
              spec);
      return 2;
    }
    *model = files.dir;
    return 0;
  }
  *model = files.model;
  if (!*mmproj)
    *mmproj = files.mmproj;
  return 0;
}

int args_take_kv_type(int *argc, char **argv, int start, const char *cmd) {
  const char *env = getenv("QVL_KV_TYPE");
  kv_type t;
  if (env && *env) {
    if (kv_type_parse(env, &t) != QVL_OK) {
      fprintf(stderr, "%s: QVL_KV_TYPE: %s\n", cmd, qvl_last_error());
      return 2;
    }
    kv_set_default_type(t);
  }
  for (int i = start; i < *argc;) {
    const char *v = NULL;
    int take = 0;
    if (!strcmp(argv[i], "--kv-type")) {
      if (i + 1 >= *argc) {
        fprintf(stderr, "%s: --kv-type needs a value (f16 or f32)\n", cmd);
        return 2;
      }
      v = argv[i + 1];
      take = 2;
    } else if (!strncmp(argv[i], "--kv-type=", 10)) {
      v = argv[i] + 10;
      take = 1;
    }
    if (!take) {
      i++;
      continue;
    }
    if (kv_type_parse(v, &t) != QVL_OK) {
      fprintf(stderr, "%s: --kv-type: %s\n", cmd, qvl_last_error());
      return 2;
    }
    kv_set_default_type(t);
    for (int k = i; k + take <= *argc; k++)
      argv[k] = argv[k + take];
    *argc -= take;
  }
  return 0;
}

int args_take_precision(int *argc, char **argv, int start, const char *cmd) {
  const char *env = getenv("QVL_PRECISION");
  kn_precision p;
  if (env && *env && kn_precision_parse(env, &p) != QVL_OK) {
    fprintf(stderr, "%s: QVL_PRECISION: %s\n", cmd, qvl_last_error());
    return 2;
  }
  for (int i = start; i < *argc;) {
    const char *v = NULL;
    int take = 0;
    if (!strcmp(argv[i], "--precision")) {
      if (i + 1 >= *argc) {
        fprintf(stderr, "%s: --precision needs a value (exact or fast)\n", cmd);
        return 2;
      }
      v = argv[i + 1];
      take = 2;
    } else if (!strncmp(argv[i], "--precision=", 12)) {
      v = argv[i] + 12;
      take = 1;
    }
    if (!take) {
      i++;
      continue;
    }
    if (kn_precision_parse(v, &p) != QVL_OK) {
      fprintf(stderr, "%s: --precision: %s\n", cmd, qvl_last_error());
      return 2;
    }
    vision_set_precision(p);
    for (int k = i; k + take <= *argc; k++)
      argv[k] = argv[k + take]; /* argv[argc] is NULL and moves down too */
    *argc -= take;
  }
  return 0;
}
