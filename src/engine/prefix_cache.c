#include "engine/prefix_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/free_each.h"
#include "base/log.h"
#include "base/lru.h"
#include "base/status.h"
#include "text/kv_pool.h"

#define PC_BUCKETS 4096
#define PC_ROOT 0x51ed270b7f3a6c1dull /* h_{-1}: the chain's seed */

typedef struct pc_entry {
  lru_node lru;              /* first member: the list node converts back to the entry */
  uint64_t hash, parent;
  uint64_t keys[PREFIX_BLOCK];
  int64_t next_pos;          /* position state after this block */
  void *k, *v;               /* copy mode: [n_layer][PREFIX_BLOCK][row] elements of the cache's type */
  int64_t slot;              /* shared mode: the block's slot in the pool (one reference held) */
  struct pc_entry *chain;    /* bucket list */
} pc_entry;

struct prefix_cache {
  int64_t cap, used, n_layer, row, block_bytes;
  kv_type type;      /* element type of every block (that of the sequences' caches) */
  size_t elem_bytes; /* 4 (f32) or 2 (f16) */
  kv_pool *pool;     /* shared mode (NULL: copy mode, blocks on the heap) */
  pc_entry *buckets[PC_BUCKETS];
  lru_list lru; /* head = most recent */
};

uint64_t prefix_image_key(uint64_t image_hash, int64_t row) {
  uint64_t x[2] = {image_hash, (uint64_t)row};
  return XXH3_64bits(x, sizeof x) | (1ull << 63);
}

qvl_status prefix_cache_init(int64_t cap_bytes, int64_t n_layer, int64_t row, prefix_cache **out) {
  return prefix_cache_init_type(cap_bytes, n_layer, row, KV_TYPE_F32, out);
}

qvl_status prefix_cache_init_type(int64_t cap_bytes, int64_t n_layer, int64_t row, kv_type type,
                                  prefix_cache **out) {
  return prefix_cache_init_mode(cap_bytes, n_layer, row, type, PREFIX_RESTORE_AUTO, out);
}

qvl_status prefix_cache_init_mode(int64_t cap_bytes, int64_t n_layer, int64_t row, kv_type type,
                                  prefix_restore mode, prefix_cache **out) {
  *out = NULL;
  type = kv_type_resolve(type);
  uint64_t b = kv_cache_bytes_type(n_layer, PREFIX_BLOCK, row, type);
  if (b == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "prefix cache: invalid KV shape (%lld layers, row %lld)",
                      (long long)n_layer, (long long)row);
  prefix_cache *c = calloc(1, sizeof *c);
  if (!c)
    return qvl_errorf(QVL_ERR_NOMEM, "prefix cache: out of memory");
  c->cap = cap_bytes > 0 ? cap_bytes : 0;
  c->n_layer = n_layer;
  c->row = row;
  c->type = type;
  c->elem_bytes = (size_t)kv_type_elem_bytes(type);
  c->block_bytes = (int64_t)b + (int64_t)sizeof(pc_entry);
  int64_t blocks = c->cap / c->block_bytes;
  /* Twice the budget's blocks: a block dropped while sequences still map it keeps its slot until
   * they end, and new blocks must not wait for that (the file is sparse: unused slots cost nothing). */
  /* Copy mode when this shape's blocks are not whole pages, or the system has no memory files. */
  if (mode == PREFIX_RESTORE_AUTO && blocks > 0 && kv_block_mappable(row, type) &&
      kv_pool_create(n_layer, row, type, 2 * blocks, &c->pool) != QVL_OK) {
    log_warn("prefix cache: %s; cached prefixes are copied", qvl_last_error());
    c->pool = NULL;
  }
  *out = c;
  return QVL_OK;
}

int prefix_cache_shares(const prefix_cache *c) { return c->pool != NULL; }

static void drop(prefix_cache *c, pc_entry *e) {
  pc_entry **p = &c->buckets[e->hash % PC_BUCKETS];
  while (*p != e)
    p = &(*p)->chain;
  *p = e->chain;
  lru_unlink(&c->lru, &e->lru);
  c->used -= c->block_bytes;
  if (c->pool)
    kv_pool_unref(c->pool, e->slot); /* sequences mapping it keep it until they end */
  FREE_EACH(e->k, e->v, e);
}

