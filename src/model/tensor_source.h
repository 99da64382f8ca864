/*
 * Where a model's weights come from: find() returns a view of the tensor stored under a GGUF name
 * ("blk.3.attn_q.weight", "v.blk.0.attn_qkv.weight"), in ggml ne order, or NULL if there is none.
 * The views stay valid until release(user) is called (by the model's free, or by its init when it
 * fails). The text decoder and the vision tower both load from one: a GGUF file
 * (tensor_source_gguf) or a weight table over an HF checkpoint (model/wtable.h).
 */
#ifndef QVL_MODEL_TENSOR_SOURCE_H
#define QVL_MODEL_TENSOR_SOURCE_H

#include "model/gguf.h"
#include "tensor/tensor.h"

typedef struct tensor_source {
  const char *label;                                 /* file/directory named in errors */
  void *user;
  const tensor *(*find)(void *user, const char *name);
  void (*release)(void *user);                       /* may be NULL */
} tensor_source;

/* The tensors of an open GGUF, viewed in place; release closes the file. */
tensor_source tensor_source_gguf(gguf *g);

#endif
