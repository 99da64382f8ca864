#include "engine/hf_model.h"

#include <float.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/buf.h"
#include "base/free_each.h"
#include "base/log.h"
#include "base/status.h"
#include "text/chat.h"

#define HF_MAX_JSON (64u << 20) /* config files; a real index is ~30 kB, tokenizer.json is read elsewhere */
#define HF_MAX_DIM (1 << 20)

/* ---- JSON helpers ----------------------------------------------------------------------------- */

static const cJSON *item(const cJSON *o, const char *key) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* An integer key in [lo, hi]. Absent: *out = def if !required, else an error. */
static qvl_status get_int(const cJSON *o, const char *obj, const char *key, bool required, int64_t def,
                          int64_t lo, int64_t hi, const char *label, int64_t *out) {
  const cJSON *v = item(o, key);
  if (!v || cJSON_IsNull(v)) {
    if (required)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: missing key '%s%s'", label, obj, key);
    *out = def;
    return QVL_OK;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !(v->valuedouble >= (double)lo) ||
      !(v->valuedouble <= (double)hi))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s%s': expected an integer in %lld..%lld", label, obj, key,
                      (long long)lo, (long long)hi);
  *out = (int64_t)v->valuedouble;
  return QVL_OK;
}

static qvl_status get_float(const cJSON *o, const char *obj, const char *key, bool required, double def,
                            const char *label, double *out) {
  const cJSON *v = item(o, key);
  if (!v || cJSON_IsNull(v)) {
    if (required)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: missing key '%s%s'", label, obj, key);
    *out = def;
    return QVL_OK;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s%s': expected a number", label, obj, key);
  *out = v->valuedouble;
  return QVL_OK;
}

static qvl_status get_bool(const cJSON *o, const char *obj, const char *key, bool def, const char *label,
                           bool *out) {
  const cJSON *v = item(o, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return QVL_OK;
  }
  if (!cJSON_IsBool(v))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s%s': expected true or false", label, obj, key);
  *out = cJSON_IsTrue(v);
  return QVL_OK;
}

/* An optional string key: NULL when absent, an error when not a string. */
static qvl_status get_str(const cJSON *o, const char *obj, const char *key, const char *label, const char **out) {
  const cJSON *v = item(o, key);
  *out = NULL;
  if (!v || cJSON_IsNull(v))
    return QVL_OK;
  if (!cJSON_IsString(v))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s%s': expected a string", label, obj, key);
  *out = v->valuestring;
  return QVL_OK;
}

static cJSON *parse_json(const char *json, size_t len, const char *label, qvl_status *s) {
  cJSON *root = cJSON_ParseWithLength(json, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : 0;
    *s = qvl_errorf(QVL_ERR_FORMAT, "%s: not valid JSON (error near byte %zu)", label, off);
    return NULL;
  }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    *s = qvl_errorf(QVL_ERR_FORMAT, "%s: expected a JSON object at the top level", label);
    return NULL;
  }
  *s = QVL_OK;
  return root;
}

/* Parses json (a JSON object) and reads it into out with fields(). */
static qvl_status parse_with(const char *json, size_t len, const char *label,
                             qvl_status (*fields)(const cJSON *root, const char *label, void *out), void *out) {
  qvl_status s;
  cJSON *root = parse_json(json, len, label, &s);
  if (!root)
    return s;
  s = fields(root, label, out);
  cJSON_Delete(root);
  return s;
}

/* ---- config.json -------------------------------------------------------------------------------- */

