#include "model/random_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/gguf_write.h"

random_text_shape random_text_shape_2b(void) {
  random_text_shape s = {.n_embd = 2048, .n_layer = 28, .n_head = 16, .n_head_kv = 8, .head_dim = 128,
                         .n_ff = 6144, .n_vocab = 151936, .n_deepstack = 3, .sections = {24, 20, 20, 0},
                         .rope_theta = 5e6f};
  return s;
}

random_vision_shape random_vision_shape_2b(void) {
  random_vision_shape s = {.n_embd = 1024, .n_layer = 24, .n_head = 16, .n_ff = 4096, .proj_dim = 2048,
                           .pos_side = 48, .patch_size = 16, .deepstack_layers = {5, 11, 17}, .n_deepstack = 3};
  return s;
}

/* splitmix64: a stateless hash of (seed, tensor, index), so rows can be generated in parallel and
 * the same seed always gives the same file. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Approximately N(0, 1): the sum of four uniforms, rescaled (Irwin-Hall); plenty for benchmark weights. */
static float gauss(uint64_t key) {
  uint64_t a = mix64(key), b = mix64(key ^ 0x5851f42d4c957f2dull);
  float s = (float)(a & 0xffffffff) + (float)(a >> 32) + (float)(b & 0xffffffff) + (float)(b >> 32);
  return (s * (1.0f / 4294967296.0f) - 2.0f) * 1.7320508f;
}

typedef struct fill_job {
  uint64_t key;
  int64_t row_len;
  float scale, offset;
  qvl_dtype type;
  size_t row_bytes;
  uint8_t *out;
  _Atomic int failed;
} fill_job;

static void fill_row(void *arg, int64_t r) {
  fill_job *j = arg;
  float *row = malloc(sizeof(float) * (size_t)j->row_len);
  if (!row) {
    j->failed = 1;
    return;
  }
  for (int64_t i = 0; i < j->row_len; i++)
    row[i] = j->offset + j->scale * gauss(j->key + (uint64_t)(r * j->row_len + i));
  dtype_quantize_row(j->type, row, j->out + (size_t)r * j->row_bytes, j->row_len);
  free(row);
}

static qvl_status add_random(gguf_writer *w, const char *name, qvl_dtype type, int n_dims, const int64_t *ne,
                             uint64_t seed, float scale, float offset) {
  int64_t rows = 1;
  for (int i = 1; i < n_dims; i++)
    rows *= ne[i];
  size_t row_bytes;
  if (!dtype_row_bytes(type, ne[0], &row_bytes))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "tensor '%s': row of %lld is not a whole number of %s blocks", name,
                      (long long)ne[0], dtype_name(type));
  uint8_t *data = calloc((size_t)rows, row_bytes);
  if (!data)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for tensor '%s' (%zu bytes)", name, (size_t)rows * row_bytes);
  uint64_t key = mix64(seed);
  for (const char *c = name; *c; c++)
    key = mix64(key ^ (uint64_t)(unsigned char)*c);
  fill_job j = {key, ne[0], scale, offset, type, row_bytes, data, 0};
  kn_parallel_for(rows, fill_row, &j);
  qvl_status s = j.failed ? qvl_errorf(QVL_ERR_NOMEM, "out of memory filling tensor '%s'", name)
                          : gguf_writer_add_tensor(w, name, type, n_dims, ne, data);
  free(data);
  return s;
}

static qvl_status add_matrix(gguf_writer *w, const char *name, qvl_dtype type, int64_t n_in, int64_t n_out,
                             uint64_t seed) {
  int64_t ne[2] = {n_in, n_out};
  return add_random(w, name, type, 2, ne, seed, 1.0f / sqrtf((float)n_in), 0.0f);
}

static qvl_status add_vector(gguf_writer *w, const char *name, int64_t n, uint64_t seed, float scale, float offset) {
  return add_random(w, name, QVL_DTYPE_F32, 1, &n, seed, scale, offset);
}

