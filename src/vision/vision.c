/* Qwen3-VL vision tower: loading (mmproj GGUF or any tensor source) and the forward pass.
 * The maths follows transformers' Qwen3VLVisionModel; see docs qwen3vl-spec.md section 4. */
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"
#include "base/timing.h"

/* Grids larger than this (in patches per side) are refused before any size arithmetic: a 16384-token
 * image (HF's maximum) is 256 x 256 patches, so this leaves ample room without risking overflow. */
#define VISION_MAX_GRID_SIDE 4096
#define VISION_MAX_FRAMES 4096
/* Upper bound on hyperparameters read from files, so that size products cannot overflow. */
#define VISION_MAX_DIM (1 << 20)
#define VISION_MAX_HEAD_DIM 512

/* ------------------------------------------------------------------------------------------------
 * Hyperparameters
 * ------------------------------------------------------------------------------------------------ */

static qvl_status get_u32_req(const gguf *g, const char *key, int64_t *out) {
  uint32_t v;
  qvl_status s = gguf_get_u32(g, key, &v);
  if (s != QVL_OK)
    return qvl_error_prefix(s == QVL_ERR_NOT_FOUND ? QVL_ERR_FORMAT : s, "mmproj '%s': ", gguf_path(g));
  if (v == 0 || v > VISION_MAX_DIM)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': key '%s' = %u, expected 1..%d", gguf_path(g), key, v,
                      VISION_MAX_DIM);
  *out = v;
  return QVL_OK;
}

static qvl_status get_f32x3(const gguf *g, const char *key, float out[3]) {
  float *v = NULL;
  uint64_t n = 0;
  qvl_status s = gguf_get_f32_array(g, key, &v, &n);
  if (s != QVL_OK)
    return qvl_error_prefix(s == QVL_ERR_NOT_FOUND ? QVL_ERR_FORMAT : s, "mmproj '%s': ", gguf_path(g));
  if (n != 3) {
    free(v);
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': key '%s' has %llu values, expected 3 (RGB)",
                      gguf_path(g), key, (unsigned long long)n);
  }
  memcpy(out, v, 3 * sizeof(float));
  free(v);
  return QVL_OK;
}

qvl_status vision_hparams_from_gguf(const gguf *g, vision_hparams *hp) {
  const char *path = gguf_path(g);
  const char *arch = NULL;
  qvl_status s = gguf_get_str(g, "general.architecture", &arch);
  if (s != QVL_OK)
    return qvl_error_prefix(QVL_ERR_FORMAT, "mmproj '%s': ", path);
  if (strcmp(arch, "clip") != 0)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "mmproj '%s': general.architecture is '%s', expected 'clip' — this is not a "
                      "vision projector (mmproj) file%s",
                      path, arch,
                      strcmp(arch, "qwen3vl") == 0 ? " but a Qwen3-VL text model; pass it as the model "
                                                     "and the mmproj-*.gguf file as the projector"
                                                   : "");
  bool has_vision = true;
  if (gguf_find_key(g, "clip.has_vision_encoder") >= 0) {
    QVL_TRY(gguf_get_bool(g, "clip.has_vision_encoder", &has_vision));
    if (!has_vision)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': clip.has_vision_encoder is false (no vision "
                        "encoder in this file)", path);
  }
  const char *proj = NULL;
  const char *proj_key = "clip.projector_type";
  if (gguf_find_key(g, proj_key) < 0)
    proj_key = "clip.vision.projector_type"; /* mixed-modality files */
  if (gguf_get_str(g, proj_key, &proj) != QVL_OK)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': missing string key clip.projector_type "
                      "(expected 'qwen3vl_merger')", path);
  if (strcmp(proj, "qwen3vl_merger") != 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "mmproj '%s': unsupported projector '%s' (%s); only 'qwen3vl_merger' (Qwen3-VL) "
                      "is supported", path, proj, proj_key);

  memset(hp, 0, sizeof *hp);
  QVL_TRY(get_u32_req(g, "clip.vision.embedding_length", &hp->n_embd));
  QVL_TRY(get_u32_req(g, "clip.vision.attention.head_count", &hp->n_head));
  QVL_TRY(get_u32_req(g, "clip.vision.feed_forward_length", &hp->n_ff));
  QVL_TRY(get_u32_req(g, "clip.vision.block_count", &hp->n_layer));
  QVL_TRY(get_u32_req(g, "clip.vision.projection_dim", &hp->proj_dim));
  QVL_TRY(get_u32_req(g, "clip.vision.patch_size", &hp->patch_size));
  hp->merge = 2;
  if (gguf_find_key(g, "clip.vision.spatial_merge_size") >= 0)
    QVL_TRY(get_u32_req(g, "clip.vision.spatial_merge_size", &hp->merge));
  if (gguf_find_key(g, "clip.vision.attention.head_count_kv") >= 0) {
    int64_t kv;
    QVL_TRY(get_u32_req(g, "clip.vision.attention.head_count_kv", &kv));
    if (kv != hp->n_head)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': clip.vision.attention.head_count_kv = %lld, "
                        "expected %lld (= head_count; the Qwen3-VL tower has no grouped KV heads)",
                        path, (long long)kv, (long long)hp->n_head);
  }
  if (hp->n_embd % hp->n_head != 0)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': embedding_length %lld is not a multiple of "
                      "head_count %lld", path, (long long)hp->n_embd, (long long)hp->n_head);
  hp->head_dim = hp->n_embd / hp->n_head;
  if (gguf_find_key(g, "clip.vision.attention.head_dim") >= 0) {
    int64_t hd;
    QVL_TRY(get_u32_req(g, "clip.vision.attention.head_dim", &hd));
    if (hd != hp->head_dim)
      return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': clip.vision.attention.head_dim = %lld, expected "
                        "%lld (embedding_length / head_count)", path, (long long)hd,
                        (long long)hp->head_dim);
  }
  s = gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &hp->eps);
  if (s != QVL_OK)
    return qvl_error_prefix(s == QVL_ERR_NOT_FOUND ? QVL_ERR_FORMAT : s, "mmproj '%s': ", path);
  QVL_TRY(get_f32x3(g, "clip.vision.image_mean", hp->image_mean));
  QVL_TRY(get_f32x3(g, "clip.vision.image_std", hp->image_std));
  hp->temporal = 2;
  hp->rope_theta = 10000.0f;
  return QVL_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------------ */

