/* GGUF reader and writer: the fixture files (expected values from tests/fixtures/README.md and the
 * case.json files), a write/read round trip of every value type and stored dtype, byte-exact
 * re-serialization of fixture files written by gguf-py and by llama.cpp, and malformed inputs. */
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "gguf_bytes.h"
#include "test.h"
#include "corpus_test.h"

#define FIX "tests/fixtures/models/"

static bool contains(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

static int count_type(const gguf *g, qvl_dtype t) {
  int n = 0;
  for (int64_t i = 0; i < gguf_n_tensors(g); i++)
    n += gguf_tensor_at(g, i)->type == t;
  return n;
}

static bool str_is(const gguf *g, const char *key, const char *want) {
  const char *v = NULL;
  return gguf_get_str(g, key, &v) == QVL_OK && v && strcmp(v, want) == 0;
}

static uint32_t u32_of(const gguf *g, const char *key) {
  uint32_t v = 0xdeadbeef;
  qvl_status s = gguf_get_u32(g, key, &v);
  CHECK(s == QVL_OK, "%s: %s", key, qvl_last_error());
  return v;
}

static bool array_str_is(const gguf *g, const char *key, uint64_t i, const char *want) {
  size_t len;
  const char *p = gguf_array_str(g, gguf_find_key(g, key), i, &len);
  return p && len == strlen(want) && memcmp(p, want, len) == 0;
}

static bool shape_is(const tensor *t, int n_dims, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t && t->n_dims == n_dims && t->ne[0] == a && t->ne[1] == b && t->ne[2] == c && t->ne[3] == d;
}

static void test_all_fixtures_open(void) {
  glob_t gl;
  int rc = glob(FIX "*/gguf/*.gguf", 0, NULL, &gl);
  CHECK(rc == 0 && gl.gl_pathc == 18, "found %zu fixture GGUFs", rc == 0 ? gl.gl_pathc : 0);
  for (size_t i = 0; rc == 0 && i < gl.gl_pathc; i++) {
    gguf *g = NULL;
    qvl_status s = gguf_open(gl.gl_pathv[i], &g);
    CHECK(s == QVL_OK, "%s: %s", gl.gl_pathv[i], qvl_last_error());
    if (!g)
      continue;
    CHECK(gguf_version(g) == 3, "%s version %u", gl.gl_pathv[i], gguf_version(g));
    CHECK(gguf_n_tensors(g) > 0 && gguf_n_kv(g) > 0, "%s empty", gl.gl_pathv[i]);
    bool mmproj = contains(gl.gl_pathv[i], "mmproj-");
    CHECK(str_is(g, "general.architecture", mmproj ? "clip" : "qwen3vl"), "%s arch", gl.gl_pathv[i]);
    /* every tensor is findable by name and its data is readable */
    for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
      const tensor *t = gguf_tensor_at(g, k);
      CHECK(gguf_find_tensor(g, t->name) == t, "%s: find %s", gl.gl_pathv[i], t->name);
      CHECK(((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(g, 0)->data) % 32 == 0, "aligned");
    }
    for (int64_t k = 0; k < gguf_n_kv(g); k++)
      CHECK(gguf_find_key(g, gguf_key_name(g, k)) == k, "key %s", gguf_key_name(g, k));
    gguf_close(g);
  }
  if (rc == 0)
    globfree(&gl);
}

static void test_micro_a(void) {
  gguf *g = NULL;
  qvl_status s = gguf_open(FIX "micro-a/gguf/micro-a-F32.gguf", &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (!g)
    return;
  /* README: micro-a text hidden 64 / 4 layers / 4 heads (2 kv) x 16 / ffn 128 / vocab 512 /
   * mrope [4,2,2] / theta 10000 / untied; mock512 tokenizer with 240 merges; F32: 47 tensors. */
  CHECK(str_is(g, "general.architecture", "qwen3vl"), "arch");
  CHECK(u32_of(g, "qwen3vl.block_count") == 4, "block_count");
  CHECK(u32_of(g, "qwen3vl.embedding_length") == 64, "embedding_length");
  CHECK(u32_of(g, "qwen3vl.feed_forward_length") == 128, "ffn");
  CHECK(u32_of(g, "qwen3vl.attention.head_count") == 4, "heads");
  CHECK(u32_of(g, "qwen3vl.attention.head_count_kv") == 2, "kv heads");
  CHECK(u32_of(g, "qwen3vl.attention.key_length") == 16, "head_dim");
  int64_t *sec = NULL;
  uint64_t n = 0;
  s = gguf_get_int_array(g, "qwen3vl.rope.dimension_sections", &sec, &n);
  CHECK(s == QVL_OK && n == 4, "sections n=%llu %s", (unsigned long long)n, qvl_last_error());
  if (s == QVL_OK && n == 4)
    CHECK(sec[0] == 4 && sec[1] == 2 && sec[2] == 2 && sec[3] == 0, "sections values");
  free(sec);
  float f = 0;
  CHECK(gguf_get_f32(g, "qwen3vl.rope.freq_base", &f) == QVL_OK && f == 10000.0f, "freq_base %g", f);
  CHECK(gguf_get_f32(g, "qwen3vl.attention.layer_norm_rms_epsilon", &f) == QVL_OK && f == 1e-6f, "eps");
  int64_t tk = gguf_find_key(g, "tokenizer.ggml.tokens");
  CHECK(tk >= 0 && gguf_key_type(g, tk) == GGUF_TYPE_ARRAY && gguf_array_type(g, tk) == GGUF_TYPE_STRING,
        "tokens type");
  CHECK(gguf_array_len(g, tk) == 512, "vocab %llu", (unsigned long long)gguf_array_len(g, tk));
  CHECK(gguf_array_len(g, gguf_find_key(g, "tokenizer.ggml.merges")) == 240, "merges");
  /* README: ids 0-255 byte symbols in Qwen order ('!' first), 496 <|endoftext|>, 497 <|im_start|>,
   * 498 <|im_end|>, 505 <|vision_start|>, 508 <|image_pad|> (case.json special_token_ids). */
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 0, "!"), "token 0");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 496, "<|endoftext|>"), "token 496");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 497, "<|im_start|>"), "token 497");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 498, "<|im_end|>"), "token 498");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 505, "<|vision_start|>"), "token 505");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 508, "<|image_pad|>"), "token 508");
  CHECK(gguf_array_str(g, tk, 512, NULL) == NULL, "out of range token");
  CHECK(u32_of(g, "tokenizer.ggml.eos_token_id") == 498, "eos");
  CHECK(u32_of(g, "tokenizer.ggml.bos_token_id") == 496, "bos");
  CHECK(u32_of(g, "tokenizer.ggml.padding_token_id") == 496, "pad");
  bool b = true;
  CHECK(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == QVL_OK && !b, "add_bos false");
  CHECK(str_is(g, "tokenizer.ggml.model", "gpt2") && str_is(g, "tokenizer.ggml.pre", "qwen2"), "tok model");

  CHECK(gguf_n_tensors(g) == 47 && count_type(g, QVL_DTYPE_F32) == 47, "47 F32 tensors");
  const tensor *t = gguf_find_tensor(g, "token_embd.weight");
  CHECK(shape_is(t, 2, 64, 512, 1, 1) && t->type == QVL_DTYPE_F32 && t->nbytes == 64 * 512 * 4, "token_embd");
  CHECK(shape_is(gguf_find_tensor(g, "output.weight"), 2, 64, 512, 1, 1), "output (untied)");
  CHECK(shape_is(gguf_find_tensor(g, "blk.3.attn_k.weight"), 2, 64, 32, 1, 1), "attn_k 2 kv heads x 16");
  CHECK(shape_is(gguf_find_tensor(g, "blk.0.ffn_down.weight"), 2, 128, 64, 1, 1), "ffn_down");
  CHECK(shape_is(gguf_find_tensor(g, "blk.0.attn_q_norm.weight"), 1, 16, 1, 1, 1), "q_norm");
  CHECK(gguf_find_tensor(g, "blk.4.attn_k.weight") == NULL, "no layer 4");
  CHECK(gguf_find_tensor(g, "token_embd.weigh") == NULL && gguf_find_tensor(g, "") == NULL, "prefix miss");

  /* typed getter errors */
  s = gguf_get_f32(g, "qwen3vl.block_count", &f);
  CHECK(s == QVL_ERR_FORMAT && contains(qvl_last_error(), "key 'qwen3vl.block_count' has type uint32, expected float32") &&
            contains(qvl_last_error(), "micro-a-F32.gguf"),
        "%s", qvl_last_error());
  uint32_t u;
  s = gguf_get_u32(g, "qwen3vl.no_such_key", &u);
  CHECK(s == QVL_ERR_NOT_FOUND && contains(qvl_last_error(), "qwen3vl.no_such_key"), "%s", qvl_last_error());
  s = gguf_get_u32(g, "general.architecture", &u);
  CHECK(s == QVL_ERR_FORMAT && contains(qvl_last_error(), "has type string"), "%s", qvl_last_error());
  const char *str;
  s = gguf_get_str(g, "tokenizer.ggml.tokens", &str);
  CHECK(s == QVL_ERR_FORMAT && contains(qvl_last_error(), "array of string"), "%s", qvl_last_error());
  s = gguf_get_int_array(g, "tokenizer.ggml.merges", &sec, &n);
  CHECK(s == QVL_ERR_FORMAT && sec == NULL, "%s", qvl_last_error());
  gguf_close(g);

  /* quantized / half variants: README tensor type counts */
  struct { const char *file; qvl_dtype t; int n_t, n_f32; } v[] = {
      {"micro-a/gguf/micro-a-F16.gguf", QVL_DTYPE_F16, 30, 17},
      {"micro-a/gguf/micro-a-BF16.gguf", QVL_DTYPE_BF16, 30, 17},
      {"micro-a/gguf/micro-a-Q8_0.gguf", QVL_DTYPE_Q8_0, 30, 17},
      {"micro-a/gguf/micro-a-Q4_0.gguf", QVL_DTYPE_Q4_0, 30, 17},
      {"micro-a/gguf/mmproj-micro-a-F16.gguf", QVL_DTYPE_F16, 26, 50},
      {"micro-a/gguf/mmproj-micro-a-BF16.gguf", QVL_DTYPE_BF16, 24, 52},
      {"micro-a/gguf/mmproj-micro-a-Q8_0.gguf", QVL_DTYPE_Q8_0, 24, 52},
      {"micro-b/gguf/micro-b-Q8_0.gguf", QVL_DTYPE_Q8_0, 15, 9},
      {"micro-b/gguf/micro-b-Q4_0.gguf", QVL_DTYPE_Q4_0, 15, 9},
      {"micro-b/gguf/micro-b-Q4_K.gguf", QVL_DTYPE_Q4_K, 15, 9},
      {"micro-b/gguf/micro-b-Q6_K.gguf", QVL_DTYPE_Q6_K, 15, 9},
      {"micro-b/gguf/micro-b-Q4_K_M.gguf", QVL_DTYPE_Q4_K, 12, 9},
      {"micro-b/gguf/mmproj-micro-b-F16.gguf", QVL_DTYPE_F16, 22, 42},
      {"micro-b/gguf/mmproj-micro-b-Q8_0.gguf", QVL_DTYPE_Q8_0, 20, 44},
      {"e2e/gguf/mmproj-e2e-F16.gguf", QVL_DTYPE_F16, 14, 26},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s", v[i].file);
    g = NULL;
    s = gguf_open(path, &g);
    CHECK(s == QVL_OK, "%s", qvl_last_error());
    if (!g)
      continue;
    CHECK(count_type(g, v[i].t) == v[i].n_t && count_type(g, QVL_DTYPE_F32) == v[i].n_f32, "%s types", path);
    if (strstr(path, "Q4_K_M"))
      CHECK(count_type(g, QVL_DTYPE_Q6_K) == 3 && gguf_n_tensors(g) == 24, "%s Q6_K count", path);
    else
      CHECK(gguf_n_tensors(g) == v[i].n_t + v[i].n_f32, "%s count", path);
    gguf_close(g);
  }
}

