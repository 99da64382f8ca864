#include "text/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_ctx, int64_t row) {
  if (n_layer <= 0 || n_ctx <= 0 || row <= 0)
    return 0;
  uint64_t b = 2 * sizeof(float);
  if (__builtin_mul_overflow(b, (uint64_t)n_layer, &b) || __builtin_mul_overflow(b, (uint64_t)n_ctx, &b) ||
      __builtin_mul_overflow(b, (uint64_t)row, &b) || b > (uint64_t)SIZE_MAX)
    return 0;
  return b;
}

qvl_status kv_cache_init(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row) {
  memset(c, 0, sizeof *c);
  uint64_t bytes = kv_cache_bytes(n_layer, n_ctx, row);
  if (bytes == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "KV cache: invalid size (layers %lld, context %lld, row %lld floats)",
                      (long long)n_layer, (long long)n_ctx, (long long)row);
  size_t half = (size_t)(bytes / 2);
  c->k = calloc(1, half);
  c->v = c->k ? calloc(1, half) : NULL;
  if (!c->k || !c->v) {
    free(c->k);
    c->k = NULL;
    return qvl_errorf(QVL_ERR_NOMEM,
                      "KV cache: cannot allocate %.1f MiB for a context of %lld tokens (%lld layers); "
                      "use a smaller context",
                      (double)bytes / (1024.0 * 1024.0), (long long)n_ctx, (long long)n_layer);
  }
  c->n_layer = n_layer;
  c->n_ctx = n_ctx;
  c->row = row;
  return QVL_OK;
}

void kv_cache_free(kv_cache *c) {
  if (!c)
    return;
  free(c->k);
  free(c->v);
  memset(c, 0, sizeof *c);
}

kv_view kv_cache_layer(kv_cache *c, int64_t layer) {
  kv_view v;
  size_t off = (size_t)layer * (size_t)c->n_ctx * (size_t)c->row;
  v.k = c->k + off;
  v.v = c->v + off;
  v.stride = c->row;
  v.n_past = c->n;
  v.capacity = c->n_ctx;
  return v;
}
