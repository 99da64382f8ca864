#include "engine/model_sampling.h"

#include <math.h>

#include "base/status.h"

sampler_params model_sampling_qwen3vl(void) {
  sampler_params p = sampler_default_params();
  p.temperature = 0.7f;
  p.top_p = 0.8f;
  p.top_k = 20;
  return p;
}

void model_sampling_from_hf(const hf_config *c, sampler_params *p) {
  if (!c->has_generation)
    return;
  p->temperature = c->do_sample ? c->temperature : 0.0f;
  p->top_p = c->top_p;
  p->top_k = c->top_k;
  p->repetition_penalty = c->repetition_penalty;
}

/* An optional float key in [lo, hi] (lo_open: lo itself excluded). */
static qvl_status get_float(const gguf *g, const char *key, float lo, bool lo_open, float hi, float *out) {
  float v;
  qvl_status s = gguf_get_f32(g, key, &v);
  if (s == QVL_ERR_NOT_FOUND) {
    qvl_error_clear();
    return QVL_OK;
  }
  QVL_TRY(s);
  if (!isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' = %g, expected %s%g, %g]", gguf_path(g), key, (double)v,
                      lo_open ? "(" : "[", (double)lo, (double)hi);
  *out = v;
  return QVL_OK;
}

qvl_status model_sampling_from_gguf(const gguf *g, sampler_params *p) {
  sampler_params q = *p;
  QVL_TRY(get_float(g, "general.sampling.temp", 0, false, 100, &q.temperature));
  QVL_TRY(get_float(g, "general.sampling.top_p", 0, false, 1, &q.top_p));
  QVL_TRY(get_float(g, "general.sampling.min_p", 0, false, 1, &q.min_p));
  QVL_TRY(get_float(g, "general.sampling.penalty_repeat", 0, true, 100, &q.repetition_penalty));
  int64_t k;
  qvl_status s = gguf_get_i64(g, "general.sampling.top_k", &k);
  if (s == QVL_OK) /* llama.cpp: <= 0 is off, as 0 is here */
    q.top_k = k <= 0 ? 0 : k > INT32_MAX ? INT32_MAX : (int32_t)k;
  else if (s == QVL_ERR_NOT_FOUND)
    qvl_error_clear();
  else
    return s;
  *p = q;
  return QVL_OK;
}
