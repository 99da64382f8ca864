/*
 * A pool of shareable KV blocks: KV_BLOCK rows of every layer's keys and values per slot, kept in
 * one memory file (memfd) so that a slot's pages can be mapped into any number of sequences'
 * caches (kv_cache.h) instead of being copied there. The prefix cache keeps its blocks here: a
 * cached prompt prefix is restored by mapping it (page-table work only, no bytes move).
 *
 * Layout: [layer][K|V][slot][KV_BLOCK][row], so one layer's rows of consecutive slots are
 * consecutive in the file: a chain stored in consecutive slots maps with one mmap per layer half.
 * The file is sparse: a slot costs memory once written, and its pages are given back when its last
 * reference goes.
 *
 * References: the creator holds the pool. kv_pool_alloc hands out a free slot with one reference
 * (its owner's: a prefix-cache entry); each cache that maps the slot holds one more, dropped when
 * the cache is cleared or freed. A slot is reused only when no reference is left, so dropping an
 * entry while sequences still read its rows is safe. The pool lives until its creator released it
 * and no cache maps any of its slots.
 *
 * Thread safety: references are atomic. Allocation, writes and maps are for one thread at a time
 * (the engine thread); a cache may be freed on any thread.
 */
#ifndef QVL_TEXT_KV_POOL_H
#define QVL_TEXT_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl.h"
#include "text/kv_cache.h"

typedef struct kv_pool kv_pool;

/* n_slots >= 1. QVL_ERR_UNSUPPORTED when KV_BLOCK rows do not fill whole pages
 * (kv_block_mappable) or the system cannot make a memory file: callers copy rows then. */
qvl_status kv_pool_create(int64_t n_layer, int64_t row, kv_type type, int64_t n_slots, kv_pool **out);
/* Drops the creator's reference (NULL: no-op). Slots still mapped keep the memory until unmapped. */
void kv_pool_release(kv_pool *p);

/* A free slot with one reference, `prefer` if it is free (for consecutive chains), -1 if none. */
int64_t kv_pool_alloc(kv_pool *p, int64_t prefer);
void kv_pool_unref(kv_pool *p, int64_t slot);
/* References held on a slot (0: free). */
int kv_pool_refs(const kv_pool *p, int64_t slot);
int64_t kv_pool_slots(const kv_pool *p);

/* Copies rows block*KV_BLOCK .. +KV_BLOCK of every layer of kv into slot (kv: same shape and type). */
void kv_pool_write(kv_pool *p, int64_t slot, const kv_cache *kv, int64_t block);
/* Copies slot into rows block*KV_BLOCK.. of kv: the fallback when mapping is not possible. */
void kv_pool_read(const kv_pool *p, int64_t slot, kv_cache *kv, int64_t block);
/* The same for the slot's first `rows` rows only (a cached block's leading rows after a prefix). */
void kv_pool_read_rows(const kv_pool *p, int64_t slot, kv_cache *kv, int64_t block, int rows);

/*
 * Makes blocks 0 .. n_blocks-1 of kv (a cache of the pool's shape with no shared blocks yet, room for
 * the rows) read-only views of slots[0 .. n_blocks), taking a reference on each. Nothing is copied.
 * QVL_ERR_UNSUPPORTED when kv cannot take shared blocks (another shape or type, heap storage,
 * blocks already shared), QVL_ERR_IO when the system refuses a mapping; kv is unchanged then.
 */
qvl_status kv_pool_map(kv_pool *p, const int64_t *slots, int64_t n_blocks, kv_cache *kv);

/* Drops kv's references to its shared blocks; keep_rows: the storage stays in use and those rows
 * become private zero pages again (kv_cache_clear), else it is about to be unmapped (kv_cache_free). */
void kv_pool_unshare(kv_cache *kv, bool keep_rows);

#endif