static int file_type_of(qvl_dtype t) {
  switch (t) { /* llama_ftype values, as llama.cpp records them */
  case QVL_DTYPE_F32: return 0;
  case QVL_DTYPE_F16: return 1;
  case QVL_DTYPE_Q4_0: return 2;
  case QVL_DTYPE_Q8_0: return 7;
  case QVL_DTYPE_Q4_K: return 15;
  case QVL_DTYPE_Q6_K: return 18;
  case QVL_DTYPE_BF16: return 32;
  default: return 0;
  }
}

/* One metadata key of a generated file: type says which member holds the value (GGUF_TYPE_ARRAY:
 * arr_n elements of arr_type at arr). */
typedef struct meta_entry {
  const char *key;
  gguf_type type;
  const char *str;
  uint32_t u32;
  float f32;
  bool b;
  gguf_type arr_type;
  const void *arr;
  uint64_t arr_n;
} meta_entry;

/* Writes the n entries in order. */
static qvl_status write_meta(gguf_writer *w, const meta_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (e[i].type) {
    case GGUF_TYPE_STRING: QVL_TRY(gguf_writer_set_str(w, e[i].key, e[i].str)); break;
    case GGUF_TYPE_UINT32: QVL_TRY(gguf_writer_set_u32(w, e[i].key, e[i].u32)); break;
    case GGUF_TYPE_FLOAT32: QVL_TRY(gguf_writer_set_f32(w, e[i].key, e[i].f32)); break;
    case GGUF_TYPE_BOOL: QVL_TRY(gguf_writer_set_bool(w, e[i].key, e[i].b)); break;
    case GGUF_TYPE_ARRAY: QVL_TRY(gguf_writer_set_array(w, e[i].key, e[i].arr_type, e[i].arr, e[i].arr_n)); break;
    default: return qvl_errorf(QVL_ERR_INTERNAL, "random model: metadata '%s' has no writer", e[i].key);
    }
  }
  return QVL_OK;
}

/* The general.* keys every generated file starts with. */
static qvl_status write_general(gguf_writer *w, const char *arch, const char *kind, const char *name, qvl_dtype type) {
  const meta_entry meta[] = {
      {"general.architecture", GGUF_TYPE_STRING, .str = arch},
      {"general.type", GGUF_TYPE_STRING, .str = kind},
      {"general.name", GGUF_TYPE_STRING, .str = name},
      {"general.quantization_version", GGUF_TYPE_UINT32, .u32 = 2},
      {"general.file_type", GGUF_TYPE_UINT32, .u32 = (uint32_t)file_type_of(type)},
  };
  return write_meta(w, meta, sizeof meta / sizeof meta[0]);
}

static qvl_status copy_tokenizer(gguf_writer *w, const gguf *src, int64_t n_vocab) {
  for (int64_t i = 0; i < gguf_n_kv(src); i++) {
    const char *key = gguf_key_name(src, i);
    if (strncmp(key, "tokenizer.", 10))
      continue;
    gguf_type t = gguf_key_type(src, i);
    if (t == GGUF_TYPE_STRING) {
      const char *v;
      QVL_TRY(gguf_get_str(src, key, &v));
      QVL_TRY(gguf_writer_set_str(w, key, v));
    } else if (t == GGUF_TYPE_ARRAY && gguf_array_type(src, i) == GGUF_TYPE_STRING) {
      uint64_t n = gguf_array_len(src, i);
      const char **strs = malloc(sizeof *strs * (size_t)(n ? n : 1));
      size_t *lens = malloc(sizeof *lens * (size_t)(n ? n : 1));
      if (!strs || !lens) {
        free(strs);
        free(lens);
        return qvl_errorf(QVL_ERR_NOMEM, "out of memory copying %s", key);
      }
      for (uint64_t k = 0; k < n; k++)
        strs[k] = gguf_array_str(src, i, k, &lens[k]);
      qvl_status s = gguf_writer_set_str_array(w, key, strs, lens, n);
      free(strs);
      free(lens);
      QVL_TRY(s);
    } else if (t == GGUF_TYPE_ARRAY) {
      QVL_TRY(gguf_writer_set_array(w, key, gguf_array_type(src, i), gguf_array_data(src, i), gguf_array_len(src, i)));
    } else if (t == GGUF_TYPE_UINT32) {
      uint32_t v;
      QVL_TRY(gguf_get_u32(src, key, &v));
      QVL_TRY(gguf_writer_set_u32(w, key, v));
    } else if (t == GGUF_TYPE_BOOL) {
      bool v;
      QVL_TRY(gguf_get_bool(src, key, &v));
      QVL_TRY(gguf_writer_set_bool(w, key, v));
    } else {
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tokenizer key '%s' has type %s, which the copier does not handle",
                        gguf_path(src), key, gguf_type_name(t));
    }
  }
  int64_t idx = gguf_find_key(src, "tokenizer.ggml.tokens");
  if (idx < 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: no tokenizer.ggml.tokens to copy", gguf_path(src));
  if ((int64_t)gguf_array_len(src, idx) != n_vocab)
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: the tokenizer has %llu tokens, the model needs %lld", gguf_path(src),
                      (unsigned long long)gguf_array_len(src, idx), (long long)n_vocab);
  return QVL_OK;
}

