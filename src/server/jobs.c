/* The store of async jobs (see jobs.h). A flat array searched linearly: max_jobs is at most a
 * few thousand in practice and a lookup is a string compare per job, far below one HTTP round trip. */
#include "server/jobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/status.h"
#include "server/api.h"

typedef struct job {
  char id[JOBS_ID_CAP];
  job_state state;
  uint64_t engine_id;
  bool has_engine_id;
  int64_t created;  /* unix seconds */
  double finished;  /* monotonic seconds */
  char *json;       /* result or error object */
} job;

struct jobs {
  pthread_mutex_t mu;
  job *items;       /* [n] */
  int64_t n, cap, max_jobs;
  double ttl_s;
};

const char *job_state_name(job_state s) {
  switch (s) {
  case JOB_QUEUED:
    return "queued";
  case JOB_RUNNING:
    return "running";
  case JOB_DONE:
    return "done";
  case JOB_FAILED:
    return "failed";
  }
  return "unknown";
}

qvl_status jobs_init(int64_t max_jobs, double ttl_s, jobs **out) {
  *out = NULL;
  if (max_jobs < 1 || !(ttl_s > 0))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "jobs: max_jobs %lld and ttl %g s must be positive", (long long)max_jobs,
                      ttl_s);
  jobs *j = calloc(1, sizeof *j);
  if (!j)
    return qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
  pthread_mutex_init(&j->mu, NULL);
  j->max_jobs = max_jobs;
  j->ttl_s = ttl_s;
  *out = j;
  return QVL_OK;
}

void jobs_free(jobs *j) {
  if (!j)
    return;
  for (int64_t i = 0; i < j->n; i++)
    free(j->items[i].json);
  free(j->items);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

/* Drops finished jobs older than the ttl (mutex held). */
static void expire(jobs *j, double now) {
  int64_t w = 0;
  for (int64_t i = 0; i < j->n; i++) {
    job *x = &j->items[i];
    if ((x->state == JOB_DONE || x->state == JOB_FAILED) && now - x->finished >= j->ttl_s) {
      free(x->json);
      continue;
    }
    j->items[w++] = *x;
  }
  j->n = w;
}

static job *find(jobs *j, const char *id) {
  for (int64_t i = 0; i < j->n; i++)
    if (!strcmp(j->items[i].id, id))
      return &j->items[i];
  return NULL;
}

qvl_status jobs_add(jobs *j, double now, char id[JOBS_ID_CAP]) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  qvl_status st = QVL_OK;
  if (j->n >= j->max_jobs) {
    st = qvl_errorf(QVL_ERR_BUSY, "%lld jobs are stored (the limit); collect finished jobs or retry later",
                    (long long)j->n);
  } else if (j->n == j->cap) {
    int64_t cap = j->cap ? j->cap * 2 : 16;
    job *grown = realloc(j->items, (size_t)cap * sizeof *grown);
    if (!grown)
      st = qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
    else {
      j->items = grown;
      j->cap = cap;
    }
  }
  if (st == QVL_OK) {
    job *x = &j->items[j->n++];
    memset(x, 0, sizeof *x);
    do
      api_random_id("job-", x->id, sizeof x->id);
    while (find(j, x->id) != x); /* ids are 96 random bits; a repeat is only theoretical */
    x->state = JOB_QUEUED;
    x->created = (int64_t)time(NULL);
    memcpy(id, x->id, JOBS_ID_CAP);
  }
  pthread_mutex_unlock(&j->mu);
  return st;
}

void jobs_remove(jobs *j, const char *id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x) {
    free(x->json);
    *x = j->items[--j->n];
  }
  pthread_mutex_unlock(&j->mu);
}

void jobs_set_engine_id(jobs *j, const char *id, uint64_t engine_id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x) {
    x->engine_id = engine_id;
    x->has_engine_id = true;
  }
  pthread_mutex_unlock(&j->mu);
}

bool jobs_engine_id(jobs *j, const char *id, uint64_t *engine_id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  bool ok = x && x->has_engine_id && (x->state == JOB_QUEUED || x->state == JOB_RUNNING);
  if (ok)
    *engine_id = x->engine_id;
  pthread_mutex_unlock(&j->mu);
  return ok;
}

void jobs_set_running(jobs *j, const char *id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x && x->state == JOB_QUEUED)
    x->state = JOB_RUNNING;
  pthread_mutex_unlock(&j->mu);
}

void jobs_finish(jobs *j, const char *id, double now, bool ok, char *json) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x && (x->state == JOB_QUEUED || x->state == JOB_RUNNING)) {
    x->state = ok ? JOB_DONE : JOB_FAILED;
    x->finished = now;
    free(x->json);
    x->json = json;
    json = NULL;
  }
  pthread_mutex_unlock(&j->mu);
  free(json);
}

char *jobs_get_json(jobs *j, const char *id, double now) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  job *x = find(j, id);
  buf b = {0};
  if (x) {
    /* ids are [a-z0-9-] only, so they need no JSON escaping */
    buf_printf(&b, "{\"id\":\"%s\",\"object\":\"job\",\"status\":\"%s\",\"created\":%lld", x->id,
               job_state_name(x->state), (long long)x->created);
    if (x->state == JOB_DONE || x->state == JOB_FAILED)
      buf_printf(&b, ",\"%s\":%s", x->state == JOB_DONE ? "result" : "error", x->json ? x->json : "null");
    buf_append_str(&b, "}");
  }
  pthread_mutex_unlock(&j->mu);
  return b.data;
}

void jobs_counts(jobs *j, double now, int64_t *stored, int64_t *pending) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  int64_t p = 0;
  for (int64_t i = 0; i < j->n; i++)
    p += j->items[i].state == JOB_QUEUED || j->items[i].state == JOB_RUNNING;
  *stored = j->n;
  *pending = p;
  pthread_mutex_unlock(&j->mu);
}
