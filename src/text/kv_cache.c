#include "text/kv_cache.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"
#include "kernels/kernels.h"
#include "text/kv_pool.h"

static kv_type g_default = KV_TYPE_F16;

void kv_set_default_type(kv_type t) {
  if (t == KV_TYPE_F32 || t == KV_TYPE_F16)
    g_default = t;
}
kv_type kv_default_type(void) { return g_default; }
kv_type kv_type_resolve(kv_type t) { return t == KV_TYPE_DEFAULT ? g_default : t; }

const char *kv_type_name(kv_type t) { return kv_type_resolve(t) == KV_TYPE_F32 ? "f32" : "f16"; }

qvl_status kv_type_parse(const char *s, kv_type *out) {
  static const struct {
    const char *name;
    kv_type type;
  } names[] = {{"f32", KV_TYPE_F32}, {"f16", KV_TYPE_F16}};
  for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
    if (!strcasecmp(s, names[i].name)) {
      *out = names[i].type;
      return QVL_OK;
    }
  }
  return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown KV cache type '%s' (use f16 or f32)", s ? s : "");
}

int kv_type_elem_bytes(kv_type t) { return kv_type_resolve(t) == KV_TYPE_F32 ? 4 : 2; }

uint64_t kv_cache_bytes_type(int64_t n_layer, int64_t n_ctx, int64_t row, kv_type t) {
  if (n_layer <= 0 || n_ctx <= 0 || row <= 0)
    return 0;
  uint64_t b = 2 * (uint64_t)kv_type_elem_bytes(t);
  if (__builtin_mul_overflow(b, (uint64_t)n_layer, &b) || __builtin_mul_overflow(b, (uint64_t)n_ctx, &b) ||
      __builtin_mul_overflow(b, (uint64_t)row, &b) || b > (uint64_t)SIZE_MAX)
    return 0;
  return b;
}

uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_ctx, int64_t row) {
  return kv_cache_bytes_type(n_layer, n_ctx, row, KV_TYPE_F32);
}

int kv_block_mappable(int64_t row, kv_type t) {
  long page = sysconf(_SC_PAGESIZE);
  int64_t block = KV_BLOCK * row * kv_type_elem_bytes(t);
  return page > 0 && row > 0 && block % page == 0;
}

/* Zeroed storage for K or V: page-aligned anonymous memory when blocks can be shared (untouched
 * pages cost nothing, like calloc's), the heap otherwise. */
static void *storage_alloc(size_t bytes, int mapped) {
  if (!mapped)
    return calloc(1, bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void storage_free(void *p, size_t bytes, int mapped) {
  if (p && mapped)
    munmap(p, bytes);
  else
    free(p);
}

/* Bytes of K (or of V) storage. */
static size_t half_bytes(const kv_cache *c) {
  return (size_t)c->n_layer * (size_t)c->layer_rows * (size_t)c->row * (size_t)kv_type_elem_bytes(c->type);
}

qvl_status kv_cache_init_type(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row, kv_type t) {
  memset(c, 0, sizeof *c);
  t = kv_type_resolve(t);
  uint64_t bytes = kv_cache_bytes_type(n_layer, n_ctx, row, t);
  if (bytes == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "KV cache: invalid size (layers %lld, context %lld, row %lld elements)",
                      (long long)n_layer, (long long)n_ctx, (long long)row);
  c->type = t;
  c->n_layer = n_layer;
  c->n_ctx = n_ctx;
  c->row = row;
  c->mapped = kv_block_mappable(row, t);
  c->layer_rows = c->mapped ? (n_ctx + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK : n_ctx;
  if (kv_cache_bytes_type(n_layer, c->layer_rows, row, t) == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "KV cache: context of %lld tokens is too large", (long long)n_ctx);
  size_t half = half_bytes(c);
  void *k = storage_alloc(half, c->mapped);
  void *v = k ? storage_alloc(half, c->mapped) : NULL;
  if (!k || !v) {
    storage_free(k, half, c->mapped);
    memset(c, 0, sizeof *c);
    return qvl_errorf(QVL_ERR_NOMEM,
                      "KV cache: cannot allocate %.1f MiB for a context of %lld tokens (%lld layers, %s); "
                      "use a smaller context",
                      (double)bytes / (1024.0 * 1024.0), (long long)n_ctx, (long long)n_layer, kv_type_name(t));
  }
  if (t == KV_TYPE_F32) {
    c->k = k;
    c->v = v;
  } else {
    c->kh = k;
    c->vh = v;
  }
  return QVL_OK;
}

qvl_status kv_cache_init(kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row) {
  return kv_cache_init_type(c, n_layer, n_ctx, row, KV_TYPE_F32);
}

void kv_cache_free(kv_cache *c) {
  if (!c)
    return;
  kv_pool_unshare(c, false);
  size_t half = half_bytes(c);
  storage_free(c->k ? (void *)c->k : (void *)c->kh, half, c->mapped);
  storage_free(c->v ? (void *)c->v : (void *)c->vh, half, c->mapped);
  memset(c, 0, sizeof *c);
}

void kv_cache_clear(kv_cache *c) {
  kv_pool_unshare(c, true);
  c->n = 0;
}

kv_view kv_cache_layer(kv_cache *c, int64_t layer) {
  kv_view v = {0};
  size_t off = (size_t)layer * (size_t)c->layer_rows * (size_t)c->row;
  if (c->type == KV_TYPE_F32) {
    v.k = c->k + off;
    v.v = c->v + off;
  } else {
    v.kh = c->kh + off;
    v.vh = c->vh + off;
  }
  v.stride = c->row;
  v.n_past = c->n;
  v.capacity = c->n_ctx;
  return v;
}

void kv_view_store(const kv_view *v, int values, const float *src, int64_t src_stride, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int64_t at = (v->n_past + i) * v->stride;
    if (v->k)
      memcpy((values ? v->v : v->k) + at, src + i * src_stride, (size_t)v->stride * sizeof(float));
    else
      kn_f32_to_f16(src + i * src_stride, (values ? v->vh : v->kh) + at, v->stride);
  }
}
