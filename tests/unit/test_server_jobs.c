/* The async jobs store: states, results, expiry after the ttl, the cap on stored jobs. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/jobs.h"
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
  return TEST_SUMMARY("server_jobs");
}
