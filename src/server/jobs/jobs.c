/* The store of async jobs (see jobs.h). A flat array searched linearly: max_jobs is at most a
 * few thousand in practice and a lookup is a string compare per job, far below one HTTP round trip.
 * With a database every change is written through (jobs_db.c) while the mutex is held, so the
 * file and the array never disagree about the order of changes. */
#include "server/jobs/jobs.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "server/openai/chat_wire.h"
#include "server/jobs/jobs_db.h"

typedef struct job {
  char id[JOBS_ID_CAP];
  char owner[JOBS_OWNER_CAP];
  job_state state;
  uint64_t engine_id;
  bool has_engine_id;
  int64_t created;  /* unix seconds */
  int64_t seq;      /* order of submission: newest first in listings */
  double finished;  /* monotonic seconds */
  double finished_unix;
  char *json;       /* result or error object */
} job;

struct jobs {
  pthread_mutex_t mu;
  job *items;       /* [n] */
  int64_t n, cap, max_jobs, next_seq;
  double ttl_s;
  char replica[JOBS_REPLICA_MAX + 1];
  jobs_db *db;      /* NULL: memory only */
  uint64_t db_errors;
};

/* The error object of a job the process stopped before it finished. */
static const char INTERRUPTED_JSON[] =
    "{\"message\":\"the server restarted before this job finished; submit it again\",\"type\":\"server_error\","
    "\"param\":null,\"code\":\"job_interrupted\"}";

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

/* Wall-clock seconds with a fraction: finish times must outlive the process's monotonic clock. */
static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool finished(const job *x) { return x->state == JOB_DONE || x->state == JOB_FAILED; }

void jobs_owner_of(const char *api_key, char out[JOBS_OWNER_CAP]) {
  out[0] = '\0';
  if (!api_key || !*api_key)
    return;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(api_key, strlen(api_key), md, &n, EVP_sha256(), NULL) != 1 || n < 16) {
    /* no digest: a fixed owner that no real key maps to, so nothing is shared by accident */
    snprintf(out, JOBS_OWNER_CAP, "unhashable");
    return;
  }
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

bool jobs_replica_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > JOBS_REPLICA_MAX || name[0] == '-' || name[n - 1] == '-')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-'))
      return false;
  return true;
}

/* ---- write-through (mutex held) ------------------------------------------------------------ */

static void db_failed(jobs *j, const char *id) {
  j->db_errors++;
  char line[512];
  int n = snprintf(line, sizeof line, "level=warn msg=\"jobs db: %s (job %s stays in memory only)\"\n", qvl_last_error(),
                   id);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
}

static void db_put(jobs *j, const job *x) {
  if (!j->db)
    return;
  jobs_db_row r = {x->id, x->owner, (int)x->state, x->created, x->finished_unix, x->json, x->seq};
  if (jobs_db_put(j->db, &r) != QVL_OK)
    db_failed(j, x->id);
}

static void db_delete(jobs *j, const char *id) {
  if (j->db && jobs_db_delete(j->db, id) != QVL_OK)
    db_failed(j, id);
}

/* ---- the array (mutex held) ----------------------------------------------------------------- */

static void drop(jobs *j, int64_t i) {
  db_delete(j, j->items[i].id);
  free(j->items[i].json);
  j->items[i] = j->items[--j->n];
}

/* Drops finished jobs older than the ttl. */
static void expire(jobs *j, double now) {
  for (int64_t i = 0; i < j->n;) {
    job *x = &j->items[i];
    if (finished(x) && now - x->finished >= j->ttl_s)
      drop(j, i);
    else
      i++;
  }
}

static job *find(jobs *j, const char *id) {
  for (int64_t i = 0; i < j->n; i++)
    if (!strcmp(j->items[i].id, id))
      return &j->items[i];
  return NULL;
}

static job *find_owned(jobs *j, const char *id, const char *owner) {
  job *x = find(j, id);
  return x && !strcmp(x->owner, owner ? owner : "") ? x : NULL;
}

static qvl_status grow(jobs *j) {
  if (j->n < j->cap)
    return QVL_OK;
  int64_t cap = j->cap ? j->cap * 2 : 16;
  job *grown = realloc(j->items, (size_t)cap * sizeof *grown);
  if (!grown)
    return qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
  j->items = grown;
  j->cap = cap;
  return QVL_OK;
}

