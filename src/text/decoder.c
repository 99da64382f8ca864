#include "text/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/log.h"
#include "base/status.h"

/* Caps that keep every size product below 2^63 and reject absurd metadata early. */
#define DECODER_MAX_DIM (1 << 20)
#define DECODER_MAX_LAYERS 4096
#define DECODER_MAX_VOCAB (1 << 24)

/* ---- hyperparameters ------------------------------------------------------------------------ */

static qvl_status key_missing(const gguf *g, const char *key) {
  return qvl_errorf(QVL_ERR_FORMAT, "%s: missing required key '%s'", gguf_path(g), key);
}

/* Reads an integer that llama.cpp allows to be a scalar or a per-layer array; an array must hold
 * one value for every layer, all equal (this engine has no per-layer widths). */
static qvl_status get_uniform_int(const gguf *g, const char *key, int64_t n_layer, bool required,
                                  int64_t *out) {
  int64_t idx = gguf_find_key(g, key);
  if (idx < 0) {
    if (required)
      return key_missing(g, key);
    return QVL_ERR_NOT_FOUND;
  }
  if (gguf_key_type(g, idx) == GGUF_TYPE_ARRAY) {
    int64_t *v = NULL;
    uint64_t n = 0;
    QVL_TRY(gguf_get_int_array(g, key, &v, &n));
    if (n == 0 || (n_layer > 0 && n != (uint64_t)n_layer)) {
      free(v);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected one value or %lld (one per layer), found %llu",
                        gguf_path(g), key, (long long)n_layer, (unsigned long long)n);
    }
    for (uint64_t i = 1; i < n; i++)
      if (v[i] != v[0]) {
        int64_t a = v[0], b = v[i];
        free(v);
        return qvl_errorf(QVL_ERR_UNSUPPORTED,
                          "%s: key '%s': per-layer values differ (layer 0: %lld, layer %llu: %lld); "
                          "only uniform layers are supported",
                          gguf_path(g), key, (long long)a, (unsigned long long)i, (long long)b);
      }
    *out = v[0];
    free(v);
    return QVL_OK;
  }
  return gguf_get_i64(g, key, out);
}

static qvl_status check_range(const gguf *g, const char *key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected a value in %lld..%lld, found %lld", gguf_path(g),
                      key, (long long)lo, (long long)hi, (long long)v);
  return QVL_OK;
}

qvl_status decoder_hparams_from_gguf(const gguf *g, decoder_hparams *hp) {
  memset(hp, 0, sizeof *hp);
  const char *path = gguf_path(g);
  const char *arch = NULL;
  if (gguf_find_key(g, "general.architecture") < 0)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s: missing required key 'general.architecture' (not a llama.cpp model file?)", path);
  QVL_TRY(gguf_get_str(g, "general.architecture", &arch));
  if (gguf_is_mmproj(g))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, GGUF_MMPROJ_AS_MODEL_FMT, path);
  if (strcmp(arch, "qwen3vl") != 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported, expected qwen3vl", path,
                      arch);

  char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "qwen3vl.%s", suffix), key)
  int64_t v;
  /* block_count first: per-layer arrays are checked against it. */
  QVL_TRY(get_uniform_int(g, KEY("block_count"), 0, true, &v));
  QVL_TRY(check_range(g, key, v, 1, DECODER_MAX_LAYERS));
  hp->n_layer = v;
  QVL_TRY(get_uniform_int(g, KEY("context_length"), 0, true, &v));
  QVL_TRY(check_range(g, key, v, 1, INT32_MAX));
  hp->n_ctx_train = v;
  QVL_TRY(get_uniform_int(g, KEY("embedding_length"), 0, true, &v));
  QVL_TRY(check_range(g, key, v, 1, DECODER_MAX_DIM));
  hp->n_embd = v;
  /* llama.cpp loads files without these two but cannot run them; say so at load time. */
  QVL_TRY(get_uniform_int(g, KEY("feed_forward_length"), hp->n_layer, true, &v));
  QVL_TRY(check_range(g, key, v, 1, DECODER_MAX_DIM));
  hp->n_ff = v;
  QVL_TRY(get_uniform_int(g, KEY("attention.head_count"), hp->n_layer, true, &v));
  QVL_TRY(check_range(g, key, v, 1, 4096));
  hp->n_head = v;
  qvl_status st = get_uniform_int(g, KEY("attention.head_count_kv"), hp->n_layer, false, &v);
  if (st == QVL_ERR_NOT_FOUND)
    v = hp->n_head;
  else if (st != QVL_OK)
    return st;
  QVL_TRY(check_range(g, key, v, 1, hp->n_head));
  if (hp->n_head % v != 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': %lld key/value heads do not divide %lld query heads", path,
                      key, (long long)v, (long long)hp->n_head);
  hp->n_head_kv = v;
  if (hp->n_embd % hp->n_head != 0 && gguf_find_key(g, KEY("attention.key_length")) < 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing key 'qwen3vl.attention.key_length' and n_embd %lld is not a "
                      "multiple of head_count %lld", path, (long long)hp->n_embd, (long long)hp->n_head);
  st = get_uniform_int(g, KEY("attention.key_length"), 0, false, &v);
  if (st == QVL_ERR_NOT_FOUND)
    v = hp->n_embd / hp->n_head;
  else if (st != QVL_OK)
    return st;
  QVL_TRY(check_range(g, key, v, 2, 2 * MROPE_MAX_HALF));
  if (v % 2 != 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': head dimension %lld must be even", path, key, (long long)v);
  hp->head_dim = v;
  int64_t vl;
  st = get_uniform_int(g, KEY("attention.value_length"), 0, false, &vl);
  if (st == QVL_OK && vl != hp->head_dim)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: key 'qwen3vl.attention.value_length' is %lld, expected the key "
                      "length %lld", path, (long long)vl, (long long)hp->head_dim);
  if (st != QVL_OK && st != QVL_ERR_NOT_FOUND)
    return st;
  st = get_uniform_int(g, KEY("n_deepstack_layers"), 0, false, &v);
  if (st == QVL_ERR_NOT_FOUND)
    v = 0;
  else if (st != QVL_OK)
    return st;
  QVL_TRY(check_range(g, key, v, 0, hp->n_layer));
  hp->n_deepstack = v;

  if (gguf_find_key(g, KEY("attention.layer_norm_rms_epsilon")) < 0)
    return key_missing(g, key);
  QVL_TRY(gguf_get_f32(g, key, &hp->rms_eps));
  if (!(hp->rms_eps > 0.0f) || !isfinite(hp->rms_eps))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected a positive epsilon, found %g", path, key,
                      (double)hp->rms_eps);

  /* llama.cpp's default when the key is absent; the converter always writes it (5e6 for Qwen3-VL). */
  if (gguf_find_key(g, KEY("rope.freq_base")) < 0) {
    hp->rope_theta = 10000.0f;
    log_warn("%s: no 'qwen3vl.rope.freq_base'; using llama.cpp's default 10000 (Qwen3-VL uses 5000000)", path);
  } else {
    QVL_TRY(gguf_get_f32(g, key, &hp->rope_theta));
    if (!(hp->rope_theta > 0.0f) || !isfinite(hp->rope_theta))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected a positive value, found %g", path, key,
                        (double)hp->rope_theta);
  }

  if (gguf_find_key(g, KEY("rope.dimension_sections")) < 0)
    return key_missing(g, key);
  {
    int64_t *sec = NULL;
    uint64_t n = 0;
    QVL_TRY(gguf_get_int_array(g, key, &sec, &n));
    if (n != 4) {
      free(sec);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': expected 4 values, found %llu", path, key,
                        (unsigned long long)n);
    }
    for (int i = 0; i < 4; i++) {
      if (sec[i] < 0 || sec[i] > hp->head_dim) {
        int64_t bad = sec[i];
        free(sec);
        return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': value %d is %lld, expected 0..%lld", path, key, i,
                          (long long)bad, (long long)hp->head_dim);
      }
      hp->rope_sections[i] = (int)sec[i];
    }
    free(sec);
  }
