/*
 * Key/value cache of one sequence: rows for every layer, allocated once for n_ctx tokens, stored
 * as float32 or as IEEE half (F16, the default: half the bytes per token; rows are rounded once
 * when appended and attention widens them to fp32 in registers, kn_attention_f16kv).
 *
 * The element type is the engine's (engine_config.kv_type, qvl_engine_params.kv_type); a caller
 * that names none gets the process default (kv_set_default_type: the deprecated qvl_set_kv_type,
 * f16 unless set). The caches of one engine (and its prefix cache's blocks) all have one type.
 *
 * The decoder's per-layer code only sees a kv_view (where layer l's rows live, how many are
 * already stored), so a paged cache for batched serving can hand out views of its own without
 * changing the layer code.
 *
 * Shared blocks: when KV_BLOCK rows of one layer fill whole memory pages (kv_block_mappable: the
 * 2B model's 16 rows of 1024 f16 are 32 KiB), the storage is allocated page-aligned, block-aligned
 * per layer, and a block's rows can be replaced by read-only pages of a kv_pool (text/kv_pool.h),
 * shared with the prefix cache and with other sequences: a cached prompt prefix is restored by
 * mapping it, not copied. Rows below n are never written again, so sharing them is safe; the
 * mapping is read-only so a write there would fault instead of corrupting the shared copy.
 */
#ifndef QVL_TEXT_KV_CACHE_H
#define QVL_TEXT_KV_CACHE_H

#include <stdint.h>

#include "qvl.h"

/* Element type of a cache. KV_TYPE_DEFAULT (0) means the process default (kv_default_type()). */
typedef enum kv_type { KV_TYPE_DEFAULT = 0, KV_TYPE_F32 = 1, KV_TYPE_F16 = 2 } kv_type;

/* The process default, initially KV_TYPE_F16. t must not be KV_TYPE_DEFAULT. Set it before any
 * cache is made (at start, from the command line). */
void kv_set_default_type(kv_type t);
kv_type kv_default_type(void);
/* KV_TYPE_DEFAULT resolved to the process default. */
kv_type kv_type_resolve(kv_type t);
/* "f32" / "f16"; parse (case-insensitive) returns QVL_ERR_INVALID_ARG with a message otherwise. */
const char *kv_type_name(kv_type t);
qvl_status kv_type_parse(const char *s, kv_type *out);
/* Bytes per stored element (4 or 2). */
int kv_type_elem_bytes(kv_type t);

/* Rows per shared block (and per prefix-cache block). */
#define KV_BLOCK 16

struct kv_pool;

typedef struct kv_cache {
  int64_t n_layer;
  int64_t n_ctx;  /* token capacity */
  int64_t layer_rows; /* rows allocated per layer: n_ctx, rounded up to KV_BLOCK when mapped */
  int mapped;     /* 1: the storage came from mmap, block-aligned (blocks can be shared) */
  int64_t row;    /* elements per token and layer: n_head_kv * head_dim */
  kv_type type;   /* KV_TYPE_F32 or KV_TYPE_F16 (never DEFAULT) */
  /* [n_layer][n_ctx][row], rows after RMSNorm and RoPE: k/v for F32 (kh/vh NULL), kh/vh for F16
   * (k/v NULL). */
  float *k, *v;
  uint16_t *kh, *vh;
  int64_t n;      /* tokens stored (the same for every layer between forward calls) */
  /* Blocks 0 .. n_shared-1 are pages of this pool (slots[j] backs block j), with a reference each. */
  struct kv_pool *pool;
  int64_t *slots;
  int64_t n_shared;
} kv_cache;

/* One layer of a cache: token i's key is k + i * stride (or kh + i * stride for F16). */
typedef struct kv_view {
  float *k;        /* [capacity][stride], F32 caches */
  float *v;
  uint16_t *kh;    /* [capacity][stride], F16 caches */
  uint16_t *vh;
  int64_t stride;  /* elements between token rows */
  int64_t n_past;  /* rows already stored */
  int64_t capacity;
} kv_view;

/* Allocates (zeroed) float32 storage; QVL_ERR_NOMEM names the bytes asked for, QVL_ERR_INVALID_ARG
 * for non-positive sizes or sizes whose byte count overflows. */
qvl_status kv_cache_init(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row);
/* The same for an element type (KV_TYPE_DEFAULT: the process default). */
qvl_status kv_cache_init_type(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row, kv_type t);
void kv_cache_free(kv_cache *c);
/* Drops the shared blocks (their rows read as zeros again, privately writable) and sets n = 0: for
 * refilling a sequence from the start. */
void kv_cache_clear(kv_cache *c);

/* Whether KV_BLOCK rows of row elements of type t fill whole pages (so blocks can be shared). */
int kv_block_mappable(int64_t row, kv_type t);

/* Bytes kv_cache_init would allocate (float32; 0 on overflow), and for an element type. */
uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_ctx, int64_t row);
uint64_t kv_cache_bytes_type(int64_t n_layer, int64_t n_ctx, int64_t row, kv_type t);

kv_view kv_cache_layer(kv_cache *c, int64_t layer);

/* Stores n rows src[n][row] (src_stride floats apart) at token n_past.. of layer view v (k or v as
 * `values` says), converting to the cache's type. */
void kv_view_store(const kv_view *v, int values, const float *src, int64_t src_stride, int64_t n);

#endif