static void shape_str(const tensor *t, char *buf, size_t n) {
  int off = snprintf(buf, n, "{");
  for (int d = 0; d < t->n_dims && off > 0 && (size_t)off < n; d++)
    off += snprintf(buf + off, n - (size_t)off, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
  if (off > 0 && (size_t)off < n)
    snprintf(buf + off, n - (size_t)off, "}");
}

static const tensor *find(const tensor_source *src, const char *name) {
  return src->find(src->user, name);
}

static qvl_status missing(const tensor_source *src, const char *name) {
  return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s' is missing", src->label, name);
}

/* Checks shape {ne0, ne1, ne2, ne3} (trailing 1s are implied) and that the data covers it. */
static qvl_status check_tensor(const tensor_source *src, const tensor *t, int64_t ne0, int64_t ne1,
                               int64_t ne2, int64_t ne3, const char *expect) {
  int64_t want[4] = {ne0, ne1, ne2, ne3};
  bool ok = t->n_dims >= 1 && t->n_dims <= TENSOR_MAX_DIMS;
  for (int d = 0; ok && d < TENSOR_MAX_DIMS; d++)
    ok = (d < t->n_dims ? t->ne[d] : 1) == want[d];
  if (!ok) {
    char got[128];
    shape_str(t, got, sizeof got);
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s' has shape %s, expected %s", src->label,
                      t->name ? t->name : "?", got, expect);
  }
  if (!dtype_supported(t->type))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': tensor '%s' has unsupported type %s (%d)",
                      src->label, t->name ? t->name : "?", dtype_name(t->type), (int)t->type);
  size_t row;
  if (!dtype_row_bytes(t->type, ne0, &row))
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s': rows of %lld elements do not fit "
                      "type %s (block size %d)", src->label, t->name ? t->name : "?", (long long)ne0,
                      dtype_name(t->type), dtype_block_elems(t->type));
  uint64_t rows = (uint64_t)ne1 * (uint64_t)ne2 * (uint64_t)ne3; /* each <= VISION_MAX_DIM^2 */
  if (t->data == NULL || row == 0 || rows > SIZE_MAX / row || row * rows > t->nbytes)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s' holds %zu bytes, expected %llu",
                      src->label, t->name ? t->name : "?", t->nbytes,
                      (unsigned long long)row * (unsigned long long)rows);
  return QVL_OK;
}

/* Dequantizes a tensor of n elements (ne0 = row length) into a new float array. */
static qvl_status dequant_alloc(const tensor *t, int64_t ne0, int64_t n_rows, float **out) {
  float *v = malloc((size_t)(ne0 * n_rows) * sizeof(float));
  if (!v)
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory dequantizing '%s'", t->name ? t->name : "?");
  size_t row;
  dtype_row_bytes(t->type, ne0, &row);
  for (int64_t r = 0; r < n_rows; r++)
    dtype_dequantize_row(t->type, (const char *)t->data + (size_t)r * row, v + r * ne0, ne0);
  *out = v;
  return QVL_OK;
}

/* A 1-D vector of n floats (norm weights, biases), stored in any dense type. */
static qvl_status load_vec(const tensor_source *src, const char *name, int64_t n, float **out) {
  const tensor *t = find(src, name);
  if (!t)
    return missing(src, name);
  char expect[48];
  snprintf(expect, sizeof expect, "{%lld}", (long long)n);
  QVL_TRY(check_tensor(src, t, n, 1, 1, 1, expect));
  return dequant_alloc(t, n, 1, out);
}

/* The process default tier of towers loaded without one (vision_set_precision: the deprecated
 * qvl_set_precision). The library reads no environment: the commands turn QVL_PRECISION into
 * --precision (src/options). */
static _Atomic int g_precision = KN_PREC_FAST;

void vision_set_precision(kn_precision p) { g_precision = (int)p; }

kn_precision vision_precision(void) { return (kn_precision)g_precision; }

/* A matrix W[n_out][n_in] (ggml ne {n_in, n_out}) prepared for kn_matmul. */
static qvl_status load_mat(const tensor_source *src, kn_precision prec, const char *name, int64_t n_in, int64_t n_out,
                           kn_weight *w) {
  const tensor *t = find(src, name);
  if (!t)
    return missing(src, name);
  char expect[64];
  snprintf(expect, sizeof expect, "{%lld, %lld}", (long long)n_in, (long long)n_out);
  QVL_TRY(check_tensor(src, t, n_in, n_out, 1, 1, expect));
  qvl_status s = kn_weight_init_prec(w, t, prec);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "mmproj '%s': tensor '%s': ", src->label, name);
  return QVL_OK;
}

static qvl_status load_linear(const tensor_source *src, kn_precision prec, const char *prefix, int64_t n_in, int64_t n_out,
                              kn_weight *w, float **b) {
  char name[96];
  snprintf(name, sizeof name, "%s.weight", prefix);
  QVL_TRY(load_mat(src, prec, name, n_in, n_out, w));
  snprintf(name, sizeof name, "%s.bias", prefix);
  return load_vec(src, name, n_out, b);
}