static qvl_status parse_text_config(const cJSON *root, const cJSON *tc, const char *label, hf_config *c) {
  decoder_hparams *hp = &c->text;
  const char *obj = "text_config.";
  const char *act;
  QVL_TRY(get_str(tc, obj, "hidden_act", label, &act));
  if (act && strcmp(act, "silu"))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key 'text_config.hidden_act': '%s' is not supported, expected 'silu'",
                      label, act);
  bool bias;
  QVL_TRY(get_bool(tc, obj, "attention_bias", false, label, &bias));
  if (bias)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key 'text_config.attention_bias': attention biases are not supported "
                      "(Qwen3-VL has none)", label);
  QVL_TRY(get_int(tc, obj, "vocab_size", true, 0, 1, 1 << 24, label, &hp->n_vocab));
  QVL_TRY(get_int(tc, obj, "hidden_size", true, 0, 1, HF_MAX_DIM, label, &hp->n_embd));
  QVL_TRY(get_int(tc, obj, "num_hidden_layers", true, 0, 1, 4096, label, &hp->n_layer));
  QVL_TRY(get_int(tc, obj, "intermediate_size", true, 0, 1, HF_MAX_DIM, label, &hp->n_ff));
  QVL_TRY(get_int(tc, obj, "num_attention_heads", true, 0, 1, 4096, label, &hp->n_head));
  QVL_TRY(get_int(tc, obj, "num_key_value_heads", false, hp->n_head, 1, 4096, label, &hp->n_head_kv));
  if (hp->n_head % hp->n_head_kv)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                      label, (long long)hp->n_head, (long long)hp->n_head_kv);
  QVL_TRY(get_int(tc, obj, "head_dim", false, hp->n_embd / hp->n_head, 2, 4096, label, &hp->head_dim));
  if (hp->head_dim % 2)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'text_config.head_dim': %lld, expected an even number", label,
                      (long long)hp->head_dim);
  QVL_TRY(get_int(tc, obj, "max_position_embeddings", false, 4096, 1, INT32_MAX, label, &hp->n_ctx_train));
  double eps;
  QVL_TRY(get_float(tc, obj, "rms_norm_eps", true, 0, label, &eps));
  /* it is used as a float: below FLT_MIN it would round to 0 (or a denormal) and divide by zero */
  if (!(eps >= FLT_MIN && eps < 1))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'text_config.rms_norm_eps': %g, expected a value in (0, 1) that a float holds (>= %g)",
                      label, eps, (double)FLT_MIN);
  hp->rms_eps = (float)eps;
  /* transformers >= 4.56 may move the RoPE settings into rope_parameters. */
  const cJSON *rp = item(tc, "rope_parameters");
  const cJSON *rs = item(tc, "rope_scaling");
  const char *rs_name = "text_config.rope_scaling.";
  if (!cJSON_IsObject(rs)) {
    rs = rp;
    rs_name = "text_config.rope_parameters.";
  }
  double theta;
  if (item(tc, "rope_theta"))
    QVL_TRY(get_float(tc, obj, "rope_theta", true, 0, label, &theta));
  else
    QVL_TRY(get_float(rp, "text_config.rope_parameters.", "rope_theta", true, 0, label, &theta));
  if (!(theta > 0 && theta < 1e12))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: rope_theta %g out of range", label, theta);
  hp->rope_theta = (float)theta;
  if (!cJSON_IsObject(rs))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing key 'text_config.rope_scaling' (the M-RoPE mrope_section)", label);
  const char *rtype;
  QVL_TRY(get_str(rs, rs_name, "rope_type", label, &rtype));
  if (!rtype)
    QVL_TRY(get_str(rs, rs_name, "type", label, &rtype));
  if (rtype && strcmp(rtype, "default") && strcmp(rtype, "mrope"))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key '%srope_type': '%s' RoPE scaling is not supported (expected 'default')",
                      label, rs_name, rtype);
  bool inter;
  QVL_TRY(get_bool(rs, rs_name, "mrope_interleaved", true, label, &inter));
  if (!inter)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key '%smrope_interleaved': false (Qwen2-VL style sections) is not "
                      "supported; Qwen3-VL uses interleaved M-RoPE", label, rs_name);
  const cJSON *sec = item(rs, "mrope_section");
  if (!cJSON_IsArray(sec) || cJSON_GetArraySize(sec) != 3)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%smrope_section': expected an array of 3 integers", label, rs_name);
  int64_t sum = 0;
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetArrayItem(sec, i);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > (double)hp->head_dim)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%smrope_section': value %d is not an integer in 0..%lld", label,
                        rs_name, i, (long long)hp->head_dim);
    hp->rope_sections[i] = (int)v->valuedouble;
    sum += hp->rope_sections[i];
  }
  hp->rope_sections[3] = 0;
  if (sum > hp->head_dim / 2)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%smrope_section': the sections sum to %lld, more than head_dim/2 = %lld",
                      label, rs_name, (long long)sum, (long long)hp->head_dim / 2);
  /* tie_word_embeddings lives at the top level in Qwen3VLConfig; older exports put it in text_config. */
  const cJSON *tie = item(root, "tie_word_embeddings");
  if (tie)
    QVL_TRY(get_bool(root, "", "tie_word_embeddings", false, label, &c->tie_word_embeddings));
  else
    QVL_TRY(get_bool(tc, obj, "tie_word_embeddings", false, label, &c->tie_word_embeddings));
  int64_t v;
  QVL_TRY(get_int(tc, obj, "bos_token_id", false, -1, -1, INT32_MAX, label, &v));
  c->bos_token_id = (int32_t)v;
  const cJSON *eos = item(tc, "eos_token_id");
  if (cJSON_IsArray(eos))
    eos = cJSON_GetArrayItem(eos, 0);
  c->eos_token_id = cJSON_IsNumber(eos) && eos->valuedouble >= 0 && eos->valuedouble <= INT32_MAX
                        ? (int32_t)eos->valuedouble : -1;
  return QVL_OK;
}

static qvl_status parse_vision_config(const cJSON *vc, const char *label, hf_config *c) {
  vision_hparams *hp = &c->vision;
  const char *obj = "vision_config.";
  const char *act;
  QVL_TRY(get_str(vc, obj, "hidden_act", label, &act));
  if (act && strcmp(act, "gelu_pytorch_tanh"))
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: key 'vision_config.hidden_act': '%s' is not supported, expected 'gelu_pytorch_tanh'", label,
                      act);
  int64_t in_ch;
  QVL_TRY(get_int(vc, obj, "in_channels", false, 3, 1, 64, label, &in_ch));
  if (in_ch != 3)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key 'vision_config.in_channels': %lld, expected 3 (RGB)", label,
                      (long long)in_ch);
  QVL_TRY(get_int(vc, obj, "hidden_size", true, 0, 1, HF_MAX_DIM, label, &hp->n_embd));
  QVL_TRY(get_int(vc, obj, "num_heads", true, 0, 1, 4096, label, &hp->n_head));
  QVL_TRY(get_int(vc, obj, "intermediate_size", true, 0, 1, HF_MAX_DIM, label, &hp->n_ff));
  QVL_TRY(get_int(vc, obj, "depth", true, 0, 1, 4096, label, &hp->n_layer));
  QVL_TRY(get_int(vc, obj, "out_hidden_size", true, 0, 1, HF_MAX_DIM, label, &hp->proj_dim));
  QVL_TRY(get_int(vc, obj, "patch_size", false, 16, 1, 1024, label, &hp->patch_size));
  QVL_TRY(get_int(vc, obj, "spatial_merge_size", false, 2, 1, 64, label, &hp->merge));
  QVL_TRY(get_int(vc, obj, "temporal_patch_size", false, 2, 1, 64, label, &hp->temporal));
  QVL_TRY(get_int(vc, obj, "num_position_embeddings", true, 0, 1, HF_MAX_DIM, label, &c->vision_n_pos));
  if (hp->n_embd % hp->n_head)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: vision_config.hidden_size %lld is not a multiple of num_heads %lld", label,
                      (long long)hp->n_embd, (long long)hp->n_head);
  hp->head_dim = hp->n_embd / hp->n_head;
  /* What the image preprocessor (image/preprocess.h) produces: a model with other sizes would get
   * pixel rows of the wrong layout. */
  if (hp->patch_size != 16 || hp->merge != 2 || hp->temporal != 2)
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: vision patch_size %lld / spatial_merge_size %lld / temporal_patch_size %lld: only 16 / 2 / 2 "
                      "are supported", label, (long long)hp->patch_size, (long long)hp->merge, (long long)hp->temporal);
  if (hp->proj_dim != c->text.n_embd)
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: vision_config.out_hidden_size %lld differs from text hidden_size %lld",
                      label, (long long)hp->proj_dim, (long long)c->text.n_embd);
  hp->eps = 1e-6f;         /* transformers hard-codes the vision LayerNorm epsilon */
  hp->rope_theta = 10000.0f; /* and the vision RoPE base */
  for (int i = 0; i < 3; i++) {
    hp->image_mean[i] = 0.5f;
    hp->image_std[i] = 0.5f;
  }
  const cJSON *ds = item(vc, "deepstack_visual_indexes");
  if (ds && !cJSON_IsArray(ds))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'vision_config.deepstack_visual_indexes': expected an array", label);
  int n = ds ? cJSON_GetArraySize(ds) : 0;
  if (n > HF_MAX_DEEPSTACK || n > hp->n_layer || n > c->text.n_layer)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'vision_config.deepstack_visual_indexes': %d entries, expected at most "
                      "min(depth %lld, text layers %lld)", label, n, (long long)hp->n_layer, (long long)c->text.n_layer);
  for (int i = 0; i < n; i++) {
    const cJSON *v = cJSON_GetArrayItem(ds, i);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble >= (double)hp->n_layer || (i > 0 && v->valuedouble <= (double)c->deepstack_layers[i - 1]))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'vision_config.deepstack_visual_indexes': entry %d is not a block "
                        "index in 0..%lld above the previous one", label, i, (long long)hp->n_layer - 1);
    c->deepstack_layers[i] = (int64_t)v->valuedouble;
  }
  c->n_deepstack = n;
  c->text.n_deepstack = n;
  return QVL_OK;
}