static void test_mmproj_and_micro_b(void) {
  gguf *g = NULL;
  qvl_status s = gguf_open(FIX "micro-a/gguf/mmproj-micro-a-F32.gguf", &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (g) {
    /* README: micro-a vision hidden 32 / depth 4 / heads 2 / ffn 64 / pos table 8x8; 76 F32 tensors */
    CHECK(str_is(g, "clip.projector_type", "qwen3vl_merger"), "projector");
    CHECK(gguf_n_tensors(g) == 76, "76 tensors");
    CHECK(u32_of(g, "clip.vision.embedding_length") == 32 && u32_of(g, "clip.vision.block_count") == 4, "vision");
    CHECK(u32_of(g, "clip.vision.projection_dim") == 64, "projection_dim = text hidden");
    float *mean = NULL;
    uint64_t n = 0;
    s = gguf_get_f32_array(g, "clip.vision.image_mean", &mean, &n);
    CHECK(s == QVL_OK && n == 3 && mean[0] == 0.5f && mean[1] == 0.5f && mean[2] == 0.5f, "image_mean");
    free(mean);
    int64_t ds = gguf_find_key(g, "clip.vision.is_deepstack_layers");
    /* deepstack_visual_indexes [0, 1, 2] of depth 4 */
    const uint8_t *flags = gguf_array_data(g, ds);
    CHECK(gguf_array_type(g, ds) == GGUF_TYPE_BOOL && gguf_array_len(g, ds) == 4 && flags && flags[0] == 1 &&
              flags[1] == 1 && flags[2] == 1 && flags[3] == 0,
          "deepstack flags");
    bool b = false;
    CHECK(gguf_get_bool(g, "clip.use_gelu", &b) == QVL_OK && b, "use_gelu");
    CHECK(shape_is(gguf_find_tensor(g, "v.patch_embd.weight"), 4, 16, 16, 3, 32), "patch_embd");
    CHECK(shape_is(gguf_find_tensor(g, "v.patch_embd.weight.1"), 4, 16, 16, 3, 32), "patch_embd.1");
    CHECK(shape_is(gguf_find_tensor(g, "v.position_embd.weight"), 2, 32, 64, 1, 1), "pos embd 8x8");
    CHECK(shape_is(gguf_find_tensor(g, "mm.2.weight"), 2, 128, 64, 1, 1), "mm.2");
    gguf_close(g);
  }
  g = NULL;
  s = gguf_open(FIX "micro-b/gguf/micro-b-Q4_K.gguf", &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (g) {
    /* README: micro-b hidden 256 / 2 layers / 4 heads (1 kv) x 64 / ffn 256 / vocab 512 / [12,10,10] /
     * 5e6 / tied */
    CHECK(u32_of(g, "qwen3vl.block_count") == 2 && u32_of(g, "qwen3vl.embedding_length") == 256, "micro-b");
    const tensor *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(shape_is(t, 2, 256, 512, 1, 1) && t->type == QVL_DTYPE_Q4_K && t->nbytes == 512 * 144, "embd Q4_K");
    CHECK(gguf_find_tensor(g, "output.weight") == NULL, "tied: no output.weight");
    int64_t *sec = NULL;
    uint64_t n = 0;
    CHECK(gguf_get_int_array(g, "qwen3vl.rope.dimension_sections", &sec, &n) == QVL_OK && n == 4 &&
              sec[0] == 12 && sec[1] == 10 && sec[2] == 10 && sec[3] == 0,
          "sections");
    free(sec);
    float f;
    CHECK(gguf_get_f32(g, "qwen3vl.rope.freq_base", &f) == QVL_OK && f == 5e6f, "theta");
    gguf_close(g);
  }
}

static void test_e2e(void) {
  gguf *g = NULL;
  qvl_status s = gguf_open(FIX "e2e/gguf/e2e-Q8_0.gguf", &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (!g)
    return;
  /* README: 151,936 tokens (151669.. are [PAD<id>], type UNUSED), 151,387 merges, eos 151645,
   * padding and bos 151643, add_bos false; text hidden 32, 2 layers; every matrix Q8_0 (15), 9 F32. */
  int64_t tk = gguf_find_key(g, "tokenizer.ggml.tokens");
  CHECK(gguf_array_len(g, tk) == 151936, "tokens %llu", (unsigned long long)gguf_array_len(g, tk));
  CHECK(gguf_array_len(g, gguf_find_key(g, "tokenizer.ggml.merges")) == 151387, "merges");
  CHECK(gguf_array_len(g, gguf_find_key(g, "tokenizer.ggml.token_type")) == 151936, "token types");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 151643, "<|endoftext|>"), "151643");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 151645, "<|im_end|>"), "151645");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 151655, "<|image_pad|>"), "151655");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 151669, "[PAD151669]"), "pad row");
  CHECK(array_str_is(g, "tokenizer.ggml.tokens", 151935, "[PAD151935]"), "last pad row");
  int64_t *types = NULL;
  uint64_t n = 0;
  s = gguf_get_int_array(g, "tokenizer.ggml.token_type", &types, &n);
  /* llama token types: 3 CONTROL, 5 UNUSED */
  CHECK(s == QVL_OK && n == 151936 && types[151645] == 3 && types[151935] == 5, "token types");
  free(types);
  CHECK(u32_of(g, "tokenizer.ggml.eos_token_id") == 151645, "eos");
  CHECK(u32_of(g, "tokenizer.ggml.padding_token_id") == 151643, "pad");
  CHECK(u32_of(g, "tokenizer.ggml.bos_token_id") == 151643, "bos");
  CHECK(u32_of(g, "qwen3vl.embedding_length") == 32 && u32_of(g, "qwen3vl.block_count") == 2, "dims");
  const tensor *t = gguf_find_tensor(g, "token_embd.weight");
  CHECK(shape_is(t, 2, 32, 151936, 1, 1) && t->type == QVL_DTYPE_Q8_0 && t->nbytes == (size_t)151936 * 34,
        "token_embd");
  CHECK(count_type(g, QVL_DTYPE_Q8_0) == 15 && count_type(g, QVL_DTYPE_F32) == 9, "types");
  /* the chat template is the Qwen3-VL-Instruct one */
  buf tmpl = {0};
  const char *ct = NULL;
  CHECK(buf_read_file("tests/fixtures/tokenizer/qwen3vl_instruct_chat_template.jinja", 1 << 20, &tmpl) == QVL_OK &&
            gguf_get_str(g, "tokenizer.chat_template", &ct) == QVL_OK && strcmp(ct, tmpl.data) == 0,
        "chat template");
  buf_free(&tmpl);
  gguf_close(g);
}