void prefix_cache_free(prefix_cache *c) {
  if (!c)
    return;
  while (c->lru.head)
    drop(c, (pc_entry *)c->lru.head);
  kv_pool_release(c->pool);
  free(c);
}

static pc_entry *find(prefix_cache *c, uint64_t hash, uint64_t parent, const uint64_t *keys) {
  for (pc_entry *e = c->buckets[hash % PC_BUCKETS]; e; e = e->chain)
    if (e->hash == hash && e->parent == parent && memcmp(e->keys, keys, sizeof e->keys) == 0)
      return e;
  return NULL;
}

/* Row bytes of layer view v from token t on (either element type). */
static char *view_k(const kv_view *v, int64_t t, size_t eb) {
  return v->k ? (char *)(v->k + t * v->stride) : (char *)v->kh + (size_t)(t * v->stride) * eb;
}
static char *view_v(const kv_view *v, int64_t t, size_t eb) {
  return v->v ? (char *)(v->v + t * v->stride) : (char *)v->vh + (size_t)(t * v->stride) * eb;
}

static uint64_t block_hash(const uint64_t *keys, uint64_t parent) {
  return XXH3_64bits_withSeed(keys, sizeof(uint64_t) * PREFIX_BLOCK, parent);
}

/* Copies block e into block j of kv (copy mode, or shared mode when kv cannot map). */
static void copy_in(const prefix_cache *c, const pc_entry *e, kv_cache *kv, int64_t j) {
  if (c->pool) {
    kv_pool_read(c->pool, e->slot, kv, j);
    return;
  }
  size_t rows = (size_t)PREFIX_BLOCK * (size_t)c->row * c->elem_bytes; /* bytes per layer */
  for (int64_t l = 0; l < c->n_layer; l++) {
    kv_view v = kv_cache_layer(kv, l);
    memcpy(view_k(&v, j * PREFIX_BLOCK, c->elem_bytes), (char *)e->k + (size_t)l * rows, rows);
    memcpy(view_v(&v, j * PREFIX_BLOCK, c->elem_bytes), (char *)e->v + (size_t)l * rows, rows);
  }
}

int64_t prefix_cache_restore(prefix_cache *c, const uint64_t *keys, int64_t max_blocks, kv_cache *kv,
                             int64_t *next_pos) {
  uint64_t parent = PC_ROOT;
  int64_t nb = 0;
  pc_entry *last = NULL;
  if (kv->type != c->type) /* blocks of another element type never match */
    return 0;
  if (max_blocks > kv->n_ctx / PREFIX_BLOCK)
    max_blocks = kv->n_ctx / PREFIX_BLOCK;
  if (max_blocks <= 0)
    return 0;
  kv_pool_unshare(kv, true); /* the rows are replaced: earlier shared blocks (a reused cache) go back */
  pc_entry **chain = malloc(sizeof *chain * (size_t)max_blocks);
  int64_t *slots = malloc(sizeof *slots * (size_t)max_blocks);
  if (!chain || !slots) {
    free(chain);
    free(slots);
    return 0; /* nothing restored: the request computes its prompt */
  }
  while (nb < max_blocks) {
    const uint64_t *bk = keys + nb * PREFIX_BLOCK;
    uint64_t h = block_hash(bk, parent);
    pc_entry *e = find(c, h, parent, bk);
    if (!e)
      break;
    chain[nb] = e;
    slots[nb] = e->slot;
    /* Chain order in the LRU list: block 0 at the head, later blocks right behind it, so eviction
     * takes a chain's far end first and the shared start of a conversation survives longest. */
    lru_unlink(&c->lru, &e->lru);
    lru_insert_after(&c->lru, last ? &last->lru : NULL, &e->lru);
    last = e;
    *next_pos = e->next_pos;
    parent = h;
    nb++;
  }
  /* Shared mode: the rows become views of the cached pages; otherwise (or when kv cannot map them)
   * they are copied. */
  if (nb > 0 && !(c->pool && kv_pool_map(c->pool, slots, nb, kv) == QVL_OK))
    for (int64_t j = 0; j < nb; j++)
      copy_in(c, chain[j], kv, j);
  free(chain);
  free(slots);
  return nb * PREFIX_BLOCK;
}

