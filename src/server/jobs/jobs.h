/*
 * The store of async jobs (POST /v1/jobs, GET /v1/jobs, GET/DELETE /v1/jobs/{id}): id, owner,
 * state, result or error. Finished jobs expire ttl seconds after they finish, or at once when their
 * owner deletes them; at most max_jobs are stored (finished or not), so a client that never
 * collects its results cannot grow the server's memory.
 *
 * Owners: a job belongs to the API key that made it. The store keeps only a hash of the key
 * (jobs_owner_of); a lookup with another owner answers as if the job did not exist (the HTTP layer
 * says 404), so one key can neither read, list nor cancel another key's jobs. Without API keys
 * every caller is the same owner ("").
 *
 * Ids: "job-" + 24 hex digits, or "job-" + REPLICA + "-" + 24 hex digits when the store has a
 * replica name, so that a balancer can send GET /v1/jobs/{id} to the replica that owns the job
 * (deploy/nginx/qvl.conf shows the match).
 *
 * Persistence: with a db_path the store is written through to SQLite (WAL mode) and read back by
 * jobs_open, so finished jobs survive a restart. Jobs that were queued or running when the
 * process stopped cannot be resumed (their request, images included, is not stored): they come back
 * as failed, code "job_interrupted". Without a db_path the store lives in memory only.
 *
 * Times are monotonic seconds given by the caller (tests drive the clock); the database stores
 * wall-clock times and converts. Thread safety: every function may be called from any thread (one
 * mutex).
 */
#ifndef QVL_SERVER_JOBS_JOBS_H
#define QVL_SERVER_JOBS_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"
#include "server/jobs/jobs_db.h"

#define JOBS_ID_CAP 64
#define JOBS_REPLICA_MAX 24 /* characters of a replica name: [a-z0-9-] */
#define JOBS_OWNER_CAP 33   /* 32 hex digits of SHA-256(api key), NUL */
#define JOBS_LIST_MAX 100   /* most jobs one GET /v1/jobs page holds */

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED } job_state;

typedef struct jobs jobs;

typedef struct jobs_opts {
  int64_t max_jobs;
  double ttl_s;
  const char *db_path; /* NULL: in memory only */
  const char *replica; /* NULL or "": ids without a replica part */
} jobs_opts;

/* Opens the store; with a db_path creates or reads the database (jobs left queued or running
 * become failed, "job_interrupted"). Bad options, a bad replica name or a database that cannot be
 * opened fail with a message. */
qvl_status jobs_open(const jobs_opts *o, double now, jobs **out);
/* jobs_open in memory, without a replica name. */
qvl_status jobs_init(int64_t max_jobs, double ttl_s, jobs **out);
void jobs_free(jobs *j);
/* Adds one stored row (what jobs_open does for each row of the file that jobs_db_row_check
 * accepted; the fuzz target drives it directly): a pending job becomes failed, job_interrupted; a
 * finish time after now_unix counts as now_unix. */
qvl_status jobs_import(jobs *j, const jobs_db_row *r, double now, double now_unix);

/* The owner string of an API key: hex of the first 16 bytes of its SHA-256; "" for no key. */
void jobs_owner_of(const char *api_key, char out[JOBS_OWNER_CAP]);
/* Checks a replica name: 1..JOBS_REPLICA_MAX of [a-z0-9-], not starting or ending with '-'. */
bool jobs_replica_valid(const char *name);

/* Stores a new queued job of owner (NULL = "") and writes its id; QVL_ERR_BUSY when max_jobs are
 * stored even after expiring old ones. */
qvl_status jobs_add_owned(jobs *j, double now, const char *owner, char id[JOBS_ID_CAP]);
qvl_status jobs_add(jobs *j, double now, char id[JOBS_ID_CAP]);
/* Forgets a job (its submission failed). */
void jobs_remove(jobs *j, const char *id);
void jobs_set_engine_id(jobs *j, const char *id, uint64_t engine_id);
/* The engine id of a queued or running job (false when finished or unknown). */
bool jobs_engine_id(jobs *j, const char *id, uint64_t *engine_id);
void jobs_set_running(jobs *j, const char *id);
/* Finishes a job: json is the chat.completion object (done) or the error object
 * {"message",...} (failed); the store takes ownership of the malloc'd string. */
void jobs_finish(jobs *j, const char *id, double now, bool ok, char *json);
/* The job as JSON (malloc'd): {"id","object":"job","status","created", "result"|"error"};
 * NULL when the id is unknown or expired. Any owner. */
char *jobs_get_json(jobs *j, const char *id, double now);
/* The same, NULL also when the job belongs to another owner. */
char *jobs_get_json_owned(jobs *j, const char *id, const char *owner, double now);

typedef enum jobs_delete_result {
  JOBS_DELETE_NOT_FOUND, /* unknown, expired or another owner's */
  JOBS_DELETE_REMOVED,   /* was finished: gone now */
  JOBS_DELETE_CANCEL,    /* queued or running: *engine_id (when *has_engine_id) is to be cancelled */
} jobs_delete_result;
/* DELETE /v1/jobs/{id}. *json (malloc'd, may be NULL on no memory) is the job as it was, with
 * "deleted":true when removed. A cancelled job finishes as failed and a second DELETE removes it. */
jobs_delete_result jobs_delete(jobs *j, const char *id, const char *owner, double now, uint64_t *engine_id,
                               bool *has_engine_id, char **json);

/* GET /v1/jobs: the owner's jobs, newest first, without their results:
 * {"object":"list","data":[{"id","object":"job","status","created"}...],"has_more":bool}.
 * limit is clamped to [1, JOBS_LIST_MAX]; after (NULL or an id) starts the page after that job.
 * NULL on no memory. */
char *jobs_list_json(jobs *j, const char *owner, double now, int limit, const char *after);

/* Jobs stored now, and how many of them are queued or running. */
void jobs_counts(jobs *j, double now, int64_t *stored, int64_t *pending);
/* Database writes that failed since the start (the job stays in memory; the error is logged). */
uint64_t jobs_db_errors(jobs *j);

const char *job_state_name(job_state s);

#endif
