#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "qvl_tools.h"

int args_parse(const qvl_opt_cmd *c, int argc, char **argv, void *dst, const char **args, int *n_args) {
  bool help = false;
  if (qvl_opts_parse(c, argc, argv, 2, dst, NULL, args, n_args, &help) != QVL_OK) {
    fprintf(stderr, "%s: %s\n", c->name, qvl_last_error());
    return 2;
  }
  if (help) {
    qvl_opts_usage(c, dst, stdout);
    return 0;
  }
  return -1;
}

int args_usage_error(const qvl_opt_cmd *c, const void *defaults, const char *msg) {
  fprintf(stderr, "%s: %s\n", c->name, msg);
  qvl_opts_usage(c, defaults, stderr);
  return 2;
}

int args_apply_process(const char *cmd, const char *precision, const char *kv_type) {
  if (precision && qvl_set_precision(precision) != QVL_OK) {
    fprintf(stderr, "%s: --precision: %s\n", cmd, qvl_last_error());
    return 2;
  }
  if (kv_type && qvl_set_kv_type(kv_type) != QVL_OK) {
    fprintf(stderr, "%s: --kv-type: %s\n", cmd, qvl_last_error());
    return 2;
  }
  return 0;
}

int args_resolve_model(const char *cmd, model_args *a) {
  if (a->hf && a->model) {
    fprintf(stderr, "%s: give either -m MODEL.gguf or --hf REPO[:QUANT], not both\n", cmd);
    return 2;
  }
  if (!a->hf)
    return 0;
  /* kept for the life of the process: the paths are used until exit */
  static char *files_model, *files_mmproj;
  return qvl_hf_files(a->hf, a->offline, &a->model, &a->mmproj, &files_model, &files_mmproj);
}

int report_error(const char *what, int status) {
  const char *msg = qvl_last_error();
  fprintf(stderr, "qvl: %s: %s\n", what, msg && *msg ? msg : qvl_status_text((qvl_status)status));
  return 1;
}