/* ---- open / load ------------------------------------------------------------------------------ */

typedef struct load_ctx {
  jobs *j;
  double now, now_unix;
  int64_t dup_seq; /* rows whose seq repeats an earlier one's: skipped */
} load_ctx;

qvl_status jobs_import(jobs *j, const jobs_db_row *r, double now, double now_unix) {
  if (strlen(r->id) >= JOBS_ID_CAP || strlen(r->owner) >= JOBS_OWNER_CAP || r->state < JOB_QUEUED ||
      r->state > JOB_FAILED || r->seq < 1 || r->seq >= INT64_MAX)
    return QVL_OK; /* jobs_db_row_check refuses these already; kept so that no caller can overflow */
  QVL_TRY(grow(j));
  job *x = &j->items[j->n];
  memset(x, 0, sizeof *x);
  snprintf(x->id, sizeof x->id, "%s", r->id);
  snprintf(x->owner, sizeof x->owner, "%s", r->owner);
  x->state = (job_state)r->state;
  x->created = r->created;
  x->seq = r->seq;
  if (r->json && !(x->json = strdup(r->json)))
    return qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
  if (finished(x)) {
    /* a finish time in the future (a clock set back, a crafted row) would keep the job forever */
    x->finished_unix = r->finished_unix < now_unix ? r->finished_unix : now_unix;
    /* the ttl counts from the wall-clock finish, across the restart */
    x->finished = now - (now_unix - x->finished_unix);
  } else {
    /* its request is gone with the process that held it */
    free(x->json);
    if (!(x->json = strdup(INTERRUPTED_JSON)))
      return qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
    x->state = JOB_FAILED;
    x->finished = now;
    x->finished_unix = now_unix;
    db_put(j, x);
  }
  j->n++;
  if (x->seq >= j->next_seq)
    j->next_seq = x->seq + 1;
  return QVL_OK;
}

static qvl_status load_row(void *user, const jobs_db_row *r) {
  load_ctx *L = user;
  /* rows come in seq order: a repeated seq would make listings skip or repeat jobs */
  if (L->j->n && r->seq <= L->j->items[L->j->n - 1].seq) {
    if (++L->dup_seq <= 10)
      log_warn("jobs db: job %s skipped: its seq %lld repeats an earlier job's", r->id, (long long)r->seq);
    return QVL_OK;
  }
  return jobs_import(L->j, r, L->now, L->now_unix);
}

/* Start-up trimming, linear: items are in seq order after the load; the expired ones and then the
 * oldest beyond max_jobs go, the rest keep their order, and the deletes share one transaction. */
static void trim_loaded(jobs *j, double now) {
  int64_t live = 0;
  for (int64_t i = 0; i < j->n; i++)
    live += !(finished(&j->items[i]) && now - j->items[i].finished >= j->ttl_s);
  int64_t excess = live > j->max_jobs ? live - j->max_jobs : 0;
  int64_t kept = 0;
  for (int64_t i = 0; i < j->n; i++) {
    job *x = &j->items[i];
    bool expired = finished(x) && now - x->finished >= j->ttl_s;
    bool over = !expired && excess > 0;
    excess -= over;
    if (expired || over) {
      db_delete(j, x->id);
      free(x->json);
    } else {
      j->items[kept++] = *x;
    }
  }
  j->n = kept;
}

