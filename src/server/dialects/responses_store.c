/* Stored Responses API conversations (see resp_store.h). A flat array searched linearly: it holds
 * at most a few thousand entries and a lookup costs far less than the request it serves. */
#include "server/dialects/responses_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct entry {
  char id[RESP_STORE_ID_CAP];
  char *json;
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

void resp_store_free(resp_store *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n; i++)
    free(s->e[i].json);
  free(s->e);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void drop(resp_store *s, int i) {
  s->bytes -= s->e[i].bytes;
  free(s->e[i].json);
  s->e[i] = s->e[--s->n];
}

static void expire(resp_store *s, double now) {
  for (int i = 0; i < s->n;)
    if (now - s->e[i].t_put > s->ttl_s)
      drop(s, i);
    else
      i++;
}

qvl_status resp_store_put(resp_store *s, const char *id, const char *json, double now) {
  size_t len = strlen(json), idn = strlen(id);
  if (idn == 0 || idn >= RESP_STORE_ID_CAP)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "response store: bad id");
  if (len + 1 > s->max_bytes)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "the conversation (%zu bytes) exceeds the response store (%zu bytes)", len,
                      s->max_bytes);
  char *copy = malloc(len + 1);
  if (!copy)
    return qvl_errorf(QVL_ERR_NOMEM, "response store: out of memory");
  memcpy(copy, json, len + 1);
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
  e->bytes = len + 1;
  e->t_used = e->t_put = now;
  s->bytes += e->bytes;
  pthread_mutex_unlock(&s->mu);
  return QVL_OK;
}

char *resp_store_get(resp_store *s, const char *id, double now) {
  char *out = NULL;
  pthread_mutex_lock(&s->mu);
  expire(s, now);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].id, id)) {
      s->e[i].t_used = now;
      out = strdup(s->e[i].json);
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
