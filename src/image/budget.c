/* The server-wide image decoding budget (see budget.h). */
#include "image/budget.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/cond.h"
#include "base/status.h"

#define WAIT_SLICE_MS 50 /* how often a waiter polls its stop check */

struct image_budget {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t pool, reserved, peak;
  int slots, busy, waiting;
  uint64_t refused;
};

qvl_status image_budget_new(int64_t pool_pixels, int slots, image_budget **out) {
  *out = NULL;
  if (pool_pixels < 1 || slots < 1)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image budget: pool %lld pixels, %d slots: both must be positive",
                      (long long)pool_pixels, slots);
  image_budget *b = calloc(1, sizeof *b);
  if (!b)
    return qvl_errorf(QVL_ERR_NOMEM, "image budget: out of memory");
  pthread_mutex_init(&b->mu, NULL);
  cond_init_monotonic(&b->cv);
  b->pool = pool_pixels;
  b->slots = slots;
  *out = b;
  return QVL_OK;
}

void image_budget_free(image_budget *b) {
  if (!b)
    return;
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b);
}

/* One slice of waiting (mutex held); then the stop check, without the mutex. */
static qvl_status wait_slice(image_budget *b, qvl_stop_fn stop, void *user) {
  b->waiting++;
  cond_wait_ms(&b->cv, &b->mu, WAIT_SLICE_MS);
  b->waiting--;
  pthread_mutex_unlock(&b->mu);
  qvl_status s = qvl_stop_poll(stop, user);
  pthread_mutex_lock(&b->mu);
  return s;
}

qvl_status image_budget_reserve(image_budget *b, int64_t px, qvl_stop_fn stop, void *user) {
  if (px <= 0)
    return QVL_OK;
  pthread_mutex_lock(&b->mu);
  if (px > b->pool) {
    b->refused++;
    int64_t pool = b->pool;
    pthread_mutex_unlock(&b->mu);
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "the images need %lld decoded pixels at once; this server decodes at most %lld (image_memory_mb)",
                      (long long)px, (long long)pool);
  }
  qvl_status s = QVL_OK;
  while (s == QVL_OK && b->reserved + px > b->pool)
    s = wait_slice(b, stop, user);
  if (s == QVL_OK) {
    b->reserved += px;
    if (b->reserved > b->peak)
      b->peak = b->reserved;
  }
  pthread_mutex_unlock(&b->mu);
  return s;
}

void image_budget_release(image_budget *b, int64_t px) {
  if (px <= 0)
    return;
  pthread_mutex_lock(&b->mu);
  b->reserved -= px;
  if (b->reserved < 0)
    b->reserved = 0;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

qvl_status image_budget_slot_take(image_budget *b, qvl_stop_fn stop, void *user) {
  pthread_mutex_lock(&b->mu);
  qvl_status s = QVL_OK;
  while (s == QVL_OK && b->busy >= b->slots)
    s = wait_slice(b, stop, user);
  if (s == QVL_OK)
    b->busy++;
  pthread_mutex_unlock(&b->mu);
  return s;
}

void image_budget_slot_give(image_budget *b) {
  pthread_mutex_lock(&b->mu);
  if (b->busy > 0)
    b->busy--;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

void image_budget_get_stats(image_budget *b, image_budget_stats *out) {
  pthread_mutex_lock(&b->mu);
  out->pool_pixels = b->pool;
  out->reserved_pixels = b->reserved;
  out->peak_pixels = b->peak;
  out->slots = b->slots;
  out->slots_busy = b->busy;
  out->waiting = b->waiting;
  out->refused = b->refused;
  pthread_mutex_unlock(&b->mu);
}