static qvl_status load_norm(const tensor_source *src, const char *prefix, int64_t n, float **w, float **b) {
  char name[96];
  snprintf(name, sizeof name, "%s.weight", prefix);
  QVL_TRY(load_vec(src, name, n, w));
  snprintf(name, sizeof name, "%s.bias", prefix);
  return load_vec(src, name, n, b);
}

/* Combines the two Conv3d temporal slices {P, P, 3, Dv} into one [Dv][3*T*P*P] F32 matrix whose
 * columns follow the pixel_values layout (c, t, py, px): element c*T*P*P + t*P*P + py*P + px. */
static qvl_status load_patch_embed(vision_model *m) {
  const tensor_source *src = &m->src;
  const vision_hparams *hp = &m->hp;
  const int64_t P = hp->patch_size, T = hp->temporal, Dv = hp->n_embd;
  const int64_t PP = P * P, K = 3 * T * PP;
  char expect[80];
  snprintf(expect, sizeof expect, "{%lld, %lld, 3, %lld}", (long long)P, (long long)P, (long long)Dv);
  m->patch_w = malloc((size_t)(Dv * K) * sizeof(float));
  if (!m->patch_w)
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory for the patch embedding");
  for (int64_t t = 0; t < T; t++) {
    char name[64];
    snprintf(name, sizeof name, t == 0 ? "v.patch_embd.weight" : "v.patch_embd.weight.%lld", (long long)t);
    const tensor *w = find(src, name);
    if (!w)
      return missing(src, name);
    QVL_TRY(check_tensor(src, w, P, P, 3, Dv, expect));
    if (w->type != QVL_DTYPE_F32 && w->type != QVL_DTYPE_F16 && w->type != QVL_DTYPE_BF16)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': tensor '%s' has type %s, expected F32, F16 "
                        "or BF16", src->label, name, dtype_name(w->type));
    float *slice;
    QVL_TRY(dequant_alloc(w, P, 3 * P * Dv, &slice)); /* [Dv][3][P][P] */
    for (int64_t o = 0; o < Dv; o++)
      for (int64_t c = 0; c < 3; c++)
        memcpy(m->patch_w + o * K + c * T * PP + t * PP, slice + (o * 3 + c) * PP, (size_t)PP * sizeof(float));
    free(slice);
  }
  tensor view = {.name = "v.patch_embd (both temporal slices)", .type = QVL_DTYPE_F32, .n_dims = 2,
                 .ne = {K, Dv, 1, 1}, .data = m->patch_w, .nbytes = (size_t)(Dv * K) * sizeof(float)};
  qvl_status s = kn_weight_init(&m->patch, &view);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "mmproj '%s': patch embedding: ", src->label);
  return load_vec(src, "v.patch_embd.bias", Dv, &m->patch_b);
}

static qvl_status load_pos_embed(vision_model *m) {
  const tensor_source *src = &m->src;
  const int64_t Dv = m->hp.n_embd;
  const char *name = "v.position_embd.weight";
  const tensor *t = find(src, name);
  if (!t)
    return missing(src, name);
  int64_t n = t->n_dims >= 2 ? t->ne[1] : 1;
  if (n < 1 || n > VISION_MAX_DIM)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s' has %lld positions, expected 1..%d",
                      src->label, name, (long long)n, VISION_MAX_DIM);
  int64_t S = (int64_t)sqrt((double)n);
  while (S * S > n)
    S--;
  while ((S + 1) * (S + 1) <= n)
    S++;
  if (S < 1 || S * S != n)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': tensor '%s' has %lld positions, expected a square "
                      "number (an S x S grid)", src->label, name, (long long)n);
  char expect[64];
  snprintf(expect, sizeof expect, "{%lld, S*S}", (long long)Dv);
  QVL_TRY(check_tensor(src, t, Dv, n, 1, 1, expect));
  m->pos_side = S;
  return dequant_alloc(t, Dv, n, &m->pos);
}

static qvl_status load_merger(const tensor_source *src, kn_precision prec, const vision_hparams *hp, vision_merger *mg,
                              int64_t layer) {
  const int64_t D4 = hp->n_embd * hp->merge * hp->merge;
  char p[64];
  mg->layer = layer;
  if (layer < 0) {
    mg->norm_dim = hp->n_embd;
    QVL_TRY(load_norm(src, "v.post_ln", hp->n_embd, &mg->norm_w, &mg->norm_b));
    QVL_TRY(load_linear(src, prec, "mm.0", D4, D4, &mg->fc1, &mg->fc1_b));
    return load_linear(src, prec, "mm.2", D4, hp->proj_dim, &mg->fc2, &mg->fc2_b);
  }
  mg->norm_dim = D4;
  snprintf(p, sizeof p, "v.deepstack.%lld.norm", (long long)layer);
  QVL_TRY(load_norm(src, p, D4, &mg->norm_w, &mg->norm_b));
  snprintf(p, sizeof p, "v.deepstack.%lld.fc1", (long long)layer);
  QVL_TRY(load_linear(src, prec, p, D4, D4, &mg->fc1, &mg->fc1_b));
  snprintf(p, sizeof p, "v.deepstack.%lld.fc2", (long long)layer);
  return load_linear(src, prec, p, D4, hp->proj_dim, &mg->fc2, &mg->fc2_b);
}

/* DeepStack mergers are found by tensor presence (as llama.cpp does; clip.vision.is_deepstack_layers
 * is not authoritative). A layer with some but not all of its tensors is an error, reported by
 * load_merger naming the missing one. */
