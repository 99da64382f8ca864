/* The hub's public face (qvl_tools.h): --hf REPO[:QUANT] into local files. In the service archive,
 * not libqvl: downloading needs libcurl, which an embedder loading local files should not inherit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/hf_model.h"
#include "hub/hub.h"
#include "qvl_tools.h"

static char *dup_or_null(const char *s, bool *oom) {
  if (!s)
    return NULL;
  char *d = strdup(s);
  if (!d)
    *oom = true;
  return d;
}

qvl_status qvl_hf_resolve(const char *spec, bool offline, char **model, char **mmproj) {
  *model = *mmproj = NULL;
  hub_opts o = {0};
  o.offline = offline ? 1 : 0;
  hub_files f;
  memset(&f, 0, sizeof f);
  QVL_TRY(hub_resolve(&o, spec, &f));
  bool oom = false;
  *model = dup_or_null(f.is_gguf ? f.model : f.dir, &oom);
  *mmproj = f.is_gguf ? dup_or_null(f.mmproj, &oom) : NULL;
  hub_files_free(&f);
  if (oom) {
    free(*model);
    free(*mmproj);
    *model = *mmproj = NULL;
    return qvl_errorf(QVL_ERR_NOMEM, "--hf %s: out of memory", spec);
  }
  return QVL_OK;
}

int qvl_hf_files(const char *spec, bool offline, const char **model, const char **mmproj, char **own_model,
                 char **own_mmproj) {
  qvl_status s = qvl_hf_resolve(spec, offline, own_model, own_mmproj);
  if (s != QVL_OK) {
    const char *msg = qvl_last_error();
    fprintf(stderr, "qvl: --hf: %s\n", msg && *msg ? msg : qvl_status_text(s));
    return 1;
  }
  if (hf_model_is_dir(*own_model) && *mmproj) {
    fprintf(stderr, "qvl: --hf %s is a Hugging Face checkpoint (vision tower included); it takes no --mmproj\n", spec);
    return 2;
  }
  *model = *own_model;
  if (!*mmproj)
    *mmproj = *own_mmproj;
  return 0;
}
