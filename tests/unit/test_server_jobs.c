/* The async jobs store: states, results, expiry after the ttl, the cap on stored jobs; owners,
 * DELETE, listing (issue 10); replica ids and the SQLite file across a restart (issue 14). */
#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/jobs/jobs.h"
#include "test.h"

static const char *status_of(jobs *j, const char *id, double now, cJSON **out) {
  static char st[16];
  char *s = jobs_get_json(j, id, now);
  if (!s)
    return NULL;
  cJSON *o = cJSON_Parse(s);
  free(s);
  CHECK(o != NULL, "job JSON parses");
  snprintf(st, sizeof st, "%s", o ? cJSON_GetStringValue(cJSON_GetObjectItem(o, "status")) : "");
  if (out)
    *out = o;
  else
    cJSON_Delete(o);
  return st;
}


static cJSON *parse_free(char *s) {
  cJSON *o = s ? cJSON_Parse(s) : NULL;
  free(s);
  return o;
}

static int list_count(jobs *j, const char *owner, int limit, const char *after, bool *more, char *last_id) {
  cJSON *o = parse_free(jobs_list_json(j, owner, 1, limit, after));
  CHECK(o != NULL, "list parses");
  cJSON *data = cJSON_GetObjectItem(o, "data");
  int n = cJSON_GetArraySize(data);
  if (more)
    *more = cJSON_IsTrue(cJSON_GetObjectItem(o, "has_more"));
  if (last_id && n)
    snprintf(last_id, JOBS_ID_CAP, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(data, n - 1), "id")));
  for (int i = 0; i < n; i++)
    CHECK(!cJSON_GetObjectItem(cJSON_GetArrayItem(data, i), "result"), "a listing carries no results");
  cJSON_Delete(o);
  return n;
}

