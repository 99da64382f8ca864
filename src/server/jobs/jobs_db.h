/*
 * The SQLite file behind the job store (jobs.h, --jobs-db): one table, one row per job, written
 * through on every change and read once at start. WAL mode, synchronous=NORMAL: a crash of the
 * process loses nothing committed; a power cut may lose the last writes, never the file.
 *
 * One database per replica: two processes writing one file would see each other's jobs under ids
 * they do not own. Thread safety: none; the job store calls it under its mutex.
 */
#ifndef QVL_SERVER_JOBS_DB_H
#define QVL_SERVER_JOBS_DB_H

#include <stdint.h>

#include "qvl.h"

typedef struct jobs_db jobs_db;

typedef struct jobs_db_row {
  const char *id, *owner;
  int state;            /* job_state */
  int64_t created;      /* unix seconds */
  double finished_unix; /* 0 while pending */
  const char *json;     /* result or error object; NULL while pending */
  int64_t seq;          /* order of submission */
} jobs_db_row;

qvl_status jobs_db_open(const char *path, jobs_db **out);
void jobs_db_close(jobs_db *db);
/* Calls fn for every row, oldest submission first; stops at fn's first error. */
typedef qvl_status (*jobs_db_row_fn)(void *user, const jobs_db_row *row);
qvl_status jobs_db_load(jobs_db *db, jobs_db_row_fn fn, void *user);
/* Inserts or replaces the row with that id. */
qvl_status jobs_db_put(jobs_db *db, const jobs_db_row *row);
qvl_status jobs_db_delete(jobs_db *db, const char *id);

#endif