#undef KEY

  const tensor *te = gguf_find_tensor(g, "token_embd.weight");
  if (!te)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'", path);
  if (te->ne[1] < 1 || te->ne[1] > DECODER_MAX_VOCAB)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor 'token_embd.weight': vocabulary of %lld rows, expected 1..%d",
                      path, (long long)te->ne[1], DECODER_MAX_VOCAB);
  hp->n_vocab = te->ne[1];
  return QVL_OK;
}

/* ---- weight binding --------------------------------------------------------------------------- */

static const char *shape_str(char *b, size_t cap, const int64_t *ne, int n_dims) {
  size_t o = 0;
  o += (size_t)snprintf(b + o, cap - o, "{");
  for (int i = 0; i < n_dims && o < cap; i++)
    o += (size_t)snprintf(b + o, cap - o, i ? ", %lld" : "%lld", (long long)ne[i]);
  if (o < cap)
    snprintf(b + o, cap - o, "}");
  return b;
}

static qvl_status shape_check(const tensor_source *src, const char *name, const tensor *t,
                              const int64_t *want, int n_want) {
  bool ok = true;
  for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
    int64_t w = i < n_want ? want[i] : 1;
    if (t->ne[i] != w)
      ok = false;
  }
  if (ok)
    return QVL_OK;
  char a[96], b[96];
  int nd = t->n_dims > 0 && t->n_dims <= TENSOR_MAX_DIMS ? t->n_dims : TENSOR_MAX_DIMS;
  return qvl_errorf(QVL_ERR_MISMATCH, "%s: tensor '%s': expected shape %s, found %s", src->label, name,
                    shape_str(a, sizeof a, want, n_want), shape_str(b, sizeof b, t->ne, nd));
}

static const tensor *find_tensor(const tensor_source *src, const char *name) {
  return src->find(src->user, name);
}

static qvl_status bind_matrix(const tensor_source *src, const char *name, int64_t n_in, int64_t n_out,
                              kn_weight *w) {
  const tensor *t = find_tensor(src, name);
  if (!t)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing tensor '%s'", src->label, name);
  int64_t want[2] = {n_in, n_out};
  QVL_TRY(shape_check(src, name, t, want, 2));
  if (!dtype_supported(t->type))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s': type %s (%d) is not supported", src->label, name,
                      dtype_name(t->type), (int)t->type);
  qvl_status st = kn_weight_init(w, t);
  if (st != QVL_OK)
    return qvl_error_prefix(st, "%s: tensor '%s': ", src->label, name);
  return QVL_OK;
}

static qvl_status bind_vector(const tensor_source *src, const char *name, int64_t n, float **out) {
  const tensor *t = find_tensor(src, name);
  if (!t)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing tensor '%s'", src->label, name);
  int64_t want[1] = {n};
  QVL_TRY(shape_check(src, name, t, want, 1));
  if (t->type != QVL_DTYPE_F32 && t->type != QVL_DTYPE_F16 && t->type != QVL_DTYPE_BF16)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s': type %s, expected F32 (or F16/BF16) for a norm weight",
                      src->label, name, dtype_name(t->type));
  size_t need = (size_t)n * (t->type == QVL_DTYPE_F32 ? 4 : 2);
  if (t->nbytes < need)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': %zu bytes of data, expected %zu", src->label, name,
                      t->nbytes, need);
  float *v = malloc((size_t)n * sizeof(float));
  if (!v)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory for tensor '%s'", src->label, name);
  dtype_dequantize_row(t->type, t->data, v, n);
  *out = v;
  return QVL_OK;
}

/* llama.cpp also accepts one fused attn_qkv matrix {D, qd + 2 kvd}: the q rows, then k, then v
 * (create_tensor_qkv). Rows are contiguous, so the three matrices are views of row ranges. */
static qvl_status bind_fused_qkv(const tensor_source *src, const char *name, const tensor *t, int64_t D,
                                 int64_t qd, int64_t kvd, decoder_layer *L) {
  int64_t want[2] = {D, qd + 2 * kvd};
  QVL_TRY(shape_check(src, name, t, want, 2));
  size_t rb;
  if (!dtype_supported(t->type) || !dtype_row_bytes(t->type, D, &rb))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s': type %s with rows of %lld is not supported",
                      src->label, name, dtype_name(t->type), (long long)D);
  if (t->nbytes / rb < (size_t)(qd + 2 * kvd))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': %zu bytes, expected %lld rows of %zu", src->label, name,
                      t->nbytes, (long long)(qd + 2 * kvd), rb);
  kn_weight *w[3] = {&L->wq, &L->wk, &L->wv};
  int64_t rows[3] = {qd, kvd, kvd}, r0 = 0;
  for (int i = 0; i < 3; i++) {
    tensor part = *t;
    part.ne[1] = rows[i];
    part.data = (const char *)t->data + (size_t)r0 * rb;
    part.nbytes = (size_t)rows[i] * rb;
    qvl_status st = kn_weight_init(w[i], &part);
    if (st != QVL_OK)
      return qvl_error_prefix(st, "%s: tensor '%s': ", src->label, name);
    r0 += rows[i];
  }
  return QVL_OK;
}