/* Issue 10 item 7: a job belongs to the key that made it; DELETE of a finished job frees it. */
static void test_owners(void) {
  char ka[JOBS_OWNER_CAP], kb[JOBS_OWNER_CAP], none[JOBS_OWNER_CAP];
  jobs_owner_of("key-a", ka);
  jobs_owner_of("key-b", kb);
  jobs_owner_of(NULL, none);
  CHECK(strlen(ka) == 32 && strcmp(ka, kb) && !strstr(ka, "key-a") && none[0] == '\0', "owner = hash of the key: %s", ka);
  jobs *j = NULL;
  CHECK(jobs_init(2, 100, &j) == QVL_OK, "init 2");
  char a[JOBS_ID_CAP], b[JOBS_ID_CAP], c[JOBS_ID_CAP];
  CHECK(jobs_add_owned(j, 0, ka, a) == QVL_OK && jobs_add_owned(j, 0, kb, b) == QVL_OK, "add a (key a), b (key b)");
  char *s = jobs_get_json_owned(j, a, kb, 1);
  CHECK(s == NULL, "key b cannot read key a's job");
  free(s);
  s = jobs_get_json_owned(j, a, ka, 1);
  CHECK(s != NULL, "key a reads its job");
  free(s);
  uint64_t eid = 0;
  bool has = true;
  char *json = NULL;
  jobs_set_engine_id(j, a, 7);
  CHECK(jobs_delete(j, a, kb, 1, &eid, &has, &json) == JOBS_DELETE_NOT_FOUND && !json, "key b cannot cancel key a's job");
  CHECK(jobs_delete(j, a, ka, 1, &eid, &has, &json) == JOBS_DELETE_CANCEL && has && eid == 7 && json,
        "DELETE of a pending job asks to cancel it");
  free(json);
  jobs_finish(j, a, 2, false, strdup("{\"message\":\"cancelled\"}"));
  CHECK(list_count(j, ka, 10, NULL, NULL, NULL) == 1 && list_count(j, kb, 10, NULL, NULL, NULL) == 1 &&
            list_count(j, none, 10, NULL, NULL, NULL) == 0,
        "each key lists only its own jobs");
  /* the store is full (2); deleting the finished job makes room at once, long before the ttl */
  CHECK(jobs_add_owned(j, 3, ka, c) == QVL_ERR_BUSY, "full");
  CHECK(jobs_delete(j, a, ka, 3, &eid, &has, &json) == JOBS_DELETE_REMOVED && json && strstr(json, "\"deleted\":true"),
        "DELETE of a finished job removes it");
  free(json);
  s = jobs_get_json_owned(j, a, ka, 3);
  CHECK(s == NULL, "deleted: gone");
  free(s);
  CHECK(jobs_delete(j, a, ka, 3, &eid, &has, &json) == JOBS_DELETE_NOT_FOUND, "deleted twice: not found");
  int64_t stored, pending;
  jobs_counts(j, 3, &stored, &pending);
  CHECK(stored == 1 && pending == 1, "freed: %lld stored", (long long)stored);
  CHECK(jobs_add_owned(j, 3, ka, c) == QVL_OK, "room again right after the DELETE");
  jobs_free(j);

  /* pages: newest first, limit and cursor */
  CHECK(jobs_init(50, 100, &j) == QVL_OK, "init 50");
  char ids[25][JOBS_ID_CAP];
  for (int i = 0; i < 25; i++)
    jobs_add_owned(j, 0, ka, ids[i]);
  jobs_add_owned(j, 0, kb, c);
  bool more = false;
  char last[JOBS_ID_CAP] = "";
  CHECK(list_count(j, ka, 10, NULL, &more, last) == 10 && more && !strcmp(last, ids[15]), "page 1: newest 10 (%s)", last);
  CHECK(list_count(j, ka, 10, last, &more, last) == 10 && more && !strcmp(last, ids[5]), "page 2");
  CHECK(list_count(j, ka, 10, last, &more, last) == 5 && !more && !strcmp(last, ids[0]), "page 3: the rest");
  CHECK(list_count(j, ka, 1000, NULL, &more, NULL) == 25, "limit clamped to the store");
  CHECK(list_count(j, ka, 10, "job-nosuchjob", &more, NULL) == 0, "unknown cursor: empty page");
  CHECK(list_count(j, ka, 10, c, &more, NULL) == 0, "another owner's id as cursor: empty page");
  jobs_free(j);
}