static qvl_status text_tensors(gguf_writer *w, const random_text_shape *sh, qvl_dtype type, uint64_t seed) {
  int64_t d = sh->n_embd, q = sh->n_head * sh->head_dim, kv = sh->n_head_kv * sh->head_dim;
  int64_t ne_embd[2] = {d, sh->n_vocab};
  /* Tied head: embeddings scaled like the fixtures' so logits stay in a sane range. */
  QVL_TRY(add_random(w, "token_embd.weight", type, 2, ne_embd, seed, 1.6f / sqrtf((float)d), 0));
  QVL_TRY(add_vector(w, "output_norm.weight", d, seed, 0.1f, 1.0f));
  char name[96];
  for (int64_t l = 0; l < sh->n_layer; l++) {
    log_info("make-random: text layer %lld/%lld", (long long)l + 1, (long long)sh->n_layer);
#define NAME(fmt) (snprintf(name, sizeof name, "blk.%lld." fmt, (long long)l), name)
    QVL_TRY(add_vector(w, NAME("attn_norm.weight"), d, seed, 0.1f, 1.0f));
    QVL_TRY(add_matrix(w, NAME("attn_q.weight"), type, d, q, seed));
    QVL_TRY(add_matrix(w, NAME("attn_k.weight"), type, d, kv, seed));
    QVL_TRY(add_matrix(w, NAME("attn_v.weight"), type, d, kv, seed));
    QVL_TRY(add_matrix(w, NAME("attn_output.weight"), type, q, d, seed));
    QVL_TRY(add_vector(w, NAME("attn_q_norm.weight"), sh->head_dim, seed, 0.1f, 1.0f));
    QVL_TRY(add_vector(w, NAME("attn_k_norm.weight"), sh->head_dim, seed, 0.1f, 1.0f));
    QVL_TRY(add_vector(w, NAME("ffn_norm.weight"), d, seed, 0.1f, 1.0f));
    QVL_TRY(add_matrix(w, NAME("ffn_gate.weight"), type, d, sh->n_ff, seed));
    QVL_TRY(add_matrix(w, NAME("ffn_up.weight"), type, d, sh->n_ff, seed));
    QVL_TRY(add_matrix(w, NAME("ffn_down.weight"), type, sh->n_ff, d, seed));
#undef NAME
  }
  return QVL_OK;
}

/* The end of writing a file: saves w to path when all before succeeded (s is QVL_OK); frees w. */
static qvl_status save_and_free(gguf_writer *w, qvl_status s, const char *path) {
  if (s == QVL_OK)
    s = gguf_writer_save(w, path);
  gguf_writer_free(w);
  return s;
}