static bool has_deepstack(const tensor_source *src, int64_t layer) {
  static const char *const parts[] = {"norm.weight", "norm.bias", "fc1.weight",
                                      "fc1.bias",    "fc2.weight", "fc2.bias"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "v.deepstack.%lld.%s", (long long)layer, parts[i]);
    if (find(src, name))
      return true;
  }
  return false;
}

static qvl_status check_hparams(const vision_hparams *hp, const char *label) {
  const int64_t dims[] = {hp->n_embd, hp->n_head, hp->n_ff, hp->n_layer, hp->proj_dim, hp->patch_size,
                          hp->merge, hp->temporal};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i] < 1 || dims[i] > VISION_MAX_DIM)
      return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': hyperparameter %zu out of range (%lld)", label, i,
                        (long long)dims[i]);
  if (hp->n_embd % hp->n_head != 0 || hp->head_dim != hp->n_embd / hp->n_head)
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': head_dim %lld != embedding_length %lld / heads %lld",
                      label, (long long)hp->head_dim, (long long)hp->n_embd, (long long)hp->n_head);
  if (hp->head_dim % 4 != 0 || hp->head_dim > VISION_MAX_HEAD_DIM)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': vision head_dim %lld is not a multiple of 4 "
                      "up to %d (the 2-D RoPE splits each head into row and column quarters)", label,
                      (long long)hp->head_dim, VISION_MAX_HEAD_DIM);
  if (hp->temporal != 2)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': temporal patch size %lld, expected 2", label,
                      (long long)hp->temporal);
  if (hp->patch_size > 64 || hp->merge > 8)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "mmproj '%s': patch size %lld / merge size %lld out of range",
                      label, (long long)hp->patch_size, (long long)hp->merge);
  if (!(hp->eps > 0.0f) || !(hp->eps < 1.0f))
    return qvl_errorf(QVL_ERR_FORMAT, "mmproj '%s': layer_norm_epsilon %g out of range (0, 1)", label,
                      (double)hp->eps);
  return QVL_OK;
}

static qvl_status vision_load(vision_model *m) {
  const tensor_source *src = &m->src;
  const kn_precision prec = m->precision;
  const vision_hparams *hp = &m->hp;
  QVL_TRY(check_hparams(hp, src->label));
  const int64_t Dv = hp->n_embd;
  QVL_TRY(load_patch_embed(m));
  QVL_TRY(load_pos_embed(m));
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers)
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory");
  for (int64_t i = 0; i < hp->n_layer; i++) {
    vision_layer *l = &m->layers[i];
    char p[64];
    snprintf(p, sizeof p, "v.blk.%lld.ln1", (long long)i);
    QVL_TRY(load_norm(src, p, Dv, &l->ln1_w, &l->ln1_b));
    snprintf(p, sizeof p, "v.blk.%lld.attn_qkv", (long long)i);
    QVL_TRY(load_linear(src, prec, p, Dv, 3 * Dv, &l->qkv, &l->qkv_b));
    snprintf(p, sizeof p, "v.blk.%lld.attn_out", (long long)i);
    QVL_TRY(load_linear(src, prec, p, Dv, Dv, &l->out, &l->out_b));
    snprintf(p, sizeof p, "v.blk.%lld.ln2", (long long)i);
    QVL_TRY(load_norm(src, p, Dv, &l->ln2_w, &l->ln2_b));
    snprintf(p, sizeof p, "v.blk.%lld.ffn_up", (long long)i);
    QVL_TRY(load_linear(src, prec, p, Dv, hp->n_ff, &l->up, &l->up_b));
    snprintf(p, sizeof p, "v.blk.%lld.ffn_down", (long long)i);
    QVL_TRY(load_linear(src, prec, p, hp->n_ff, Dv, &l->down, &l->down_b));
  }
  QVL_TRY(load_merger(src, m->precision, hp, &m->merger, -1));
  int n_ds = 0;
  for (int64_t i = 0; i < hp->n_layer; i++)
    n_ds += has_deepstack(src, i);
  if (n_ds > 0) {
    m->deepstack = calloc((size_t)n_ds, sizeof *m->deepstack);
    if (!m->deepstack)
      return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory");
  }
  for (int64_t i = 0; i < hp->n_layer; i++)
    if (has_deepstack(src, i))
      QVL_TRY(load_merger(src, m->precision, hp, &m->deepstack[m->n_deepstack++], i));
  return QVL_OK;
}

qvl_status vision_init(const vision_hparams *hp, const tensor_source *src, vision_model **out) {
  return vision_init_prec(hp, src, vision_precision(), out);
}

qvl_status vision_init_prec(const vision_hparams *hp, const tensor_source *src, kn_precision prec,
                            vision_model **out) {
  *out = NULL;
  vision_model *m = calloc(1, sizeof *m);
  if (!m) {
    if (src->release)
      src->release(src->user);
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory");
  }
  m->hp = *hp;
  m->src = *src;
  m->precision = prec;
  if (!m->src.label)
    m->src.label = "(tensor source)";
  qvl_status s = vision_load(m);
  if (s != QVL_OK) {
    vision_free(m);
    return s;
  }
  *out = m;
  return QVL_OK;
}

qvl_status vision_load_gguf_file(gguf *g, vision_model **out) {
  return vision_load_gguf_file_prec(g, vision_precision(), out);
}

qvl_status vision_load_gguf_file_prec(gguf *g, kn_precision prec, vision_model **out) {
  *out = NULL;
  vision_hparams hp;
  qvl_status s = vision_hparams_from_gguf(g, &hp);
  if (s != QVL_OK) {
    gguf_close(g);
    return s;
  }
  tensor_source src = tensor_source_gguf(g);
  return vision_init_prec(&hp, &src, prec, out);
}

qvl_status vision_load_gguf(const char *path, vision_model **out) {
  return vision_load_gguf_prec(path, vision_precision(), out);
}