/* Issue 14: ids name their replica; the SQLite file keeps jobs across a restart. */
static void test_db(void) {
  jobs *j = NULL;
  jobs_opts bad = {10, 100, NULL, "Bad_Name"};
  CHECK(jobs_open(&bad, 0, &j) == QVL_ERR_INVALID_ARG && !j, "replica names are [a-z0-9-]");
  CHECK(!jobs_replica_valid("-a") && !jobs_replica_valid("a-") && !jobs_replica_valid("") &&
            !jobs_replica_valid("abcdefghijklmnopqrstuvwxy") && jobs_replica_valid("r1") && jobs_replica_valid("node-7"),
        "replica name rules");
  char dir[] = "/tmp/qvl-jobs-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "temp dir");
  char path[256];
  snprintf(path, sizeof path, "%s/jobs.db", dir);
  jobs_opts o = {10, 100, path, "node-7"};
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "open a new db: %s", qvl_last_error());
  char ka[JOBS_OWNER_CAP], kb[JOBS_OWNER_CAP];
  jobs_owner_of("key-a", ka);
  jobs_owner_of("key-b", kb);
  char done[JOBS_ID_CAP], pend[JOBS_ID_CAP], gone[JOBS_ID_CAP], old[JOBS_ID_CAP];
  jobs_add_owned(j, 0, ka, done);
  jobs_add_owned(j, 0, ka, pend);
  jobs_add_owned(j, 0, ka, gone);
  jobs_add_owned(j, 0, kb, old);
  CHECK(!strncmp(done, "job-node-7-", 11) && strlen(done) == 11 + 24, "id carries the replica: %s", done);
  jobs_set_running(j, pend);
  jobs_finish(j, done, 1, true, strdup("{\"object\":\"chat.completion\",\"answer\":42}"));
  jobs_finish(j, gone, 1, true, strdup("{}"));
  jobs_finish(j, old, 1, true, strdup("{}"));
  char *json = NULL;
  uint64_t eid;
  bool has;
  CHECK(jobs_delete(j, gone, ka, 1, &eid, &has, &json) == JOBS_DELETE_REMOVED, "delete before the restart");
  free(json);
  jobs_free(j); /* the process stops */
  j = NULL;

  /* a restart 50 s later (new monotonic clock origin): the ttl keeps counting from the finish */
  o.ttl_s = 100;
  CHECK(jobs_open(&o, 1000, &j) == QVL_OK, "reopen: %s", qvl_last_error());
  cJSON *x = parse_free(jobs_get_json_owned(j, done, ka, 1000));
  CHECK(x && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "status")), "done") &&
            cJSON_GetObjectItem(cJSON_GetObjectItem(x, "result"), "answer")->valuedouble == 42,
        "a finished job and its result survive the restart");
  cJSON_Delete(x);
  x = parse_free(jobs_get_json_owned(j, pend, ka, 1000));
  cJSON *err = cJSON_GetObjectItem(x, "error");
  CHECK(x && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "status")), "failed") &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "code")), "job_interrupted"),
        "a running job comes back failed, job_interrupted");
  cJSON_Delete(x);
  char *s = jobs_get_json_owned(j, gone, ka, 1000);
  CHECK(s == NULL, "a deleted job stays deleted");
  free(s);
  s = jobs_get_json_owned(j, old, ka, 1000);
  CHECK(s == NULL, "owners survive the restart too");
  free(s);
  CHECK(list_count(j, ka, 10, NULL, NULL, NULL) == 2, "key a lists its 2 jobs");
  char fresh[JOBS_ID_CAP];
  CHECK(jobs_add_owned(j, 1000, ka, fresh) == QVL_OK, "add after the restart");
  bool more;
  char last[JOBS_ID_CAP] = "";
  list_count(j, ka, 1, NULL, &more, last);
  CHECK(!strcmp(last, fresh), "the new job lists first (sequence continues)");
  CHECK(jobs_db_errors(j) == 0, "no db errors");
  jobs_free(j);
  j = NULL;

  /* expiry across a restart: finished at wall time T, reopened with a ttl already past */
  o.ttl_s = 1e-3;
  usleep(2000);
  CHECK(jobs_open(&o, 5, &j) == QVL_OK, "reopen with a tiny ttl");
  int64_t stored, pending;
  jobs_counts(j, 5, &stored, &pending);
  /* the job interrupted at the previous open finished then (wall clock): also past the ttl */
  CHECK(stored == 1 && pending == 0, "finished jobs expire by wall-clock time, the one interrupted now stays: %lld left", (long long)stored);
  jobs_free(j);

  /* not a database */
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("this is not an SQLite file, not even close, padding padding padding padding padding padding", f);
    fclose(f);
  }
  char wal[300];
  snprintf(wal, sizeof wal, "%s-wal", path);
  unlink(wal);
  snprintf(wal, sizeof wal, "%s-shm", path);
  unlink(wal);
  o.ttl_s = 100;
  j = NULL;
  CHECK(jobs_open(&o, 0, &j) != QVL_OK && !j, "a file that is not a database is refused: %s", qvl_last_error());
  jobs_free(j);
  unlink(path);
  snprintf(wal, sizeof wal, "%s-wal", path);
  unlink(wal);
  snprintf(wal, sizeof wal, "%s-shm", path);
  unlink(wal);
  rmdir(dir);
}

/* ---- issue 24 item 5: crafted job stores ---------------------------------------------------- */

