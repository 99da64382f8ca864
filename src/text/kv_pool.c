#include "text/kv_pool.h"

#include <errno.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"

struct kv_pool {
  int64_t n_layer, row, n_slots;
  kv_type type;
  size_t chunk;       /* bytes of one layer half of one slot: KV_BLOCK rows */
  int fd;             /* the memory file */
  char *base;         /* the whole file, mapped shared: writes and copies go through it */
  size_t bytes;
  int64_t hint;       /* where the search for a free slot starts */
  _Atomic int refs;   /* creator + caches with shared blocks */
  _Atomic int *slot_refs;
};

/* Offset in the file of layer l's keys (half 0) or values (half 1) of slot s. */
static size_t chunk_offset(const kv_pool *p, int64_t l, int half, int64_t s) {
  return (((size_t)l * 2 + (size_t)half) * (size_t)p->n_slots + (size_t)s) * p->chunk;
}

/* Where block j of layer l's keys (half 0) or values (half 1) lives in a cache. */
static char *cache_chunk(const kv_cache *kv, int64_t l, int half, int64_t j, size_t chunk) {
  char *base = half ? (kv->v ? (char *)kv->v : (char *)kv->vh) : (kv->k ? (char *)kv->k : (char *)kv->kh);
  return base + ((size_t)l * (size_t)(kv->layer_rows / KV_BLOCK) + (size_t)j) * chunk;
}

static void pool_free(kv_pool *p) {
  if (p->base)
    munmap(p->base, p->bytes);
  if (p->fd >= 0)
    close(p->fd);
  free(p->slot_refs);
  free(p);
}

static void pool_unref(kv_pool *p) {
  if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
    pool_free(p);
}

qvl_status kv_pool_create(int64_t n_layer, int64_t row, kv_type type, int64_t n_slots, kv_pool **out) {
  *out = NULL;
  type = kv_type_resolve(type);
  if (n_layer <= 0 || row <= 0 || n_slots <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "KV pool: invalid shape (%lld layers, row %lld, %lld slots)",
                      (long long)n_layer, (long long)row, (long long)n_slots);
  if (!kv_block_mappable(row, type))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "KV pool: %d rows of %lld %s elements are not whole pages", KV_BLOCK,
                      (long long)row, kv_type_name(type));
  kv_pool *p = calloc(1, sizeof *p);
  if (!p)
    return qvl_errorf(QVL_ERR_NOMEM, "KV pool: out of memory");
  p->fd = -1;
  p->n_layer = n_layer;
  p->row = row;
  p->n_slots = n_slots;
  p->type = type;
  p->chunk = (size_t)KV_BLOCK * (size_t)row * (size_t)kv_type_elem_bytes(type);
  p->bytes = p->chunk * 2 * (size_t)n_layer * (size_t)n_slots;
  atomic_init(&p->refs, 1);
  p->slot_refs = calloc((size_t)n_slots, sizeof *p->slot_refs);
  if (!p->slot_refs) {
    pool_free(p);
    return qvl_errorf(QVL_ERR_NOMEM, "KV pool: out of memory");
  }
  p->fd = memfd_create("qvl-kv-pool", MFD_CLOEXEC);
  size_t bytes = p->bytes;
  if (p->fd < 0 || ftruncate(p->fd, (off_t)bytes) != 0) {
    int err = errno;
    pool_free(p);
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "KV pool: no memory file of %zu bytes: %s", bytes, strerror(err));
  }
  p->base = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (p->base == MAP_FAILED) {
    int err = errno;
    p->base = NULL;
    pool_free(p);
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "KV pool: cannot map %zu bytes: %s", bytes, strerror(err));
  }
  *out = p;
  return QVL_OK;
}

void kv_pool_release(kv_pool *p) {
  if (p)
    pool_unref(p);
}

int64_t kv_pool_slots(const kv_pool *p) { return p->n_slots; }

int kv_pool_refs(const kv_pool *p, int64_t slot) {
  return atomic_load_explicit(&p->slot_refs[slot], memory_order_acquire);
}

int64_t kv_pool_alloc(kv_pool *p, int64_t prefer) {
  if (prefer >= 0 && prefer < p->n_slots && kv_pool_refs(p, prefer) == 0) {
    atomic_store_explicit(&p->slot_refs[prefer], 1, memory_order_release);
    return prefer;
  }
  for (int64_t i = 0; i < p->n_slots; i++) {
    int64_t s = (p->hint + i) % p->n_slots;
    if (kv_pool_refs(p, s) == 0) {
      atomic_store_explicit(&p->slot_refs[s], 1, memory_order_release);
      p->hint = s + 1;
      return s;
    }
  }
  return -1;
}

