/* qvl_model, the process-wide settings and the small public helpers (include/qvl.h). */
#include <stdlib.h>
#include <string.h>

#include "capi/api_impl.h"
#include "base/buf.h"
#include "base/dataurl.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/wtable.h"
#include "text/kv_cache.h"
#include "vision/vision.h"

void qvl_free(void *p) { free(p); }

qvl_status qvl_set_precision(const char *name) {
  kn_precision p;
  if (!name)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "precision: expected exact or fast");
  QVL_TRY(kn_precision_parse(name, &p));
  vision_set_precision(p);
  return QVL_OK;
}

qvl_status qvl_set_kv_type(const char *name) {
  kv_type t;
  if (!name)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "KV type: expected f16 or f32");
  QVL_TRY(kv_type_parse(name, &t));
  kv_set_default_type(t);
  return QVL_OK;
}

const char *qvl_isa(void) { return kernels_isa(); }
int qvl_threads(void) { return kernels_threads(); }

void qvl_model_params_default(qvl_model_params *p) { memset(p, 0, sizeof *p); }

bool qvl_dtype_valid(const char *name) {
  qvl_dtype dt;
  return name && wtable_parse_dtype(name, &dt);
}

qvl_status qvl_model_load(const char *path, const char *mmproj, const qvl_model_params *params, qvl_model **out) {
  *out = NULL;
  qvl_model_params d;
  qvl_model_params_default(&d);
  const qvl_model_params *p = params ? params : &d;
  if (!path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "qvl_model_load: no model path");
  if (p->dtype && !qvl_dtype_valid(p->dtype))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "dtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k", p->dtype);
  kn_precision prec;
  if (p->precision && kn_precision_parse(p->precision, &prec) != QVL_OK)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "precision '%s': expected exact or fast", p->precision);
  QVL_TRY(kernels_init(NULL, p->threads));
  qvl_model *m = calloc(1, sizeof *m);
  if (!m)
    return qvl_errorf(QVL_ERR_NOMEM, "qvl_model_load: out of memory");
  vlm_paths paths = {path, mmproj};
  vlm_load_opts lo = {.hf_dir = NULL, .dtype = p->dtype, .precision = p->precision};
  qvl_status s = vlm_load_with(&paths, &lo, &m->v);
  if (s != QVL_OK) {
    free(m);
    return s;
  }
  m->tok.t = m->v->tok;
  *out = m;
  return QVL_OK;
}

void qvl_model_free(qvl_model *m) {
  if (!m)
    return;
  vlm_free(m->v);
  free(m);
}

bool qvl_model_has_vision(const qvl_model *m) { return m->v->vision != NULL; }
bool qvl_model_is_reasoning(const qvl_model *m) { return m->v->thinking; }
int64_t qvl_model_n_ctx_train(const qvl_model *m) { return m->v->text->hp.n_ctx_train; }

bool qvl_path_is_hf_dir(const char *path) { return path && hf_model_is_dir(path); }

qvl_status qvl_video_data_url(const void *data, size_t len, char **url) {
  const uint8_t *b = data;
  /* the media type says what the bytes are to other readers; qvl itself sniffs the container */
  const char *mime = len >= 8 && !memcmp(b + 4, "ftyp", 4)                            ? "video/mp4"
                     : len >= 4 && b[0] == 0x1a && b[1] == 0x45 && b[2] == 0xdf && b[3] == 0xa3 ? "video/x-matroska"
                     : len >= 6 && !memcmp(b, "GIF8", 4)                              ? "image/gif"
                                                                                       : "application/octet-stream";
  *url = NULL;
  buf u = {0};
  return buf_finish(&u, dataurl_encode(mime, data, len, &u), url, NULL);
}

qvl_status qvl_image_data_url(const void *data, size_t len, char **url) {
  *url = NULL;
  const unsigned char *b = data;
  /* the decoder tells the format from the bytes; the MIME type is for other readers of the URL */
  const char *mime = len > 3 && b[0] == 0xFF && b[1] == 0xD8          ? "image/jpeg"
                     : len > 12 && !memcmp(b + 8, "WEBP", 4)           ? "image/webp"
                                                                       : "image/png";
  buf u = {0};
  return buf_finish(&u, dataurl_encode(mime, data, len, &u), url, NULL);
}