static void rm_db(const char *path) {
  char p[300];
  unlink(path);
  snprintf(p, sizeof p, "%s-wal", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-shm", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-journal", path);
  unlink(p);
}

static bool sql_file(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  bool ok = sqlite3_open(path, &db) == SQLITE_OK && sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
  if (!ok)
    fprintf(stderr, "sqlite: %s\n", db ? sqlite3_errmsg(db) : "?");
  sqlite3_close(db);
  return ok;
}

static int64_t sql_count(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *q = NULL;
  int64_t n = -1;
  if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    n = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return n;
}

/* A database another program made (or a newer schema) is refused and left byte for byte. */
static void test_db_foreign(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/other.db", dir);
  struct {
    const char *sql, *what;
  } cases[] = {
      {"CREATE TABLE users(name TEXT); INSERT INTO users VALUES('ann');", "another program's tables"},
      {"PRAGMA application_id = 1234; CREATE TABLE jobs(x);", "another application id"},
      {"PRAGMA application_id = 1903586410; PRAGMA user_version = 7; CREATE TABLE jobs(id TEXT PRIMARY KEY NOT NULL,"
       " owner TEXT NOT NULL, state INTEGER NOT NULL, created INTEGER NOT NULL, finished REAL NOT NULL DEFAULT 0,"
       " json TEXT, seq INTEGER NOT NULL);",
       "a newer schema version"},
      {"CREATE TABLE jobs(id TEXT, owner TEXT, state INTEGER, created INTEGER, finished REAL, json TEXT, seq INTEGER);",
       "a jobs table of another shape"},
      {"PRAGMA journal_mode=DELETE; CREATE TABLE t(a); CREATE INDEX ti ON t(a);", "tables and an index"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    rm_db(path);
    CHECK(sql_file(path, cases[c].sql), "craft %s", cases[c].what);
    buf before = {0}, after = {0};
    CHECK(buf_read_file(path, 1 << 20, &before) == QVL_OK, "read");
    jobs_opts o = {10, 100, path, NULL};
    jobs *j = NULL;
    qvl_status st = jobs_open(&o, 0, &j);
    CHECK(st != QVL_OK && !j && strstr(qvl_last_error(), "not a qvl jobs database"), "%s refused: %s", cases[c].what,
          qvl_last_error());
    jobs_free(j);
    CHECK(buf_read_file(path, 1 << 20, &after) == QVL_OK, "read again");
    CHECK(before.len == after.len && !memcmp(before.data, after.data, before.len), "%s: file unchanged byte for byte",
          cases[c].what);
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(access(wal, F_OK) != 0, "%s: no WAL file created", cases[c].what);
    buf_free(&before);
    buf_free(&after);
  }
  /* the first qvl versions wrote no marks: their file (nothing but our jobs table) is adopted */
  rm_db(path);
  CHECK(sql_file(path, "CREATE TABLE IF NOT EXISTS jobs ( id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, state "
                       "INTEGER NOT NULL, created INTEGER NOT NULL, finished REAL NOT NULL DEFAULT 0, json TEXT, seq "
                       "INTEGER NOT NULL);"
                       "INSERT INTO jobs VALUES('job-0123456789abcdef01234567', '', 2, 1700000000, 1700000001.5, "
                       "'{\"ok\":1}', 5);"),
        "craft a legacy file");
  jobs_opts o = {10, 1e12, path, NULL};
  jobs *j = NULL;
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "a legacy qvl file is ours: %s", qvl_last_error());
  char *s = jobs_get_json(j, "job-0123456789abcdef01234567", 0);
  CHECK(s && strstr(s, "\"ok\":1"), "its job loads: %s", s ? s : "(none)");
  free(s);
  jobs_free(j);
  CHECK(sql_count(path, "PRAGMA application_id") == 1903586410 && sql_count(path, "PRAGMA user_version") == 1,
        "and now carries the qvl marks");
  /* a new file gets the marks too */
  rm_db(path);
  j = NULL;
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "new file");
  jobs_free(j);
  CHECK(sql_count(path, "PRAGMA application_id") == 1903586410, "a new file carries the application id");
  rm_db(path);
}

