/*
 * `qvl tune` and the tuning file's place: the kernels measure where a tier offers a choice
 * (src/kernels/tune.c) and keep the results in the cache folder, next to the downloaded models,
 * so each later start on the same CPU reuses them. The library itself reads no folder: the
 * command layer names it.
 */
#include "commands/tune.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "hub/hub.h"
#include "kernels/kernels.h"
#include "qvl.h"
#include "qvl_tools.h"

qvl_status qvl_tune_use_cache(void) {
  char *root = NULL;
  QVL_TRY(hub_cache_root(NULL, &root));
  size_t n = strlen(root) + sizeof "/tuning";
  char *dir = malloc(n);
  if (!dir) {
    free(root);
    return qvl_errorf(QVL_ERR_NOMEM, "tuning: out of memory");
  }
  snprintf(dir, n, "%s/tuning", root);
  qvl_status st = kernels_set_tune_dir(dir);
  free(dir);
  free(root);
  return st;
}

static void rates(const kn_tune_row *r, char *out, size_t n) {
  out[0] = 0;
  for (int c = 0; c < r->n_cand; c++) {
    size_t used = strlen(out);
    if (r->gops[c] > 0)
      snprintf(out + used, n - used, "%s%s %.0f", c ? ", " : "", r->cand[c], r->gops[c]);
    else
      snprintf(out + used, n - used, "%s%s", c ? ", " : "", r->cand[c]);
  }
}

void tune_print(FILE *f) {
  kn_tune_row rows[64];
  int n = kernels_tune_rows(rows, 64);
  const char *file = kernels_tune_file();
  if (n == 0) {
    fprintf(f, "tuning: no operation offers a choice of kernels on this tier (isa %s)\n", kernels_isa());
    return;
  }
  fprintf(f, "tuning (isa %s, %d threads%s%s):\n", kernels_isa(), kernels_threads(), file[0] ? ", file " : "", file);
  for (int i = 0; i < n; i++) {
    char buf[512];
    rates(&rows[i], buf, sizeof buf);
    fprintf(f, "  %-5s %6lldx%-6lld %-12s -> %-22s GOP/s: %s%s\n", rows[i].type, (long long)rows[i].n_out,
            (long long)rows[i].n_in, kn_class_name(rows[i].cls), rows[i].cand[rows[i].chosen], buf,
            rows[i].measured ? "" : " (from the file)");
  }
}

cJSON *tune_json(void) {
  kn_tune_row rows[64];
  int n = kernels_tune_rows(rows, 64);
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) {
    cJSON *o = cJSON_CreateObject(), *c = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "type", rows[i].type);
    cJSON_AddNumberToObject(o, "n_out", (double)rows[i].n_out);
    cJSON_AddNumberToObject(o, "n_in", (double)rows[i].n_in);
    cJSON_AddStringToObject(o, "tokens", kn_class_name(rows[i].cls));
    cJSON_AddStringToObject(o, "chosen", rows[i].cand[rows[i].chosen]);
    cJSON_AddBoolToObject(o, "measured", rows[i].measured);
    for (int k = 0; k < rows[i].n_cand; k++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "kernel", rows[i].cand[k]);
      cJSON_AddNumberToObject(e, "gops", rows[i].gops[k]);
      cJSON_AddItemToArray(c, e);
    }
    cJSON_AddItemToObject(o, "candidates", c);
    cJSON_AddItemToArray(a, o);
  }
  return a;
}

qvl_status qvl_tune(const char *model, const char *mmproj, int threads, FILE *out) {
  QVL_TRY(kernels_init(NULL, threads));
  QVL_TRY(kernels_tune_reset());
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.threads = threads;
  qvl_model *m = NULL;
  QVL_TRY(qvl_model_load(model, mmproj, &mp, &m)); /* every weight is measured as it is prepared */
  tune_print(out);
  qvl_model_free(m);
  return QVL_OK;
}