static qvl_status bind_layer(const decoder_model *m, int64_t il, decoder_layer *L) {
  const decoder_hparams *hp = &m->hp;
  const tensor_source *src = &m->src;
  int64_t D = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%lld.%s", (long long)il, s), n)
  QVL_TRY(bind_vector(src, NAME("attn_norm.weight"), D, &L->attn_norm));
  const tensor *fused = NULL;
  if (!find_tensor(src, NAME("attn_q.weight")))
    fused = find_tensor(src, NAME("attn_qkv.weight"));
  if (fused) {
    QVL_TRY(bind_fused_qkv(src, n, fused, D, qd, kvd, L));
  } else {
    QVL_TRY(bind_matrix(src, NAME("attn_q.weight"), D, qd, &L->wq));
    QVL_TRY(bind_matrix(src, NAME("attn_k.weight"), D, kvd, &L->wk));
    QVL_TRY(bind_matrix(src, NAME("attn_v.weight"), D, kvd, &L->wv));
  }
  QVL_TRY(bind_matrix(src, NAME("attn_output.weight"), qd, D, &L->wo));
  QVL_TRY(bind_vector(src, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm));
  QVL_TRY(bind_vector(src, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm));
  QVL_TRY(bind_vector(src, NAME("ffn_norm.weight"), D, &L->ffn_norm));
  QVL_TRY(bind_matrix(src, NAME("ffn_gate.weight"), D, hp->n_ff, &L->w_gate));
  QVL_TRY(bind_matrix(src, NAME("ffn_up.weight"), D, hp->n_ff, &L->w_up));
  QVL_TRY(bind_matrix(src, NAME("ffn_down.weight"), hp->n_ff, D, &L->w_down));
#undef NAME
  /* Biases would change the maths silently if ignored; Qwen3 has none. */
  static const char *const biases[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias",
                                       "attn_output.bias"};
  for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
    snprintf(n, sizeof n, "blk.%lld.%s", (long long)il, biases[i]);
    if (find_tensor(src, n))
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s': attention biases are not supported (Qwen3 has none)",
                        src->label, n);
  }
  return QVL_OK;
}

static qvl_status check_hparams(const decoder_hparams *hp, const char *label) {
  if (hp->n_vocab < 1 || hp->n_vocab > DECODER_MAX_VOCAB || hp->n_embd < 1 || hp->n_embd > DECODER_MAX_DIM ||
      hp->n_layer < 1 || hp->n_layer > DECODER_MAX_LAYERS || hp->n_ff < 1 || hp->n_ff > DECODER_MAX_DIM ||
      hp->n_head < 1 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv != 0 || hp->head_dim < 2 ||
      hp->head_dim % 2 != 0 || hp->head_dim > 2 * MROPE_MAX_HALF ||
      hp->n_head * hp->head_dim > DECODER_MAX_DIM || hp->n_deepstack < 0 || hp->n_deepstack > hp->n_layer ||
      hp->n_ctx_train < 1 || !(hp->rms_eps > 0.0f))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "%s: invalid decoder hyperparameters (vocab %lld, embd %lld, layers %lld, ff %lld, heads "
                      "%lld/%lld, head_dim %lld, deepstack %lld, ctx %lld)",
                      label, (long long)hp->n_vocab, (long long)hp->n_embd, (long long)hp->n_layer,
                      (long long)hp->n_ff, (long long)hp->n_head, (long long)hp->n_head_kv,
                      (long long)hp->head_dim, (long long)hp->n_deepstack, (long long)hp->n_ctx_train);
  return QVL_OK;
}

qvl_status decoder_init(const decoder_hparams *hp, const tensor_source *src, decoder_model **out) {
  *out = NULL;
  decoder_model *m = calloc(1, sizeof *m);
  if (!m) {
    if (src->release)
      src->release(src->user);
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", src->label);
  }
  m->hp = *hp;
  m->src = *src;
  if (!m->src.label)
    m->src.label = "model";
  qvl_status st = check_hparams(hp, m->src.label);
  if (st == QVL_OK) {
    st = mrope_init(&m->rope, (int)hp->head_dim, hp->rope_theta, hp->rope_sections);
    if (st != QVL_OK)
      qvl_error_prefix(st, "%s: ", m->src.label);
  }
  if (st == QVL_OK)
    st = bind_matrix(&m->src, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd);
  if (st == QVL_OK) {
    if (find_tensor(&m->src, "output.weight")) {
      st = bind_matrix(&m->src, "output.weight", hp->n_embd, hp->n_vocab, &m->output);
      m->head = &m->output;
    } else {
      m->tied = true;
      m->head = &m->tok_embd;
    }
  }
  if (st == QVL_OK)
    st = bind_vector(&m->src, "output_norm.weight", hp->n_embd, &m->output_norm);
  if (st == QVL_OK) {
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
      st = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", m->src.label);
  }
  for (int64_t il = 0; st == QVL_OK && il < hp->n_layer; il++)
    st = bind_layer(m, il, &m->layers[il]);
  if (st != QVL_OK) {
    decoder_free(m);
    return st;
  }
  *out = m;
  return QVL_OK;
}

qvl_status decoder_load_gguf_file(gguf *g, decoder_model **out) {
  *out = NULL;
  decoder_hparams hp;
  qvl_status st = decoder_hparams_from_gguf(g, &hp);
  if (st != QVL_OK) {
    gguf_close(g);
    return st;
  }
  tensor_source src = tensor_source_gguf(g);
  return decoder_init(&hp, &src, out);
}

qvl_status decoder_load_gguf(const char *path, decoder_model **out) {
  *out = NULL;
  gguf *g = NULL;
  QVL_TRY(gguf_open(path, &g));
  return decoder_load_gguf_file(g, out);
}

static void layer_free(decoder_layer *L) {
  FREE_EACH(L->attn_norm, L->q_norm, L->k_norm, L->ffn_norm);
  kn_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    kn_weight_free(w[i]);
}