/* A fresh jobs database file dir/name (its path into path) made by jobs_open, so that a test can
 * write rows into its table with SQL; the options that open it again, keeping max_jobs jobs. */
static jobs_opts fresh_db(const char *dir, const char *name, int64_t max_jobs, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  rm_db(path);
  jobs_opts o = {max_jobs, 1e12, path, NULL};
  jobs *j = NULL;
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "new db");
  jobs_free(j);
  return o;
}

/* Rows are validated on load: bad ones are skipped, good ones served, all output is JSON. */
static void test_db_bad_rows(const char *dir) {
  char path[256];
  jobs_opts o = fresh_db(dir, "rows.db", 100, path, sizeof path);
  const char *owner = "0123456789abcdef0123456789abcdef";
  char sql[4096];
  snprintf(sql, sizeof sql,
           "INSERT INTO jobs VALUES('job-good1', '%s', 2, 1700000000, 1700000001, '{\"a\":1}', 3);"
           "INSERT INTO jobs VALUES('job-maxseq', '%s', 2, 1700000000, 1700000001, '{}', 9223372036854775807);"
           "INSERT INTO jobs VALUES('job-notjson', '%s', 2, 1700000000, 1700000001, '{\"a\":', 4);"
           "INSERT INTO jobs VALUES('job-array', '%s', 2, 1700000000, 1700000001, '[1]', 5);"
           "INSERT INTO jobs VALUES('job-blob', '%s', 2, 1700000000, 1700000001, x'7b7d', 6);"
           "INSERT INTO jobs VALUES('job-q\"uote', '%s', 2, 1700000000, 1700000001, '{}', 7);"
           "INSERT INTO jobs VALUES(CAST(x'6a6f622d6e756c00782d7979' AS TEXT), '%s', 2, 1700000000, 1700000001, '{}', 8);"
           "INSERT INTO jobs VALUES('job-state9', '%s', 9, 1700000000, 1700000001, '{}', 9);"
           "INSERT INTO jobs VALUES('job-textnum', '%s', 2, 'yesterday', 1700000001, '{}', 10);"
           "INSERT INTO jobs VALUES('job-badowner', 'Z', 2, 1700000000, 1700000001, '{}', 11);"
           "INSERT INTO jobs VALUES('job-nanfin', '%s', 2, 1700000000, 1e999, '{}', 12);"
           "INSERT INTO jobs VALUES('job-negseq', '%s', 2, 1700000000, 1700000001, '{}', -5);"
           "INSERT INTO jobs VALUES('job-dupseq', '%s', 2, 1700000000, 1700000001, '{}', 3);"
           "INSERT INTO jobs VALUES('job-badutf8', '%s', 2, 1700000000, 1700000001, CAST(x'7b2261223a2280227d' AS TEXT), 13);"
           "INSERT INTO jobs VALUES('job-pending', '%s', 0, 1700000000, 0, x'00ff', 14);"
           "INSERT INTO jobs VALUES('job-good2', '%s', 1, 1700000000, 0, NULL, 15);",
           owner, owner, owner, owner, owner, owner, owner, owner, owner, owner, owner, owner, owner, owner, owner);
  CHECK(sql_file(path, sql), "craft rows");
  jobs *j = NULL;
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "a file with bad rows opens: %s", qvl_last_error());
  cJSON *list = parse_free(jobs_list_json(j, owner, 0, 100, NULL));
  CHECK(list != NULL, "GET /v1/jobs is valid JSON");
  cJSON *data = cJSON_GetObjectItem(list, "data");
  int n = cJSON_GetArraySize(data);
  CHECK(n == 2, "only the 2 good rows load: %d", n);
  for (int i = 0; i < n; i++) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(data, i), "id"));
    CHECK(id && (!strcmp(id, "job-good1") || !strcmp(id, "job-good2")), "loaded: %s", id ? id : "?");
  }
  cJSON_Delete(list);
  cJSON *x = parse_free(jobs_get_json(j, "job-good1", 0));
  CHECK(x && cJSON_GetObjectItem(cJSON_GetObjectItem(x, "result"), "a"), "a good row's result is served");
  cJSON_Delete(x);
  char *s = jobs_get_json(j, "job-notjson", 0);
  CHECK(!s, "a row whose result is not JSON is not served");
  free(s);
  /* the sequence continues after the largest valid seq: no overflow, new job listed first */
  char fresh[JOBS_ID_CAP];
  CHECK(jobs_add_owned(j, 0, owner, fresh) == QVL_OK, "add");
  list = parse_free(jobs_list_json(j, owner, 0, 1, NULL));
  const char *first = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(list, "data"), 0), "id"));
  CHECK(first && !strcmp(first, fresh), "the new job lists first");
  cJSON_Delete(list);
  jobs_free(j);
  CHECK(sql_count(path, "SELECT count(*) FROM jobs WHERE id = 'job-maxseq'") == 1, "bad rows are left in the file");
  rm_db(path);

  /* output is escaped even for an id that reached the store some other way */
  CHECK(jobs_init(10, 100, &j) == QVL_OK, "memory store");
  jobs_db_row r = {"job-\"},{\"x\\\n", "", 2, 1, 1, "{}", 1};
  CHECK(jobs_import(j, &r, 0, 1) == QVL_OK, "import");
  list = parse_free(jobs_list_json(j, "", 0, 10, NULL));
  first = list ? cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(list, "data"), 0), "id")) : NULL;
  CHECK(first && !strcmp(first, r.id), "an id with quotes, backslash and newline is escaped");
  cJSON_Delete(list);
  jobs_db_row big = {"job-a", "", 2, 1, 1, "{}", INT64_MAX};
  CHECK(jobs_import(j, &big, 0, 1) == QVL_OK, "import seq INT64_MAX (ignored)");
  int64_t stored, pending;
  jobs_counts(j, 0, &stored, &pending);
  CHECK(stored == 1, "seq INT64_MAX is not imported");
  jobs_free(j);
}

