/*
 * Prefix KV cache: KV rows of finished requests, kept in blocks of PREFIX_BLOCK tokens so that a
 * later request whose prompt starts with the same tokens (a follow-up turn of a conversation, or
 * another question with the same system prompt and image) copies them instead of recomputing.
 *
 * A block is keyed by a hash chain: h_j = XXH3(keys of block j, seed h_{j-1}), where a token's key
 * is its id, or for an <|image_pad|> token the content hash of its image and its row in it (so the
 * same text with a different picture never matches). A block matches only when its whole chain
 * matches, i.e. the entire prefix up to it is equal; entries also keep their keys and parent hash
 * and are compared in full, so a hash collision cannot return wrong KV. Positions (M-RoPE) and
 * DeepStack inputs are functions of that prefix, so equal prefixes have bit-identical KV.
 *
 * Reuse is the whole common prefix: the chain of whole blocks, then the leading rows of the entry
 * that follows the chain with the most matching keys, which is either a whole block (where the
 * prompt diverges or the restore must stop) or a tail: a sequence's last rows after its last whole
 * block, kept as an entry of 1-15 rows. So asking the same question again restores all but the
 * last prompt token (whose logits must be computed), not the prompt rounded down to 16. Entries are
 * evicted least recently used first; when a chain is used its blocks are touched from last to
 * first, so the older end of a conversation (the start that every later turn shares) is the last
 * to go.
 *
 * Memory: every block owns copies of its rows in the KV caches' element type (2 * n_layer *
 * PREFIX_BLOCK * row elements: 4 bytes each for f32, 2 for f16). Where a block's rows of one layer
 * are whole pages (kv_block_mappable: the real models), the blocks live in a kv_pool and a restore
 * maps them into the sequence's cache read-only, shared, with a reference per block: no copy (for
 * a 2B model's 784-token image prompt that is 88 MiB not copied, and not page-faulted in). A block
 * evicted while sequences map it keeps its pages until they end. Other shapes (tiny test models)
 * copy rows in and out (memcpy), as do tails and the rows after the whole blocks (the sequence
 * writes on from there). Storing always copies the finished sequence's new blocks once; a tail is
 * charged a whole block's bytes.
 * The element type is fixed per prefix cache (the
 * engine's, from the process-wide KV type), so keys need not carry it: a sequence whose cache has
 * another type is never restored into nor stored from (checked, not assumed).
 *
 * Thread safety: none; the engine thread owns it.
 */
#ifndef QVL_ENGINE_PREFIX_CACHE_H
#define QVL_ENGINE_PREFIX_CACHE_H

#include <stdint.h>

#include "qvl.h"
#include "text/kv_cache.h"

#define PREFIX_BLOCK KV_BLOCK

/* How a restore hands rows over: AUTO maps shared blocks where the shape allows, COPY always
 * copies (the behaviour before shared blocks; for comparisons and tests). */
typedef enum prefix_restore { PREFIX_RESTORE_AUTO = 0, PREFIX_RESTORE_COPY = 1 } prefix_restore;

typedef struct prefix_cache prefix_cache;

/* The key of an image token: image content hash + row, disjoint from token ids (< 2^32). */
uint64_t prefix_image_key(uint64_t image_hash, int64_t row);

/* cap_bytes <= 0: stores nothing. n_layer and row (elements per token and layer) fix the block size. */
qvl_status prefix_cache_init(int64_t cap_bytes, int64_t n_layer, int64_t row, prefix_cache **out);
/* The same for blocks of a KV element type (prefix_cache_init: KV_TYPE_F32; DEFAULT: the process
 * default). */
qvl_status prefix_cache_init_type(int64_t cap_bytes, int64_t n_layer, int64_t row, kv_type type,
                                  prefix_cache **out);
qvl_status prefix_cache_init_mode(int64_t cap_bytes, int64_t n_layer, int64_t row, kv_type type,
                                  prefix_restore mode, prefix_cache **out);
void prefix_cache_free(prefix_cache *c);
/* 1 when restores map shared blocks instead of copying. */
int prefix_cache_shares(const prefix_cache *c);

/*
 * Puts the KV rows of the longest cached prefix of keys[0 .. max_rows) into kv (rows 0..; kv must
 * have room and no rows yet), whole blocks shared or copied and the rows after them copied (see
 * above), and returns the number of tokens restored (possibly 0); *next_pos receives the position
 * state after them.
 */
int64_t prefix_cache_restore(prefix_cache *c, const uint64_t *keys, int64_t max_rows, kv_cache *kv,
                             int64_t *next_pos);

/* The tokens prefix_cache_restore would restore now (no copy, no LRU change): what a request
 * about to be admitted will not compute, so the image rows it needs are known before it starts. */
int64_t prefix_cache_match(prefix_cache *c, const uint64_t *keys, int64_t max_rows);

/* Stores rows 0 .. n_rows-1 of a sequence (at most kv->n): its whole blocks, and the rows after the
 * last of them as a tail; row_next_pos[i] is the position state after row i. Entries already
 * present are only touched. */
void prefix_cache_store(prefix_cache *c, const uint64_t *keys, int64_t n_rows, const kv_cache *kv,
                        const int64_t *row_next_pos);

int64_t prefix_cache_bytes(const prefix_cache *c);
/* What one cached block costs (its K and V rows in the cache's type + bookkeeping): the unit the
 * budget is charged in. */
int64_t prefix_cache_block_bytes(const prefix_cache *c);

#endif