static void config_defaults(hf_config *c) {
  memset(c, 0, sizeof *c);
  c->image_token_id = c->vision_start_token_id = c->vision_end_token_id = -1;
  c->bos_token_id = c->eos_token_id = -1;
  c->gen_bos_id = c->gen_pad_id = -1;
  c->temperature = c->top_p = c->repetition_penalty = 1.0f;
}

static qvl_status config_fields(const cJSON *root, const char *label, void *config) {
  hf_config *out = config;
  const cJSON *arch = item(root, "architectures");
  const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
  const char *mt = NULL;
  qvl_status s = get_str(root, "", "model_type", label, &mt);
  if (s == QVL_OK && !cJSON_IsString(a0))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: missing key 'architectures' (expected [\"Qwen3VLForConditionalGeneration\"])",
                   label);
  else if (s == QVL_OK && strcmp(a0->valuestring, "Qwen3VLForConditionalGeneration"))
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported, expected "
                   "Qwen3VLForConditionalGeneration (Qwen3-VL dense)", label, a0->valuestring);
  else if (s == QVL_OK && mt && strcmp(mt, "qwen3_vl"))
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported, expected 'qwen3_vl'", label, mt);
  const cJSON *tc = item(root, "text_config");
  if (s == QVL_OK && !cJSON_IsObject(tc))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: missing key 'text_config' (an object)", label);
  if (s == QVL_OK)
    s = parse_text_config(root, tc, label, out);
  const cJSON *vc = item(root, "vision_config");
  if (s == QVL_OK && vc && !cJSON_IsObject(vc))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'vision_config': expected an object", label);
  if (s == QVL_OK && vc) {
    out->has_vision = true;
    s = parse_vision_config(vc, label, out);
  }
  int64_t v;
  static const char *const ids[] = {"image_token_id", "vision_start_token_id", "vision_end_token_id"};
  int32_t *dst[] = {&out->image_token_id, &out->vision_start_token_id, &out->vision_end_token_id};
  for (int i = 0; s == QVL_OK && i < 3; i++) {
    s = get_int(root, "", ids[i], false, -1, -1, INT32_MAX, label, &v);
    *dst[i] = (int32_t)v;
  }
  const char *dt = NULL;
  if (s == QVL_OK)
    s = get_str(root, "", "torch_dtype", label, &dt);
  if (s == QVL_OK && !dt)
    s = get_str(root, "", "dtype", label, &dt);
  if (s == QVL_OK && dt)
    snprintf(out->torch_dtype, sizeof out->torch_dtype, "%s", dt);
  return s;
}

qvl_status hf_config_parse(const char *json, size_t len, const char *label, hf_config *out) {
  config_defaults(out);
  return parse_with(json, len, label, config_fields, out);
}

/* ---- preprocessor_config.json ------------------------------------------------------------------ */

static qvl_status check_triplet(const cJSON *root, const char *key, double want, const char *label, float *dst) {
  const cJSON *a = item(root, key);
  if (!a)
    return QVL_OK;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected 3 numbers", label, key);
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetArrayItem(a, i);
    if (!cJSON_IsNumber(v))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected 3 numbers", label, key);
    /* The preprocessor normalizes with (x - 0.5) / 0.5 in float32 exactly as HF does for these
     * values; other statistics would need another code path. */
    if (v->valuedouble != want)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key '%s': value %d is %g; only %g is supported", label, key, i,
                        v->valuedouble, want);
    dst[i] = (float)v->valuedouble;
  }
  return QVL_OK;
}

