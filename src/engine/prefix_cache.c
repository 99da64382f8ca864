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
  int rows;                  /* PREFIX_BLOCK, or 1 .. PREFIX_BLOCK-1 for a sequence's last rows (a tail) */
  uint64_t keys[PREFIX_BLOCK]; /* (a tail's past `rows`: zero) */
  int64_t next_pos[PREFIX_BLOCK]; /* position state after each row */
  void *k, *v;               /* heap rows (copy mode, and every tail): [n_layer][PREFIX_BLOCK][row] */
  int64_t slot;              /* shared mode, whole blocks: the block's slot in the pool (one reference held) */
  struct pc_entry *chain;    /* bucket list by hash */
  struct pc_entry *sibling;  /* bucket list by parent: the entries that can follow a chain */
} pc_entry;

struct prefix_cache {
  int64_t cap, used, n_layer, row, block_bytes;
  kv_type type;      /* element type of every block (that of the sequences' caches) */
  size_t elem_bytes; /* 4 (f32) or 2 (f16) */
  kv_pool *pool;     /* shared mode (NULL: copy mode, blocks on the heap) */
  pc_entry *buckets[PC_BUCKETS];
  pc_entry *children[PC_BUCKETS]; /* the same entries by parent hash */
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
  p = &c->children[e->parent % PC_BUCKETS];
  while (*p != e)
    p = &(*p)->sibling;
  *p = e->sibling;
  lru_unlink(&c->lru, &e->lru);
  c->used -= c->block_bytes;
  if (!e->k)
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

static pc_entry *find(prefix_cache *c, uint64_t hash, uint64_t parent, const uint64_t *keys, int rows) {
  for (pc_entry *e = c->buckets[hash % PC_BUCKETS]; e; e = e->chain)
    if (e->hash == hash && e->parent == parent && e->rows == rows &&
        memcmp(e->keys, keys, sizeof(uint64_t) * (size_t)rows) == 0)
      return e;
  return NULL;
}

/* The entry after chain hash `parent` (a whole block or a tail) that shares the most leading keys
 * with keys[0 .. max), and that count (0: none). */
static pc_entry *best_child(prefix_cache *c, uint64_t parent, const uint64_t *keys, int64_t max, int *shared) {
  pc_entry *best = NULL;
  *shared = 0;
  for (pc_entry *e = c->children[parent % PC_BUCKETS]; e; e = e->sibling) {
    if (e->parent != parent)
      continue;
    int m = 0;
    while (m < e->rows && m < max && e->keys[m] == keys[m])
      m++;
    if (m > *shared)
      best = e, *shared = m;
  }
  return best;
}

/* Row bytes of layer view v from token t on (either element type). */
static char *view_k(const kv_view *v, int64_t t, size_t eb) {
  return v->k ? (char *)(v->k + t * v->stride) : (char *)v->kh + (size_t)(t * v->stride) * eb;
}
static char *view_v(const kv_view *v, int64_t t, size_t eb) {
  return v->v ? (char *)(v->v + t * v->stride) : (char *)v->vh + (size_t)(t * v->stride) * eb;
}

/* A tail hashes its own row count in, so it never collides with the whole block it starts. */
static uint64_t block_hash(const uint64_t *keys, int rows, uint64_t parent) {
  uint64_t h = XXH3_64bits_withSeed(keys, sizeof(uint64_t) * (size_t)rows, parent);
  return rows == PREFIX_BLOCK ? h : h ^ (0x9E3779B97F4A7C15ull * (uint64_t)rows);
}

/* Copies the first n rows of entry e into rows j*PREFIX_BLOCK.. of kv (copy mode, a tail, a
 * block's leading rows, or shared mode when kv cannot map). */
static void copy_in(const prefix_cache *c, const pc_entry *e, kv_cache *kv, int64_t j, int n) {
  if (!e->k) {
    kv_pool_read_rows(c->pool, e->slot, kv, j, n);
    return;
  }
  size_t rows = (size_t)PREFIX_BLOCK * (size_t)c->row * c->elem_bytes; /* bytes per layer */
  size_t part = (size_t)n * (size_t)c->row * c->elem_bytes;
  for (int64_t l = 0; l < c->n_layer; l++) {
    kv_view v = kv_cache_layer(kv, l);
    memcpy(view_k(&v, j * PREFIX_BLOCK, c->elem_bytes), (char *)e->k + (size_t)l * rows, part);
    memcpy(view_v(&v, j * PREFIX_BLOCK, c->elem_bytes), (char *)e->v + (size_t)l * rows, part);
  }
}

/* The longest cached prefix of keys[0 .. max_rows): the chain of whole blocks (into chain[], which
 * has room for max_rows / PREFIX_BLOCK), then the entry that follows it with the most matching
 * leading rows (*part, *part_rows: a tail, or the leading rows of the block where the chain
 * diverges or stops). Returns the whole blocks matched. */
static int64_t walk(prefix_cache *c, const uint64_t *keys, int64_t max_rows, pc_entry **chain, pc_entry **part,
                    int *part_rows) {
  uint64_t parent = PC_ROOT;
  int64_t nb = 0;
  while ((nb + 1) * PREFIX_BLOCK <= max_rows) {
    const uint64_t *bk = keys + nb * PREFIX_BLOCK;
    uint64_t h = block_hash(bk, PREFIX_BLOCK, parent);
    pc_entry *e = find(c, h, parent, bk, PREFIX_BLOCK);
    if (!e)
      break;
    if (chain)
      chain[nb] = e;
    parent = h;
    nb++;
  }
  *part = best_child(c, parent, keys + nb * PREFIX_BLOCK, max_rows - nb * PREFIX_BLOCK, part_rows);
  return nb;
}

int64_t prefix_cache_restore(prefix_cache *c, const uint64_t *keys, int64_t max_rows, kv_cache *kv,
                             int64_t *next_pos) {
  if (kv->type != c->type) /* blocks of another element type never match */
    return 0;
  if (max_rows > kv->n_ctx)
    max_rows = kv->n_ctx;
  if (max_rows <= 0)
    return 0;
  kv_pool_unshare(kv, true); /* the rows are replaced: earlier shared blocks (a reused cache) go back */
  int64_t max_blocks = max_rows / PREFIX_BLOCK;
  pc_entry **chain = malloc(sizeof *chain * (size_t)(max_blocks + 1));
  int64_t *slots = malloc(sizeof *slots * (size_t)(max_blocks + 1));
  if (!chain || !slots) {
    free(chain);
    free(slots);
    return 0; /* nothing restored: the request computes its prompt */
  }
  pc_entry *part;
  int part_rows;
  int64_t nb = walk(c, keys, max_rows, chain, &part, &part_rows);
  /* Chain order in the LRU list: block 0 at the head, later blocks right behind it, so eviction
   * takes a chain's far end first and the shared start of a conversation survives longest. */
  pc_entry *last = NULL;
  for (int64_t j = 0; j <= nb; j++) {
    pc_entry *e = j < nb ? chain[j] : part;
    if (!e)
      break;
    lru_unlink(&c->lru, &e->lru);
    lru_insert_after(&c->lru, last ? &last->lru : NULL, &e->lru);
    last = e;
    if (j < nb)
      slots[j] = e->slot, *next_pos = e->next_pos[PREFIX_BLOCK - 1];
  }
  /* Shared mode: the whole blocks become views of the cached pages; otherwise (or when kv cannot
   * map them) they are copied. The rows after them are copied: the sequence writes on from there. */
  bool mapped = nb > 0 && c->pool && !chain[0]->k && kv_pool_map(c->pool, slots, nb, kv) == QVL_OK;
  for (int64_t j = 0; j < nb && !mapped; j++)
    copy_in(c, chain[j], kv, j, PREFIX_BLOCK);
  if (part) {
    copy_in(c, part, kv, nb, part_rows);
    *next_pos = part->next_pos[part_rows - 1];
  }
  free(chain);
  free(slots);
  return nb * PREFIX_BLOCK + part_rows;
}

int64_t prefix_cache_match(prefix_cache *c, const uint64_t *keys, int64_t max_rows) {
  pc_entry *part;
  int part_rows;
  return walk(c, keys, max_rows, NULL, &part, &part_rows) * PREFIX_BLOCK + part_rows;
}

/* Copies rows j*PREFIX_BLOCK .. + e->rows of kv into a new entry's storage: a whole block into a
 * pool slot next to the chain's previous block when free (so the chain maps with few mmaps), else
 * (copy mode, a tail) onto the heap. False: no room. */
static bool fill_entry(prefix_cache *c, pc_entry *e, const kv_cache *kv, int64_t j, const pc_entry *prev) {
  if (c->pool && e->rows == PREFIX_BLOCK) {
    if (kv->row != c->row || kv->n_layer != c->n_layer || !kv->mapped)
      return false;
    e->slot = kv_pool_alloc(c->pool, prev && !prev->k ? prev->slot + 1 : -1);
    if (e->slot < 0)
      return false;
    kv_pool_write(c->pool, e->slot, kv, j);
    return true;
  }
  size_t rows = (size_t)PREFIX_BLOCK * (size_t)c->row * c->elem_bytes; /* bytes per layer */
  size_t part = (size_t)e->rows * (size_t)c->row * c->elem_bytes;
  e->k = calloc(rows, (size_t)c->n_layer);
  e->v = calloc(rows, (size_t)c->n_layer);
  if (!e->k || !e->v) {
    free(e->k);
    free(e->v);
    e->k = e->v = NULL;
    return false;
  }
  for (int64_t l = 0; l < c->n_layer; l++) {
    kv_view src = kv_cache_layer((kv_cache *)kv, l);
    memcpy((char *)e->k + (size_t)l * rows, view_k(&src, j * PREFIX_BLOCK, c->elem_bytes), part);
    memcpy((char *)e->v + (size_t)l * rows, view_v(&src, j * PREFIX_BLOCK, c->elem_bytes), part);
  }
  return true;
}

void prefix_cache_store(prefix_cache *c, const uint64_t *keys, int64_t n_rows, const kv_cache *kv,
                        const int64_t *row_next_pos) {
  if (c->block_bytes > c->cap || kv->type != c->type)
    return;
  if (n_rows > kv->n)
    n_rows = kv->n;
  uint64_t parent = PC_ROOT;
  pc_entry *last = NULL;
  for (int64_t j = 0; j * PREFIX_BLOCK < n_rows; j++) {
    const uint64_t *bk = keys + j * PREFIX_BLOCK;
    int rows = n_rows - j * PREFIX_BLOCK < PREFIX_BLOCK ? (int)(n_rows - j * PREFIX_BLOCK) : PREFIX_BLOCK;
    uint64_t h = block_hash(bk, rows, parent);
    pc_entry *e = find(c, h, parent, bk, rows);
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
      if (e)
        e->rows = rows;
      if (!e || !fill_entry(c, e, kv, j, last)) {
        free(e);
        break;
      }
      e->hash = h;
      e->parent = parent;
      memcpy(e->keys, bk, sizeof(uint64_t) * (size_t)rows);
      memcpy(e->next_pos, row_next_pos + j * PREFIX_BLOCK, sizeof(int64_t) * (size_t)rows);
      pc_entry **b = &c->buckets[h % PC_BUCKETS];
      e->chain = *b;
      *b = e;
      b = &c->children[parent % PC_BUCKETS];
      e->sibling = *b;
      *b = e;
      c->used += c->block_bytes; /* a tail is charged a whole block: simple, and an upper bound */
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
