/* SQLite persistence of the job store (see jobs_db.h). */
#include "server/jobs/jobs_db.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/status.h"
#include "text/unicode.h"

struct jobs_db {
  sqlite3 *db;
  sqlite3_stmt *put, *del;
};

/* The table's columns: the text SQLite keeps in sqlite_master is "CREATE TABLE jobs (" + this, which
 * is how a file of the first versions (before the application id) is recognised as ours. */
#define SCHEMA_COLS                                                                                                  \
  " id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, state INTEGER NOT NULL, created INTEGER NOT NULL,"            \
  " finished REAL NOT NULL DEFAULT 0, json TEXT, seq INTEGER NOT NULL)"
static const char SCHEMA[] = "CREATE TABLE IF NOT EXISTS jobs (" SCHEMA_COLS ";";
static const char LEGACY_SQL[] = "CREATE TABLE jobs (" SCHEMA_COLS;

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

/* ---- is the file ours? ------------------------------------------------------------------------- */

typedef enum db_kind { DB_NEW, DB_OURS, DB_LEGACY, DB_FOREIGN } db_kind;

static bool pragma_int(sqlite3 *db, const char *sql, int64_t *v) {
  sqlite3_stmt *q = NULL;
  bool ok = sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW;
  if (ok)
    *v = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return ok;
}

/* Reads the marks and the schema through a read-only connection; *why says what makes a file
 * foreign. */
static qvl_status db_inspect(const char *path, db_kind *kind, char *why, size_t why_cap) {
  struct stat sb;
  if (stat(path, &sb) != 0 || (S_ISREG(sb.st_mode) && sb.st_size == 0)) {
    *kind = DB_NEW; /* absent or empty: SQLite writes the header on the first change */
    return QVL_OK;
  }
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    qvl_status st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_close(db);
    return st;
  }
  sqlite3_busy_timeout(db, 5000);
  int64_t app = 0, ver = 0;
  qvl_status st = QVL_OK;
  if (!pragma_int(db, "PRAGMA application_id", &app) || !pragma_int(db, "PRAGMA user_version", &ver)) {
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return st;
  }
  sqlite3_stmt *q = NULL;
  if (sqlite3_prepare_v2(db, "SELECT type, name, tbl_name, sql FROM sqlite_master", -1, &q, NULL) != SQLITE_OK) {
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return st;
  }
  int objects = 0, other = 0;
  bool jobs_table = false; /* exactly the table this program creates */
  char first_other[64] = "";
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    objects++;
    const char *type = (const char *)sqlite3_column_text(q, 0);
    const char *name = (const char *)sqlite3_column_text(q, 1);
    const char *tbl = (const char *)sqlite3_column_text(q, 2);
    const char *sql = (const char *)sqlite3_column_text(q, 3);
    if (type && name && !strcmp(type, "table") && !strcmp(name, "jobs")) {
      jobs_table = sql && !strcmp(sql, LEGACY_SQL);
    } else if (!(type && tbl && !strcmp(type, "index") && !strcmp(tbl, "jobs") && !sql)) {
      if (!other++)
        snprintf(first_other, sizeof first_other, "%s", name ? name : "?");
    }
  }
  if (rc != SQLITE_DONE)
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, sqlite3_errmsg(db));
  sqlite3_finalize(q);
  sqlite3_close(db);
  QVL_TRY(st);
  if (app == JOBS_DB_APP_ID && ver == JOBS_DB_SCHEMA && jobs_table && !other)
    *kind = DB_OURS;
  else if (app == 0 && ver == 0 && objects == 0)
    *kind = DB_NEW;
  else if (app == 0 && ver == 0 && jobs_table && !other)
    *kind = DB_LEGACY;
  else {
    *kind = DB_FOREIGN;
    if (app == JOBS_DB_APP_ID && ver != JOBS_DB_SCHEMA)
      snprintf(why, why_cap, "its schema version is %lld, this program knows %d", (long long)ver, JOBS_DB_SCHEMA);
    else if (app != JOBS_DB_APP_ID && app != 0)
      snprintf(why, why_cap, "its application_id is 0x%08llx, not qvl's 0x%08x", (unsigned long long)(uint32_t)app,
               JOBS_DB_APP_ID);
    else if (other)
      snprintf(why, why_cap, "it holds %d object(s) that are not qvl's, e.g. '%s'", other, first_other);
    else
      snprintf(why, why_cap, "its jobs table is not the one qvl writes");
  }
  return QVL_OK;
}