int64_t prefix_cache_match(prefix_cache *c, const uint64_t *keys, int64_t max_blocks) {
  uint64_t parent = PC_ROOT;
  int64_t nb = 0;
  while (nb < max_blocks) {
    const uint64_t *bk = keys + nb * PREFIX_BLOCK;
    uint64_t h = block_hash(bk, parent);
    if (!find(c, h, parent, bk))
      break;
    parent = h;
    nb++;
  }
  return nb * PREFIX_BLOCK;
}

/* Copies block j of kv into a new entry's storage: a pool slot next to the chain's previous block
 * when free (so the chain maps with few mmaps), or heap copies in copy mode. False: no room. */
static bool fill_entry(prefix_cache *c, pc_entry *e, const kv_cache *kv, int64_t j, const pc_entry *prev) {
  if (c->pool) {
    if (kv->row != c->row || kv->n_layer != c->n_layer || !kv->mapped)
      return false;
    e->slot = kv_pool_alloc(c->pool, prev ? prev->slot + 1 : -1);
    if (e->slot < 0)
      return false;
    kv_pool_write(c->pool, e->slot, kv, j);
    return true;
  }
  size_t rows = (size_t)PREFIX_BLOCK * (size_t)c->row * c->elem_bytes; /* bytes per layer */
  e->k = malloc(rows * (size_t)c->n_layer);
  e->v = malloc(rows * (size_t)c->n_layer);
  if (!e->k || !e->v) {
    free(e->k);
    free(e->v);
    return false;
  }
  for (int64_t l = 0; l < c->n_layer; l++) {
    kv_view src = kv_cache_layer((kv_cache *)kv, l);
    memcpy((char *)e->k + (size_t)l * rows, view_k(&src, j * PREFIX_BLOCK, c->elem_bytes), rows);
    memcpy((char *)e->v + (size_t)l * rows, view_v(&src, j * PREFIX_BLOCK, c->elem_bytes), rows);
  }
  return true;
}

void prefix_cache_store(prefix_cache *c, const uint64_t *keys, int64_t n_blocks, const kv_cache *kv,
                        const int64_t *block_next_pos) {
  if (c->block_bytes > c->cap || kv->type != c->type)
    return;
  uint64_t parent = PC_ROOT;
  pc_entry *last = NULL;
  for (int64_t j = 0; j < n_blocks && (j + 1) * PREFIX_BLOCK <= kv->n; j++) {
    const uint64_t *bk = keys + j * PREFIX_BLOCK;
    uint64_t h = block_hash(bk, parent);
    pc_entry *e = find(c, h, parent, bk);
    if (!e) {
      while (c->used + c->block_bytes > c->cap && c->lru.tail) {
        /* Never evict the part of this chain already placed (it sits at the head). */
        if (last && c->lru.tail == &last->lru)
          break;
        drop(c, (pc_entry *)c->lru.tail);
      }
      if (c->used + c->block_bytes > c->cap)
        break;
      e = calloc(1, sizeof *e);
      if (!e || !fill_entry(c, e, kv, j, last)) {
        free(e);
        break;
      }
      e->hash = h;
      e->parent = parent;
      memcpy(e->keys, bk, sizeof e->keys);
      e->next_pos = block_next_pos[j];
      pc_entry **b = &c->buckets[h % PC_BUCKETS];
      e->chain = *b;
      *b = e;
      c->used += c->block_bytes;
    } else {
      lru_unlink(&c->lru, &e->lru);
    }
    /* Chain order in the LRU list: block 0 at the head, later blocks right behind it. */
    lru_insert_after(&c->lru, last ? &last->lru : NULL, &e->lru);
    last = e;
    parent = h;
  }
}

int64_t prefix_cache_bytes(const prefix_cache *c) { return c->used; }
int64_t prefix_cache_block_bytes(const prefix_cache *c) { return c->block_bytes; }