/* ---- writer ----------------------------------------------------------------------------------- */

/* Re-serializes every key and tensor of a fixture with our writer; the bytes must be identical.
 * micro-a-F32 was written by gguf-py and e2e-Q8_0 by llama-quantize (llama.cpp's own writer), so
 * identity shows the writer follows the layout llama.cpp reads. */
static void test_rewrite_identical(const char *path) {
  buf orig = {0};
  CHECK(buf_read_file(path, 64u << 20, &orig) == QVL_OK, "%s", qvl_last_error());
  gguf *g = NULL;
  qvl_status s = gguf_open_memory(orig.data, orig.len, path, &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (!g) {
    buf_free(&orig);
    return;
  }
  gguf_writer *w = gguf_writer_init();
  for (int64_t k = 0; k < gguf_n_kv(g) && s == QVL_OK; k++) {
    const char *key = gguf_key_name(g, k);
    gguf_type t = gguf_key_type(g, k);
    if (t == GGUF_TYPE_STRING) {
      size_t len;
      const char *v = gguf_key_str(g, k, &len);
      s = gguf_writer_set_strn(w, key, v, len);
    } else if (t == GGUF_TYPE_ARRAY && gguf_array_type(g, k) == GGUF_TYPE_STRING) {
      uint64_t n = gguf_array_len(g, k);
      const char **strs = malloc((n + 1) * sizeof *strs);
      size_t *lens = malloc((n + 1) * sizeof *lens);
      for (uint64_t i = 0; i < n; i++)
        strs[i] = gguf_array_str(g, k, i, &lens[i]);
      s = gguf_writer_set_str_array(w, key, strs, lens, n);
      free(strs);
      free(lens);
    } else if (t == GGUF_TYPE_ARRAY) {
      s = gguf_writer_set_array(w, key, gguf_array_type(g, k), gguf_array_data(g, k), gguf_array_len(g, k));
    } else {
      /* scalar: reuse the typed setters through the raw bytes found by the getters */
      int64_t i64;
      float f;
      bool b;
      switch (t) {
      case GGUF_TYPE_UINT32: gguf_get_i64(g, key, &i64); s = gguf_writer_set_u32(w, key, (uint32_t)i64); break;
      case GGUF_TYPE_INT32: gguf_get_i64(g, key, &i64); s = gguf_writer_set_i32(w, key, (int32_t)i64); break;
      case GGUF_TYPE_FLOAT32: gguf_get_f32(g, key, &f); s = gguf_writer_set_f32(w, key, f); break;
      case GGUF_TYPE_BOOL: gguf_get_bool(g, key, &b); s = gguf_writer_set_bool(w, key, b); break;
      default: CHECK(0, "unexpected scalar type %s in fixture", gguf_type_name(t)); break;
      }
    }
  }
  for (int64_t i = 0; i < gguf_n_tensors(g) && s == QVL_OK; i++) {
    const tensor *t = gguf_tensor_at(g, i);
    s = gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data);
  }
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  void *out = NULL;
  size_t size = 0;
  s = gguf_writer_save_mem(w, &out, &size);
  CHECK(s == QVL_OK && size == orig.len, "%s: size %zu vs %zu", path, size, orig.len);
  CHECK(s == QVL_OK && size == orig.len && memcmp(out, orig.data, size) == 0, "%s: bytes differ", path);
  free(out);
  gguf_writer_free(w);
  gguf_close(g);
  buf_free(&orig);
}

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (uint8_t)(seed >> 24);
  }
}

