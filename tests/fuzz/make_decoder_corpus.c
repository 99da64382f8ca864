/*
 * Regenerates the hand-made seed corpus of fuzz_decoder: tiny valid text models (qwen3vl layout,
 * F32 / F16 / BF16 / Q8_0 matrices, tied and untied head, DeepStack levels, per-layer key arrays)
 * written with our GGUF writer, plus broken variants (another architecture, an mmproj, a missing
 * key, a missing tensor, a bad shape, a truncated file).
 *
 *   make BUILD=build/rel
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc tests/fuzz/make_decoder_corpus.c build/rel/libqvl.a \
 *      $(pkg-config --libs libcjson) -lm -pthread -o build/make_decoder_corpus
 *   build/make_decoder_corpus tests/fuzz/corpus/decoder
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_write.h"

enum { VOCAB = 40, LAYERS = 2, HEADS = 2, KV_HEADS = 1, HEAD_DIM = 16, FF = 64 };

typedef struct variant {
  const char *file;
  const char *arch, *type;
  qvl_dtype mat_type;
  int n_embd;            /* a multiple of 32 for Q8_0 */
  int tied, deepstack;
  int layer_arrays;      /* head_count / feed_forward_length as per-layer arrays */
  const char *skip_key;
  const char *skip;      /* tensor left out */
  const char *bad_shape; /* tensor written with one extra row */
  double keep;           /* fraction of the bytes written (truncation) */
} variant;

static uint32_t rng = 4242;
static float rnd(void) {
  rng = rng * 1664525u + 1013904223u;
  return ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.5f;
}

static qvl_status add(gguf_writer *w, const variant *v, const char *name, qvl_dtype type, int64_t ne0, int64_t ne1) {
  if (v->skip && !strcmp(name, v->skip))
    return QVL_OK;
  if (v->bad_shape && !strcmp(name, v->bad_shape))
    ne1 = ne1 ? ne1 + 1 : 2;
  int n_dims = ne1 ? 2 : 1;
  int64_t rows = ne1 ? ne1 : 1;
  int64_t ne[2] = {ne0, rows};
  float *f = malloc((size_t)(ne0 * rows) * sizeof(float));
  size_t rb = 0;
  dtype_row_bytes(type, ne0, &rb);
  char *q = malloc(rb * (size_t)rows);
  for (int64_t i = 0; i < ne0 * rows; i++)
    f[i] = n_dims == 1 ? 1.0f + rnd() : rnd();
  for (int64_t r = 0; r < rows; r++)
    dtype_quantize_row(type, f + r * ne0, q + (size_t)r * rb, ne0);
  qvl_status s = gguf_writer_add_tensor(w, name, type, n_dims, ne, q);
  free(f);
  free(q);
  return s;
}

