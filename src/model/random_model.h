/*
 * Random-weight Qwen3-VL models written as llama.cpp-layout GGUF (text "qwen3vl" + mmproj "clip" /
 * "qwen3vl_merger"). Speed does not depend on weight values, so a model with the exact 2B shapes
 * is our benchmark model; both qvl and llama.cpp load the same files. Values are seeded and
 * scaled like a trained model's (matrices ~ N(0, 1/fan_in), norms ~ 1), so activations stay finite.
 */
#ifndef QVL_MODEL_RANDOM_MODEL_H
#define QVL_MODEL_RANDOM_MODEL_H

#include <stdint.h>

#include "model/gguf.h"
#include "qvl.h"
#include "tensor/dtype.h"

typedef struct random_text_shape {
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_deepstack;
  int32_t sections[4];
  float rope_theta;
  const char *chat_template; /* tokenizer.chat_template to write (NULL: the tokenizer source's) */
} random_text_shape;

typedef struct random_vision_shape {
  int64_t n_embd, n_layer, n_head, n_ff, proj_dim, pos_side, patch_size;
  int64_t deepstack_layers[8];
  int n_deepstack;
} random_vision_shape;

/* Qwen3-VL-2B-Instruct: text 28 x 2048 (16/8 heads of 128, FFN 6144, vocab 151936, tied);
 * vision 24 x 1024 (16 heads, FFN 4096, 48x48 positions, DeepStack at 5/11/17). */
random_text_shape random_text_shape_2b(void);
random_vision_shape random_vision_shape_2b(void);

/* Writes the text model with every matrix in `type` (norms F32). The tokenizer.* keys are copied
 * from tok_src (a GGUF with a tokenizer; its vocabulary must fit n_vocab). */
qvl_status random_text_write(const random_text_shape *sh, qvl_dtype type, const gguf *tok_src, uint64_t seed,
                             const char *path);
/* Writes the mmproj with matrices in `type` (F16 or Q8_0 like the converter / llama-quantize write
 * them: patch kernels F16 for F16 and F32 otherwise; position table, norms and biases F32). */
qvl_status random_mmproj_write(const random_vision_shape *sh, qvl_dtype type, uint64_t seed, const char *path);

#endif