qvl_status jobs_open(const jobs_opts *o, double now, jobs **out) {
  *out = NULL;
  if (o->max_jobs < 1 || !(o->ttl_s > 0))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "jobs: max_jobs %lld and ttl %g s must be positive", (long long)o->max_jobs,
                      o->ttl_s);
  if (o->replica && *o->replica && !jobs_replica_valid(o->replica))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "replica id '%s': expected 1 to %d of a-z, 0-9 and '-', not starting or ending with '-'",
                      o->replica, JOBS_REPLICA_MAX);
  jobs *j = calloc(1, sizeof *j);
  if (!j)
    return qvl_errorf(QVL_ERR_NOMEM, "jobs: out of memory");
  pthread_mutex_init(&j->mu, NULL);
  j->max_jobs = o->max_jobs;
  j->ttl_s = o->ttl_s;
  j->next_seq = 1;
  if (o->replica)
    snprintf(j->replica, sizeof j->replica, "%s", o->replica);
  if (o->db_path) {
    qvl_status st = jobs_db_open(o->db_path, &j->db);
    bool in_tx = false;
    if (st == QVL_OK && (st = jobs_db_begin(j->db)) == QVL_OK)
      in_tx = true;
    if (st == QVL_OK) {
      load_ctx L = {j, now, wall_now(), 0};
      int64_t skipped = 0;
      st = jobs_db_load(j->db, load_row, &L, &skipped);
      if (L.dup_seq > 10)
        log_warn("jobs db: %lld jobs with a repeated seq skipped", (long long)L.dup_seq);
    }
    if (st == QVL_OK)
      trim_loaded(j, now); /* also what a smaller --max-jobs than the file was written with drops */
    if (in_tx && st == QVL_OK)
      st = jobs_db_commit(j->db);
    if (st != QVL_OK) {
      jobs_free(j);
      return st;
    }
  }
  *out = j;
  return QVL_OK;
}

qvl_status jobs_init(int64_t max_jobs, double ttl_s, jobs **out) {
  jobs_opts o = {max_jobs, ttl_s, NULL, NULL};
  return jobs_open(&o, 0, out);
}

void jobs_free(jobs *j) {
  if (!j)
    return;
  for (int64_t i = 0; i < j->n; i++)
    free(j->items[i].json);
  free(j->items);
  jobs_db_close(j->db);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

/* ---- changes ------------------------------------------------------------------------------------ */

qvl_status jobs_add_owned(jobs *j, double now, const char *owner, char id[JOBS_ID_CAP]) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  qvl_status st = QVL_OK;
  if (j->n >= j->max_jobs)
    st = qvl_errorf(QVL_ERR_BUSY, "%lld jobs are stored (the limit); collect or delete finished jobs, or retry later",
                    (long long)j->n);
  else
    st = grow(j);
  if (st == QVL_OK) {
    job *x = &j->items[j->n++];
    memset(x, 0, sizeof *x);
    char prefix[JOBS_REPLICA_MAX + 8];
    snprintf(prefix, sizeof prefix, j->replica[0] ? "job-%s-" : "job-", j->replica);
    do
      api_random_id(prefix, x->id, sizeof x->id);
    while (find(j, x->id) != x); /* ids are 96 random bits; a repeat is only theoretical */
    snprintf(x->owner, sizeof x->owner, "%s", owner ? owner : "");
    x->state = JOB_QUEUED;
    x->created = (int64_t)time(NULL);
    x->seq = j->next_seq++;
    db_put(j, x);
    memcpy(id, x->id, JOBS_ID_CAP);
  }
  pthread_mutex_unlock(&j->mu);
  return st;
}

qvl_status jobs_add(jobs *j, double now, char id[JOBS_ID_CAP]) { return jobs_add_owned(j, now, NULL, id); }

void jobs_remove(jobs *j, const char *id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x)
    drop(j, x - j->items);
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
  bool ok = x && x->has_engine_id && !finished(x);
  if (ok)
    *engine_id = x->engine_id;
  pthread_mutex_unlock(&j->mu);
  return ok;
}

void jobs_set_running(jobs *j, const char *id) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  /* not written to the database: called on the engine thread at a job's first token, and after a
   * restart a running job and a queued one come back the same (job_interrupted) */
  if (x && x->state == JOB_QUEUED)
    x->state = JOB_RUNNING;
  pthread_mutex_unlock(&j->mu);
}

void jobs_finish(jobs *j, const char *id, double now, bool ok, char *json) {
  pthread_mutex_lock(&j->mu);
  job *x = find(j, id);
  if (x && !finished(x)) {
    x->state = ok ? JOB_DONE : JOB_FAILED;
    x->finished = now;
    x->finished_unix = wall_now();
    free(x->json);
    x->json = json;
    json = NULL;
    db_put(j, x);
  }
  pthread_mutex_unlock(&j->mu);
  free(json);
}

/* ---- reads ---------------------------------------------------------------------------------------- */

/* A JSON string of s: ids are [a-z0-9-] when this program made them, but a stored file is not
 * trusted to hold only those (jobs_db_row_check refuses others; this keeps the output valid JSON
 * whatever reaches it). */
