/*
 * Regenerates the hand-made seed corpus of fuzz_vision: tiny valid mmproj files (Qwen3-VL layout,
 * width 8, two blocks) written with our GGUF writer, plus broken variants (another projector, a text
 * architecture, a missing tensor, a bad shape, a non-square position table, a truncated file).
 *
 *   make BUILD=build/rel
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc tests/fuzz/make_vision_corpus.c build/rel/libqvl.a \
 *      $(pkg-config --libs libcjson) -lm -pthread -o build/make_vision_corpus
 *   build/make_vision_corpus tests/fuzz/corpus/vision
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_write.h"

enum { DV = 8, HEADS = 2, FF = 16, LAYERS = 2, PROJ = 8, P = 16 };

typedef struct variant {
  const char *file;
  const char *arch, *projector;
  qvl_dtype mat_type;
  int pos_side, pos_n;    /* table is pos_n rows (pos_side^2 when valid) */
  const char *skip;       /* tensor left out */
  const char *bad_shape;  /* tensor written with one extra row */
  int deepstack_mask;     /* bit L: v.deepstack.L.* present */
  double keep;            /* fraction of the bytes written (truncation) */
} variant;

static uint32_t rng = 12345;
static float rnd(void) {
  rng = rng * 1664525u + 1013904223u;
  return ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.5f;
}

static qvl_status add(gguf_writer *w, const variant *v, const char *name, qvl_dtype type, int n_dims,
                      int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
  if (v->skip && !strcmp(name, v->skip))
    return QVL_OK;
  if (v->bad_shape && !strcmp(name, v->bad_shape)) {
    if (n_dims >= 2)
      ne1++;
    else
      ne0++;
  }
  int64_t ne[4] = {ne0, ne1, ne2, ne3};
  int64_t n = ne0 * ne1 * ne2 * ne3;
  float *f = malloc((size_t)n * sizeof(float));
  uint16_t *h = malloc((size_t)n * sizeof(uint16_t));
  for (int64_t i = 0; i < n; i++) {
    f[i] = rnd();
    h[i] = f32_to_fp16(f[i]);
  }
  qvl_status s = gguf_writer_add_tensor(w, name, type, n_dims, ne, type == QVL_DTYPE_F16 ? (void *)h : (void *)f);
  free(f);
  free(h);
  return s;
}

