/*
 * The server-wide budget for decoding images: a pool of pixels (decoded images in memory at once,
 * at IMAGE_BUDGET_BYTES_PER_PIXEL each) and a number of decode slots (decodes running at once).
 * A request reserves the pixels its images declare in their headers before any of them is decoded,
 * and takes a slot around each decode, so however many requests arrive, image memory stays under
 * the pool and image CPU under the slots. Waits poll a stop check (client gone, deadline, drain).
 *
 *     image_budget *b;  image_budget_new(pool_pixels, slots, &b);
 *     image_budget_reserve(b, px, stop, user);   // waits; ERR_TOO_LARGE if px > the whole pool
 *     image_budget_slot_take(b, stop, user); ... decode ... image_budget_slot_give(b);
 *     image_budget_release(b, px);
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef QVL_IMAGE_BUDGET_H
#define QVL_IMAGE_BUDGET_H

#include <stdint.h>

#include "base/stop.h"
#include "qvl.h"

/* What one decoded pixel costs at the peak of decoding: 3 bytes of RGB plus the decoder's rows (4 to
 * 7 bytes measured for 8- and 16-bit grey/RGB/RGBA PNGs, docs/RELIABILITY.md), rounded up. A resized
 * pixel costs ~30 bytes while it is made (float planes + pixel_values), i.e. this many source pixels.
 * A request reserves source_pixels + IMAGE_BUDGET_RESIZE_FACTOR * resized_pixels. */
#define IMAGE_BUDGET_BYTES_PER_PIXEL 12
#define IMAGE_BUDGET_RESIZE_FACTOR 3

typedef struct image_budget image_budget;

typedef struct image_budget_stats {
  int64_t pool_pixels, reserved_pixels, peak_pixels;
  int slots, slots_busy, waiting;
  uint64_t refused; /* reservations that could never fit */
} image_budget_stats;

/* pool_pixels >= 1, slots >= 1. */
qvl_status image_budget_new(int64_t pool_pixels, int slots, image_budget **out);
void image_budget_free(image_budget *b);

/* Reserves px pixels, waiting while others hold the pool. ERR_TOO_LARGE at once when px exceeds the
 * whole pool; otherwise the stop check's status if it says stop while waiting. */
qvl_status image_budget_reserve(image_budget *b, int64_t px, qvl_stop_fn stop, void *user);
void image_budget_release(image_budget *b, int64_t px);
/* One decode slot (waits the same way). */
qvl_status image_budget_slot_take(image_budget *b, qvl_stop_fn stop, void *user);
void image_budget_slot_give(image_budget *b);

void image_budget_get_stats(image_budget *b, image_budget_stats *out);

#endif