static void test_round_trip(const char *dir) {
  gguf_writer *w = gguf_writer_init();
  CHECK(w != NULL, "init");
  qvl_status s = QVL_OK;
  s |= gguf_writer_set_u8(w, "t.u8", 200);
  s |= gguf_writer_set_i8(w, "t.i8", -100);
  s |= gguf_writer_set_u16(w, "t.u16", 60000);
  s |= gguf_writer_set_i16(w, "t.i16", -30000);
  s |= gguf_writer_set_u32(w, "t.u32", 4000000000u);
  s |= gguf_writer_set_i32(w, "t.i32", -5);
  s |= gguf_writer_set_i32(w, "t.i32pos", 7);
  s |= gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull);
  s |= gguf_writer_set_i64(w, "t.i64", -9000000000000000000ll);
  s |= gguf_writer_set_f32(w, "t.f32", 1.5f);
  s |= gguf_writer_set_f64(w, "t.f64", 0.1);
  s |= gguf_writer_set_bool(w, "t.bool", true);
  s |= gguf_writer_set_str(w, "t.str", "first");
  s |= gguf_writer_set_str(w, "t.str", "héllo"); /* replaces, keeps position */
  s |= gguf_writer_set_strn(w, "t.strnul", "a\0b", 3);
  s |= gguf_writer_set_str(w, "t.empty", "");
  const int32_t i32s[] = {24, 20, 20, 0};
  const uint64_t u64s[] = {1, 18000000000000000000ull};
  const double f64s[] = {0.25, -2.0};
  const float f32s[] = {0.5f, 0.25f, -1.0f};
  const uint8_t bools[] = {1, 0, 1};
  const int8_t i8s[] = {-1, 2};
  const uint16_t u16s[] = {65535};
  s |= gguf_writer_set_array(w, "a.i32", GGUF_TYPE_INT32, i32s, 4);
  s |= gguf_writer_set_array(w, "a.u64", GGUF_TYPE_UINT64, u64s, 2);
  s |= gguf_writer_set_array(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2);
  s |= gguf_writer_set_array(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 3);
  s |= gguf_writer_set_array(w, "a.bool", GGUF_TYPE_BOOL, bools, 3);
  s |= gguf_writer_set_array(w, "a.i8", GGUF_TYPE_INT8, i8s, 2);
  s |= gguf_writer_set_array(w, "a.u16", GGUF_TYPE_UINT16, u16s, 1);
  s |= gguf_writer_set_array(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0);
  const char *strs[] = {"x", "", "longer string", "nul\0inside"};
  const size_t lens[] = {1, 0, 13, 10};
  s |= gguf_writer_set_str_array(w, "a.str", strs, lens, 4);
  s |= gguf_writer_set_str_array(w, "a.cstr", strs, NULL, 3);
  CHECK(s == QVL_OK, "setters: %s", qvl_last_error());
  CHECK(gguf_writer_set_array(w, "a.badbool", GGUF_TYPE_BOOL, (const uint8_t[]){2}, 1) == QVL_ERR_INVALID_ARG,
        "bool 2 rejected");
  CHECK(gguf_writer_set_array(w, "a.nested", GGUF_TYPE_ARRAY, i32s, 1) == QVL_ERR_INVALID_ARG, "nested rejected");
  CHECK(gguf_writer_set_u32(w, "", 1) == QVL_ERR_INVALID_ARG, "empty key rejected");

  /* one tensor of every stored type; expected byte sizes from the ggml block formats:
   * F32 4, F16/BF16 2, Q8_0 34 per 32, Q4_0 18 per 32, Q4_K 144 per 256, Q6_K 210 per 256 */
  struct { const char *name; qvl_dtype t; int nd; int64_t ne[4]; size_t nbytes; } ts[] = {
      {"f32.1d", QVL_DTYPE_F32, 1, {5, 1, 1, 1}, 20},
      {"f16.3d", QVL_DTYPE_F16, 3, {3, 2, 2, 1}, 24},
      {"bf16.4d", QVL_DTYPE_BF16, 4, {2, 2, 2, 3}, 48},
      {"q8_0", QVL_DTYPE_Q8_0, 2, {64, 3, 1, 1}, 6 * 34},
      {"q4_0", QVL_DTYPE_Q4_0, 2, {32, 5, 1, 1}, 5 * 18},
      {"q4_k", QVL_DTYPE_Q4_K, 2, {512, 2, 1, 1}, 4 * 144},
      {"q6_k", QVL_DTYPE_Q6_K, 2, {256, 3, 1, 1}, 3 * 210},
  };
  enum { NT = sizeof ts / sizeof ts[0] };
  uint8_t *data[NT];
  for (int i = 0; i < NT; i++) {
    data[i] = malloc(ts[i].nbytes);
    fill_bytes(data[i], ts[i].nbytes, (uint32_t)i + 1);
    s = i % 2 ? gguf_writer_add_tensor_ref(w, ts[i].name, ts[i].t, ts[i].nd, ts[i].ne, data[i])
              : gguf_writer_add_tensor(w, ts[i].name, ts[i].t, ts[i].nd, ts[i].ne, data[i]);
    CHECK(s == QVL_OK, "add %s: %s", ts[i].name, qvl_last_error());
  }
  CHECK(gguf_writer_add_tensor(w, "q8_0", QVL_DTYPE_F32, 1, (int64_t[]){1}, data[0]) == QVL_ERR_INVALID_ARG,
        "duplicate tensor rejected");
  CHECK(gguf_writer_add_tensor(w, "bad", QVL_DTYPE_Q8_0, 1, (int64_t[]){33}, data[3]) == QVL_ERR_INVALID_ARG,
        "ragged block rejected");
  CHECK(gguf_writer_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123",
                               QVL_DTYPE_F32, 1, (int64_t[]){1}, data[0]) == QVL_ERR_INVALID_ARG,
        "64-byte name rejected");
  CHECK(gguf_writer_add_tensor(w, "bad5", QVL_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, data[0]) ==
            QVL_ERR_INVALID_ARG,
        "5 dims rejected");

  char path[512];
  snprintf(path, sizeof path, "%s/rt.gguf", dir);
  s = gguf_writer_save(w, path);
  CHECK(s == QVL_OK, "save: %s", qvl_last_error());
  CHECK(access(path, F_OK) == 0, "file written");
  snprintf(path + strlen(path), sizeof path - strlen(path), ".tmp");
  CHECK(access(path, F_OK) != 0, "no temp file left");
  path[strlen(path) - 4] = 0;
  void *mem = NULL;
  size_t mem_size = 0;
  CHECK(gguf_writer_save_mem(w, &mem, &mem_size) == QVL_OK, "save_mem");

  gguf *g = NULL;
  s = gguf_open(path, &g);
  CHECK(s == QVL_OK, "open round trip: %s", qvl_last_error());
  buf file = {0};
  CHECK(buf_read_file(path, 1 << 20, &file) == QVL_OK && file.len == mem_size && memcmp(file.data, mem, mem_size) == 0,
        "save and save_mem agree");
  buf_free(&file);
  if (g) {
    CHECK(gguf_version(g) == 3 && gguf_alignment(g) == 32, "v3 align 32");
    CHECK(gguf_n_kv(g) == 25, "n_kv %lld", (long long)gguf_n_kv(g));
    CHECK(strcmp(gguf_key_name(g, 12), "t.str") == 0, "replaced key keeps its position");
    uint32_t u;
    int64_t i;
    float f;
    bool b;
    const char *str;
    CHECK(gguf_get_u32(g, "t.u8", &u) == QVL_OK && u == 200, "u8");
    CHECK(gguf_get_i64(g, "t.i8", &i) == QVL_OK && i == -100, "i8");
    CHECK(gguf_get_u32(g, "t.u16", &u) == QVL_OK && u == 60000, "u16");
    CHECK(gguf_get_i64(g, "t.i16", &i) == QVL_OK && i == -30000, "i16");
    CHECK(gguf_get_u32(g, "t.u32", &u) == QVL_OK && u == 4000000000u, "u32");
    CHECK(gguf_get_i64(g, "t.i32", &i) == QVL_OK && i == -5, "i32");
    CHECK(gguf_get_u32(g, "t.i32pos", &u) == QVL_OK && u == 7, "u32 getter accepts non-negative int32");
    CHECK(gguf_get_u32(g, "t.i32", &u) == QVL_ERR_FORMAT && contains(qvl_last_error(), "t.i32") &&
              contains(qvl_last_error(), "does not fit"),
          "%s", qvl_last_error());
    CHECK(gguf_get_u32(g, "t.u64", &u) == QVL_ERR_FORMAT, "u64 too big for u32");
    CHECK(gguf_get_i64(g, "t.u64", &i) == QVL_ERR_FORMAT && contains(qvl_last_error(), "int64"), "u64 > INT64_MAX");
    CHECK(gguf_get_i64(g, "t.i64", &i) == QVL_OK && i == -9000000000000000000ll, "i64");
    CHECK(gguf_get_f32(g, "t.f32", &f) == QVL_OK && f == 1.5f, "f32");
    CHECK(gguf_get_f32(g, "t.f64", &f) == QVL_ERR_FORMAT && contains(qvl_last_error(), "has type float64, expected float32"),
          "%s", qvl_last_error());
    CHECK(gguf_get_bool(g, "t.bool", &b) == QVL_OK && b, "bool");
    CHECK(gguf_get_bool(g, "t.u8", &b) == QVL_ERR_FORMAT, "bool getter on u8");
    CHECK(gguf_get_str(g, "t.str", &str) == QVL_OK && strcmp(str, "héllo") == 0, "str");
    size_t len;
    const char *sv = gguf_key_str(g, gguf_find_key(g, "t.strnul"), &len);
    CHECK(sv && len == 3 && memcmp(sv, "a\0b", 4) == 0, "string with NUL, NUL-terminated copy");
    CHECK(gguf_get_str(g, "t.empty", &str) == QVL_OK && str[0] == 0, "empty str");
    int64_t *iv = NULL;
    uint64_t n = 0;
    CHECK(gguf_get_int_array(g, "a.i32", &iv, &n) == QVL_OK && n == 4 && iv[0] == 24 && iv[3] == 0, "i32 array");
    free(iv);
    CHECK(gguf_get_int_array(g, "a.i8", &iv, &n) == QVL_OK && n == 2 && iv[0] == -1 && iv[1] == 2, "i8 array");
    free(iv);
    CHECK(gguf_get_int_array(g, "a.u16", &iv, &n) == QVL_OK && n == 1 && iv[0] == 65535, "u16 array");
    free(iv);
    CHECK(gguf_get_int_array(g, "a.u64", &iv, &n) == QVL_ERR_FORMAT && iv == NULL &&
              contains(qvl_last_error(), "element 1"),
          "%s", qvl_last_error());
    CHECK(gguf_get_int_array(g, "a.empty", &iv, &n) == QVL_OK && n == 0, "empty array");
    free(iv);
    float *fv = NULL;
    CHECK(gguf_get_f32_array(g, "a.f32", &fv, &n) == QVL_OK && n == 3 && fv[0] == 0.5f && fv[2] == -1.0f, "f32 arr");
    free(fv);
    CHECK(gguf_get_f32_array(g, "a.f64", &fv, &n) == QVL_OK && n == 2 && fv[0] == 0.25f && fv[1] == -2.0f, "f64 arr");
    free(fv);
    CHECK(gguf_get_f32_array(g, "a.i32", &fv, &n) == QVL_ERR_FORMAT && contains(qvl_last_error(), "array of int32"),
          "%s", qvl_last_error());
    int64_t bk = gguf_find_key(g, "a.bool");
    const uint8_t *bv = gguf_array_data(g, bk);
    CHECK(gguf_array_type(g, bk) == GGUF_TYPE_BOOL && bv && bv[0] == 1 && bv[1] == 0 && bv[2] == 1, "bool arr");
    int64_t sk = gguf_find_key(g, "a.str");
    CHECK(gguf_array_len(g, sk) == 4 && gguf_array_data(g, sk) == NULL, "str array");
    for (int k = 0; k < 4; k++) {
      const char *p = gguf_array_str(g, sk, (uint64_t)k, &len);
      CHECK(p && len == lens[k] && memcmp(p, strs[k], len) == 0, "str elem %d", k);
    }
    CHECK(array_str_is(g, "a.cstr", 2, "longer string"), "cstr");
    CHECK(gguf_array_len(g, gguf_find_key(g, "a.cstr")) == 3, "cstr len");
    CHECK(gguf_find_key(g, "a.badbool") < 0 && gguf_find_key(g, "a.nested") < 0, "rejected keys absent");
    CHECK(gguf_key_type(g, -1) == GGUF_TYPE_COUNT && gguf_key_name(g, 1000) == NULL, "bad index");

    CHECK(gguf_n_tensors(g) == NT, "n tensors");
    for (int k = 0; k < NT; k++) {
      const tensor *t = gguf_find_tensor(g, ts[k].name);
      CHECK(t && t == gguf_tensor_at(g, k), "tensor %s order", ts[k].name);
      if (!t)
        continue;
      CHECK(t->type == ts[k].t && t->n_dims == ts[k].nd, "%s type/dims", ts[k].name);
      CHECK(t->ne[0] == ts[k].ne[0] && t->ne[1] == ts[k].ne[1] && t->ne[2] == ts[k].ne[2] && t->ne[3] == ts[k].ne[3],
            "%s ne", ts[k].name);
      CHECK(t->nbytes == ts[k].nbytes, "%s nbytes %zu vs %zu", ts[k].name, t->nbytes, ts[k].nbytes);
      CHECK(memcmp(t->data, data[k], ts[k].nbytes) == 0, "%s data", ts[k].name);
      CHECK(((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(g, 0)->data) % 32 == 0, "%s aligned", ts[k].name);
    }
    gguf_close(g);
  }
  /* the same image parsed from memory */
  g = NULL;
  CHECK(gguf_open_memory(mem, mem_size, "mem", &g) == QVL_OK && gguf_n_tensors(g) == NT, "memory open");
  gguf_close(g);
  free(mem);
  unlink(path);

  /* a custom alignment is honoured by the writer and the reader */
  s = gguf_writer_set_u32(w, "general.alignment", 64);
  mem = NULL;
  CHECK(s == QVL_OK && gguf_writer_save_mem(w, &mem, &mem_size) == QVL_OK, "align 64 save");
  g = NULL;
  CHECK(gguf_open_memory(mem, mem_size, "align64", &g) == QVL_OK, "%s", qvl_last_error());
  if (g) {
    CHECK(gguf_alignment(g) == 64 && gguf_data_offset(g) % 64 == 0, "align 64");
    for (int64_t k = 0; k < gguf_n_tensors(g); k++)
      CHECK(((const uint8_t *)gguf_tensor_at(g, k)->data - (const uint8_t *)mem) % 64 == 0, "64-aligned");
    gguf_close(g);
  }
  free(mem);
  CHECK(gguf_writer_set_u32(w, "general.alignment", 48) == QVL_OK &&
            gguf_writer_save_mem(w, &mem, &mem_size) == QVL_ERR_INVALID_ARG,
        "writer rejects alignment 48");
  CHECK(gguf_writer_save(w, "/nonexistent-dir/x.gguf") != QVL_OK, "save to bad dir fails");
  gguf_writer_free(w);
  for (int i = 0; i < NT; i++) /* borrowed tensors must outlive the writer's last save */
    free(data[i]);
}

