/* Stored Responses API conversations (see resp_store.h). A flat array searched linearly: it holds
 * at most a few thousand entries and a lookup costs far less than the request it serves. */
#include "server/dialects/responses_store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

struct resp_media {
  atomic_int refs;
  int n;
  prompt_media_ref *items; /* [n] */
};

resp_media *resp_media_new(int n) {
  resp_media *m = calloc(1, sizeof *m);
  if (!m || (n > 0 && !(m->items = calloc((size_t)n, sizeof *m->items)))) {
    free(m);
    return NULL;
  }
  m->n = n;
  atomic_init(&m->refs, 1);
  return m;
}

resp_media *resp_media_ref(resp_media *m) {
  if (m)
    atomic_fetch_add(&m->refs, 1);
  return m;
}

void resp_media_unref(resp_media *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
    return;
  for (int i = 0; i < m->n; i++)
    rcbuf_unref(m->items[i].bytes);
  free(m->items);
  free(m);
}

prompt_media_ref *resp_media_item(resp_media *m, int i) { return &m->items[i]; }
int resp_media_count(const resp_media *m) { return m ? m->n : 0; }

bool resp_media_resolve(void *user, uint64_t bytes_key, prompt_media_ref *out) {
  resp_media *m = user;
  for (int i = 0; m && i < m->n; i++)
    if (m->items[i].bytes_key == bytes_key && m->items[i].bytes) {
      *out = m->items[i];
      return true;
    }
  return false;
}

/* The encoded bytes a table holds. */
static size_t media_bytes(const resp_media *m) {
  size_t n = 0;
  for (int i = 0; m && i < m->n; i++)
    n += m->items[i].bytes ? m->items[i].bytes->len : 0;
  return n;
}

typedef struct entry {
  char id[RESP_STORE_ID_CAP];
  char *json;
  resp_media *media;
  size_t bytes;
  double t_used, t_put;
} entry;

struct resp_store {
  pthread_mutex_t mu;
  entry *e; /* [n] */
  int n, max_entries;
  size_t bytes, max_bytes;
  double ttl_s;
};

qvl_status resp_store_init(int max_entries, size_t max_bytes, double ttl_s, resp_store **out) {
  *out = NULL;
  if (max_entries < 1 || max_bytes < 1 || !(ttl_s > 0))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "response store: entries, bytes and ttl must be positive");
  resp_store *s = calloc(1, sizeof *s);
  if (!s || !(s->e = calloc((size_t)max_entries, sizeof *s->e))) {
    free(s);
    return qvl_errorf(QVL_ERR_NOMEM, "response store: out of memory");
  }
  pthread_mutex_init(&s->mu, NULL);
  s->max_entries = max_entries;
  s->max_bytes = max_bytes;
  s->ttl_s = ttl_s;
  *out = s;
  return QVL_OK;
}

static void drop(resp_store *s, int i) {
  s->bytes -= s->e[i].bytes;
  free(s->e[i].json);
  resp_media_unref(s->e[i].media);
  s->e[i] = s->e[--s->n];
}

void resp_store_free(resp_store *s) {
  if (!s)
    return;
  while (s->n)
    drop(s, s->n - 1);
  free(s->e);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void expire(resp_store *s, double now) {
  for (int i = 0; i < s->n;)
    if (now - s->e[i].t_put > s->ttl_s)
      drop(s, i);
    else
      i++;
}

qvl_status resp_store_put(resp_store *s, const char *id, const char *json, double now) {
  return resp_store_put_media(s, id, json, NULL, now);
}

qvl_status resp_store_put_media(resp_store *s, const char *id, const char *json, resp_media *media, double now) {
  /* the table's bytes count once per entry, also when a continued conversation shares them */
  size_t len = strlen(json) + media_bytes(media), idn = strlen(id);
  if (idn == 0 || idn >= RESP_STORE_ID_CAP) {
    resp_media_unref(media);
    return qvl_errorf(QVL_ERR_INVALID_ARG, "response store: bad id");
  }
  if (len + 1 > s->max_bytes) {
    resp_media_unref(media);
    return qvl_errorf(QVL_ERR_TOO_LARGE, "the conversation (%zu bytes) exceeds the response store (%zu bytes)", len,
                      s->max_bytes);
  }
  char *copy = strdup(json);
  if (!copy) {
    resp_media_unref(media);
    return qvl_errorf(QVL_ERR_NOMEM, "response store: out of memory");
  }
  pthread_mutex_lock(&s->mu);
  expire(s, now);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].id, id)) {
      drop(s, i);
      break;
    }
  while (s->n > 0 && (s->n >= s->max_entries || s->bytes + len + 1 > s->max_bytes)) {
    int lru = 0;
    for (int i = 1; i < s->n; i++)
      if (s->e[i].t_used < s->e[lru].t_used)
        lru = i;
    drop(s, lru);
  }
  entry *e = &s->e[s->n++];
  memcpy(e->id, id, idn + 1);
  e->json = copy;
  e->media = media;
  e->bytes = len + 1;
  e->t_used = e->t_put = now;
  s->bytes += e->bytes;
  pthread_mutex_unlock(&s->mu);
  return QVL_OK;
}

char *resp_store_get(resp_store *s, const char *id, double now) { return resp_store_get_media(s, id, now, NULL); }

char *resp_store_get_media(resp_store *s, const char *id, double now, resp_media **media) {
  char *out = NULL;
  if (media)
    *media = NULL;
  pthread_mutex_lock(&s->mu);
  expire(s, now);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].id, id)) {
      s->e[i].t_used = now;
      out = strdup(s->e[i].json);
      if (out && media)
        *media = resp_media_ref(s->e[i].media);
      break;
    }
  pthread_mutex_unlock(&s->mu);
  return out;
}

void resp_store_usage(resp_store *s, int *entries, size_t *bytes) {
  pthread_mutex_lock(&s->mu);
  *entries = s->n;
  *bytes = s->bytes;
  pthread_mutex_unlock(&s->mu);
}