static qvl_status preprocessor_fields(const cJSON *root, const char *label, void *config) {
  hf_config *c = config;
  int64_t patch = 0, merge = 0, temporal = 0;
  qvl_status s = get_int(root, "", "patch_size", false, 16, 1, 1024, label, &patch);
  if (s == QVL_OK)
    s = get_int(root, "", "merge_size", false, 2, 1, 64, label, &merge);
  if (s == QVL_OK)
    s = get_int(root, "", "temporal_patch_size", false, 2, 1, 64, label, &temporal);
  if (s == QVL_OK && (patch != 16 || merge != 2 || temporal != 2))
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: patch_size %lld / merge_size %lld / temporal_patch_size %lld: only 16 / 2 / 2 "
                   "are supported", label, (long long)patch, (long long)merge, (long long)temporal);
  if (s == QVL_OK && c->has_vision &&
      (patch != c->vision.patch_size || merge != c->vision.merge || temporal != c->vision.temporal))
    s = qvl_errorf(QVL_ERR_MISMATCH, "%s: patch/merge/temporal sizes differ from config.json's vision_config", label);
  static const char *const flags[] = {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"};
  for (size_t i = 0; s == QVL_OK && i < sizeof flags / sizeof flags[0]; i++) {
    bool b;
    s = get_bool(root, "", flags[i], true, label, &b);
    if (s == QVL_OK && !b)
      s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key '%s' is false; the image preprocessor always does it", label,
                     flags[i]);
  }
  double rescale = 1.0 / 255;
  if (s == QVL_OK)
    s = get_float(root, "", "rescale_factor", false, 1.0 / 255, label, &rescale);
  if (s == QVL_OK && fabs(rescale - 1.0 / 255) > 1e-12)
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key 'rescale_factor': %g; only 1/255 is supported", label, rescale);
  if (s == QVL_OK)
    s = check_triplet(root, "image_mean", 0.5, label, c->vision.image_mean);
  if (s == QVL_OK)
    s = check_triplet(root, "image_std", 0.5, label, c->vision.image_std);
  /* size.{shortest,longest}_edge are pixel counts for Qwen2-VL-style processors (not edges);
   * older files have top-level min_pixels / max_pixels. */
  const cJSON *size = item(root, "size");
  int64_t mn = 0, mx = 0;
  if (s == QVL_OK && size && !cJSON_IsObject(size))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'size': expected an object", label);
  if (s == QVL_OK)
    s = get_int(size, "size.", "shortest_edge", false, 0, 1, INT64_C(1) << 40, label, &mn);
  if (s == QVL_OK)
    s = get_int(size, "size.", "longest_edge", false, 0, 1, INT64_C(1) << 40, label, &mx);
  if (s == QVL_OK && !mn)
    s = get_int(root, "", "min_pixels", false, 0, 1, INT64_C(1) << 40, label, &mn);
  if (s == QVL_OK && !mx)
    s = get_int(root, "", "max_pixels", false, 0, 1, INT64_C(1) << 40, label, &mx);
  if (s == QVL_OK && mn && mx && mn > mx)
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: min pixels %lld (size.shortest_edge) exceed max pixels %lld (size.longest_edge)",
                   label, (long long)mn, (long long)mx);
  c->min_pixels = mn;
  c->max_pixels = mx;
  return s;
}

qvl_status hf_preprocessor_parse(const char *json, size_t len, const char *label, hf_config *c) {
  return parse_with(json, len, label, preprocessor_fields, c);
}

/* ---- generation_config.json -------------------------------------------------------------------- */

static qvl_status generation_fields(const cJSON *root, const char *label, void *config) {
  hf_config *c = config;
  qvl_status s = QVL_OK;
  c->has_generation = true;
  c->n_eos = 0;
  const cJSON *eos = item(root, "eos_token_id");
  if (cJSON_IsNumber(eos) || cJSON_IsArray(eos)) {
    int n = cJSON_IsArray(eos) ? cJSON_GetArraySize(eos) : 1;
    if (n > HF_MAX_EOS)
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'eos_token_id': %d ids, at most %d are supported", label, n, HF_MAX_EOS);
    for (int i = 0; s == QVL_OK && i < n; i++) {
      const cJSON *v = cJSON_IsArray(eos) ? cJSON_GetArrayItem(eos, i) : eos;
      if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
          v->valuedouble > INT32_MAX)
        s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'eos_token_id': entry %d is not a token id", label, i);
      else
        c->eos_ids[c->n_eos++] = (int32_t)v->valuedouble;
    }
  } else if (eos && !cJSON_IsNull(eos)) {
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'eos_token_id': expected an id or an array of ids", label);
  }
  int64_t v;
  double d;
  if (s == QVL_OK && (s = get_int(root, "", "bos_token_id", false, -1, -1, INT32_MAX, label, &v)) == QVL_OK)
    c->gen_bos_id = (int32_t)v;
  if (s == QVL_OK && (s = get_int(root, "", "pad_token_id", false, -1, -1, INT32_MAX, label, &v)) == QVL_OK)
    c->gen_pad_id = (int32_t)v;
  if (s == QVL_OK)
    s = get_bool(root, "", "do_sample", false, label, &c->do_sample);
  if (s == QVL_OK && (s = get_int(root, "", "top_k", false, 0, 0, INT32_MAX, label, &v)) == QVL_OK)
    c->top_k = (int32_t)v;
  if (s == QVL_OK && (s = get_float(root, "", "temperature", false, 1.0, label, &d)) == QVL_OK) {
    if (d < 0 || d > 100)
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'temperature': %g out of range 0..100", label, d);
    c->temperature = (float)d;
  }
  if (s == QVL_OK && (s = get_float(root, "", "top_p", false, 1.0, label, &d)) == QVL_OK) {
    if (d < 0 || d > 1)
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'top_p': %g out of range 0..1", label, d);
    c->top_p = (float)d;
  }
  if (s == QVL_OK && (s = get_float(root, "", "repetition_penalty", false, 1.0, label, &d)) == QVL_OK) {
    if (!(d > 0 && d <= 100))
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: key 'repetition_penalty': %g out of range (0, 100]", label, d);
    c->repetition_penalty = (float)d;
  }
  return s;
}

qvl_status hf_generation_parse(const char *json, size_t len, const char *label, hf_config *c) {
  return parse_with(json, len, label, generation_fields, c);
}

/* ---- model.safetensors.index.json -------------------------------------------------------------- */

