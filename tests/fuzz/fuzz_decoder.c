/* libFuzzer target for the text model loader and the decoder: whatever the file holds (keys, shapes,
 * types, values), loading either fails with a status or yields a model that prefills a few tokens
 * (one of them an image row with DeepStack features), decodes two more and samples, without touching
 * memory it should not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "text/decoder.h"
#include "text/sampler.h"

static volatile float sink;

static void run(const decoder_model *m) {
  const decoder_hparams *hp = &m->hp;
  decoder_seq *s = NULL;
  decoder_seq_params sp = {.n_ctx = 8, .n_batch = 2};
  if (decoder_seq_init(m, &sp, &s) != QVL_OK)
    return;
  int32_t ids[4];
  for (int i = 0; i < 4; i++)
    ids[i] = (int32_t)((i * 7) % hp->n_vocab);
  int32_t pos[12] = {0, 1, 2, 3, 0, 1, 1, 3, 0, 1, 2, 3}; /* token 2 is an "image" row at (2, 1, 2) */
  int64_t img_idx[1] = {2};
  int64_t levels = hp->n_deepstack < 2 ? hp->n_deepstack : 2;
  float *img = calloc((size_t)((1 + levels) * hp->n_embd), sizeof(float));
  float *logits_all = malloc((size_t)(4 * hp->n_vocab) * sizeof(float));
  sampler *smp = NULL;
  sampler_params spp = sampler_default_params();
  spp.temperature = 0.8f;
  spp.top_k = 5;
  spp.top_p = 0.9f;
  spp.repetition_penalty = 1.1f;
  if (img && logits_all && sampler_init(&spp, hp->n_vocab, &smp) == QVL_OK) {
    for (int64_t i = 0; i < (1 + levels) * hp->n_embd; i++)
      img[i] = (float)((i * 13) % 7) * 0.25f - 0.75f;
    decoder_input in = {.n_tokens = 4, .tokens = ids, .pos = pos, .n_img = 1, .img_idx = img_idx,
                        .img_embd = img, .n_deepstack = levels, .deepstack = img + hp->n_embd};
    const float *lg = NULL;
    if (decoder_prefill(s, &in, logits_all, &lg) == QVL_OK) {
      float *work = malloc((size_t)hp->n_vocab * sizeof(float));
      for (int step = 0; work && step < 2; step++) {
        memcpy(work, lg, (size_t)hp->n_vocab * sizeof(float));
        int32_t t = sampler_sample(smp, work);
        sampler_accept(smp, t);
        if (decoder_step(s, t, &lg) != QVL_OK)
          break;
        sink += lg[0] + lg[hp->n_vocab - 1];
      }
      free(work);
    }
  }
  sampler_free(smp);
  free(img);
  free(logits_all);
  decoder_seq_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gguf *g = NULL;
  if (gguf_open_memory(data, size, "fuzz.gguf", &g) != QVL_OK)
    return 0;
  decoder_model *m = NULL;
  if (decoder_load_gguf_file(g, &m) != QVL_OK)
    return 0;
  /* Weights in a fuzzed file are bounded by its size; keep the activations small as well. */
  const decoder_hparams *hp = &m->hp;
  if (hp->n_embd <= 4096 && hp->n_ff <= 16384 && hp->n_vocab <= 65536 && hp->n_layer <= 64 &&
      hp->n_head * hp->head_dim <= 16384)
    run(m);
  decoder_free(m);
  return 0;
}