void kv_pool_unref(kv_pool *p, int64_t slot) {
  _Atomic int *r = &p->slot_refs[slot];
  /* The last reference marks the slot as being released (-1, not free yet) while its pages are
   * given back, so that an allocation on another thread cannot write into it meanwhile. */
  int cur = atomic_load_explicit(r, memory_order_acquire);
  while (!atomic_compare_exchange_weak_explicit(r, &cur, cur == 1 ? -1 : cur - 1, memory_order_acq_rel,
                                                memory_order_acquire)) {
  }
  if (cur != 1)
    return;
  for (int64_t l = 0; l < p->n_layer; l++)
    for (int half = 0; half < 2; half++)
      madvise(p->base + chunk_offset(p, l, half, slot), p->chunk, MADV_REMOVE);
  atomic_store_explicit(r, 0, memory_order_release);
}

void kv_pool_write(kv_pool *p, int64_t slot, const kv_cache *kv, int64_t block) {
  for (int64_t l = 0; l < p->n_layer; l++)
    for (int half = 0; half < 2; half++)
      memcpy(p->base + chunk_offset(p, l, half, slot), cache_chunk(kv, l, half, block, p->chunk), p->chunk);
}

void kv_pool_read(const kv_pool *p, int64_t slot, kv_cache *kv, int64_t block) {
  kv_pool_read_rows(p, slot, kv, block, KV_BLOCK);
}

void kv_pool_read_rows(const kv_pool *p, int64_t slot, kv_cache *kv, int64_t block, int rows) {
  size_t bytes = p->chunk / KV_BLOCK * (size_t)rows;
  for (int64_t l = 0; l < p->n_layer; l++)
    for (int half = 0; half < 2; half++)
      memcpy(cache_chunk(kv, l, half, block, p->chunk), p->base + chunk_offset(p, l, half, slot), bytes);
}

/* Private zero pages over blocks 0 .. n_blocks-1 of every layer half of kv. */
static void map_private(const kv_cache *kv, int64_t n_blocks, size_t chunk) {
  for (int64_t l = 0; l < kv->n_layer; l++)
    for (int half = 0; half < 2; half++)
      mmap(cache_chunk(kv, l, half, 0, chunk), (size_t)n_blocks * chunk, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

qvl_status kv_pool_map(kv_pool *p, const int64_t *slots, int64_t n_blocks, kv_cache *kv) {
  if (n_blocks <= 0)
    return QVL_OK;
  if (!kv->mapped || kv->n_shared > 0 || kv->type != p->type || kv->row != p->row || kv->n_layer != p->n_layer ||
      n_blocks * KV_BLOCK > kv->layer_rows)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "KV pool: this cache cannot take %lld shared blocks", (long long)n_blocks);
  int64_t *own = malloc(sizeof *own * (size_t)n_blocks);
  if (!own)
    return qvl_errorf(QVL_ERR_NOMEM, "KV pool: out of memory");
  memcpy(own, slots, sizeof *own * (size_t)n_blocks);
  /* One mmap per run of consecutive slots and layer half; populated now, so the first attention
   * pass does not take the page faults. */
  for (int64_t l = 0; l < p->n_layer; l++)
    for (int half = 0; half < 2; half++)
      for (int64_t j = 0, run; j < n_blocks; j += run) {
        for (run = 1; j + run < n_blocks && slots[j + run] == slots[j] + run; run++) {
        }
        void *at = mmap(cache_chunk(kv, l, half, j, p->chunk), (size_t)run * p->chunk, PROT_READ,
                        MAP_SHARED | MAP_FIXED | MAP_POPULATE, p->fd, (off_t)chunk_offset(p, l, half, slots[j]));
        if (at == MAP_FAILED) {
          int err = errno;
          map_private(kv, n_blocks, p->chunk);
          free(own);
          return qvl_errorf(QVL_ERR_IO, "KV pool: cannot map a shared block: %s", strerror(err));
        }
      }
  for (int64_t j = 0; j < n_blocks; j++)
    atomic_fetch_add_explicit(&p->slot_refs[slots[j]], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  kv->pool = p;
  kv->slots = own;
  kv->n_shared = n_blocks;
  return QVL_OK;
}

void kv_pool_unshare(kv_cache *kv, bool keep_rows) {
  kv_pool *p = kv->pool;
  if (!p)
    return;
  if (keep_rows) /* the storage stays in use: private zero pages where the shared ones were */
    map_private(kv, kv->n_shared, p->chunk);
  for (int64_t j = 0; j < kv->n_shared; j++)
    kv_pool_unref(p, kv->slots[j]);
  free(kv->slots);
  kv->slots = NULL;
  kv->n_shared = 0;
  kv->pool = NULL;
  pool_unref(p);
}