void hf_index_free(hf_index *ix) {
  if (!ix)
    return;
  for (int i = 0; i < ix->n_shards; i++)
    free(ix->shards[i]);
  for (int64_t i = 0; i < ix->n_tensors; i++)
    free(ix->names[i]);
  FREE_EACH(ix->shards, ix->names, ix->shard_of);
  memset(ix, 0, sizeof *ix);
}

static bool plain_file_name(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n < 256 && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static qvl_status index_fields(const cJSON *root, const char *label, void *index) {
  hf_index *out = index;
  qvl_status s = QVL_OK;
  const cJSON *wm = item(root, "weight_map");
  int n = cJSON_IsObject(wm) ? cJSON_GetArraySize(wm) : 0;
  if (!cJSON_IsObject(wm) || n == 0)
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: missing or empty key 'weight_map' (tensor name -> shard file)", label);
  if (s == QVL_OK) {
    out->names = calloc((size_t)n, sizeof *out->names);
    out->shard_of = calloc((size_t)n, sizeof *out->shard_of);
    if (!out->names || !out->shard_of)
      s = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", label);
  }
  for (const cJSON *e = s == QVL_OK ? wm->child : NULL; s == QVL_OK && e; e = e->next) {
    if (!cJSON_IsString(e) || !e->string || !*e->string) {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: weight_map entry %lld: expected \"tensor name\": \"shard file\"", label,
                     (long long)out->n_tensors);
      break;
    }
    if (!plain_file_name(e->valuestring)) {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: weight_map['%s']: shard '%s' is not a plain file name in the directory",
                     label, e->string, e->valuestring);
      break;
    }
    for (int64_t i = 0; i < out->n_tensors; i++)
      if (!strcmp(out->names[i], e->string)) {
        s = qvl_errorf(QVL_ERR_FORMAT, "%s: weight_map lists tensor '%s' twice", label, e->string);
        break;
      }
    if (s != QVL_OK)
      break;
    int k = 0;
    while (k < out->n_shards && strcmp(out->shards[k], e->valuestring))
      k++;
    if (k == out->n_shards) {
      if (out->n_shards == HF_MAX_SHARDS) {
        s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: more than %d shard files", label, HF_MAX_SHARDS);
        break;
      }
      char **grown = realloc(out->shards, sizeof *grown * (size_t)(out->n_shards + 1));
      if (!grown || !(grown[out->n_shards] = strdup(e->valuestring))) {
        if (grown)
          out->shards = grown;
        s = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", label);
        break;
      }
      out->shards = grown;
      out->n_shards++;
    }
    if (!(out->names[out->n_tensors] = strdup(e->string))) {
      s = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", label);
      break;
    }
    out->shard_of[out->n_tensors++] = k;
  }
  return s;
}

qvl_status hf_index_parse(const char *json, size_t len, const char *label, hf_index *out) {
  memset(out, 0, sizeof *out);
  qvl_status s = parse_with(json, len, label, index_fields, out);
  if (s != QVL_OK)
    hf_index_free(out);
  return s;
}

/* ---- the directory ----------------------------------------------------------------------------- */

struct hf_model {
  int refs;
  char *dir;
  char path[4096 + 64];
  hf_config cfg;
  int n_shards;
  safetensors **shards;  /* [n_shards] */
  char **shard_names;    /* [n_shards] */
  char *chat_template;
};

bool hf_model_is_dir(const char *path) {
  struct stat sb;
  if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return false;
  char p[4200];
  snprintf(p, sizeof p, "%s/config.json", path);
  return stat(p, &sb) == 0;
}

const char *hf_model_path(hf_model *m, const char *file) {
  snprintf(m->path, sizeof m->path, "%s/%s", m->dir, file);
  return m->path;
}

static bool file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Reads dir/file; *missing (if non-NULL) is set instead of failing when it does not exist. */
static qvl_status read_json(hf_model *m, const char *file, buf *b, bool *missing) {
  const char *p = hf_model_path(m, file);
  if (missing) {
    *missing = !file_exists(p);
    if (*missing)
      return QVL_OK;
  } else if (!file_exists(p)) {
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: no %s in the model directory", m->dir, file);
  }
  return buf_read_file(p, HF_MAX_JSON, b);
}

static qvl_status load_template(hf_model *m) {
  buf b = {0};
  bool missing;
  const char *src = NULL;
  QVL_TRY(read_json(m, "chat_template.json", &b, &missing));
  cJSON *root = NULL;
  if (missing) {
    QVL_TRY(read_json(m, "tokenizer_config.json", &b, &missing));
    src = "tokenizer_config.json";
  } else {
    src = "chat_template.json";
  }
  const char *text = NULL;
  if (!missing) {
    root = cJSON_ParseWithLength(b.data, b.len);
    const cJSON *t = item(root, "chat_template");
    if (!root)
      log_warn("%s/%s: not valid JSON; no chat template read", m->dir, src);
    else if (cJSON_IsString(t))
      text = t->valuestring;
  }
  buf j = {0};
  if (!text && file_exists(hf_model_path(m, "chat_template.jinja")) &&
      buf_read_file(hf_model_path(m, "chat_template.jinja"), HF_MAX_JSON, &j) == QVL_OK) {
    text = j.data;
    src = "chat_template.jinja";
  }
  qvl_status s = QVL_OK;
  if (text) {
    if (!(m->chat_template = strdup(text)))
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    else if (XXH3_64bits(text, strlen(text)) != HF_QWEN3VL_TEMPLATE_XXH3 && !chat_template_is_thinking(text))
      log_warn("%s/%s: the chat template is not the Qwen3-VL Instruct or Thinking one; qvl renders the Qwen3-VL template "
               "natively and ignores it", m->dir, src);
  } else {
    log_warn("%s: no chat template (chat_template.json); qvl renders the Qwen3-VL template natively", m->dir);
  }
  cJSON_Delete(root);
  buf_free(&b);
  buf_free(&j);
  return s;
}