void decoder_free(decoder_model *m) {
  if (!m)
    return;
  if (m->layers)
    for (int64_t i = 0; i < m->hp.n_layer; i++)
      layer_free(&m->layers[i]);
  free(m->layers);
  free(m->output_norm);
  kn_weight_free(&m->tok_embd);
  if (!m->tied)
    kn_weight_free(&m->output);
  if (m->src.release)
    m->src.release(m->src.user);
  free(m);
}

qvl_status decoder_embed(const decoder_model *m, const int32_t *ids, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->hp.n_vocab)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                        (int)ids[i], (long long)i, (long long)m->hp.n_vocab - 1);
  for (int64_t i = 0; i < n; i++)
    kn_weight_row(&m->tok_embd, ids[i], out + i * m->hp.n_embd);
  return QVL_OK;
}

/* ---- work buffers ----------------------------------------------------------------------------- */

/* The work buffers of one forward, sized for cap rows: they are per call, not per sequence, so a
 * serving loop owns one for all its sequences (decoder_work_init) while a lone sequence owns its own. */
struct decoder_work {
  const decoder_model *m; /* the model the rows are sized for */
  int64_t cap;
  float *x;      /* [cap][n_embd] residual stream */
  float *xn;     /* [cap][n_embd] normed input of a sublayer */
  float *q0;     /* [cap][n_head*head_dim] q projection */
  float *q;      /* [cap][n_head*head_dim] after q_norm and RoPE */
  float *k0;     /* [cap][n_head_kv*head_dim] */
  float *k;      /* [cap][n_head_kv*head_dim] */
  float *v;      /* [cap][n_head_kv*head_dim] */
  float *att;    /* [cap][n_head*head_dim] attention output */
  float *tmp;    /* [cap][n_embd] sublayer output */
  float *gate;   /* [cap][n_ff] */
  float *up;     /* [cap][n_ff] */
  float *cos;    /* [cap][head_dim] */
  float *sin;    /* [cap][head_dim] */
  int32_t *pos;  /* [3][cap] positions of the rows */
  float *logits; /* [logits_cap][n_vocab] head output of a step with several logit rows (grown on use) */
  int64_t logits_cap;
};

/* The one table of the per-row buffers: work_alloc allocates from it and decoder_work_bytes sums it. */
typedef struct work_buf {
  void **p;
  size_t row_bytes;
} work_buf;

#define WORK_BUFS 14
static void work_table(decoder_work *w, const decoder_hparams *hp, work_buf t[WORK_BUFS]) {
  size_t f = sizeof(float), D = (size_t)hp->n_embd, qd = (size_t)(hp->n_head * hp->head_dim),
         kvd = (size_t)(hp->n_head_kv * hp->head_dim), ff = (size_t)hp->n_ff, hd = (size_t)hp->head_dim;
  work_buf b[WORK_BUFS] = {{(void **)&w->x, D * f},     {(void **)&w->xn, D * f},      {(void **)&w->q0, qd * f},
                           {(void **)&w->q, qd * f},    {(void **)&w->k0, kvd * f},    {(void **)&w->k, kvd * f},
                           {(void **)&w->v, kvd * f},   {(void **)&w->att, qd * f},    {(void **)&w->tmp, D * f},
                           {(void **)&w->gate, ff * f}, {(void **)&w->up, ff * f},     {(void **)&w->cos, hd * f},
                           {(void **)&w->sin, hd * f},  {(void **)&w->pos, 3 * sizeof(int32_t)}};
  memcpy(t, b, sizeof b);
}

static void work_release(decoder_work *w) {
  work_buf t[WORK_BUFS];
  work_table(w, &(decoder_hparams){0}, t);
  for (int i = 0; i < WORK_BUFS; i++) {
    free(*t[i].p);
    *t[i].p = NULL;
  }
  w->cap = 0;
  free(w->logits);
  w->logits = NULL;
  w->logits_cap = 0;
}

static qvl_status work_alloc(decoder_work *w, const decoder_hparams *hp, int64_t cap) {
  work_release(w);
  work_buf t[WORK_BUFS];
  work_table(w, hp, t);
  bool ok = true;
  for (int i = 0; i < WORK_BUFS; i++) {
    size_t bytes;
    if (__builtin_mul_overflow((size_t)cap, t[i].row_bytes, &bytes) || !(*t[i].p = malloc(bytes)))
      ok = false;
  }
  if (!ok) {
    work_release(w);
    return qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory for work buffers of %lld tokens", (long long)cap);
  }
  w->cap = cap;
  return QVL_OK;
}

uint64_t decoder_work_bytes(const decoder_model *m, int64_t n_rows) {
  decoder_work w = {0};
  work_buf t[WORK_BUFS];
  work_table(&w, &m->hp, t);
  uint64_t per_row = 0;
  for (int i = 0; i < WORK_BUFS; i++)
    per_row += t[i].row_bytes;
  uint64_t bytes;
  if (n_rows < 0 || __builtin_mul_overflow(per_row, (uint64_t)n_rows, &bytes))
    return 0;
  return bytes;
}

qvl_status decoder_work_init(const decoder_model *m, int64_t n_rows, decoder_work **out) {
  *out = NULL;
  if (n_rows < 1)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: work buffers for %lld rows", (long long)n_rows);
  decoder_work *w = calloc(1, sizeof *w);
  if (!w)
    return qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory");
  w->m = m;
  qvl_status st = work_alloc(w, &m->hp, n_rows);
  if (st != QVL_OK) {
    free(w);
    return st;
  }
  *out = w;
  return QVL_OK;
}

void decoder_work_free(decoder_work *w) {
  if (!w)
    return;
  work_release(w);
  free(w);
}

/* Grows w to hold rows rows and, when a step gathers several logit rows, n_logits of them (only
 * when a larger step than ever before comes). */
static qvl_status work_reserve(decoder_work *w, const decoder_hparams *hp, int64_t rows, int64_t n_logits) {
  if (w->cap < rows)
    QVL_TRY(work_alloc(w, hp, rows));
  if (n_logits > 1 && w->logits_cap < n_logits) {
    size_t bytes;
    float *l = NULL;
    if (__builtin_mul_overflow((size_t)n_logits, (size_t)hp->n_vocab * sizeof(float), &bytes) ||
        !(l = malloc(bytes)))
      return qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory for the logits of a batch of %lld",
                        (long long)n_logits);
    free(w->logits);
    w->logits = l;
    w->logits_cap = n_logits;
  }
  return QVL_OK;
}