/* Trimming a file far over --max-jobs is linear (was: 200k rows took 120 s, quadratic). */
static void test_db_trim(const char *dir) {
  char path[256];
  jobs_opts o = fresh_db(dir, "big.db", 10, path, sizeof path);
  CHECK(sql_file(path, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
                       "INSERT INTO jobs SELECT printf('job-%024x', i), '', 2, 1700000000, 1700000001, '{}', i FROM n;"),
        "200,000 rows");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  jobs *j = NULL;
  CHECK(jobs_open(&o, 0, &j) == QVL_OK, "open: %s", qvl_last_error());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  /* a generous bound that only a quadratic trim misses (seconds here; 120 s before) */
  CHECK(s < 30, "200k rows trimmed to 10 in %.1f s", s);
  printf("  200,000 rows trimmed to 10 at open in %.2f s\n", s);
  int64_t stored, pending;
  jobs_counts(j, 0, &stored, &pending);
  CHECK(stored == 10, "10 kept: %lld", (long long)stored);
  char *x = jobs_get_json(j, "job-000000000000000000030d40", 0);
  CHECK(x != NULL, "the newest (seq 200000) is kept");
  free(x);
  x = jobs_get_json(j, "job-000000000000000000030d36", 0);
  CHECK(x == NULL, "the 11th newest is gone");
  free(x);
  jobs_free(j);
  CHECK(sql_count(path, "SELECT count(*) FROM jobs") == 10, "and gone from the file");
  rm_db(path);
}

