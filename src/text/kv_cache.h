/*
 * Key/value cache of one sequence: float32 rows for every layer, allocated once for n_ctx tokens.
 *
 * The decoder's per-layer code only sees a kv_view (where layer l's rows live, how many are
 * already stored), so a paged cache for batched serving can hand out views of its own without
 * changing the layer code.
 */
#ifndef QVL_TEXT_KV_CACHE_H
#define QVL_TEXT_KV_CACHE_H

#include <stdint.h>

#include "qvl.h"

typedef struct kv_cache {
  int64_t n_layer;
  int64_t n_ctx;  /* token capacity */
  int64_t row;    /* floats per token and layer: n_head_kv * head_dim */
  float *k;       /* [n_layer][n_ctx][row], rows after RMSNorm and RoPE */
  float *v;       /* [n_layer][n_ctx][row] */
  int64_t n;      /* tokens stored (the same for every layer between forward calls) */
} kv_cache;

/* One layer of a cache: token i's key is k + i * stride. */
typedef struct kv_view {
  float *k;        /* [capacity][stride] */
  float *v;        /* [capacity][stride] */
  int64_t stride;  /* floats between token rows */
  int64_t n_past;  /* rows already stored */
  int64_t capacity;
} kv_view;

/* Allocates (zeroed) storage; QVL_ERR_NOMEM names the bytes asked for, QVL_ERR_INVALID_ARG for
 * non-positive sizes or sizes whose byte count overflows. */
qvl_status kv_cache_init(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row);
void kv_cache_free(kv_cache *c);

/* Bytes kv_cache_init would allocate (0 on overflow). */
uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_ctx, int64_t row);

kv_view kv_cache_layer(kv_cache *c, int64_t layer);

#endif