/* ---- sequences -------------------------------------------------------------------------------- */

struct decoder_seq {
  const decoder_model *m;
  kv_cache kv;
  int64_t next_pos;  /* max position stored + 1 */
  int64_t n_batch;
  decoder_work *own; /* its work buffers for decoder_prefill / decoder_step, or NULL (shared_work) */
  float *logits;     /* [n_vocab] last token */
  trace_fn trace;
  void *trace_user;
};

static int64_t seq_n_ctx(const decoder_hparams *hp, const decoder_seq_params *p) {
  return p && p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
}

static int64_t seq_n_batch(int64_t n_ctx, const decoder_seq_params *p) {
  int64_t n_batch = p && p->n_batch > 0 ? p->n_batch : 512;
  return n_batch > n_ctx ? n_ctx : n_batch;
}

uint64_t decoder_seq_bytes(const decoder_model *m, const decoder_seq_params *p) {
  const decoder_hparams *hp = &m->hp;
  int64_t n_ctx = seq_n_ctx(hp, p);
  uint64_t kv = kv_cache_bytes_type(hp->n_layer, n_ctx, hp->n_head_kv * hp->head_dim, p ? p->kv_type : KV_TYPE_DEFAULT);
  if (kv == 0)
    return 0;
  uint64_t work = p && p->shared_work ? 0 : decoder_work_bytes(m, seq_n_batch(n_ctx, p));
  return kv + work + sizeof(float) * (uint64_t)hp->n_vocab;
}

qvl_status decoder_seq_init(const decoder_model *m, const decoder_seq_params *p, decoder_seq **out) {
  *out = NULL;
  int64_t n_ctx = seq_n_ctx(&m->hp, p);
  if (n_ctx > INT32_MAX)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "context of %lld tokens is too large", (long long)n_ctx);
  int64_t n_batch = seq_n_batch(n_ctx, p);
  if (n_ctx > m->hp.n_ctx_train)
    log_warn("context of %lld tokens exceeds the %lld the model was trained for", (long long)n_ctx,
             (long long)m->hp.n_ctx_train);
  decoder_seq *s = calloc(1, sizeof *s);
  if (!s)
    return qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory");
  s->m = m;
  s->n_batch = n_batch;
  qvl_status st = kv_cache_init_type(&s->kv, m->hp.n_layer, n_ctx, m->hp.n_head_kv * m->hp.head_dim,
                                     p ? p->kv_type : KV_TYPE_DEFAULT);
  if (st == QVL_OK && !(p && p->shared_work))
    st = decoder_work_init(m, n_batch, &s->own);
  if (st == QVL_OK && !(s->logits = malloc((size_t)m->hp.n_vocab * sizeof(float))))
    st = qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory for logits");
  if (st != QVL_OK) {
    decoder_seq_free(s);
    return st;
  }
  *out = s;
  return QVL_OK;
}

void decoder_seq_free(decoder_seq *s) {
  if (!s)
    return;
  kv_cache_free(&s->kv);
  decoder_work_free(s->own);
  free(s->logits);
  free(s);
}

void decoder_seq_reset(decoder_seq *s) {
  kv_cache_clear(&s->kv);
  s->next_pos = 0;
}

int64_t decoder_seq_n_past(const decoder_seq *s) { return s->kv.n; }
int64_t decoder_seq_next_pos(const decoder_seq *s) { return s->next_pos; }

void decoder_seq_set_trace(decoder_seq *s, trace_fn fn, void *user) {
  s->trace = fn;
  s->trace_user = user;
}

qvl_status decoder_seq_check_fit(const decoder_seq *s, int64_t n_prompt, int64_t n_generate) {
  if (n_prompt < 0 || n_generate < 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "negative token count (prompt %lld, generate %lld)",
                      (long long)n_prompt, (long long)n_generate);
  int64_t room = s->kv.n_ctx - s->kv.n;
  if (n_prompt > room || n_generate > room - n_prompt) {
    if (s->kv.n > 0)
      return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW,
                        "prompt of %lld tokens + %lld to generate exceeds the context of %lld (%lld tokens "
                        "already cached)",
                        (long long)n_prompt, (long long)n_generate, (long long)s->kv.n_ctx, (long long)s->kv.n);
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "prompt of %lld tokens + %lld to generate exceeds the context of %lld",
                      (long long)n_prompt, (long long)n_generate, (long long)s->kv.n_ctx);
  }
  return QVL_OK;
}

/* Rows r0 .. r0+n-1 of a forward chunk that belong to one sequence, and that sequence's layer KV:
 * the rows attend to kv.n_past stored keys plus themselves (causally) and are stored at kv.n_past.
 * A prefill chunk is one segment; a batched decode step has one segment of one row per sequence. */
typedef struct kv_seg {
  kv_view kv;
  int64_t r0, n;
} kv_seg;

/*
 * One decoder layer over n tokens x[n][n_embd] (updated in place) whose positions' RoPE tables are
 * cos/sin. Projections, norms and the MLP run once over all n rows (the weights are read once per
 * call; every kernel is row-independent, so a row's result does not depend on the other rows);
 * attention runs per segment against that segment's own KV.
 */
