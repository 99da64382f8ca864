/*
 * The SQLite file behind the job store (jobs.h, --jobs-db): one table, one row per job, written
 * through on every change and read once at start. WAL mode, synchronous=NORMAL: a crash of the
 * process loses nothing committed; a power cut may lose the last writes, never the file.
 *
 * Ownership: a file this program created carries PRAGMA application_id JOBS_DB_APP_ID and
 * PRAGMA user_version JOBS_DB_SCHEMA. jobs_db_open uses a file only when it is new (absent or
 * empty), carries both, or is a file of the first qvl versions (no marks, nothing but our `jobs`
 * table, which then gets the marks). Anything else — another program's database, a newer schema —
 * is refused with a message before anything is written to it: the file stays byte for byte as it
 * was (it is inspected through a read-only connection first).
 *
 * Rows are not trusted (a file can be edited by hand or crafted): jobs_db_row_check validates
 * every column (types, ranges, id and owner charset, JSON of the result) and jobs_db_load skips a
 * bad row with a warning instead of loading it.
 *
 * One database per replica: two processes writing one file would see each other's jobs under ids
 * they do not own. Thread safety: none; the job store calls it under its mutex.
 */
#ifndef QVL_SERVER_JOBS_JOBS_DB_H
#define QVL_SERVER_JOBS_JOBS_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

#define JOBS_DB_APP_ID 0x71766c6a /* "qvlj" */
#define JOBS_DB_SCHEMA 1
#define JOBS_DB_JSON_MAX (64u << 20)       /* bytes of one stored result or error object */
#define JOBS_DB_TIME_MAX 253402300799LL    /* 9999-12-31T23:59:59Z: later times are not ours */
#define JOBS_DB_SEQ_MAX (INT64_C(1) << 53) /* far beyond any submission count; +1 never overflows */

typedef struct jobs_db jobs_db;

typedef struct jobs_db_row {
  const char *id, *owner;
  int state;            /* job_state */
  int64_t created;      /* unix seconds */
  double finished_unix; /* 0 while pending */
  const char *json;     /* result or error object; NULL while pending */
  int64_t seq;          /* order of submission */
} jobs_db_row;

/* One column as SQLite returned it (the types are SQLite's fundamental ones). */
typedef enum jobs_db_type { JOBS_DB_NULL, JOBS_DB_INT, JOBS_DB_REAL, JOBS_DB_TEXT, JOBS_DB_BLOB } jobs_db_type;
typedef struct jobs_db_cell {
  jobs_db_type type;
  int64_t i;
  double f;
  const char *s; /* TEXT/BLOB bytes, n of them (TEXT also NUL-terminated) */
  size_t n;
} jobs_db_cell;
enum { JOBS_DB_NCOLS = 7 }; /* id, owner, state, created, finished, json, seq */

/* Validates the columns of one stored row and fills *row (pointing into the cells). False with a
 * reason in why (for the warning) when the row is not one this program could have written: a wrong
 * type (a BLOB where TEXT belongs, text where a number belongs), an id not "job-" + [a-z0-9-]
 * (< 64 bytes, no NUL), an owner not "" / 32 hex digits, a state outside job_state, a time outside
 * [0, JOBS_DB_TIME_MAX], a seq outside [1, JOBS_DB_SEQ_MAX], or a finished job whose json is not
 * one valid UTF-8 JSON object of at most JOBS_DB_JSON_MAX bytes. */
bool jobs_db_row_check(const jobs_db_cell cells[JOBS_DB_NCOLS], jobs_db_row *row, char *why, size_t why_cap);

qvl_status jobs_db_open(const char *path, jobs_db **out);
void jobs_db_close(jobs_db *db);
/* Calls fn for every valid row, oldest submission first; bad rows are skipped (a warning each, up
 * to 10, then a count) and counted in *skipped. Stops at fn's first error. */
typedef qvl_status (*jobs_db_row_fn)(void *user, const jobs_db_row *row);
qvl_status jobs_db_load(jobs_db *db, jobs_db_row_fn fn, void *user, int64_t *skipped);
/* Inserts or replaces the row with that id. */
qvl_status jobs_db_put(jobs_db *db, const jobs_db_row *row);
qvl_status jobs_db_delete(jobs_db *db, const char *id);
/* Groups the writes between them into one transaction (loading and trimming at start: one commit
 * instead of one per row). */
qvl_status jobs_db_begin(jobs_db *db);
qvl_status jobs_db_commit(jobs_db *db);

#endif
