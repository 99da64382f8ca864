/* SQLite persistence of the job store (see jobs_db.h). */
#include "server/jobs/jobs_db.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

struct jobs_db {
  sqlite3 *db;
  sqlite3_stmt *put, *del;
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " owner TEXT NOT NULL,"
    " state INTEGER NOT NULL,"
    " created INTEGER NOT NULL,"
    " finished REAL NOT NULL DEFAULT 0,"
    " json TEXT,"
    " seq INTEGER NOT NULL);";

static qvl_status db_error(jobs_db *d, const char *what) {
  return qvl_errorf(QVL_ERR_IO, "jobs db: %s: %s", what, d->db ? sqlite3_errmsg(d->db) : "no database");
}

void jobs_db_close(jobs_db *d) {
  if (!d)
    return;
  sqlite3_finalize(d->put);
  sqlite3_finalize(d->del);
  sqlite3_close(d->db);
  free(d);
}

qvl_status jobs_db_open(const char *path, jobs_db **out) {
  *out = NULL;
  jobs_db *d = calloc(1, sizeof *d);
  if (!d)
    return qvl_errorf(QVL_ERR_NOMEM, "jobs db: out of memory");
  qvl_status st = QVL_OK;
  if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
      SQLITE_OK) {
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, d->db ? sqlite3_errmsg(d->db) : "cannot open");
    jobs_db_close(d);
    return st;
  }
  /* a replica restarting while its predecessor still closes the file waits instead of failing */
  sqlite3_busy_timeout(d->db, 5000);
  char *msg = NULL;
  if (sqlite3_exec(d->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(d->db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK) {
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, msg ? msg : sqlite3_errmsg(d->db));
    sqlite3_free(msg);
    jobs_db_close(d);
    return st;
  }
  if (sqlite3_prepare_v2(d->db,
                         "INSERT OR REPLACE INTO jobs(id, owner, state, created, finished, json, seq) "
                         "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                         -1, &d->put, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(d->db, "DELETE FROM jobs WHERE id = ?1", -1, &d->del, NULL) != SQLITE_OK) {
    st = db_error(d, "prepare");
    jobs_db_close(d);
    return st;
  }
  *out = d;
  return QVL_OK;
}

qvl_status jobs_db_load(jobs_db *d, jobs_db_row_fn fn, void *user) {
  sqlite3_stmt *q = NULL;
  if (sqlite3_prepare_v2(d->db, "SELECT id, owner, state, created, finished, json, seq FROM jobs ORDER BY seq", -1, &q,
                         NULL) != SQLITE_OK)
    return db_error(d, "load");
  qvl_status st = QVL_OK;
  int rc;
  while (st == QVL_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    jobs_db_row r = {
        .id = (const char *)sqlite3_column_text(q, 0),
        .owner = (const char *)sqlite3_column_text(q, 1),
        .state = sqlite3_column_int(q, 2),
        .created = sqlite3_column_int64(q, 3),
        .finished_unix = sqlite3_column_double(q, 4),
        .json = (const char *)sqlite3_column_text(q, 5),
        .seq = sqlite3_column_int64(q, 6),
    };
    if (!r.id || !r.owner)
      continue; /* NOT NULL columns: only a hand-edited file gets here */
    st = fn(user, &r);
  }
  if (st == QVL_OK && rc != SQLITE_DONE)
    st = db_error(d, "load");
  sqlite3_finalize(q);
  return st;
}

qvl_status jobs_db_put(jobs_db *d, const jobs_db_row *r) {
  sqlite3_stmt *q = d->put;
  sqlite3_reset(q);
  sqlite3_bind_text(q, 1, r->id, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 2, r->owner, -1, SQLITE_STATIC);
  sqlite3_bind_int(q, 3, r->state);
  sqlite3_bind_int64(q, 4, r->created);
  sqlite3_bind_double(q, 5, r->finished_unix);
  if (r->json)
    sqlite3_bind_text(q, 6, r->json, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(q, 6);
  sqlite3_bind_int64(q, 7, r->seq);
  int rc = sqlite3_step(q);
  sqlite3_clear_bindings(q);
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? QVL_OK : db_error(d, "write");
}

qvl_status jobs_db_delete(jobs_db *d, const char *id) {
  sqlite3_stmt *q = d->del;
  sqlite3_reset(q);
  sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
  int rc = sqlite3_step(q);
  sqlite3_clear_bindings(q);
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? QVL_OK : db_error(d, "delete");
}