/* ---- malformed inputs --------------------------------------------------------------------------- */

/* A small valid image: tensors "wq" (Q8_0 32x2, 68 bytes, padded to 96) and "wa" (F32 4x2, 32 bytes)
 * last, so the file ends exactly where wa's data ends and every truncation must be rejected. */
static void *make_base(size_t *size) {
  gguf_writer *w = gguf_writer_init();
  gguf_writer_set_str(w, "general.architecture", "qwen3vl");
  gguf_writer_set_u32(w, "k.one", 1);
  gguf_writer_set_u32(w, "k.two", 2);
  gguf_writer_set_bool(w, "k.flag", true);
  const char *toks[] = {"aa", "bb", "cc"};
  gguf_writer_set_str_array(w, "tok.list", toks, NULL, 3);
  gguf_writer_set_array(w, "int.list", GGUF_TYPE_INT32, (const int32_t[]){1, 2, 3}, 3);
  uint8_t q[68] = {0};
  float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  gguf_writer_add_tensor(w, "wq", QVL_DTYPE_Q8_0, 2, (int64_t[]){32, 2}, q);
  gguf_writer_add_tensor(w, "wa", QVL_DTYPE_F32, 2, (int64_t[]){4, 2}, f);
  void *mem = NULL;
  gguf_writer_save_mem(w, &mem, size);
  gguf_writer_free(w);
  return mem;
}