qvl_status vision_load_gguf_prec(const char *path, kn_precision prec, vision_model **out) {
  *out = NULL;
  gguf *g = NULL;
  QVL_TRY(gguf_open(path, &g));
  return vision_load_gguf_file_prec(g, prec, out);
}

static void merger_free(vision_merger *mg) {
  kn_weight_free(&mg->fc1);
  kn_weight_free(&mg->fc2);
  FREE_EACH(mg->norm_w, mg->norm_b, mg->fc1_b, mg->fc2_b);
}

static void layer_free(vision_layer *l) {
  kn_weight *w[] = {&l->qkv, &l->out, &l->up, &l->down};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    kn_weight_free(w[i]);
  FREE_EACH(l->ln1_w, l->ln1_b, l->qkv_b, l->out_b, l->ln2_w, l->ln2_b, l->up_b, l->down_b);
}

void vision_free(vision_model *m) {
  if (!m)
    return;
  kn_weight_free(&m->patch);
  FREE_EACH(m->patch_w, m->patch_b, m->pos);
  if (m->layers) {
    for (int64_t i = 0; i < m->hp.n_layer; i++)
      layer_free(&m->layers[i]);
    free(m->layers);
  }
  merger_free(&m->merger);
  if (m->deepstack) {
    for (int i = 0; i < m->n_deepstack; i++)
      merger_free(&m->deepstack[i]);
    free(m->deepstack);
  }
  if (m->src.release)
    m->src.release(m->src.user);
  free(m);
}