int main(void) {
  jobs *j = NULL;
  CHECK(jobs_init(0, 10, &j) != QVL_OK && j == NULL, "max_jobs 0 refused");
  CHECK(jobs_init(3, 10, &j) == QVL_OK, "init");
  char a[JOBS_ID_CAP], b[JOBS_ID_CAP], c[JOBS_ID_CAP], d[JOBS_ID_CAP];
  CHECK(jobs_add(j, 0, a) == QVL_OK && jobs_add(j, 0, b) == QVL_OK && jobs_add(j, 0, c) == QVL_OK, "add 3");
  CHECK(!strncmp(a, "job-", 4) && strcmp(a, b) && strcmp(b, c), "distinct ids %s %s %s", a, b, c);
  CHECK(jobs_add(j, 0, d) == QVL_ERR_BUSY, "cap of 3");
  const char *st = status_of(j, a, 1, NULL);
  CHECK(st && !strcmp(st, "queued"), "queued: %s", st ? st : "(none)");
  uint64_t eid = 0;
  CHECK(!jobs_engine_id(j, a, &eid), "no engine id yet");
  jobs_set_engine_id(j, a, 42);
  CHECK(jobs_engine_id(j, a, &eid) && eid == 42, "engine id");
  jobs_set_running(j, a);
  st = status_of(j, a, 1, NULL);
  CHECK(st && !strcmp(st, "running"), "running");
  jobs_finish(j, a, 2, true, strdup("{\"object\":\"chat.completion\",\"x\":1}"));
  cJSON *o = NULL;
  st = status_of(j, a, 3, &o);
  CHECK(st && !strcmp(st, "done"), "done");
  cJSON *res = cJSON_GetObjectItem(o, "result");
  CHECK(res && cJSON_GetObjectItem(res, "x") && cJSON_GetObjectItem(res, "x")->valuedouble == 1, "result embedded");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")), a), "id");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")), "job"), "object");
  cJSON_Delete(o);
  CHECK(!jobs_engine_id(j, a, &eid), "no cancel after done");
  jobs_finish(j, b, 2, false, strdup("{\"message\":\"bad image\",\"type\":\"invalid_request_error\"}"));
  st = status_of(j, b, 3, &o);
  CHECK(st && !strcmp(st, "failed"), "failed");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "message")), "bad image"),
        "error embedded");
  cJSON_Delete(o);
  /* finishing twice keeps the first result; unknown ids are ignored */
  jobs_finish(j, a, 2, false, strdup("{}"));
  st = status_of(j, a, 3, NULL);
  CHECK(st && !strcmp(st, "done"), "first finish wins");
  jobs_finish(j, "job-unknown", 2, true, strdup("{}"));
  CHECK(jobs_get_json(j, "job-unknown", 3) == NULL, "unknown id");
  int64_t stored, pending;
  jobs_counts(j, 3, &stored, &pending);
  CHECK(stored == 3 && pending == 1, "counts %lld %lld", (long long)stored, (long long)pending);
  /* expiry: finished at t=2 with ttl 10 -> gone at t=12; the queued one stays */
  CHECK(status_of(j, a, 11.9, NULL) != NULL, "kept before the ttl");
  CHECK(status_of(j, a, 12, NULL) == NULL && status_of(j, b, 12, NULL) == NULL, "expired after the ttl");
  CHECK(status_of(j, c, 1000, NULL) != NULL, "a pending job never expires");
  CHECK(jobs_add(j, 12, d) == QVL_OK, "room again after expiry");
  jobs_remove(j, d);
  CHECK(jobs_get_json(j, d, 12) == NULL, "removed");
  jobs_free(j);
  jobs_free(NULL);
  test_owners();
  test_db();
  char dir[] = "/tmp/qvl-jobs24-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "temp dir");
  test_db_foreign(dir);
  test_db_bad_rows(dir);
  test_db_trim(dir);
  rmdir(dir);
  return TEST_SUMMARY("server_jobs");
}
