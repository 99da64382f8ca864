#include "engine/image_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/lru.h"
#include "base/status.h"

#define IC_BYTES_KEYS 2 /* encodings remembered per image: few, so an entry's bookkeeping stays under 100 bytes */

typedef struct ic_entry {
  lru_node lru;              /* first member: the list node converts back to the entry */
  uint64_t hash;
  int grid_t, grid_h, grid_w;
  int64_t nt, d, n_deepstack;
  float *data;               /* [1 + n_deepstack][nt][d]: merger rows, then each DeepStack level */
  int64_t bytes;
  uint64_t bytes_keys[IC_BYTES_KEYS]; /* encoded files seen decoding to this image, newest first (0: none) */
} ic_entry;

struct image_cache {
  pthread_mutex_t mu;
  int64_t cap, used;
  lru_list lru; /* head = most recent */
};

qvl_status image_cache_init(int64_t cap_bytes, image_cache **out) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return qvl_errorf(QVL_ERR_NOMEM, "image cache: out of memory");
  (*out)->cap = cap_bytes > 0 ? cap_bytes : 0;
  pthread_mutex_init(&(*out)->mu, NULL);
  return QVL_OK;
}

static void drop(image_cache *c, ic_entry *e) {
  lru_unlink(&c->lru, &e->lru);
  c->used -= e->bytes;
  free(e->data);
  free(e);
}

void image_cache_free(image_cache *c) {
  if (!c)
    return;
  while (c->lru.head)
    drop(c, (ic_entry *)c->lru.head);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static ic_entry *find(image_cache *c, uint64_t hash, int gt, int gh, int gw, int64_t nt, int64_t d, int64_t nds) {
  for (ic_entry *e = (ic_entry *)c->lru.head; e; e = (ic_entry *)e->lru.next)
    if (e->hash == hash && e->grid_t == gt && e->grid_h == gh && e->grid_w == gw && e->nt == nt && e->d == d &&
        e->n_deepstack == nds)
      return e;
  return NULL;
}

bool image_cache_get(image_cache *c, uint64_t hash, int grid_t, int grid_h, int grid_w, int64_t nt, int64_t d,
                     int64_t n_deepstack, float *embd, float *deepstack, int64_t ds_level_stride) {
  pthread_mutex_lock(&c->mu);
  ic_entry *e = find(c, hash, grid_t, grid_h, grid_w, nt, d, n_deepstack);
  if (!e) {
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  size_t level = (size_t)(nt * d);
  memcpy(embd, e->data, level * sizeof(float));
  for (int64_t l = 0; l < n_deepstack; l++)
    memcpy(deepstack + l * ds_level_stride, e->data + (size_t)(l + 1) * level, level * sizeof(float));
  lru_unlink(&c->lru, &e->lru);
  lru_push_front(&c->lru, &e->lru);
  pthread_mutex_unlock(&c->mu);
  return true;
}

static void put_locked(image_cache *c, uint64_t hash, int grid_t, int grid_h, int grid_w, int64_t nt, int64_t d,
                       int64_t n_deepstack, const float *embd, const float *deepstack, int64_t ds_level_stride) {
  ic_entry *e = find(c, hash, grid_t, grid_h, grid_w, nt, d, n_deepstack);
  if (e) {
    lru_unlink(&c->lru, &e->lru);
    lru_push_front(&c->lru, &e->lru);
    return;
  }
  size_t level = (size_t)(nt * d);
  int64_t bytes = (int64_t)(level * (size_t)(1 + n_deepstack) * sizeof(float) + sizeof(ic_entry));
  if (bytes > c->cap)
    return;
  while (c->used + bytes > c->cap && c->lru.tail)
    drop(c, (ic_entry *)c->lru.tail);
  e = calloc(1, sizeof *e);
  float *data = malloc(level * (size_t)(1 + n_deepstack) * sizeof(float));
  if (!e || !data) {
    free(e);
    free(data);
    return;
  }
  memcpy(data, embd, level * sizeof(float));
  for (int64_t l = 0; l < n_deepstack; l++)
    memcpy(data + (size_t)(l + 1) * level, deepstack + l * ds_level_stride, level * sizeof(float));
  *e = (ic_entry){.hash = hash, .grid_t = grid_t, .grid_h = grid_h, .grid_w = grid_w, .nt = nt, .d = d,
                  .n_deepstack = n_deepstack, .data = data, .bytes = bytes};
  lru_push_front(&c->lru, &e->lru);
  c->used += bytes;
}

void image_cache_put(image_cache *c, uint64_t hash, int grid_t, int grid_h, int grid_w, int64_t nt, int64_t d,
                     int64_t n_deepstack, const float *embd, const float *deepstack, int64_t ds_level_stride) {
  pthread_mutex_lock(&c->mu);
  put_locked(c, hash, grid_t, grid_h, grid_w, nt, d, n_deepstack, embd, deepstack, ds_level_stride);
  pthread_mutex_unlock(&c->mu);
}

void image_cache_note_encoded(image_cache *c, uint64_t hash, uint64_t bytes_key) {
  pthread_mutex_lock(&c->mu);
  for (ic_entry *e = (ic_entry *)c->lru.head; e; e = (ic_entry *)e->lru.next) {
    if (e->hash != hash)
      continue;
    int k = 0;
    while (k < IC_BYTES_KEYS - 1 && e->bytes_keys[k] != bytes_key)
      k++;
    memmove(e->bytes_keys + 1, e->bytes_keys, sizeof e->bytes_keys[0] * (size_t)k);
    e->bytes_keys[0] = bytes_key;
  }
  pthread_mutex_unlock(&c->mu);
}

bool image_cache_find_encoded(image_cache *c, uint64_t bytes_key, uint64_t *hash, int *grid_t, int *grid_h,
                              int *grid_w, int64_t *nt) {
  bool found = false;
  pthread_mutex_lock(&c->mu);
  for (ic_entry *e = (ic_entry *)c->lru.head; e && !found; e = (ic_entry *)e->lru.next)
    for (int k = 0; k < IC_BYTES_KEYS && !found; k++)
      if (e->bytes_keys[k] == bytes_key && bytes_key != 0) {
        *hash = e->hash;
        *grid_t = e->grid_t;
        *grid_h = e->grid_h;
        *grid_w = e->grid_w;
        *nt = e->nt;
        found = true;
      }
  pthread_mutex_unlock(&c->mu);
  return found;
}

int64_t image_cache_bytes(const image_cache *c) {
  pthread_mutex_lock((pthread_mutex_t *)&c->mu);
  int64_t b = c->used;
  pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
  return b;
}