static int write_variant(const char *dir, const variant *v) {
  gguf_writer *w = gguf_writer_init();
  int D = v->n_embd;
  gguf_writer_set_str(w, "general.architecture", v->arch);
  if (v->type)
    gguf_writer_set_str(w, "general.type", v->type);
#define SKIP(k) (v->skip_key && !strcmp(v->skip_key, k))
  if (!SKIP("qwen3vl.block_count"))
    gguf_writer_set_u32(w, "qwen3vl.block_count", LAYERS);
  if (!SKIP("qwen3vl.context_length"))
    gguf_writer_set_u32(w, "qwen3vl.context_length", 256);
  if (!SKIP("qwen3vl.embedding_length"))
    gguf_writer_set_u32(w, "qwen3vl.embedding_length", (uint32_t)D);
  if (v->layer_arrays) {
    uint32_t ff[LAYERS] = {FF, FF}, hc[LAYERS] = {HEADS, HEADS};
    gguf_writer_set_array(w, "qwen3vl.feed_forward_length", GGUF_TYPE_UINT32, ff, LAYERS);
    gguf_writer_set_array(w, "qwen3vl.attention.head_count", GGUF_TYPE_UINT32, hc, LAYERS);
  } else {
    if (!SKIP("qwen3vl.feed_forward_length"))
      gguf_writer_set_u32(w, "qwen3vl.feed_forward_length", FF);
    if (!SKIP("qwen3vl.attention.head_count"))
      gguf_writer_set_u32(w, "qwen3vl.attention.head_count", HEADS);
  }
  gguf_writer_set_u32(w, "qwen3vl.attention.head_count_kv", KV_HEADS);
  gguf_writer_set_u32(w, "qwen3vl.attention.key_length", HEAD_DIM);
  gguf_writer_set_u32(w, "qwen3vl.attention.value_length", HEAD_DIM);
  gguf_writer_set_u32(w, "qwen3vl.n_deepstack_layers", (uint32_t)v->deepstack);
  if (!SKIP("qwen3vl.attention.layer_norm_rms_epsilon"))
    gguf_writer_set_f32(w, "qwen3vl.attention.layer_norm_rms_epsilon", 1e-6f);
  gguf_writer_set_f32(w, "qwen3vl.rope.freq_base", 5e6f);
  int32_t sec[4] = {4, 2, 2, 0};
  if (!SKIP("qwen3vl.rope.dimension_sections"))
    gguf_writer_set_array(w, "qwen3vl.rope.dimension_sections", GGUF_TYPE_INT32, sec, 4);
#undef SKIP
  qvl_dtype mt = v->mat_type;
  int qd = HEADS * HEAD_DIM, kvd = KV_HEADS * HEAD_DIM;
  add(w, v, "token_embd.weight", mt, D, VOCAB);
  add(w, v, "output_norm.weight", QVL_DTYPE_F32, D, 0);
  if (!v->tied)
    add(w, v, "output.weight", mt, D, VOCAB);
  char n[64];
  for (int l = 0; l < LAYERS; l++) {
#define T(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    add(w, v, T("attn_norm.weight"), QVL_DTYPE_F32, D, 0);
    add(w, v, T("attn_q.weight"), mt, D, qd);
    add(w, v, T("attn_k.weight"), mt, D, kvd);
    add(w, v, T("attn_v.weight"), mt, D, kvd);
    add(w, v, T("attn_output.weight"), mt, qd, D);
    add(w, v, T("attn_q_norm.weight"), QVL_DTYPE_F32, HEAD_DIM, 0);
    add(w, v, T("attn_k_norm.weight"), QVL_DTYPE_F32, HEAD_DIM, 0);
    add(w, v, T("ffn_norm.weight"), QVL_DTYPE_F32, D, 0);
    add(w, v, T("ffn_gate.weight"), mt, D, FF);
    add(w, v, T("ffn_up.weight"), mt, D, FF);
    add(w, v, T("ffn_down.weight"), mt, FF, D);
#undef T
  }
  void *mem = NULL;
  size_t size = 0;
  qvl_status s = gguf_writer_save_mem(w, &mem, &size);
  gguf_writer_free(w);
  if (s != QVL_OK)
    return 1;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, v->file);
  FILE *f = fopen(path, "wb");
  if (!f)
    return 1;
  size_t keep = v->keep > 0 ? (size_t)((double)size * v->keep) : size;
  fwrite(mem, 1, keep, f);
  fclose(f);
  free(mem);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus/decoder";
  const variant vs[] = {
      {.file = "f32_untied", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16, .deepstack = 1},
      {.file = "f16_tied", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F16, .n_embd = 16, .tied = 1, .deepstack = 2},
      {.file = "bf16_arrays", .arch = "qwen3vl", .mat_type = QVL_DTYPE_BF16, .n_embd = 16, .layer_arrays = 1},
      {.file = "q8_0_tied", .arch = "qwen3vl", .mat_type = QVL_DTYPE_Q8_0, .n_embd = 32, .tied = 1, .deepstack = 1},
      {.file = "arch_llama", .arch = "llama", .mat_type = QVL_DTYPE_F32, .n_embd = 16},
      {.file = "mmproj", .arch = "clip", .type = "mmproj", .mat_type = QVL_DTYPE_F32, .n_embd = 16},
      {.file = "no_eps", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16,
       .skip_key = "qwen3vl.attention.layer_norm_rms_epsilon"},
      {.file = "no_sections", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16,
       .skip_key = "qwen3vl.rope.dimension_sections"},
      {.file = "no_k_norm", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16,
       .skip = "blk.1.attn_k_norm.weight"},
      {.file = "bad_ffn_down", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16,
       .bad_shape = "blk.0.ffn_down.weight"},
      {.file = "truncated", .arch = "qwen3vl", .mat_type = QVL_DTYPE_F32, .n_embd = 16, .keep = 0.6},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
    bad |= write_variant(dir, &vs[i]);
  return bad;
}
