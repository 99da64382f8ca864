/*
 * The store of async jobs (POST /v1/jobs, GET /v1/jobs/{id}): id, state, result or error.
 * Finished jobs expire ttl seconds after they finish; at most max_jobs are stored (finished or
 * not), so a client that never collects its results cannot grow the server's memory.
 *
 * Times are monotonic seconds given by the caller (tests drive the clock). Thread safety: every
 * function may be called from any thread (one mutex).
 */
#ifndef QVL_SERVER_JOBS_H
#define QVL_SERVER_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

#define JOBS_ID_CAP 40

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED } job_state;

typedef struct jobs jobs;

qvl_status jobs_init(int64_t max_jobs, double ttl_s, jobs **out);
void jobs_free(jobs *j);

/* Stores a new queued job and writes its id ("job-" + hex); QVL_ERR_BUSY when max_jobs are
 * stored even after expiring old ones. */
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
 * NULL when the id is unknown or expired. */
char *jobs_get_json(jobs *j, const char *id, double now);
/* Jobs stored now, and how many of them are queued or running. */
void jobs_counts(jobs *j, double now, int64_t *stored, int64_t *pending);

const char *job_state_name(job_state s);

#endif