static int write_variant(const char *dir, const variant *v) {
  gguf_writer *w = gguf_writer_init();
  char name[96];
  qvl_status s = gguf_writer_set_str(w, "general.architecture", v->arch);
  s = s ? s : gguf_writer_set_str(w, "general.type", "mmproj");
  s = s ? s : gguf_writer_set_str(w, "clip.projector_type", v->projector);
  s = s ? s : gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.projection_dim", PROJ);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)(v->pos_side * P));
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.patch_size", P);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.embedding_length", DV);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.feed_forward_length", FF);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.block_count", LAYERS);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.attention.head_count", HEADS);
  s = s ? s : gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", 2);
  s = s ? s : gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
  static const float half3[3] = {0.5f, 0.5f, 0.5f};
  s = s ? s : gguf_writer_set_array(w, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half3, 3);
  s = s ? s : gguf_writer_set_array(w, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half3, 3);
  const qvl_dtype F32 = QVL_DTYPE_F32, M = v->mat_type;
  s = s ? s : add(w, v, "v.patch_embd.weight", M, 4, P, P, 3, DV);
  s = s ? s : add(w, v, "v.patch_embd.weight.1", M, 4, P, P, 3, DV);
  s = s ? s : add(w, v, "v.patch_embd.bias", F32, 1, DV, 1, 1, 1);
  s = s ? s : add(w, v, "v.position_embd.weight", F32, 2, DV, v->pos_n, 1, 1);
  for (int l = 0; l < LAYERS && !s; l++) {
    static const char *const vec[] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn_out.bias",
                                      "ffn_down.bias"};
    for (int i = 0; i < 6 && !s; i++) {
      snprintf(name, sizeof name, "v.blk.%d.%s", l, vec[i]);
      s = add(w, v, name, F32, 1, DV, 1, 1, 1);
    }
    struct { const char *n; int in, out; } mats[] = {
        {"attn_qkv", DV, 3 * DV}, {"attn_out", DV, DV}, {"ffn_up", DV, FF}, {"ffn_down", FF, DV}};
    for (int i = 0; i < 4 && !s; i++) {
      snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, mats[i].n);
      s = add(w, v, name, M, 2, mats[i].in, mats[i].out, 1, 1);
    }
    snprintf(name, sizeof name, "v.blk.%d.attn_qkv.bias", l);
    s = s ? s : add(w, v, name, F32, 1, 3 * DV, 1, 1, 1);
    snprintf(name, sizeof name, "v.blk.%d.ffn_up.bias", l);
    s = s ? s : add(w, v, name, F32, 1, FF, 1, 1, 1);
  }
  s = s ? s : add(w, v, "v.post_ln.weight", F32, 1, DV, 1, 1, 1);
  s = s ? s : add(w, v, "v.post_ln.bias", F32, 1, DV, 1, 1, 1);
  s = s ? s : add(w, v, "mm.0.weight", M, 2, 4 * DV, 4 * DV, 1, 1);
  s = s ? s : add(w, v, "mm.0.bias", F32, 1, 4 * DV, 1, 1, 1);
  s = s ? s : add(w, v, "mm.2.weight", M, 2, 4 * DV, PROJ, 1, 1);
  s = s ? s : add(w, v, "mm.2.bias", F32, 1, PROJ, 1, 1, 1);
  for (int l = 0; l < LAYERS && !s; l++) {
    if (!(v->deepstack_mask >> l & 1))
      continue;
    snprintf(name, sizeof name, "v.deepstack.%d.norm.weight", l);
    s = add(w, v, name, F32, 1, 4 * DV, 1, 1, 1);
    snprintf(name, sizeof name, "v.deepstack.%d.norm.bias", l);
    s = s ? s : add(w, v, name, F32, 1, 4 * DV, 1, 1, 1);
    snprintf(name, sizeof name, "v.deepstack.%d.fc1.weight", l);
    s = s ? s : add(w, v, name, M, 2, 4 * DV, 4 * DV, 1, 1);
    snprintf(name, sizeof name, "v.deepstack.%d.fc1.bias", l);
    s = s ? s : add(w, v, name, F32, 1, 4 * DV, 1, 1, 1);
    snprintf(name, sizeof name, "v.deepstack.%d.fc2.weight", l);
    s = s ? s : add(w, v, name, M, 2, 4 * DV, PROJ, 1, 1);
    snprintf(name, sizeof name, "v.deepstack.%d.fc2.bias", l);
    s = s ? s : add(w, v, name, F32, 1, PROJ, 1, 1, 1);
  }
  void *mem = NULL;
  size_t size = 0;
  s = s ? s : gguf_writer_save_mem(w, &mem, &size);
  gguf_writer_free(w);
  if (s) {
    fprintf(stderr, "%s: %s\n", v->file, qvl_last_error());
    return 1;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, v->file);
  FILE *f = fopen(path, "wb");
  size_t n = (size_t)((double)size * v->keep);
  int bad = !f || fwrite(mem, 1, n, f) != n;
  if (f)
    bad |= fclose(f) != 0;
  free(mem);
  if (bad)
    fprintf(stderr, "cannot write %s\n", path);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const qvl_dtype F16 = QVL_DTYPE_F16, F32 = QVL_DTYPE_F32;
  const variant vs[] = {
      {"seed-f16", "clip", "qwen3vl_merger", F16, 3, 9, NULL, NULL, 1, 1.0},
      {"seed-f32-ds01", "clip", "qwen3vl_merger", F32, 2, 4, NULL, NULL, 3, 1.0},
      {"seed-no-deepstack", "clip", "qwen3vl_merger", F16, 3, 9, NULL, NULL, 0, 1.0},
      {"bad-projector", "clip", "mlp", F16, 3, 9, NULL, NULL, 1, 1.0},
      {"bad-arch", "qwen3vl", "qwen3vl_merger", F16, 3, 9, NULL, NULL, 1, 1.0},
      {"bad-missing", "clip", "qwen3vl_merger", F16, 3, 9, "v.blk.1.ffn_down.weight", NULL, 1, 1.0},
      {"bad-partial-deepstack", "clip", "qwen3vl_merger", F16, 3, 9, "v.deepstack.0.fc1.bias", NULL, 1, 1.0},
      {"bad-shape", "clip", "qwen3vl_merger", F16, 3, 9, NULL, "v.blk.0.attn_qkv.weight", 1, 1.0},
      {"bad-pos-nonsquare", "clip", "qwen3vl_merger", F16, 3, 8, NULL, NULL, 1, 1.0},
      {"bad-truncated", "clip", "qwen3vl_merger", F16, 3, 9, NULL, NULL, 1, 0.7},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
    bad |= write_variant(argv[1], &vs[i]);
  return bad;
}