qvl_status random_text_write(const random_text_shape *sh, qvl_dtype type, const gguf *tok_src, uint64_t seed,
                             const char *path) {
  gguf_writer *w = gguf_writer_init();
  if (!w)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  const meta_entry meta[] = {
      {"qwen3vl.block_count", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_layer},
      {"qwen3vl.context_length", GGUF_TYPE_UINT32, .u32 = 262144},
      {"qwen3vl.embedding_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_embd},
      {"qwen3vl.feed_forward_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_ff},
      {"qwen3vl.attention.head_count", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_head},
      {"qwen3vl.attention.head_count_kv", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_head_kv},
      {"qwen3vl.rope.dimension_sections", GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_INT32, .arr = sh->sections,
       .arr_n = 4},
      {"qwen3vl.rope.freq_base", GGUF_TYPE_FLOAT32, .f32 = sh->rope_theta},
      {"qwen3vl.attention.layer_norm_rms_epsilon", GGUF_TYPE_FLOAT32, .f32 = 1e-6f},
      {"qwen3vl.attention.key_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->head_dim},
      {"qwen3vl.attention.value_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->head_dim},
      {"qwen3vl.n_deepstack_layers", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_deepstack},
  };
  qvl_status s = write_general(w, "qwen3vl", "model", "qvl-random-qwen3vl", type);
  if (s == QVL_OK)
    s = write_meta(w, meta, sizeof meta / sizeof meta[0]);
  if (s == QVL_OK)
    s = copy_tokenizer(w, tok_src, sh->n_vocab);
  if (s == QVL_OK && sh->chat_template)
    s = gguf_writer_set_str(w, "tokenizer.chat_template", sh->chat_template);
  if (s == QVL_OK)
    s = text_tensors(w, sh, type, seed);
  return save_and_free(w, s, path);
}

static qvl_status linear(gguf_writer *w, const char *prefix, qvl_dtype type, int64_t n_in, int64_t n_out,
                         uint64_t seed) {
  char name[96];
  snprintf(name, sizeof name, "%s.weight", prefix);
  QVL_TRY(add_matrix(w, name, type, n_in, n_out, seed));
  snprintf(name, sizeof name, "%s.bias", prefix);
  return add_vector(w, name, n_out, seed, 0.02f, 0);
}

static qvl_status norm(gguf_writer *w, const char *prefix, int64_t n, uint64_t seed) {
  char name[96];
  snprintf(name, sizeof name, "%s.weight", prefix);
  QVL_TRY(add_vector(w, name, n, seed, 0.1f, 1.0f));
  snprintf(name, sizeof name, "%s.bias", prefix);
  return add_vector(w, name, n, seed, 0.02f, 0);
}

static qvl_status mmproj_tensors(gguf_writer *w, const random_vision_shape *sh, qvl_dtype type, uint64_t seed) {
  int64_t dv = sh->n_embd, p = sh->patch_size;
  qvl_dtype patch_type = type == QVL_DTYPE_F16 ? QVL_DTYPE_F16 : QVL_DTYPE_F32;
  int64_t ne_patch[4] = {p, p, 3, dv};
  float patch_scale = 1.0f / sqrtf((float)(p * p * 3 * 2));
  QVL_TRY(add_random(w, "v.patch_embd.weight", patch_type, 4, ne_patch, seed, patch_scale, 0));
  QVL_TRY(add_random(w, "v.patch_embd.weight.1", patch_type, 4, ne_patch, seed + 1, patch_scale, 0));
  QVL_TRY(add_vector(w, "v.patch_embd.bias", dv, seed, 0.02f, 0));
  int64_t ne_pos[2] = {dv, sh->pos_side * sh->pos_side};
  QVL_TRY(add_random(w, "v.position_embd.weight", QVL_DTYPE_F32, 2, ne_pos, seed, 0.5f, 0));
  char prefix[64];
  for (int64_t l = 0; l < sh->n_layer; l++) {
    log_info("make-random: vision block %lld/%lld", (long long)l + 1, (long long)sh->n_layer);
#define PFX(fmt) (snprintf(prefix, sizeof prefix, "v.blk.%lld." fmt, (long long)l), prefix)
    QVL_TRY(norm(w, PFX("ln1"), dv, seed));
    QVL_TRY(linear(w, PFX("attn_qkv"), type, dv, 3 * dv, seed));
    QVL_TRY(linear(w, PFX("attn_out"), type, dv, dv, seed));
    QVL_TRY(norm(w, PFX("ln2"), dv, seed));
    QVL_TRY(linear(w, PFX("ffn_up"), type, dv, sh->n_ff, seed));
    QVL_TRY(linear(w, PFX("ffn_down"), type, sh->n_ff, dv, seed));
#undef PFX
  }
  QVL_TRY(norm(w, "v.post_ln", dv, seed));
  QVL_TRY(linear(w, "mm.0", type, 4 * dv, 4 * dv, seed));
  QVL_TRY(linear(w, "mm.2", type, 4 * dv, sh->proj_dim, seed));
  for (int k = 0; k < sh->n_deepstack; k++) {
    long long L = (long long)sh->deepstack_layers[k];
    snprintf(prefix, sizeof prefix, "v.deepstack.%lld.norm", L);
    QVL_TRY(norm(w, prefix, 4 * dv, seed));
    snprintf(prefix, sizeof prefix, "v.deepstack.%lld.fc1", L);
    QVL_TRY(linear(w, prefix, type, 4 * dv, 4 * dv, seed));
    snprintf(prefix, sizeof prefix, "v.deepstack.%lld.fc2", L);
    QVL_TRY(linear(w, prefix, type, 4 * dv, sh->proj_dim, seed));
  }
  return QVL_OK;
}

qvl_status random_mmproj_write(const random_vision_shape *sh, qvl_dtype type, uint64_t seed, const char *path) {
  if (sh->n_layer > 64 || sh->n_deepstack > 8)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "vision shape too large for the generator");
  gguf_writer *w = gguf_writer_init();
  if (!w)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  bool is_ds[64] = {0};
  for (int k = 0; k < sh->n_deepstack; k++)
    if (sh->deepstack_layers[k] >= 0 && sh->deepstack_layers[k] < sh->n_layer)
      is_ds[sh->deepstack_layers[k]] = true;
  float half[3] = {0.5f, 0.5f, 0.5f};
  const meta_entry meta[] = {
      {"clip.has_vision_encoder", GGUF_TYPE_BOOL, .b = true},
      {"clip.vision.projection_dim", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->proj_dim},
      {"clip.vision.image_size", GGUF_TYPE_UINT32, .u32 = (uint32_t)(sh->pos_side * sh->patch_size)},
      {"clip.vision.patch_size", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->patch_size},
      {"clip.vision.embedding_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_embd},
      {"clip.vision.feed_forward_length", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_ff},
      {"clip.vision.block_count", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_layer},
      {"clip.vision.attention.head_count", GGUF_TYPE_UINT32, .u32 = (uint32_t)sh->n_head},
      {"clip.vision.image_mean", GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_FLOAT32, .arr = half, .arr_n = 3},
      {"clip.vision.image_std", GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_FLOAT32, .arr = half, .arr_n = 3},
      {"clip.projector_type", GGUF_TYPE_STRING, .str = "qwen3vl_merger"},
      {"clip.use_gelu", GGUF_TYPE_BOOL, .b = true},
      {"clip.vision.spatial_merge_size", GGUF_TYPE_UINT32, .u32 = 2},
      {"clip.vision.attention.layer_norm_epsilon", GGUF_TYPE_FLOAT32, .f32 = 1e-6f},
      {"clip.vision.is_deepstack_layers", GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_BOOL, .arr = is_ds,
       .arr_n = (uint64_t)sh->n_layer},
  };
  qvl_status s = write_general(w, "clip", "mmproj", "qvl-random-qwen3vl-mmproj", type);
  if (s == QVL_OK)
    s = write_meta(w, meta, sizeof meta / sizeof meta[0]);
  if (s == QVL_OK)
    s = mmproj_tensors(w, sh, type, seed);
  return save_and_free(w, s, path);
}