qvl_status vision_check_text(const vision_model *m, int64_t text_hidden, int64_t text_n_deepstack) {
  if (m->hp.proj_dim != text_hidden)
    return qvl_errorf(QVL_ERR_MISMATCH,
                      "mmproj '%s' does not belong to this text model: it projects images to %lld "
                      "features (clip.vision.projection_dim), the text model's hidden size is %lld",
                      m->src.label, (long long)m->hp.proj_dim, (long long)text_hidden);
  if (m->n_deepstack != text_n_deepstack)
    return qvl_errorf(QVL_ERR_MISMATCH,
                      "mmproj '%s' does not belong to this text model: it has %d DeepStack mergers, "
                      "the text model expects %lld DeepStack layers",
                      m->src.label, m->n_deepstack, (long long)text_n_deepstack);
  return QVL_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------------ */

int64_t vision_n_tokens(const vision_model *m, int64_t grid_t, int64_t grid_h, int64_t grid_w) {
  const int64_t mg = m->hp.merge;
  if (grid_t < 1 || grid_h < 1 || grid_w < 1 || grid_t > VISION_MAX_FRAMES ||
      grid_h > VISION_MAX_GRID_SIDE || grid_w > VISION_MAX_GRID_SIDE || grid_h % mg || grid_w % mg)
    return -1;
  return grid_t * grid_h * grid_w / (mg * mg);
}

/* Rows per block of the MLP: bounds its hidden buffer ([rows][n_ff]) while keeping GEMMs large. */
#define VISION_MLP_ROWS 512

/* Rows per parallel task: small enough to balance, large enough to amortise the dispatch. */
#define ROWS_PER_TASK 32

static int64_t n_chunks(int64_t rows) { return (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK; }

/* Full-resolution (row, col) of patch n of a frame in merge-window order:
 * n = (bh * (w/m) + bw) * m*m + mh * m + mw, row = bh*m + mh, col = bw*m + mw. */
static void patch_coords(int64_t n, int64_t grid_w, int64_t mg, int64_t *row, int64_t *col) {
  const int64_t win = n / (mg * mg), in = n % (mg * mg);
  const int64_t wpr = grid_w / mg;
  *row = (win / wpr) * mg + in / mg;
  *col = (win % wpr) * mg + in % mg;
}

/* torch.linspace(0, end, steps) in float32, scalar form (spec 4.2). */
static void linspace_f32(float end, int64_t steps, float *out) {
  if (steps == 1) {
    out[0] = 0.0f;
    return;
  }
  const float start = 0.0f;
  const float step = (end - start) / (float)(steps - 1);
  const int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; i++)
    out[i] = i < half ? start + step * (float)i : end - step * (float)(steps - 1 - i);
}

typedef struct pos_task {
  const vision_model *m;
  int64_t grid_w, n;          /* patches per frame */
  const int64_t *y0, *y1, *x0, *x1; /* [grid_h], [grid_w] table indices */
  const float *dy, *dx;       /* [grid_h], [grid_w] fractional parts */
  float *pe;                  /* [n][Dv] */
} pos_task;

static void pos_embed_task(void *arg, int64_t chunk) {
  const pos_task *a = arg;
  const int64_t Dv = a->m->hp.n_embd, S = a->m->pos_side;
  const int64_t end = (chunk + 1) * ROWS_PER_TASK < a->n ? (chunk + 1) * ROWS_PER_TASK : a->n;
  for (int64_t n = chunk * ROWS_PER_TASK; n < end; n++) {
    int64_t i, j;
    patch_coords(n, a->grid_w, a->m->hp.merge, &i, &j);
    /* the four corner weights are float32 products, as transformers forms them */
    const float ody = 1.0f - a->dy[i], odx = 1.0f - a->dx[j];
    const float w00 = ody * odx, w01 = ody * a->dx[j], w10 = a->dy[i] * odx, w11 = a->dy[i] * a->dx[j];
    const float *e00 = a->m->pos + (a->y0[i] * S + a->x0[j]) * Dv;
    const float *e01 = a->m->pos + (a->y0[i] * S + a->x1[j]) * Dv;
    const float *e10 = a->m->pos + (a->y1[i] * S + a->x0[j]) * Dv;
    const float *e11 = a->m->pos + (a->y1[i] * S + a->x1[j]) * Dv;
    float *o = a->pe + n * Dv;
    for (int64_t d = 0; d < Dv; d++) {
      const float p00 = e00[d] * w00, p01 = e01[d] * w01, p10 = e10[d] * w10, p11 = e11[d] * w11;
      o[d] = ((p00 + p01) + p10) + p11;
    }
  }
}

/* Bilinear (align-corners) resampling of the S x S table to grid_h x grid_w, in merge-window order,
 * for one frame: pe [grid_h*grid_w][Dv]. */
static qvl_status pos_embed(const vision_model *m, int64_t grid_h, int64_t grid_w, float *pe) {
  const int64_t S = m->pos_side;
  int64_t *idx = malloc((size_t)(2 * (grid_h + grid_w)) * sizeof(int64_t));
  float *f = malloc((size_t)(2 * (grid_h + grid_w)) * sizeof(float));
  if (!idx || !f) {
    free(idx);
    free(f);
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory for position embedding");
  }
  int64_t *y0 = idx, *y1 = idx + grid_h, *x0 = idx + 2 * grid_h, *x1 = x0 + grid_w;
  float *ys = f, *dy = f + grid_h, *xs = f + 2 * grid_h, *dx = xs + grid_w;
  linspace_f32((float)(S - 1), grid_h, ys);
  linspace_f32((float)(S - 1), grid_w, xs);
  for (int64_t i = 0; i < grid_h; i++) {
    y0[i] = (int64_t)ys[i]; /* truncation, as .int() */
    y1[i] = y0[i] + 1 < S ? y0[i] + 1 : S - 1;
    dy[i] = ys[i] - (float)y0[i];
  }
  for (int64_t j = 0; j < grid_w; j++) {
    x0[j] = (int64_t)xs[j];
    x1[j] = x0[j] + 1 < S ? x0[j] + 1 : S - 1;
    dx[j] = xs[j] - (float)x0[j];
  }
  pos_task a = {.m = m, .grid_w = grid_w, .n = grid_h * grid_w, .y0 = y0, .y1 = y1, .x0 = x0,
                .x1 = x1, .dy = dy, .dx = dx, .pe = pe};
  kn_parallel_for(n_chunks(a.n), pos_embed_task, &a);
  free(idx);
  free(f);
  return QVL_OK;
}

/* cos/sin tables [n][head_dim] of the 2-D RoPE for one frame (spec 4.3), all in float32:
 * emb = [row*inv, col*inv, row*inv, col*inv] with head_dim/4 inverse frequencies. */
static void rope_tables(const vision_model *m, int64_t grid_w, int64_t n, float *cosb, float *sinb) {
  const int64_t hd = m->hp.head_dim, q = hd / 4;
  float inv[VISION_MAX_HEAD_DIM / 4];
  for (int64_t j = 0; j < q; j++)
    inv[j] = 1.0f / powf(m->hp.rope_theta, (float)(2 * j) / (float)(hd / 2));
  for (int64_t p = 0; p < n; p++) {
    int64_t row, col;
    patch_coords(p, grid_w, m->hp.merge, &row, &col);
    float *c = cosb + p * hd, *s = sinb + p * hd;
    for (int64_t j = 0; j < q; j++) {
      const float ar = (float)row * inv[j], ac = (float)col * inv[j];
      c[j] = c[j + 2 * q] = cosf(ar);
      s[j] = s[j + 2 * q] = sinf(ar);
      c[j + q] = c[j + 3 * q] = cosf(ac);
      s[j + q] = s[j + 3 * q] = sinf(ac);
    }
  }
}

typedef struct rope_task {
  int64_t n;                   /* rows */
  int64_t n_head, head_dim, stride;
  float *qkv;                  /* [n][stride]: q at 0, k at n_head*head_dim */
  const float *cosb, *sinb;    /* [n][head_dim] */
} rope_task;

static void rope_task_fn(void *arg, int64_t chunk) {
  const rope_task *a = arg;
  const int64_t hd = a->head_dim, half = hd / 2, Dv = a->n_head * hd;
  const int64_t end = (chunk + 1) * ROWS_PER_TASK < a->n ? (chunk + 1) * ROWS_PER_TASK : a->n;
  for (int64_t r = chunk * ROWS_PER_TASK; r < end; r++) {
    const float *c = a->cosb + r * hd, *s = a->sinb + r * hd;
    for (int64_t part = 0; part < 2; part++) { /* q then k */
      float *v = a->qkv + r * a->stride + part * Dv;
      for (int64_t h = 0; h < a->n_head; h++, v += hd) {
        /* x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1] (NeoX pairs (i, i + hd/2)) */
        for (int64_t i = 0; i < half; i++) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c[i] + (-x2) * s[i];
          v[i + half] = x2 * c[i + half] + x1 * s[i + half];
        }
      }
    }
  }
}

/* Wall time of one step, added to a stage counter. */
#define TIMED(ACC, CALL)                 \
  do {                                   \
    double t0_ = time_now_s();           \
    CALL;                                \
    (ACC) += (time_now_s() - t0_) * 1e3; \
  } while (0)

/* The m*m patches of a merge window are consecutive rows, so [N][Dv] is [N/m^2][m^2*Dv] as is. */
static void run_merger(const vision_merger *mg, const vision_hparams *hp, const float *x, int64_t N,
                       float *tmp, float *tmp2, float *out, vision_stage_ms *ms) {
  const int64_t mm = hp->merge * hp->merge, D4 = hp->n_embd * mm, n_tok = N / mm;
  if (mg->layer < 0)
    TIMED(ms->rest, kn_layernorm(x, mg->norm_w, mg->norm_b, N, hp->n_embd, hp->eps, tmp));
  else
    TIMED(ms->rest, kn_layernorm(x, mg->norm_w, mg->norm_b, n_tok, D4, hp->eps, tmp));
  TIMED(ms->gemm, kn_matmul(&mg->fc1, tmp, n_tok, mg->fc1_b, tmp2));
  TIMED(ms->rest, kn_gelu_erf(tmp2, n_tok * D4));
  TIMED(ms->gemm, kn_matmul(&mg->fc2, tmp2, n_tok, mg->fc2_b, out));
}