static void json_str(buf *b, const char *s) {
  buf_append_str(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      buf_printf(b, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      buf_printf(b, "\\u%04x", *p < 0x7f ? *p : 0xfffd);
    else
      buf_append(b, p, 1);
  }
  buf_append_str(b, "\"");
}

static void job_json(buf *b, const job *x, bool with_result) {
  buf_append_str(b, "{\"id\":");
  json_str(b, x->id);
  buf_printf(b, ",\"object\":\"job\",\"status\":\"%s\",\"created\":%lld", job_state_name(x->state),
             (long long)x->created);
  if (with_result && finished(x))
    buf_printf(b, ",\"%s\":%s", x->state == JOB_DONE ? "result" : "error", x->json ? x->json : "null");
}

static char *get_json(jobs *j, const char *id, bool any_owner, const char *owner, double now) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  job *x = any_owner ? find(j, id) : find_owned(j, id, owner);
  buf b = {0};
  if (x) {
    job_json(&b, x, true);
    buf_append_str(&b, "}");
  }
  pthread_mutex_unlock(&j->mu);
  return b.data;
}

char *jobs_get_json(jobs *j, const char *id, double now) { return get_json(j, id, true, NULL, now); }

char *jobs_get_json_owned(jobs *j, const char *id, const char *owner, double now) {
  return get_json(j, id, false, owner, now);
}

jobs_delete_result jobs_delete(jobs *j, const char *id, const char *owner, double now, uint64_t *engine_id,
                               bool *has_engine_id, char **json) {
  *json = NULL;
  *has_engine_id = false;
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  job *x = find_owned(j, id, owner);
  jobs_delete_result res = JOBS_DELETE_NOT_FOUND;
  if (x) {
    buf b = {0};
    job_json(&b, x, true);
    if (finished(x)) {
      buf_append_str(&b, ",\"deleted\":true}");
      drop(j, x - j->items);
      res = JOBS_DELETE_REMOVED;
    } else {
      buf_append_str(&b, "}");
      *has_engine_id = x->has_engine_id;
      *engine_id = x->engine_id;
      res = JOBS_DELETE_CANCEL;
    }
    *json = b.data;
  }
  pthread_mutex_unlock(&j->mu);
  return res;
}

char *jobs_list_json(jobs *j, const char *owner, double now, int limit, const char *after) {
  if (limit < 1)
    limit = 1;
  if (limit > JOBS_LIST_MAX)
    limit = JOBS_LIST_MAX;
  if (!owner)
    owner = "";
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  /* the page: the `limit` newest of the owner's jobs older than `after` (seq below its seq) */
  int64_t below = INT64_MAX;
  if (after) {
    job *a = find_owned(j, after, owner);
    below = a ? a->seq : -1; /* an unknown cursor gives an empty page, not the first one again */
  }
  buf b = {0};
  buf_append_str(&b, "{\"object\":\"list\",\"data\":[");
  int shown = 0;
  bool more = false;
  int64_t last = below;
  for (;;) {
    /* the next newest below `last`: O(n) per item, at most JOBS_LIST_MAX items */
    job *best = NULL;
    for (int64_t i = 0; i < j->n; i++) {
      job *x = &j->items[i];
      if (x->seq < last && !strcmp(x->owner, owner) && (!best || x->seq > best->seq))
        best = x;
    }
    if (!best)
      break;
    if (shown == limit) {
      more = true;
      break;
    }
    if (shown)
      buf_append_str(&b, ",");
    job_json(&b, best, false);
    buf_append_str(&b, "}");
    shown++;
    last = best->seq;
  }
  buf_printf(&b, "],\"has_more\":%s}", more ? "true" : "false");
  pthread_mutex_unlock(&j->mu);
  return b.data;
}

void jobs_counts(jobs *j, double now, int64_t *stored, int64_t *pending) {
  pthread_mutex_lock(&j->mu);
  expire(j, now);
  int64_t p = 0;
  for (int64_t i = 0; i < j->n; i++)
    p += !finished(&j->items[i]);
  *stored = j->n;
  *pending = p;
  pthread_mutex_unlock(&j->mu);
}

uint64_t jobs_db_errors(jobs *j) {
  pthread_mutex_lock(&j->mu);
  uint64_t n = j->db_errors;
  pthread_mutex_unlock(&j->mu);
  return n;
}
