/*
 * Image-embedding cache: the vision tower's output for an image (merger rows + DeepStack rows +
 * grid), keyed by vlm_image.hash (a hash of the decoded pixels, their size and the min/max pixels
 * the request asked for), least recently used first out, bounded in bytes. A second question about
 * the same picture skips the vision tower. Each entry also remembers the keys of the last few
 * encoded files (vlm_image.bytes_key) that decoded to it, so a repeated upload of the same file is
 * recognised before it is decoded (image_cache_find_encoded).
 *
 * Thread safety: every function may be called from any thread (one mutex); get / put / note run
 * on the engine thread, find_encoded on the request threads while they build prompts.
 */
#ifndef QVL_ENGINE_IMAGE_CACHE_H
#define QVL_ENGINE_IMAGE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl.h"

typedef struct image_cache image_cache;

/* cap_bytes <= 0 gives a cache that stores nothing (every lookup misses). */
qvl_status image_cache_init(int64_t cap_bytes, image_cache **out);
void image_cache_free(image_cache *c);

/*
 * On a hit copies the image's nt rows of d floats into embd[nt][d] and, for each DeepStack level
 * l < n_deepstack, into deepstack + l * ds_level_stride (nt rows), marks the entry most recently
 * used and returns true. The grid must match too (a different grid cannot be the same image).
 */
bool image_cache_get(image_cache *c, uint64_t hash, int grid_t, int grid_h, int grid_w, int64_t nt, int64_t d,
                     int64_t n_deepstack, float *embd, float *deepstack, int64_t ds_level_stride);

/* Stores a copy (same layout as get), evicting least recently used entries to stay within the cap.
 * An entry larger than the whole cache is not stored. Out of memory only skips the store. */
void image_cache_put(image_cache *c, uint64_t hash, int grid_t, int grid_h, int grid_w, int64_t nt, int64_t d,
                     int64_t n_deepstack, const float *embd, const float *deepstack, int64_t ds_level_stride);

/* Records that encoded bytes with key bytes_key decode to the cached image hash (no-op when that
 * image is not cached). */
void image_cache_note_encoded(image_cache *c, uint64_t hash, uint64_t bytes_key);

/* The cached image whose encoded bytes had key bytes_key: true with its pixel hash, grid and token
 * count. Advisory: the entry may be evicted before it is read, so a caller that skips the decode
 * must keep the bytes to decode them after all. */
bool image_cache_find_encoded(image_cache *c, uint64_t bytes_key, uint64_t *hash, int *grid_t, int *grid_h,
                              int *grid_w, int64_t *nt);

int64_t image_cache_bytes(const image_cache *c);

#endif
