/*
 * Shared KV blocks (text/kv_pool.h) and the prefix cache's no-copy restore on a page-sized shape
 * (3 layers, rows of 128 f16: 16 rows are one 4 KiB page, as the real models' are whole pages):
 *  - a restore maps the cached blocks (a reference per block, no copy) and reads exactly the rows a
 *    copying restore gives, bit for bit, and the rows that were stored;
 *  - several sequences share one prefix: each holds its references, rows each appends after it stay
 *    its own, and threads reading the shared rows while appending see the same values;
 *  - evicting blocks while sequences map them is safe: their rows stay intact, their slots are not
 *    reused until the last sequence lets go, the pool outlives the prefix cache while mapped;
 *  - clearing a cache gives its rows back as private zeros; shapes that are not whole pages copy.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/prefix_cache.h"
#include "text/kv_cache.h"
#include "text/kv_pool.h"
#include "test.h"

#define NL 3
#define ROW 128
#define CTX (6 * PREFIX_BLOCK)

/* Fills every layer's keys and values of kv's first n rows with values of seed. */
static void fill(kv_cache *kv, int64_t n, unsigned seed) {
  for (int64_t l = 0; l < NL; l++) {
    kv_view v = kv_cache_layer(kv, l);
    for (int64_t i = 0; i < n * ROW; i++) {
      v.kh[i] = (uint16_t)(seed * 2654435761u + (unsigned)(l * 977 + i * 31));
      v.vh[i] = (uint16_t)(seed * 40503u + (unsigned)(l * 131 + i * 7));
    }
  }
  kv->n = n;
}

/* Whether rows [0, n) of a and b are equal in every layer. */
static bool same_rows(kv_cache *a, kv_cache *b, int64_t n) {
  for (int64_t l = 0; l < NL; l++) {
    kv_view x = kv_cache_layer(a, l), y = kv_cache_layer(b, l);
    if (memcmp(x.kh, y.kh, (size_t)(n * ROW) * 2) || memcmp(x.vh, y.vh, (size_t)(n * ROW) * 2))
      return false;
  }
  return true;
}

static void keys_of(uint64_t *keys, uint64_t base) {
  for (int i = 0; i < CTX; i++)
    keys[i] = base + (uint64_t)i;
}

static int64_t next_pos[CTX]; /* the position state after each row: i + 1 (text) */

