/* A read-only view of a stored tensor (in a mapped GGUF/safetensors file or owned memory). */
#ifndef QVL_TENSOR_TENSOR_H
#define QVL_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

#define TENSOR_MAX_DIMS 4

typedef struct tensor {
  const char *name;         /* NUL-terminated, owned by the file object */
  qvl_dtype type;
  int n_dims;
  int64_t ne[TENSOR_MAX_DIMS]; /* ggml order: ne[0] is the contiguous (row) length; unused dims = 1 */
  const void *data;
  size_t nbytes;
} tensor;

static inline int64_t tensor_nelements(const tensor *t) {
  return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}
/* Number of rows = product of ne[1..]. */
static inline int64_t tensor_nrows(const tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

#endif