static qvl_status open_weights(hf_model *m) {
  const char *single = hf_model_path(m, "model.safetensors");
  if (file_exists(single)) {
    m->shards = calloc(1, sizeof *m->shards);
    m->shard_names = calloc(1, sizeof *m->shard_names);
    if (!m->shards || !m->shard_names || !(m->shard_names[0] = strdup("model.safetensors")))
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    m->n_shards = 1;
    return st_open(single, &m->shards[0]);
  }
  const char *ixp = hf_model_path(m, "model.safetensors.index.json");
  if (!file_exists(ixp))
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json in the model directory",
                      m->dir);
  char label[4200];
  snprintf(label, sizeof label, "%s", ixp);
  buf b = {0};
  QVL_TRY(buf_read_file(ixp, HF_MAX_JSON, &b));
  hf_index ix;
  qvl_status s = hf_index_parse(b.data, b.len, label, &ix);
  buf_free(&b);
  if (s != QVL_OK)
    return s;
  m->shards = calloc((size_t)ix.n_shards, sizeof *m->shards);
  m->shard_names = calloc((size_t)ix.n_shards, sizeof *m->shard_names);
  if (!m->shards || !m->shard_names)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  for (int i = 0; s == QVL_OK && i < ix.n_shards; i++) {
    m->shard_names[i] = ix.shards[i];
    ix.shards[i] = NULL;
    m->n_shards = i + 1;
    const char *p = hf_model_path(m, m->shard_names[i]);
    if (!file_exists(p))
      s = qvl_errorf(QVL_ERR_NOT_FOUND, "%s: shard '%s' named by model.safetensors.index.json is missing", m->dir,
                     m->shard_names[i]);
    else
      s = st_open(p, &m->shards[i]);
  }
  /* The index and the shards must agree both ways: a tensor listed but absent would be reported as
   * "missing" far from its cause; one present but unlisted means the index is stale. */
  for (int64_t t = 0; s == QVL_OK && t < ix.n_tensors; t++)
    if (!st_find(m->shards[ix.shard_of[t]], ix.names[t]))
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: model.safetensors.index.json puts tensor '%s' in '%s', which has no such tensor",
                     m->dir, ix.names[t], m->shard_names[ix.shard_of[t]]);
  for (int i = 0; s == QVL_OK && i < m->n_shards; i++)
    for (int64_t t = 0; s == QVL_OK && t < st_n_tensors(m->shards[i]); t++) {
      const char *name = st_tensor_at(m->shards[i], t)->name;
      int64_t k = 0;
      while (k < ix.n_tensors && strcmp(ix.names[k], name))
        k++;
      if (k == ix.n_tensors || ix.shard_of[k] != i)
        s = qvl_errorf(QVL_ERR_FORMAT, "%s: shard '%s' holds tensor '%s', which model.safetensors.index.json %s", m->dir,
                       m->shard_names[i], name, k == ix.n_tensors ? "does not list" : "puts in another shard");
    }
  hf_index_free(&ix);
  return s;
}

static qvl_status open_dir(hf_model *m) {
  buf b = {0};
  char label[4200];
  QVL_TRY(read_json(m, "config.json", &b, NULL));
  snprintf(label, sizeof label, "%s/config.json", m->dir);
  qvl_status s = hf_config_parse(b.data, b.len, label, &m->cfg);
  buf_free(&b);
  QVL_TRY(s);
  bool missing;
  QVL_TRY(read_json(m, "preprocessor_config.json", &b, &missing));
  if (missing) {
    if (m->cfg.has_vision)
      log_warn("%s: no preprocessor_config.json; using the Qwen3-VL image settings", m->dir);
  } else {
    snprintf(label, sizeof label, "%s/preprocessor_config.json", m->dir);
    s = hf_preprocessor_parse(b.data, b.len, label, &m->cfg);
    buf_free(&b);
    QVL_TRY(s);
  }
  QVL_TRY(read_json(m, "generation_config.json", &b, &missing));
  if (!missing) {
    snprintf(label, sizeof label, "%s/generation_config.json", m->dir);
    s = hf_generation_parse(b.data, b.len, label, &m->cfg);
    buf_free(&b);
    QVL_TRY(s);
  }
  if (!file_exists(hf_model_path(m, "tokenizer.json")))
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: no tokenizer.json in the model directory", m->dir);
  QVL_TRY(load_template(m));
  return open_weights(m);
}

