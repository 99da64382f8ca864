/* libFuzzer target for the mmproj loader and the vision forward: whatever the file holds (keys,
 * shapes, types, values), loading either fails with a status or yields a model that encodes a small
 * image and a two-frame clip without touching memory it should not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "vision/vision.h"

static volatile float sink;

static void encode(const vision_model *vm, int64_t t, int64_t h, int64_t w) {
  const int64_t n_tok = vision_n_tokens(vm, t, h, w);
  if (n_tok <= 0)
    return;
  const int64_t K = 3 * vm->hp.temporal * vm->hp.patch_size * vm->hp.patch_size;
  const int64_t N = t * h * w;
  float *pv = malloc((size_t)(N * K) * sizeof(float));
  float *emb = malloc((size_t)(n_tok * vm->hp.proj_dim) * sizeof(float));
  float *ds = malloc((size_t)((vm->n_deepstack + 1) * n_tok * vm->hp.proj_dim) * sizeof(float));
  if (pv && emb && ds) {
    for (int64_t i = 0; i < N * K; i++)
      pv[i] = (float)((i * 37) % 255) / 127.5f - 1.0f;
    if (vision_encode(vm, pv, t, h, w, emb, ds, NULL, NULL) == QVL_OK)
      sink = emb[0] + emb[n_tok * vm->hp.proj_dim - 1] + (vm->n_deepstack ? ds[0] : 0.0f);
  }
  free(pv);
  free(emb);
  free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gguf *g = NULL;
  if (gguf_open_memory(data, size, "fuzz.gguf", &g) != QVL_OK)
    return 0;
  vision_model *vm = NULL;
  if (vision_load_gguf_file(g, &vm) != QVL_OK)
    return 0;
  /* weights in a fuzzed file are bounded by its size; keep the activations small as well */
  if (vm->hp.n_embd <= 4096 && vm->hp.n_ff <= 16384 && vm->hp.proj_dim <= 16384 && vm->hp.n_layer <= 64) {
    const int64_t m = vm->hp.merge;
    encode(vm, 1, m, m);
    encode(vm, 2, m, 2 * m);
  }
  (void)vision_check_text(vm, vm->hp.proj_dim, vm->n_deepstack);
  vision_free(vm);
  return 0;
}