static void layer_forward(const decoder_model *m, const decoder_layer *L, float *x, int64_t n,
                          const float *cos, const float *sin, const kv_seg *segs, int n_segs, decoder_work *w) {
  const decoder_hparams *hp = &m->hp;
  int64_t D = hp->n_embd, H = hp->n_head, KV = hp->n_head_kv, hd = hp->head_dim;
  int64_t qd = H * hd, kvd = KV * hd;
  float eps = hp->rms_eps;

  kn_rmsnorm(x, L->attn_norm, n, D, eps, w->xn);
  kn_matmul(&L->wq, w->xn, n, NULL, w->q0);
  kn_matmul(&L->wk, w->xn, n, NULL, w->k0);
  kn_matmul(&L->wv, w->xn, n, NULL, w->v);
  /* Qwen3: RMSNorm over each head's head_dim values, before RoPE. */
  kn_rmsnorm(w->q0, L->q_norm, n * H, hd, eps, w->q);
  kn_rmsnorm(w->k0, L->k_norm, n * KV, hd, eps, w->k);
  mrope_apply(&m->rope, w->q, n, (int)H, qd, cos, sin);
  mrope_apply(&m->rope, w->k, n, (int)KV, kvd, cos, sin);
  float scale = (float)(1.0 / sqrt((double)hd));
  for (int sg = 0; sg < n_segs; sg++) {
    kv_view kv = segs[sg].kv;
    int64_t r0 = segs[sg].r0, ns = segs[sg].n;
    kv_view_store(&kv, 0, w->k + r0 * kvd, kvd, ns);
    kv_view_store(&kv, 1, w->v + r0 * kvd, kvd, ns);
    if (kv.k)
      kn_attention(w->q + r0 * qd, ns, qd, kv.k, kv.v, kv.n_past + ns, kv.stride, (int)H, (int)KV, (int)hd, scale,
                   kv.n_past, w->att + r0 * qd, qd);
    else
      kn_attention_f16kv(w->q + r0 * qd, ns, qd, kv.kh, kv.vh, kv.n_past + ns, kv.stride, (int)H, (int)KV, (int)hd,
                         scale, kv.n_past, w->att + r0 * qd, qd);
  }
  kn_matmul(&L->wo, w->att, n, NULL, w->tmp);
  kn_add(x, w->tmp, n * D);

  kn_rmsnorm(x, L->ffn_norm, n, D, eps, w->xn);
  kn_matmul(&L->w_gate, w->xn, n, NULL, w->gate);
  kn_matmul(&L->w_up, w->xn, n, NULL, w->up);
  kn_silu_mul(w->gate, w->up, n * hp->n_ff);
  kn_matmul(&L->w_down, w->gate, n, NULL, w->tmp);
  kn_add(x, w->tmp, n * D);
}

static qvl_status check_input(const decoder_seq *s, const decoder_input *in, int64_t begin, int64_t end) {
  const decoder_hparams *hp = &s->m->hp;
  int64_t n = in->n_tokens;
  if (n <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: empty input (%lld tokens)", (long long)n);
  if (!in->tokens && !in->embd)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: input has neither token ids nor embeddings");
  if (end - begin > s->kv.n_ctx - s->kv.n)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "%lld tokens cached + %lld new exceed the context of %lld",
                      (long long)s->kv.n, (long long)(end - begin), (long long)s->kv.n_ctx);
  if (in->tokens)
    for (int64_t i = 0; i < n; i++)
      if (in->tokens[i] < 0 || in->tokens[i] >= hp->n_vocab)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                          (int)in->tokens[i], (long long)i, (long long)hp->n_vocab - 1);
  if (in->pos)
    for (int64_t a = 0; a < 3; a++)
      for (int64_t i = 0; i < n; i++)
        if (in->pos[a * n + i] < 0)
          return qvl_errorf(QVL_ERR_INVALID_ARG, "position %d (axis %lld) of token %lld is negative",
                            (int)in->pos[a * n + i], (long long)a, (long long)i);
  if (!in->pos && s->next_pos + (end - begin) > INT32_MAX)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "positions beyond %d", INT32_MAX);
  if (in->n_img < 0 || in->n_img > n || (in->n_img > 0 && !in->img_idx))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: %lld image rows for %lld tokens", (long long)in->n_img,
                      (long long)n);
  for (int64_t j = 0; j < in->n_img; j++)
    if (in->img_idx[j] < 0 || in->img_idx[j] >= n || (j > 0 && in->img_idx[j] <= in->img_idx[j - 1]))
      return qvl_errorf(QVL_ERR_INVALID_ARG,
                        "decoder: image row %lld has token index %lld; indices must be ascending within 0..%lld",
                        (long long)j, (long long)in->img_idx[j], (long long)n - 1);
  if (in->n_deepstack < 0 || in->n_deepstack > hp->n_deepstack)
    return qvl_errorf(QVL_ERR_MISMATCH, "decoder: %lld DeepStack levels given, the model has %lld",
                      (long long)in->n_deepstack, (long long)hp->n_deepstack);
  if (in->n_deepstack > 0 && in->n_img > 0 && !in->deepstack)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: DeepStack levels given without data");
  return QVL_OK;
}

static void emit(const decoder_seq *s, const char *name, const float *data, int64_t rows, int64_t cols) {
  if (s && s->trace)
    s->trace(s->trace_user, name, data, rows, cols);
}

/* Final norm + head for rows x[n] into out[n][n_vocab] (w->xn keeps the normed rows). */
static void head_forward(const decoder_model *m, decoder_work *w, const float *x, int64_t n, float *out) {
  kn_rmsnorm(x, m->output_norm, n, m->hp.n_embd, m->hp.rms_eps, w->xn);
  kn_matmul(m->head, w->xn, n, NULL, out);
}

static bool wants_logits(const decoder_batch_item *it) { return !it->in || it->logits; }

/*
 * The one decoder driver. Items (checked; distinct sequences) own rows r0[i] .. r0[i+1]-1 of one
 * [r0[n]][n_embd] activation: a decode item one row (its token at next_pos), a prefill item the
 * tokens [begin, end) of its prompt with their image rows, positions and DeepStack additions.
 * Projections, MLP and head run once over all rows; attention per item against its own KV; then
 * every sequence's cache and next position advance. w holds r0[n] rows and n_logits logit rows.
 * all_logits (one item only): every row's logits [r0[1]][n_vocab] instead of the last row's.
 * trace: the sequence whose dump hooks see this call's tensors (a single prefill item), or NULL.
 * Cannot fail: everything is checked and reserved before.
 */