static bool mul_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= INT64_MAX / 8;
}

/* The state of one image going through the tower: scratch memory and how far it got. */
struct vision_job {
  const vision_model *m;
  int64_t grid_t, nf, N, n_tok;
  float *mem;               /* the whole scratch allocation */
  float *x, *h, *qkv, *ff, *cosb, *sinb;
  float *embeds, *deepstack; /* caller's outputs */
  int64_t next_layer;       /* first block not yet run; n_layer + 1 once the merger ran */
  int ds;                   /* DeepStack mergers done */
  trace_fn trace;
  void *trace_user;
  vision_stage_ms ms;       /* time so far per kind of work (vision_job_stage_ms) */
};

vision_stage_ms vision_job_stage_ms(const vision_job *j) { return j->ms; }

qvl_status vision_job_begin(const vision_model *m, const float *pixel_values, int64_t grid_t, int64_t grid_h,
                            int64_t grid_w, float *embeds, float *deepstack, trace_fn trace, void *trace_user,
                            vision_job **out) {
  *out = NULL;
  const vision_hparams *hp = &m->hp;
  const int64_t n_tok = vision_n_tokens(m, grid_t, grid_h, grid_w);
  if (n_tok < 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "vision: invalid image grid t=%lld h=%lld w=%lld (expected t in 1..%d, h and w in "
                      "1..%d and multiples of the merge size %lld)",
                      (long long)grid_t, (long long)grid_h, (long long)grid_w, VISION_MAX_FRAMES,
                      VISION_MAX_GRID_SIDE, (long long)hp->merge);
  if (!pixel_values || !embeds || (m->n_deepstack > 0 && !deepstack))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "vision_encode: NULL %s", !pixel_values ? "pixel_values"
                      : !embeds ? "embeds" : "deepstack output");
  const int64_t Dv = hp->n_embd, hd = hp->head_dim, nf = grid_h * grid_w, N = grid_t * nf;
  int64_t sz_x, sz_qkv, sz_ff, sz_rope, total;
  if (!mul_ok(N, Dv, &sz_x) || !mul_ok(N, 3 * Dv, &sz_qkv) ||
      !mul_ok(N < VISION_MLP_ROWS ? N : VISION_MLP_ROWS, hp->n_ff, &sz_ff) ||
      !mul_ok(N, hd, &sz_rope) || __builtin_add_overflow(2 * sz_x, sz_qkv, &total) ||
      __builtin_add_overflow(total, sz_ff + 2 * sz_rope, &total) ||
      (uint64_t)total > SIZE_MAX / sizeof(float))
    return qvl_errorf(QVL_ERR_TOO_LARGE, "vision: image of %lld patches is too large", (long long)N);
  vision_job *j = calloc(1, sizeof *j);
  float *mem = j ? malloc((size_t)total * sizeof(float)) : NULL;
  if (!mem) {
    free(j);
    return qvl_errorf(QVL_ERR_NOMEM, "vision: out of memory for %lld patches (%lld MB of scratch)",
                      (long long)N, (long long)(total / (1 << 18)));
  }
  j->m = m;
  j->grid_t = grid_t;
  j->nf = nf;
  j->N = N;
  j->n_tok = n_tok;
  j->mem = mem;
  j->embeds = embeds;
  j->deepstack = deepstack;
  j->trace = trace;
  j->trace_user = trace_user;
  float *x = j->x = mem;                 /* [N][Dv] residual stream */
  float *h = j->h = x + sz_x;            /* [N][Dv] normed input / attention output / merger LayerNorm */
  j->qkv = h + sz_x;                     /* [N][3*Dv] q|k|v, then attention projection / merger fc1 */
  j->ff = j->qkv + sz_qkv;               /* [min(N, VISION_MLP_ROWS)][n_ff] MLP hidden */
  float *cosb = j->cosb = j->ff + sz_ff; /* [N][hd] */
  float *sinb = j->sinb = cosb + sz_rope; /* [N][hd] */

  /* patch embedding (Conv3d as a matmul) + bias, then the position embedding of every frame */
  (void)kernels_take_error(); /* only this job's kernel failures count */
  TIMED(j->ms.gemm, kn_matmul(&m->patch, pixel_values, N, m->patch_b, x));
  double t_rest = time_now_s();
  qvl_status s = kernels_take_error();
  if (s == QVL_OK)
    s = pos_embed(m, grid_h, grid_w, h);
  if (s != QVL_OK) {
    vision_job_free(j);
    return s;
  }
  for (int64_t t = 1; t < grid_t; t++)
    memcpy(h + t * nf * Dv, h, (size_t)(nf * Dv) * sizeof(float));
  if (trace)
    trace(trace_user, "vision_pos_embed", h, N, Dv);
  kn_add(x, h, N * Dv);
  rope_tables(m, grid_w, nf, cosb, sinb);
  for (int64_t t = 1; t < grid_t; t++) { /* every frame has the same coordinates */
    memcpy(cosb + t * nf * hd, cosb, (size_t)(nf * hd) * sizeof(float));
    memcpy(sinb + t * nf * hd, sinb, (size_t)(nf * hd) * sizeof(float));
  }
  j->ms.rest += (time_now_s() - t_rest) * 1e3;
  if (trace) {
    trace(trace_user, "vision_rope_cos", cosb, N, hd);
    trace(trace_user, "vision_rope_sin", sinb, N, hd);
    trace(trace_user, "vision_hidden.0", x, N, Dv);
  }
  *out = j;
  return QVL_OK;
}