qvl_status hf_model_open(const char *dir, hf_model **out) {
  *out = NULL;
  struct stat sb;
  if (!dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: not a directory", dir ? dir : "(null)");
  if (strlen(dir) > 4000)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "model directory path too long");
  hf_model *m = calloc(1, sizeof *m);
  if (!m || !(m->dir = strdup(dir))) {
    free(m);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  size_t n = strlen(m->dir);
  while (n > 1 && m->dir[n - 1] == '/')
    m->dir[--n] = 0;
  m->refs = 1;
  qvl_status s = open_dir(m);
  if (s != QVL_OK) {
    hf_model_close(m);
    return s;
  }
  *out = m;
  return QVL_OK;
}

void hf_model_close(hf_model *m) {
  if (!m || --m->refs > 0)
    return;
  for (int i = 0; i < m->n_shards; i++) {
    st_close(m->shards ? m->shards[i] : NULL);
    free(m->shard_names ? m->shard_names[i] : NULL);
  }
  free(m->shards);
  free(m->shard_names);
  free(m->chat_template);
  free(m->dir);
  free(m);
}

const hf_config *hf_model_config(const hf_model *m) { return &m->cfg; }
const char *hf_model_dir(const hf_model *m) { return m->dir; }
const char *hf_model_chat_template(const hf_model *m) { return m->chat_template; }

const st_tensor *hf_model_find(const hf_model *m, const char *hf_name) {
  for (int i = 0; i < m->n_shards; i++) {
    const st_tensor *t = st_find(m->shards[i], hf_name);
    if (t)
      return t;
  }
  return NULL;
}

/* ---- weight tables ----------------------------------------------------------------------------- */

static void unref(void *user) { hf_model_close(user); }

/* A GGUF-named view of an HF tensor: same bytes, shape reversed into ggml ne order. Data that is
 * not aligned for its element type (safetensors only pads the header to 8 bytes) is copied. */
static qvl_status add_tensor(wtable *t, const hf_model *m, const char *gguf_name, const st_tensor *st) {
  qvl_dtype type;
  switch (st->dtype) {
  case ST_F32: type = QVL_DTYPE_F32; break;
  case ST_F16: type = QVL_DTYPE_F16; break;
  case ST_BF16: type = QVL_DTYPE_BF16; break;
  default:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16", m->dir,
                      st->name, st_dtype_name(st->dtype));
  }
  if (st->n_dims < 1 || st->n_dims > TENSOR_MAX_DIMS)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s' has %d dimensions, expected 1..%d", m->dir, st->name,
                      st->n_dims, TENSOR_MAX_DIMS);
  tensor v = {.type = type, .n_dims = st->n_dims, .ne = {1, 1, 1, 1}, .data = st->data, .nbytes = st->nbytes};
  for (int d = 0; d < st->n_dims; d++)
    v.ne[d] = st->shape[st->n_dims - 1 - d];
  size_t align = type == QVL_DTYPE_F32 ? 4 : 2;
  if ((uintptr_t)st->data % align == 0)
    return wtable_add_view(t, gguf_name, &v);
  void *copy = malloc(st->nbytes ? st->nbytes : 1);
  if (!copy)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory copying tensor '%s'", m->dir, st->name);
  memcpy(copy, st->data, st->nbytes);
  return wtable_add_owned(t, gguf_name, type, v.n_dims, v.ne, copy, st->nbytes);
}

/* A checkpoint name and its GGUF name (in the linear maps: the prefixes of a weight and its bias). */
typedef struct name_pair {
  const char *hf, *gguf;
} name_pair;

/* The pair that names s whole; NULL if none does. */
static const name_pair *whole_name(const name_pair *map, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(s, map[i].hf))
      return &map[i];
  return NULL;
}

/* The pair whose prefix s is, followed by "weight" or "bias" (*tail); NULL if none. */
static const name_pair *linear_name(const name_pair *map, size_t n, const char *s, const char **tail) {
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(map[i].hf);
    *tail = s + l;
    if (!strncmp(s, map[i].hf, l) && (!strcmp(*tail, "weight") || !strcmp(*tail, "bias")))
      return &map[i];
  }
  return NULL;
}

/* Maps "model.language_model.<rest>" (rest given) to a text GGUF name; false if unknown. */
static bool text_name(const char *rest, char *out, size_t cap) {
  static const name_pair whole[] = {{"embed_tokens.weight", "token_embd.weight"}, {"norm.weight", "output_norm.weight"}};
  static const name_pair layer_map[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      /* biases are mapped so that the decoder refuses them by name */
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  const name_pair *p = whole_name(whole, sizeof whole / sizeof whole[0], rest);
  if (p)
    return snprintf(out, cap, "%s", p->gguf) > 0;
  unsigned layer;
  int off = 0;
  if (sscanf(rest, "layers.%u.%n", &layer, &off) != 1 || off == 0 || layer > 100000)
    return false;
  p = whole_name(layer_map, sizeof layer_map / sizeof layer_map[0], rest + off);
  return p && snprintf(out, cap, "blk.%u.%s", layer, p->gguf) < (int)cap;
}

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

#define TEXT_PREFIX "model.language_model."
#define VISION_PREFIX "model.visual."

/* Tensors of the checkpoint that neither table serves. */
static bool known_elsewhere(const char *name) {
  return starts_with(name, TEXT_PREFIX) || starts_with(name, VISION_PREFIX) || !strcmp(name, "lm_head.weight");
}

static qvl_status new_table(hf_model *m, const char *what, wtable **out) {
  char label[4200];
  snprintf(label, sizeof label, "%s (%s)", m->dir, what);
  QVL_TRY(wtable_init(label, out));
  m->refs++;
  wtable_set_owner(*out, unref, m);
  return QVL_OK;
}

qvl_status hf_model_text_weights(hf_model *m, wtable **out) {
  *out = NULL;
  wtable *t;
  QVL_TRY(new_table(m, "text", &t));
  qvl_status s = QVL_OK;
  bool have_head = false;
  for (int i = 0; s == QVL_OK && i < m->n_shards; i++)
    for (int64_t k = 0; s == QVL_OK && k < st_n_tensors(m->shards[i]); k++) {
      const st_tensor *st = st_tensor_at(m->shards[i], k);
      char g[128];
      if (!strcmp(st->name, "lm_head.weight")) {
        have_head = true;
        /* A tied checkpoint may still store the head; HF ignores it then, and so do we. */
        if (!m->cfg.tie_word_embeddings)
          s = add_tensor(t, m, "output.weight", st);
      } else if (starts_with(st->name, TEXT_PREFIX)) {
        if (!text_name(st->name + strlen(TEXT_PREFIX), g, sizeof g))
          s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of a Qwen3-VL text model (unsupported "
                         "checkpoint)", m->dir, st->name);
        else
          s = add_tensor(t, m, g, st);
      } else if (!known_elsewhere(st->name)) {
        s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of a Qwen3-VL model (expected names under "
                       "model.language_model., model.visual. and lm_head.weight)", m->dir, st->name);
      }
    }
  if (s == QVL_OK && !m->cfg.tie_word_embeddings && !have_head)
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: config.json says tie_word_embeddings is false but the checkpoint has no "
                   "lm_head.weight", m->dir);
  if (s != QVL_OK) {
    wtable_free(t);
    return s;
  }
  *out = t;
  return QVL_OK;
}

/* Splits the Conv3d kernel [Dv, 3, T, P, P] into T slices {P, P, 3, Dv} (F32), as the converter
 * writes v.patch_embd.weight (t = 0) and v.patch_embd.weight.1 (t = 1). */