qvl_status jobs_db_open(const char *path, jobs_db **out) {
  *out = NULL;
  db_kind kind = DB_FOREIGN;
  char why[160] = "";
  QVL_TRY(db_inspect(path, &kind, why, sizeof why));
  if (kind == DB_FOREIGN)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "jobs db '%s' is not a qvl jobs database (%s); it was left unchanged — point --jobs-db at a "
                      "new file",
                      path, why);
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
  char *msg = NULL, marks[96];
  snprintf(marks, sizeof marks, "PRAGMA application_id = %d; PRAGMA user_version = %d;", JOBS_DB_APP_ID,
           JOBS_DB_SCHEMA);
  if (sqlite3_exec(d->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(d->db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK ||
      (kind != DB_OURS && sqlite3_exec(d->db, marks, NULL, NULL, &msg) != SQLITE_OK)) {
    st = qvl_errorf(QVL_ERR_IO, "jobs db '%s': %s", path, msg ? msg : sqlite3_errmsg(d->db));
    sqlite3_free(msg);
    jobs_db_close(d);
    return st;
  }
  if (kind == DB_LEGACY)
    log_info("jobs db '%s': a file of an earlier qvl, now marked with the qvl application id", path);
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

/* ---- rows ----------------------------------------------------------------------------------------- */

static bool text_ok(const jobs_db_cell *c) { return c->type == JOBS_DB_TEXT && c->s && strlen(c->s) == c->n; }

static bool id_ok(const jobs_db_cell *c) {
  if (!text_ok(c) || c->n < 5 || c->n >= 64 || strncmp(c->s, "job-", 4))
    return false;
  for (size_t i = 4; i < c->n; i++)
    if (!((c->s[i] >= 'a' && c->s[i] <= 'z') || (c->s[i] >= '0' && c->s[i] <= '9') || c->s[i] == '-'))
      return false;
  return true;
}

static bool owner_ok(const jobs_db_cell *c) {
  if (!text_ok(c))
    return false;
  if (c->n == 0 || !strcmp(c->s, "unhashable"))
    return true;
  if (c->n != 32)
    return false;
  for (size_t i = 0; i < 32; i++)
    if (!((c->s[i] >= 'a' && c->s[i] <= 'f') || (c->s[i] >= '0' && c->s[i] <= '9')))
      return false;
  return true;
}

static bool int_in(const jobs_db_cell *c, int64_t lo, int64_t hi, int64_t *v) {
  if (c->type != JOBS_DB_INT || c->i < lo || c->i > hi)
    return false;
  *v = c->i;
  return true;
}

static bool json_object_ok(const jobs_db_cell *c) {
  if (!text_ok(c) || c->n > JOBS_DB_JSON_MAX || utf8_valid_prefix(c->s, c->n) != c->n)
    return false;
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithLengthOpts(c->s, c->n + 1, &end, true); /* n + 1: the NUL ends it */
  bool ok = o && cJSON_IsObject(o);
  cJSON_Delete(o);
  return ok;
}

bool jobs_db_row_check(const jobs_db_cell cells[JOBS_DB_NCOLS], jobs_db_row *row, char *why, size_t why_cap) {
  memset(row, 0, sizeof *row);
  const char *bad = NULL;
  int64_t state = 0, created = 0, seq = 0;
  if (!id_ok(&cells[0]))
    bad = "id is not \"job-\" + [a-z0-9-] text below 64 bytes";
  else if (!owner_ok(&cells[1]))
    bad = "owner is not \"\" or 32 hex digits";
  else if (!int_in(&cells[2], 0, 3, &state))
    bad = "state is not an integer 0..3";
  else if (!int_in(&cells[3], 0, JOBS_DB_TIME_MAX, &created))
    bad = "created is not an integer time in range";
  else if (!((cells[4].type == JOBS_DB_REAL && isfinite(cells[4].f) && cells[4].f >= 0 &&
              cells[4].f <= (double)JOBS_DB_TIME_MAX) ||
             (cells[4].type == JOBS_DB_INT && cells[4].i >= 0 && cells[4].i <= JOBS_DB_TIME_MAX)))
    bad = "finished is not a time in range";
  else if (!int_in(&cells[6], 1, JOBS_DB_SEQ_MAX, &seq))
    bad = "seq is not an integer 1..2^53";
  /* a pending job's json is replaced on load (job_interrupted): only a finished one's must be valid */
  else if (state >= 2 && !json_object_ok(&cells[5]))
    bad = "the result of a finished job is not one UTF-8 JSON object (TEXT)";
  else if (state < 2 && cells[5].type != JOBS_DB_NULL && cells[5].type != JOBS_DB_TEXT)
    bad = "json is neither NULL nor TEXT";
  if (bad) {
    snprintf(why, why_cap, "%s", bad);
    return false;
  }
  row->id = cells[0].s;
  row->owner = cells[1].s;
  row->state = (int)state;
  row->created = created;
  row->finished_unix = cells[4].type == JOBS_DB_REAL ? cells[4].f : (double)cells[4].i;
  row->json = state >= 2 ? cells[5].s : NULL;
  row->seq = seq;
  return true;
}

static void cell_of(sqlite3_stmt *q, int col, jobs_db_cell *c) {
  memset(c, 0, sizeof *c);
  switch (sqlite3_column_type(q, col)) {
  case SQLITE_INTEGER:
    c->type = JOBS_DB_INT;
    c->i = sqlite3_column_int64(q, col);
    break;
  case SQLITE_FLOAT:
    c->type = JOBS_DB_REAL;
    c->f = sqlite3_column_double(q, col);
    break;
  case SQLITE_TEXT:
    c->type = JOBS_DB_TEXT;
    c->s = (const char *)sqlite3_column_text(q, col);
    c->n = (size_t)sqlite3_column_bytes(q, col);
    break;
  case SQLITE_BLOB:
    c->type = JOBS_DB_BLOB;
    c->s = sqlite3_column_blob(q, col);
    c->n = (size_t)sqlite3_column_bytes(q, col);
    break;
  default:
    c->type = JOBS_DB_NULL;
  }
}

#define JOBS_DB_WARN_ROWS 10 /* warnings about bad rows, then only the count */

qvl_status jobs_db_load(jobs_db *d, jobs_db_row_fn fn, void *user, int64_t *skipped) {
  *skipped = 0;
  sqlite3_stmt *q = NULL;
  /* rowid breaks ties of a crafted seq so that the order is still total */
  if (sqlite3_prepare_v2(d->db, "SELECT id, owner, state, created, finished, json, seq, rowid FROM jobs ORDER BY seq, rowid",
                         -1, &q, NULL) != SQLITE_OK)
    return db_error(d, "load");
  qvl_status st = QVL_OK;
  int rc;
  while (st == QVL_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    jobs_db_cell cells[JOBS_DB_NCOLS];
    for (int c = 0; c < JOBS_DB_NCOLS; c++)
      cell_of(q, c, &cells[c]);
    jobs_db_row r;
    char why[128];
    if (!jobs_db_row_check(cells, &r, why, sizeof why)) {
      if (++*skipped <= JOBS_DB_WARN_ROWS)
        log_warn("jobs db: row with rowid %lld skipped: %s", (long long)sqlite3_column_int64(q, 7), why);
      continue;
    }
    st = fn(user, &r);
  }
  if (st == QVL_OK && rc != SQLITE_DONE)
    st = db_error(d, "load");
  sqlite3_finalize(q);
  if (*skipped > JOBS_DB_WARN_ROWS)
    log_warn("jobs db: %lld bad rows skipped in all (left in the file, not loaded)", (long long)*skipped);
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

qvl_status jobs_db_begin(jobs_db *d) {
  return sqlite3_exec(d->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? QVL_OK : db_error(d, "begin");
}

qvl_status jobs_db_commit(jobs_db *d) {
  return sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? QVL_OK : db_error(d, "commit");
}