qvl_status vision_job_run(vision_job *j, int64_t max_layers, bool *done_out) {
  *done_out = false;
  (void)kernels_take_error();
  const vision_model *m = j->m;
  const vision_hparams *hp = &m->hp;
  const int64_t Dv = hp->n_embd, hd = hp->head_dim, nf = j->nf, N = j->N, n_tok = j->n_tok;
  float *x = j->x, *h = j->h, *qkv = j->qkv, *ff = j->ff;
  const float scale = 1.0f / sqrtf((float)hd);
  for (int64_t done = 0; j->next_layer < hp->n_layer && (max_layers <= 0 || done < max_layers); done++) {
    const int64_t li = j->next_layer++;
    const vision_layer *l = &m->layers[li];
    vision_stage_ms *ms = &j->ms;
    TIMED(ms->rest, kn_layernorm(x, l->ln1_w, l->ln1_b, N, Dv, hp->eps, h));
    TIMED(ms->gemm, kn_matmul(&l->qkv, h, N, l->qkv_b, qkv));
    rope_task rt = {.n = N, .n_head = hp->n_head, .head_dim = hd, .stride = 3 * Dv,
                    .qkv = qkv, .cosb = j->cosb, .sinb = j->sinb};
    TIMED(ms->rest, kn_parallel_for(n_chunks(N), rope_task_fn, &rt));
    /* block-diagonal: each frame attends only to itself */
    double ta = time_now_s();
    for (int64_t t = 0; t < j->grid_t; t++) {
      const float *q = qkv + t * nf * 3 * Dv;
      kn_attention_prec(q, nf, 3 * Dv, q + Dv, q + 2 * Dv, nf, 3 * Dv, (int)hp->n_head, (int)hp->n_head,
                        (int)hd, scale, -1, h + t * nf * Dv, Dv, m->precision);
    }
    ms->attn += (time_now_s() - ta) * 1e3;
    TIMED(ms->gemm, kn_matmul(&l->out, h, N, l->out_b, qkv)); /* q, k, v are consumed: reuse their memory */
    TIMED(ms->rest, kn_add(x, qkv, N * Dv));
    /* the MLP is row-wise: run it in row blocks so its [rows][n_ff] hidden stays small */
    for (int64_t r0 = 0; r0 < N; r0 += VISION_MLP_ROWS) {
      const int64_t nr = N - r0 < VISION_MLP_ROWS ? N - r0 : VISION_MLP_ROWS;
      float *xr = x + r0 * Dv, *hr = h + r0 * Dv;
      TIMED(ms->rest, kn_layernorm(xr, l->ln2_w, l->ln2_b, nr, Dv, hp->eps, hr));
      TIMED(ms->gemm, kn_matmul(&l->up, hr, nr, l->up_b, ff));
      TIMED(ms->rest, kn_gelu_tanh(ff, nr * hp->n_ff));
      TIMED(ms->gemm, kn_matmul(&l->down, ff, nr, l->down_b, hr));
      TIMED(ms->rest, kn_add(xr, hr, nr * Dv));
    }
    if (j->trace) {
      char name[40];
      snprintf(name, sizeof name, "vision_hidden.%lld", (long long)(li + 1));
      j->trace(j->trace_user, name, x, N, Dv);
    }
    if (j->ds < m->n_deepstack && m->deepstack[j->ds].layer == li) {
      float *out = j->deepstack + (int64_t)j->ds * n_tok * hp->proj_dim;
      run_merger(&m->deepstack[j->ds], hp, x, N, h, qkv, out, &j->ms);
      if (j->trace) {
        char name[40];
        snprintf(name, sizeof name, "deepstack.%d", j->ds);
        j->trace(j->trace_user, name, out, n_tok, hp->proj_dim);
      }
      j->ds++;
    }
  }
  if (j->next_layer == hp->n_layer) {
    run_merger(&m->merger, hp, x, N, h, qkv, j->embeds, &j->ms);
    if (j->trace)
      j->trace(j->trace_user, "image_embeds", j->embeds, n_tok, hp->proj_dim);
    j->next_layer++;
  }
  /* an out-of-memory in one of the kernels above (kernels_take_error): the outputs are not valid */
  QVL_TRY(kernels_take_error());
  *done_out = j->next_layer > hp->n_layer;
  return QVL_OK;
}

void vision_job_free(vision_job *j) {
  if (!j)
    return;
  FREE_EACH(j->mem, j);
}

qvl_status vision_encode(const vision_model *m, const float *pixel_values, int64_t grid_t,
                         int64_t grid_h, int64_t grid_w, float *embeds, float *deepstack,
                         trace_fn trace, void *trace_user) {
  return vision_encode_stages(m, pixel_values, grid_t, grid_h, grid_w, embeds, deepstack, trace,
                              trace_user, NULL);
}

qvl_status vision_encode_stages(const vision_model *m, const float *pixel_values, int64_t grid_t,
                                int64_t grid_h, int64_t grid_w, float *embeds, float *deepstack,
                                trace_fn trace, void *trace_user, vision_stage_ms *ms) {
  vision_job *j;
  QVL_TRY(vision_job_begin(m, pixel_values, grid_t, grid_h, grid_w, embeds, deepstack, trace, trace_user, &j));
  bool done;
  qvl_status s = vision_job_run(j, 0, &done);
  if (ms)
    *ms = j->ms;
  vision_job_free(j);
  return s;
}