static void test_shared_restore(void) {
  CHECK(kv_block_mappable(ROW, KV_TYPE_F16), "16 rows of 128 f16 are whole pages");
  CHECK(!kv_block_mappable(3, KV_TYPE_F16), "16 rows of 3 f16 are not");
  kv_cache src, shared, copied;
  CHECK(kv_cache_init_type(&src, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK && src.mapped, "source cache");
  fill(&src, 4 * PREFIX_BLOCK + 5, 1);
  uint64_t keys[CTX];
  keys_of(keys, 0);
  prefix_cache *pc, *pcc;
  CHECK(prefix_cache_init_type(64 << 20, NL, ROW, KV_TYPE_F16, &pc) == QVL_OK && prefix_cache_shares(pc),
        "a page-sized shape shares blocks");
  CHECK(prefix_cache_init_mode(64 << 20, NL, ROW, KV_TYPE_F16, PREFIX_RESTORE_COPY, &pcc) == QVL_OK &&
            !prefix_cache_shares(pcc),
        "copy mode copies");
  /* 4 whole blocks and a tail of 5 rows. */
  prefix_cache_store(pc, keys, 4 * PREFIX_BLOCK + 5, &src, next_pos);
  prefix_cache_store(pcc, keys, 4 * PREFIX_BLOCK + 5, &src, next_pos);
  CHECK(kv_cache_init_type(&shared, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  CHECK(kv_cache_init_type(&copied, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  int64_t np = -1, np2 = -1;
  int64_t got = prefix_cache_restore(pc, keys, 5 * PREFIX_BLOCK, &shared, &np);
  int64_t got2 = prefix_cache_restore(pcc, keys, 5 * PREFIX_BLOCK, &copied, &np2);
  CHECK(got == 4 * PREFIX_BLOCK + 5 && got2 == got && np == got && np2 == got,
        "restored %lld / %lld tokens (the tail copied after the blocks), next %lld", (long long)got, (long long)got2,
        (long long)np);
  CHECK(shared.n_shared == 4 && shared.pool && copied.n_shared == 0, "shared: %lld blocks mapped, copied: %lld",
        (long long)shared.n_shared, (long long)copied.n_shared);
  CHECK(same_rows(&shared, &src, got) && same_rows(&copied, &src, got), "restored rows equal the stored ones");
  CHECK(same_rows(&shared, &copied, got), "shared and copied restores are bit-identical");
  for (int64_t j = 0; j < shared.n_shared; j++)
    CHECK(kv_pool_refs(shared.pool, shared.slots[j]) == 2, "block %lld: the entry's and the sequence's reference",
          (long long)j);
  CHECK(shared.slots[1] == shared.slots[0] + 1 && shared.slots[3] == shared.slots[0] + 3,
        "a chain is stored in consecutive slots (few mmaps)");
  /* Restoring again into the same cache replaces its shared blocks (references do not pile up). */
  got = prefix_cache_restore(pc, keys, 2 * PREFIX_BLOCK, &shared, &np);
  CHECK(got == 2 * PREFIX_BLOCK && shared.n_shared == 2 && kv_pool_refs(shared.pool, shared.slots[0]) == 2,
        "a second restore into the same cache: %lld blocks, refs %d", (long long)shared.n_shared,
        kv_pool_refs(shared.pool, shared.slots[0]));
  kv_pool *pool = shared.pool;
  int64_t s0 = shared.slots[0];
  kv_cache_clear(&shared);
  CHECK(shared.n == 0 && shared.n_shared == 0 && kv_pool_refs(pool, s0) == 1, "clear drops the references");
  kv_view v = kv_cache_layer(&shared, 0);
  bool zero = true;
  for (int64_t i = 0; i < 2 * PREFIX_BLOCK * ROW; i++)
    zero = zero && v.kh[i] == 0 && v.vh[i] == 0;
  v.kh[0] = 1; /* writable again (a read-only shared page would fault here) */
  CHECK(zero && v.kh[0] == 1, "cleared rows are private zeros");
  prefix_cache_free(pcc);
  prefix_cache_free(pc);
  kv_cache_free(&src);
  kv_cache_free(&shared);
  kv_cache_free(&copied);
}

typedef struct reader {
  kv_cache *kv, *ref;
  int64_t prefix, extra;
  int tag; /* makes each sequence's own rows differ */
  bool ok;
} reader;

/* A sequence that reads its shared prefix while appending rows of its own after it. */
static void *reader_main(void *arg) {
  reader *r = arg;
  r->ok = true;
  float row[ROW];
  for (int round = 0; round < 200 && r->ok; round++) {
    for (int64_t l = 0; l < NL; l++) {
      kv_view v = kv_cache_layer(r->kv, l);
      v.n_past = r->prefix + round % r->extra;
      for (int i = 0; i < ROW; i++)
        row[i] = (float)(round + i) + 0.5f * (float)r->tag;
      kv_view_store(&v, 0, row, ROW, 1);
      kv_view_store(&v, 1, row, ROW, 1);
    }
    r->ok = same_rows(r->kv, r->ref, r->prefix);
  }
  return NULL;
}

static void test_concurrent_and_eviction(void) {
  kv_cache src, other, a, b;
  CHECK(kv_cache_init_type(&src, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  CHECK(kv_cache_init_type(&other, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  CHECK(kv_cache_init_type(&a, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  CHECK(kv_cache_init_type(&b, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  fill(&src, 3 * PREFIX_BLOCK, 7);
  fill(&other, 3 * PREFIX_BLOCK, 8);
  uint64_t keys[CTX], keys2[CTX];
  keys_of(keys, 0);
  keys_of(keys2, 1000);
  prefix_cache *pc;
  /* Room for exactly 3 blocks. */
  prefix_cache *probe;
  CHECK(prefix_cache_init_type(1, NL, ROW, KV_TYPE_F16, &probe) == QVL_OK, "probe");
  int64_t bb = prefix_cache_block_bytes(probe);
  prefix_cache_free(probe);
  CHECK(prefix_cache_init_type(3 * bb, NL, ROW, KV_TYPE_F16, &pc) == QVL_OK && prefix_cache_shares(pc), "3 blocks");
  prefix_cache_store(pc, keys, 3 * PREFIX_BLOCK, &src, next_pos);
  int64_t np;
  CHECK(prefix_cache_restore(pc, keys, 3 * PREFIX_BLOCK, &a, &np) == 3 * PREFIX_BLOCK,
        "sequence a restores the prefix");
  CHECK(prefix_cache_restore(pc, keys, 3 * PREFIX_BLOCK, &b, &np) == 3 * PREFIX_BLOCK,
        "sequence b restores the same prefix");
  kv_pool *pool = a.pool;
  CHECK(pool && b.pool == pool && a.slots[0] == b.slots[0] && kv_pool_refs(pool, a.slots[0]) == 3,
        "both sequences share the blocks (refs %d)", pool ? kv_pool_refs(pool, a.slots[0]) : -1);
  reader ra = {&a, &src, 3 * PREFIX_BLOCK, 2 * PREFIX_BLOCK, 1, false};
  reader rb = {&b, &src, 3 * PREFIX_BLOCK, 2 * PREFIX_BLOCK, 2, false};
  pthread_t ta, tb;
  int ca = pthread_create(&ta, NULL, reader_main, &ra), cb = pthread_create(&tb, NULL, reader_main, &rb);
  CHECK(ca == 0 && cb == 0, "threads");
  if (ca == 0)
    pthread_join(ta, NULL);
  if (cb == 0)
    pthread_join(tb, NULL);
  CHECK(ra.ok && rb.ok, "concurrent sequences read the shared prefix intact while appending");
  kv_view va = kv_cache_layer(&a, 0), vb = kv_cache_layer(&b, 0);
  CHECK(memcmp(va.kh + 3 * PREFIX_BLOCK * ROW, vb.kh + 3 * PREFIX_BLOCK * ROW, ROW * 2) != 0,
        "rows appended after the prefix are each sequence's own");
  /* Another conversation fills the cache: the first chain is evicted while a and b still map it. */
  int64_t held[3] = {a.slots[0], a.slots[1], a.slots[2]};
  prefix_cache_store(pc, keys2, 3 * PREFIX_BLOCK, &other, next_pos);
  CHECK(prefix_cache_match(pc, keys, 3 * PREFIX_BLOCK) == 0 &&
            prefix_cache_match(pc, keys2, 3 * PREFIX_BLOCK) == 3 * PREFIX_BLOCK,
        "the old chain was evicted for the new one");
  bool distinct = true;
  kv_cache c;
  CHECK(kv_cache_init_type(&c, NL, CTX, ROW, KV_TYPE_F16) == QVL_OK, "cache");
  CHECK(prefix_cache_restore(pc, keys2, 3 * PREFIX_BLOCK, &c, &np) == 3 * PREFIX_BLOCK &&
            same_rows(&c, &other, 3 * PREFIX_BLOCK),
        "the new chain restores its own rows");
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < 3; k++)
      distinct = distinct && c.slots[j] != held[k];
  CHECK(distinct, "slots still mapped by sequences are not reused");
  for (int k = 0; k < 3; k++)
    CHECK(kv_pool_refs(pool, held[k]) == 2, "evicted block %d: held by the two sequences only", k);
  CHECK(same_rows(&a, &src, 3 * PREFIX_BLOCK) && same_rows(&b, &src, 3 * PREFIX_BLOCK),
        "evicted while shared: the sequences' rows are intact");
  kv_cache_free(&a);
  CHECK(kv_pool_refs(pool, held[0]) == 1, "freeing a sequence drops its references");
  /* The prefix cache goes first: the pool stays alive for b, which still reads its rows. */
  kv_cache_free(&c);
  prefix_cache_free(pc);
  CHECK(same_rows(&b, &src, 3 * PREFIX_BLOCK), "the pool outlives the prefix cache while a sequence maps it");
  kv_cache_free(&b); /* the last reference: the pool goes (ASan/valgrind see a leak otherwise) */
  kv_cache_free(&src);
  kv_cache_free(&other);
}

static void test_pool_contract(void) {
  kv_pool *p = NULL;
  CHECK(kv_pool_create(NL, 3, KV_TYPE_F16, 4, &p) == QVL_ERR_UNSUPPORTED && !p, "rows that are not pages: refused");
  CHECK(kv_pool_create(NL, ROW, KV_TYPE_F16, 0, &p) == QVL_ERR_INVALID_ARG, "zero slots: refused");
  CHECK(kv_pool_create(NL, ROW, KV_TYPE_F16, 2, &p) == QVL_OK && kv_pool_slots(p) == 2, "two slots");
  int64_t s0 = kv_pool_alloc(p, 1), s1 = kv_pool_alloc(p, 1);
  CHECK(s0 == 1 && s1 == 0 && kv_pool_alloc(p, -1) == -1, "preferred slot, then the free one, then none");
  kv_pool_unref(p, s0);
  CHECK(kv_pool_refs(p, s0) == 0 && kv_pool_alloc(p, -1) == s0, "a released slot is reused");
  kv_cache heap;
  CHECK(kv_cache_init_type(&heap, NL, CTX, 3, KV_TYPE_F16) == QVL_OK && !heap.mapped, "a heap cache");
  int64_t slots[1] = {s1};
  CHECK(kv_pool_map(p, slots, 1, &heap) == QVL_ERR_UNSUPPORTED && heap.n_shared == 0, "a heap cache cannot map");
  kv_cache_free(&heap);
  kv_pool_release(p);
}

int main(void) {
  for (int i = 0; i < CTX; i++)
    next_pos[i] = i + 1;
  test_shared_restore();
  test_concurrent_and_eviction();
  test_pool_contract();
  return TEST_SUMMARY("test_kv_pool");
}