static void forward_rows(decoder_work *w, const decoder_batch_item *items, int n, const int64_t *r0,
                         int64_t n_logits, float *all_logits, const decoder_seq *trace) {
  const decoder_model *m = items[0].seq->m;
  const decoder_hparams *hp = &m->hp;
  int64_t D = hp->n_embd, V = hp->n_vocab, R = r0[n];
  int64_t j0[DECODER_MAX_BATCH], j1[DECODER_MAX_BATCH];
  /* Inputs and positions, row by row. */
  for (int i = 0; i < n; i++) {
    const decoder_batch_item *it = &items[i];
    const decoder_input *in = it->in;
    float *x = w->x + r0[i] * D;
    if (!in) {
      kn_weight_row(&m->tok_embd, it->token, x);
      for (int a = 0; a < 3; a++)
        w->pos[a * R + r0[i]] = (int32_t)it->seq->next_pos;
      j0[i] = j1[i] = 0;
      continue;
    }
    int64_t nr = it->end - it->begin, nin = in->n_tokens;
    if (in->tokens)
      for (int64_t k = 0; k < nr; k++)
        kn_weight_row(&m->tok_embd, in->tokens[it->begin + k], x + k * D);
    else
      memcpy(x, in->embd + it->begin * D, (size_t)(nr * D) * sizeof(float));
    int64_t j = 0;
    while (j < in->n_img && in->img_idx[j] < it->begin)
      j++;
    j0[i] = j;
    while (j < in->n_img && in->img_idx[j] < it->end)
      j++;
    j1[i] = j;
    if (in->img_embd)
      for (j = j0[i]; j < j1[i]; j++)
        memcpy(x + (in->img_idx[j] - it->begin) * D, in->img_embd + j * D, (size_t)D * sizeof(float));
    for (int64_t k = 0; k < nr; k++)
      for (int a = 0; a < 3; a++)
        w->pos[a * R + r0[i] + k] =
            (int32_t)(in->pos ? in->pos[a * nin + it->begin + k] : it->seq->next_pos + k);
  }
  emit(trace, "inputs_embeds", w->x, R, D);
  mrope_tables(&m->rope, w->pos, R, R, w->cos, w->sin);
  emit(trace, "text_rope_cos", w->cos, R, hp->head_dim);
  emit(trace, "text_rope_sin", w->sin, R, hp->head_dim);
  /* Layers, each followed by the DeepStack additions of the image rows it owns. */
  kv_seg segs[DECODER_MAX_BATCH];
  char name[64];
  for (int64_t il = 0; il < hp->n_layer; il++) {
    for (int i = 0; i < n; i++)
      segs[i] = (kv_seg){kv_cache_layer(&items[i].seq->kv, il), r0[i], r0[i + 1] - r0[i]};
    layer_forward(m, &m->layers[il], w->x, R, w->cos, w->sin, segs, n, w);
    for (int i = 0; i < n; i++) {
      const decoder_input *in = items[i].in;
      if (in && il < in->n_deepstack)
        for (int64_t j = j0[i]; j < j1[i]; j++)
          kn_add(w->x + (r0[i] + in->img_idx[j] - items[i].begin) * D, in->deepstack + (il * in->n_img + j) * D, D);
    }
    if (trace && trace->trace) {
      snprintf(name, sizeof name, "text_hidden.%lld", (long long)il);
      emit(trace, name, w->x, R, D);
    }
  }
  /* Output head: every row (all_logits), or the last row of every item that wants logits, gathered
   * into one matrix. */
  if (all_logits) {
    head_forward(m, w, w->x, R, all_logits);
    emit(trace, "final_norm", w->xn, R, D);
    if (wants_logits(&items[0]))
      memcpy(items[0].seq->logits, all_logits + (R - 1) * V, (size_t)V * sizeof(float));
  } else if (n_logits > 0) {
    int64_t k = 0;
    for (int i = 0; i < n; i++)
      if (wants_logits(&items[i]))
        memcpy(w->tmp + (k++) * D, w->x + (r0[i + 1] - 1) * D, (size_t)D * sizeof(float));
    if (n_logits == 1) {
      for (int i = 0; i < n; i++)
        if (wants_logits(&items[i]))
          head_forward(m, w, w->tmp, 1, items[i].seq->logits);
    } else {
      head_forward(m, w, w->tmp, n_logits, w->logits);
      k = 0;
      for (int i = 0; i < n; i++)
        if (wants_logits(&items[i]))
          memcpy(items[i].seq->logits, w->logits + (k++) * V, (size_t)V * sizeof(float));
    }
  }
  for (int i = 0; i < n; i++) {
    decoder_seq *s = items[i].seq;
    int64_t next = s->next_pos;
    for (int64_t rr = r0[i]; rr < r0[i + 1]; rr++)
      for (int a = 0; a < 3; a++)
        if (w->pos[a * R + rr] + 1 > next)
          next = w->pos[a * R + rr] + 1;
    s->kv.n += r0[i + 1] - r0[i];
    s->next_pos = next;
  }
}

/* The work buffers of a sequence's own calls (decoder_prefill, decoder_step). */
static qvl_status own_work(const decoder_seq *s, decoder_work **w) {
  if (!s->own)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "decoder: the sequence has no work buffers of its own (shared_work); run it with decoder_forward");
  *w = s->own;
  return QVL_OK;
}

/* Runs tokens [begin, end) of in (already checked) in chunks of n_batch, each one forward_rows of a
 * single prefill item, appending them to the cache. Chunk boundaries do not change results:
 * matmuls are row-independent and attention is computed per query row (kernels.h), so a prompt
 * prefilled in any pieces gives the same KV. */
static qvl_status prefill_span(decoder_seq *s, const decoder_input *in, int64_t begin, int64_t end,
                               float *logits_all, const float **logits_last) {
  const decoder_hparams *hp = &s->m->hp;
  int64_t V = hp->n_vocab, span = end - begin;
  decoder_work *w = NULL;
  QVL_TRY(own_work(s, &w));
  /* Dumps want whole-prompt tensors: a traced call runs as one chunk. */
  int64_t chunk = s->trace ? span : s->n_batch;
  QVL_TRY(work_reserve(w, hp, chunk, 1));
  float *trace_logits = NULL;
  if (s->trace && !logits_all) {
    size_t bytes;
    if (__builtin_mul_overflow((size_t)span, (size_t)V * sizeof(float), &bytes) || !(trace_logits = malloc(bytes)))
      return qvl_errorf(QVL_ERR_NOMEM, "decoder: out of memory for traced logits of %lld tokens", (long long)span);
  }
  /* Logits rows of tokens begin .. end-1 (the caller's [n_tokens][n_vocab] from row begin, or the
   * trace's own buffer), or NULL when only the last token's are wanted. */
  float *lg = logits_all ? logits_all + begin * V : trace_logits;
  for (int64_t c0 = begin; c0 < end; c0 += chunk) {
    int64_t nc = end - c0 < chunk ? end - c0 : chunk;
    decoder_batch_item it = {.seq = s, .in = in, .begin = c0, .end = c0 + nc, .logits = c0 + nc == end};
    int64_t r0[2] = {0, nc};
    forward_rows(w, &it, 1, r0, it.logits ? 1 : 0, lg ? lg + (c0 - begin) * V : NULL, s->trace ? s : NULL);
  }
  if (lg)
    emit(s, "logits", lg, span, V);
  free(trace_logits);
  if (logits_last)
    *logits_last = s->logits;
  return QVL_OK;
}