static qvl_status try_open(const uint8_t *m, size_t size) {
  gguf *g = NULL;
  qvl_status s = gguf_open_memory(m, size, "bad.gguf", &g);
  if (g) {
    /* touch everything a consumer could touch */
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
      const tensor *t = gguf_tensor_at(g, i);
      for (size_t k = 0; k < t->nbytes; k++)
        sink ^= ((const uint8_t *)t->data)[k];
    }
    (void)sink;
    gguf_close(g);
  }
  return s;
}

#define BAD(patch, want_status, ...)                                                   \
  do {                                                                                 \
    memcpy(m, base, size);                                                             \
    patch;                                                                             \
    qvl_status s_ = try_open(m, size);                                                 \
    const char *subs_[] = {__VA_ARGS__, NULL};                                         \
    bool ok_ = s_ == (want_status) && contains(qvl_last_error(), "bad.gguf");          \
    for (int k_ = 0; subs_[k_]; k_++)                                                  \
      ok_ = ok_ && contains(qvl_last_error(), subs_[k_]);                              \
    CHECK(ok_, "%s: status %d, message: %s", #patch, (int)s_, qvl_last_error());       \
  } while (0)

static void test_malformed(void) {
  size_t size = 0;
  uint8_t *base = make_base(&size);
  CHECK(base != NULL && try_open(base, size) == QVL_OK, "base opens: %s", qvl_last_error());
  if (!base)
    return;
  uint8_t *m = malloc(size);
  /* offsets of fields, found from the names */
  size_t k_one_type = gguf_after_str(base, size, "k.one");
  size_t k_flag_val = gguf_after_str(base, size, "k.flag") + 4;
  size_t tok_arr = gguf_after_str(base, size, "tok.list") + 4; /* u32 elem type, u64 count, strings */
  size_t int_arr = gguf_after_str(base, size, "int.list") + 4;
  size_t wq = gguf_after_str(base, size, "wq"); /* u32 n_dims, ne[0], ne[1], u32 type, u64 offset */
  size_t wa = gguf_after_str(base, size, "wa");
  CHECK(k_one_type && k_flag_val > 4 && tok_arr > 4 && wq && wa, "field offsets");

  /* every truncation of the file fails cleanly (the last tensor ends the file exactly) */
  int trunc_ok = 0;
  for (size_t n = 0; n < size; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, base, n);
    qvl_status s = try_open(cut, n);
    trunc_ok += s == QVL_ERR_FORMAT && contains(qvl_last_error(), "bad.gguf");
    if (s != QVL_ERR_FORMAT)
      fprintf(stderr, "truncated at %zu: status %d %s\n", n, (int)s, qvl_last_error());
    free(cut);
  }
  CHECK(trunc_ok == (int)size, "%d of %zu truncations rejected", trunc_ok, size);
  memcpy(m, base, size);
  CHECK(try_open(m, 3) == QVL_ERR_FORMAT && contains(qvl_last_error(), "only 3 bytes"), "%s", qvl_last_error());
  CHECK(try_open(m, size - 1) == QVL_ERR_FORMAT && contains(qvl_last_error(), "tensor 'wa'"), "%s", qvl_last_error());

  BAD(memcpy(m, "GGUX", 4), QVL_ERR_FORMAT, "not a GGUF file (magic 'GGUX'");
  BAD(put_u32(m, 4, 1), QVL_ERR_UNSUPPORTED, "version 1");
  BAD(put_u32(m, 4, 4), QVL_ERR_UNSUPPORTED, "version 4");
  BAD(put_u32(m, 4, 0x03000000), QVL_ERR_UNSUPPORTED, "big-endian");
  BAD(put_u64(m, 16, 1ull << 60), QVL_ERR_FORMAT, "keys");        /* n_kv */
  BAD(put_u64(m, 8, 1ull << 40), QVL_ERR_FORMAT, "tensors");      /* n_tensors */
  BAD(put_u64(m, 8, UINT64_MAX), QVL_ERR_FORMAT, "tensors");
  BAD(put_u64(m, 16, 7), QVL_ERR_FORMAT, "bad.gguf"); /* more keys than present: tensor infos read as keys */
  BAD(put_u64(m, 24, 1ull << 62), QVL_ERR_FORMAT, "string length"); /* first key name length */
  BAD(put_u64(m, 24, 0), QVL_ERR_FORMAT, "key #0 has an empty name");
  BAD(m[32] = 0, QVL_ERR_FORMAT, "NUL");                            /* 'g' of general.architecture */
  BAD(put_u32(m, k_one_type, 13), QVL_ERR_FORMAT, "k.one", "value type 13");
  BAD(memcpy(m + k_one_type - 3, "two", 3), QVL_ERR_FORMAT, "duplicate key 'k.two'");
  BAD(m[k_flag_val] = 2, QVL_ERR_FORMAT, "k.flag", "expected 0 or 1");
  BAD(put_u32(m, tok_arr, 9), QVL_ERR_UNSUPPORTED, "tok.list", "array of arrays");
  BAD(put_u32(m, tok_arr, 77), QVL_ERR_FORMAT, "tok.list", "element type 77");
  BAD(put_u64(m, tok_arr + 4, 1ull << 61), QVL_ERR_FORMAT, "tok.list", "bytes");
  BAD(put_u64(m, tok_arr + 4, 1000000), QVL_ERR_FORMAT, "tok.list");
  BAD(put_u64(m, tok_arr + 12, 1ull << 50), QVL_ERR_FORMAT, "string 0 of array key 'tok.list'");
  BAD(put_u64(m, int_arr + 4, (1ull << 62) + 3), QVL_ERR_FORMAT, "int.list");
  BAD(put_u64(m, wq - 10, 1ull << 40), QVL_ERR_FORMAT, "tensor #0");            /* name length */
  BAD(put_u32(m, wq, 0), QVL_ERR_FORMAT, "tensor 'wq' has 0 dimensions");
  BAD(put_u32(m, wq, 5), QVL_ERR_FORMAT, "tensor 'wq' has 5 dimensions");
  BAD(put_u64(m, wq + 4, 0), QVL_ERR_FORMAT, "tensor 'wq'", "ne[0] = 0");
  BAD(put_u64(m, wq + 12, UINT64_MAX), QVL_ERR_FORMAT, "tensor 'wq'", "ne[1] = -1");
  BAD((put_u32(m, wq, 3), put_u64(m, wq + 4, 1ull << 32), put_u64(m, wq + 12, 1ull << 32)), QVL_ERR_FORMAT,
      "tensor 'wq'");
  BAD((put_u64(m, wq + 4, 1ull << 35), put_u64(m, wq + 12, 1ull << 35)), QVL_ERR_FORMAT, "tensor 'wq'",
      "overflows");
  BAD(put_u64(m, wq + 4, 33), QVL_ERR_FORMAT, "tensor 'wq'", "ne[0] = 33", "block size 32");
  BAD(put_u32(m, wq + 20, 7), QVL_ERR_UNSUPPORTED, "tensor 'wq' has type Q5_1 (id 7), which qvl does not support");
  BAD(put_u32(m, wq + 20, 23), QVL_ERR_UNSUPPORTED, "IQ4_XS (id 23)");
  BAD(put_u32(m, wq + 20, 15), QVL_ERR_UNSUPPORTED, "Q8_K (id 15)");
  BAD(put_u32(m, wq + 20, 99), QVL_ERR_FORMAT, "tensor 'wq' has type id 99");
  BAD(put_u64(m, wa + 24, 1), QVL_ERR_FORMAT, "tensor 'wa'", "offset 1 is not a multiple of the alignment 32");
  BAD(put_u64(m, wa + 24, 1ull << 40), QVL_ERR_FORMAT, "tensor 'wa'", "outside the data section");
  BAD(put_u64(m, wa + 24, UINT64_MAX - 31), QVL_ERR_FORMAT, "tensor 'wa'");
  BAD(put_u64(m, wa + 4, 5), QVL_ERR_FORMAT, "tensor 'wa'", "outside"); /* grows past the end */
  BAD(memcpy(m + wa - 2, "wq", 2), QVL_ERR_FORMAT, "duplicate tensor name 'wq'");
  BAD(put_u64(m, wa - 10, 0), QVL_ERR_FORMAT, "tensor #1 has an empty name");

  /* general.alignment: rewrite with a bad value / type via the writer */
  struct { gguf_type t; uint64_t v; const char *msg; } al[] = {
      {GGUF_TYPE_UINT32, 0, "nonzero power of two"},
      {GGUF_TYPE_UINT32, 48, "= 48"},
      {GGUF_TYPE_UINT64, 32, "has type uint64, expected uint32"},
  };
  for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
    gguf_writer *w = gguf_writer_init();
    /* the writer refuses bad alignments, so write a good or differently named one and patch it */
    if (al[i].t == GGUF_TYPE_UINT64)
      gguf_writer_set_u64(w, "general.alignmenX", al[i].v);
    else
      gguf_writer_set_u32(w, "general.alignment", 64);
    void *mem = NULL;
    size_t ms = 0;
    gguf_writer_save_mem(w, &mem, &ms);
    if (al[i].t == GGUF_TYPE_UINT32)
      put_u32(mem, gguf_after_str(mem, ms, "general.alignment") + 4, (uint32_t)al[i].v);
    else
      ((uint8_t *)mem)[gguf_after_str(mem, ms, "general.alignmenX") - 1] = 't';
    CHECK(try_open(mem, ms) == QVL_ERR_FORMAT && contains(qvl_last_error(), "general.alignment") &&
              contains(qvl_last_error(), al[i].msg),
          "alignment case %zu: %s", i, qvl_last_error());
    free(mem);
    gguf_writer_free(w);
  }
  /* version 2 files are read like version 3 */
  memcpy(m, base, size);
  put_u32(m, 4, 2);
  CHECK(try_open(m, size) == QVL_OK, "v2: %s", qvl_last_error());
  /* an empty file with zero tensors and keys is valid */
  const uint8_t empty[24] = {'G', 'G', 'U', 'F', 3};
  CHECK(try_open(empty, sizeof empty) == QVL_OK, "empty GGUF: %s", qvl_last_error());
  CHECK(gguf_open("tests/fixtures/no/such.gguf", &(gguf *){NULL}) == QVL_ERR_NOT_FOUND &&
            contains(qvl_last_error(), "no/such.gguf"),
        "missing file");
  CHECK(gguf_open("tests/fixtures", &(gguf *){NULL}) == QVL_ERR_IO, "directory");
  CHECK(gguf_open("tests/fixtures/README.md", &(gguf *){NULL}) == QVL_ERR_FORMAT &&
            contains(qvl_last_error(), "not a GGUF file"),
        "text file");
  free(m);
  free(base);
}

/* The fuzz seeds of the GGUF reader (tests/corpus_test.h). */
static qvl_status open_close(const char *path, bool *opened) {
  gguf *g = NULL;
  qvl_status s = gguf_open(path, &g);
  *opened = g != NULL;
  gguf_close(g);
  return s;
}

int main(void) {
  char dir[] = "/tmp/qvl_test_gguf_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_all_fixtures_open();
  test_micro_a();
  test_mmproj_and_micro_b();
  test_e2e();
  test_rewrite_identical(FIX "micro-a/gguf/micro-a-F32.gguf");
  test_rewrite_identical(FIX "micro-a/gguf/mmproj-micro-a-BF16.gguf");
  test_rewrite_identical(FIX "micro-b/gguf/micro-b-Q4_K_M.gguf");
  test_rewrite_identical(FIX "e2e/gguf/e2e-Q8_0.gguf");
  test_round_trip(dir);
  test_malformed();
  check_corpus("tests/fuzz/corpus/gguf", open_close, 5, 30);
  rmdir(dir);
  return TEST_SUMMARY("test_gguf");
}