static qvl_status add_patch_kernel(wtable *t, const hf_model *m, const st_tensor *st) {
  const vision_hparams *hp = &m->cfg.vision;
  const int64_t Dv = hp->n_embd, P = hp->patch_size, T = hp->temporal;
  if (st->n_dims != 5 || st->shape[0] != Dv || st->shape[1] != 3 || st->shape[2] != T || st->shape[3] != P ||
      st->shape[4] != P)
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: tensor '%s': expected shape [%lld, 3, %lld, %lld, %lld], found %d dims "
                      "[%lld, ...]", m->dir, st->name, (long long)Dv, (long long)T, (long long)P, (long long)P,
                      st->n_dims, (long long)st->shape[0]);
  qvl_dtype type = st->dtype == ST_F32 ? QVL_DTYPE_F32 : st->dtype == ST_F16 ? QVL_DTYPE_F16
                   : st->dtype == ST_BF16 ? QVL_DTYPE_BF16 : QVL_DTYPE_MAX;
  if (type == QVL_DTYPE_MAX)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16", m->dir,
                      st->name, st_dtype_name(st->dtype));
  const size_t es = st_dtype_size(st->dtype);
  const int64_t PP = P * P;
  for (int64_t ti = 0; ti < T; ti++) {
    float *dst = malloc(sizeof(float) * (size_t)(Dv * 3 * PP));
    uint8_t *tmp = malloc(es * (size_t)PP);
    if (!dst || !tmp) {
      free(dst);
      free(tmp);
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    }
    for (int64_t o = 0; o < Dv; o++)
      for (int64_t c = 0; c < 3; c++) {
        /* source element [o][c][ti][py][px]; memcpy because the mapping may be unaligned */
        size_t off = (size_t)(((o * 3 + c) * T + ti) * PP) * es;
        memcpy(tmp, (const uint8_t *)st->data + off, es * (size_t)PP);
        dtype_dequantize_row(type, tmp, dst + (o * 3 + c) * PP, PP);
      }
    free(tmp);
    char name[64];
    snprintf(name, sizeof name, ti == 0 ? "v.patch_embd.weight" : "v.patch_embd.weight.%lld", (long long)ti);
    int64_t ne[4] = {P, P, 3, Dv};
    QVL_TRY(wtable_add_owned(t, name, QVL_DTYPE_F32, 4, ne, dst, sizeof(float) * (size_t)(Dv * 3 * PP)));
  }
  return QVL_OK;
}

static bool vision_name(const hf_config *c, const char *rest, char *out, size_t cap) {
  static const name_pair whole[] = {{"patch_embed.proj.bias", "v.patch_embd.bias"},
                                    {"pos_embed.weight", "v.position_embd.weight"}};
  static const name_pair block_map[] = {
      {"norm1.", "ln1."}, {"norm2.", "ln2."}, {"attn.qkv.", "attn_qkv."}, {"attn.proj.", "attn_out."},
      {"mlp.linear_fc1.", "ffn_up."}, {"mlp.linear_fc2.", "ffn_down."},
  };
  static const name_pair merger[] = {
      {"merger.norm.", "v.post_ln."}, {"merger.linear_fc1.", "mm.0."}, {"merger.linear_fc2.", "mm.2."}};
  static const name_pair deepstack_map[] = {{"norm.", "norm."}, {"linear_fc1.", "fc1."}, {"linear_fc2.", "fc2."}};
  const name_pair *p = whole_name(whole, sizeof whole / sizeof whole[0], rest);
  if (p)
    return snprintf(out, cap, "%s", p->gguf) > 0;
  const char *tail;
  unsigned n;
  int off = 0;
  if (sscanf(rest, "blocks.%u.%n", &n, &off) == 1 && off > 0 && n < 100000) {
    p = linear_name(block_map, sizeof block_map / sizeof block_map[0], rest + off, &tail);
    return p && snprintf(out, cap, "v.blk.%u.%s%s", n, p->gguf, tail) < (int)cap;
  }
  p = linear_name(merger, sizeof merger / sizeof merger[0], rest, &tail);
  if (p)
    return snprintf(out, cap, "%s%s", p->gguf, tail) > 0;
  off = 0;
  if (sscanf(rest, "deepstack_merger_list.%u.%n", &n, &off) == 1 && off > 0) {
    if (n >= (unsigned)c->n_deepstack)
      return false;
    p = linear_name(deepstack_map, sizeof deepstack_map / sizeof deepstack_map[0], rest + off, &tail);
    return p && snprintf(out, cap, "v.deepstack.%lld.%s%s", (long long)c->deepstack_layers[n], p->gguf, tail) <
                    (int)cap;
  }
  return false;
}

qvl_status hf_model_vision_weights(hf_model *m, wtable **out) {
  *out = NULL;
  if (!m->cfg.has_vision)
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: config.json has no vision_config (a text-only model)", m->dir);
  wtable *t;
  QVL_TRY(new_table(m, "vision", &t));
  qvl_status s = QVL_OK;
  for (int i = 0; s == QVL_OK && i < m->n_shards; i++)
    for (int64_t k = 0; s == QVL_OK && k < st_n_tensors(m->shards[i]); k++) {
      const st_tensor *st = st_tensor_at(m->shards[i], k);
      if (!starts_with(st->name, VISION_PREFIX))
        continue;
      const char *rest = st->name + strlen(VISION_PREFIX);
      char g[128];
      if (!strcmp(rest, "patch_embed.proj.weight"))
        s = add_patch_kernel(t, m, st);
      else if (vision_name(&m->cfg, rest, g, sizeof g))
        s = add_tensor(t, m, g, st);
      else
        s = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of a Qwen3-VL vision tower (unsupported "
                       "checkpoint, or a DeepStack merger beyond deepstack_visual_indexes)", m->dir, st->name);
    }
  if (s != QVL_OK) {
    wtable_free(t);
    return s;
  }
  *out = t;
  return QVL_OK;
}