/* A forward pass's status: its own, else an out-of-memory in one of its kernels (the kernels
 * report it once per pass, see kernels_take_error; the caller cleared it before the pass). */
static qvl_status forward_status(qvl_status s) {
  qvl_status k = kernels_take_error();
  return s != QVL_OK ? s : k;
}

qvl_status decoder_prefill(decoder_seq *s, const decoder_input *in, float *logits_all,
                           const float **logits_last) {
  QVL_TRY(check_input(s, in, 0, in->n_tokens));
  (void)kernels_take_error();
  return forward_status(prefill_span(s, in, 0, in->n_tokens, logits_all, logits_last));
}

qvl_status decoder_prefill_part(decoder_seq *s, const decoder_input *in, int64_t begin, int64_t end,
                                const float **logits_last) {
  if (begin < 0 || end <= begin || end > in->n_tokens)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: prefill range %lld..%lld outside the input of %lld tokens",
                      (long long)begin, (long long)end, (long long)in->n_tokens);
  QVL_TRY(check_input(s, in, begin, end));
  (void)kernels_take_error();
  return forward_status(prefill_span(s, in, begin, end, NULL, logits_last));
}

qvl_status decoder_step(decoder_seq *s, int32_t token, const float **logits) {
  const float *l = NULL;
  qvl_status st = decoder_step_batch(&s, &token, 1, &l);
  if (st == QVL_OK && logits)
    *logits = l;
  return st;
}

/* Checks one item of a mixed batch; *rows = the rows it adds. */
static qvl_status check_item(const decoder_model *m, const decoder_batch_item *it, int i, int64_t *rows) {
  const decoder_seq *s = it->seq;
  const decoder_hparams *hp = &m->hp;
  if (!s || s->m != m)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: batch item %d has no sequence of this model", i);
  if (it->in) {
    if (it->begin < 0 || it->end <= it->begin || it->end > it->in->n_tokens)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: batch item %d: prefill range %lld..%lld outside the input "
                        "of %lld tokens", i, (long long)it->begin, (long long)it->end, (long long)it->in->n_tokens);
    QVL_TRY(check_input(s, it->in, it->begin, it->end));
    *rows = it->end - it->begin;
    return QVL_OK;
  }
  if (it->token < 0 || it->token >= hp->n_vocab)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "token id %d is outside the vocabulary (0..%lld)", (int)it->token,
                      (long long)hp->n_vocab - 1);
  if (s->kv.n >= s->kv.n_ctx)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "context of %lld tokens is full", (long long)s->kv.n_ctx);
  if (s->next_pos >= INT32_MAX)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "positions beyond %d", INT32_MAX);
  *rows = 1;
  return QVL_OK;
}

/* decoder_forward with w = NULL: the first sequence's own work buffers. */
static qvl_status forward(decoder_work *w, const decoder_batch_item *items, int n, const float **logits) {
  if (n <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: batch of %d sequences", n);
  if (n > DECODER_MAX_BATCH)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "decoder: batch of %d sequences; the limit is %d", n, DECODER_MAX_BATCH);
  if (!items[0].seq)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: batch item 0 has no sequence");
  const decoder_model *m = items[0].seq->m;
  (void)kernels_take_error();
  int64_t r0[DECODER_MAX_BATCH + 1];
  int64_t R = 0, n_logits = 0;
  for (int i = 0; i < n; i++) {
    int64_t rows = 0;
    QVL_TRY(check_item(m, &items[i], i, &rows));
    for (int j = 0; j < i; j++)
      if (items[j].seq == items[i].seq)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: sequence %d appears twice in the batch (also %d)", i, j);
    if (R > INT32_MAX - rows)
      return qvl_errorf(QVL_ERR_TOO_LARGE, "decoder: batch of more than %d rows", INT32_MAX);
    r0[i] = R;
    R += rows;
    if (wants_logits(&items[i]))
      n_logits++;
  }
  r0[n] = R;
  if (!w)
    QVL_TRY(own_work(items[0].seq, &w));
  else if (w->m != m)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: the work buffers belong to another model");
  QVL_TRY(work_reserve(w, &m->hp, R > n_logits ? R : n_logits, n_logits));
  forward_rows(w, items, n, r0, n_logits, NULL, NULL);
  if (logits)
    for (int i = 0; i < n; i++)
      logits[i] = wants_logits(&items[i]) ? items[i].seq->logits : NULL;
  return forward_status(QVL_OK);
}

qvl_status decoder_forward(decoder_work *w, const decoder_batch_item *items, int n, const float **logits) {
  if (!w)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: no work buffers given");
  return forward(w, items, n, logits);
}

qvl_status decoder_forward_batch(const decoder_batch_item *items, int n, const float **logits) {
  return forward(NULL, items, n, logits);
}

qvl_status decoder_step_batch(decoder_seq **seqs, const int32_t *tokens, int n, const float **logits) {
  if (n <= 0 || n > DECODER_MAX_BATCH)
    return qvl_errorf(n <= 0 ? QVL_ERR_INVALID_ARG : QVL_ERR_TOO_LARGE,
                      "decoder: batch of %d sequences; expected 1..%d", n, DECODER_MAX_BATCH);
  decoder_batch_item items[DECODER_MAX_BATCH];
  for (int i = 0; i < n; i++)
    items[i] = (decoder_batch_item){.seq = seqs[i], .token = tokens[i]};
  return decoder_forward_batch(items, n, logits);
}

kv_cache *decoder_seq_kv(decoder_seq *s) { return &s->kv; }

qvl_status decoder_seq_set_past(decoder_seq *s, int64_t n_past, int64_t next_pos) {
  if (n_past < 0 || n_past > s->kv.n_ctx || next_pos < 0 || next_pos > INT32_MAX)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "decoder: cannot set %lld cached tokens (capacity %lld), next position %lld",
                      (long long)n_past, (long long)s->kv.n_ctx, (long long)next_pos);
  s->kv.n = n_past;
  s->next_pos = next_pos;
  return QVL_OK;
}
