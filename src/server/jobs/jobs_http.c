/* Async jobs on the HTTP side (see jobs_http.h). */
#include "server/jobs/jobs_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "base/timing.h"
#include "server/http/auth.h"
#include "server/http/backend.h"
#include "server/http/reply.h"
#include "server/openai/chat_wire.h"

qvl_status jobs_http_open(const server_config *cfg, int port_no, jobs **out) {
  char replica[JOBS_REPLICA_MAX + 1];
  if (cfg->replica_id) {
    snprintf(replica, sizeof replica, "%s", cfg->replica_id);
    if (strlen(cfg->replica_id) > JOBS_REPLICA_MAX || !jobs_replica_valid(cfg->replica_id))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "replica_id '%s': expected 1 to %d of a-z, 0-9 and '-'", cfg->replica_id,
                        JOBS_REPLICA_MAX);
  } else {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char port[16];
    snprintf(port, sizeof port, "-%d", port_no);
    size_t room = JOBS_REPLICA_MAX - strlen(port), n = 0;
    for (const char *p = host; *p && *p != '.' && n < room; p++) {
      char ch = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
      replica[n++] = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ? ch : '-';
    }
    while (n && replica[n - 1] == '-')
      n--;
    snprintf(replica + n, sizeof replica - n, "%s%s", n ? "" : "qvl", port);
    if (replica[0] == '-')
      replica[0] = 'r';
  }
  jobs_opts o = {cfg->max_jobs, (double)cfg->job_ttl_s, cfg->jobs_db, replica};
  return jobs_open(&o, time_now_s(), out);
}

char *jobs_http_result_json(const char *id, int64_t created, const char *model, const api_result *res) {
  if (res->status == QVL_OK)
    return api_completion_json(id, created, model, res);
  api_error e;
  api_error_from_status(&e, res->status, res->error);
  return api_error_inner_json(&e);
}

static bool valid_job_id(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n >= JOBS_ID_CAP)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-'))
      return false;
  return true;
}

static enum MHD_Result handle_job(struct MHD_Connection *c, server *s, conn_req *r, const char *id, bool del) {
  if (!valid_job_id(id))
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "job_not_found", "no job '%s'", "(invalid id)");
  auth_owner(s, c, r->owner);
  char *json = NULL;
  if (del) {
    /* a finished job is removed at once; a pending one is cancelled (it then reads failed, and a
     * second DELETE removes it) */
    uint64_t eid = 0;
    bool has_eid = false;
    if (jobs_delete(s->jobs, id, r->owner, time_now_s(), &eid, &has_eid, &json) == JOBS_DELETE_CANCEL && has_eid)
      backend_cancel(s, eid);
  } else {
    json = jobs_get_json_owned(s->jobs, id, r->owner, time_now_s());
  }
  /* another key's job answers exactly like an unknown one: ids are not a side channel */
  if (!json)
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "job_not_found",
                        "no job '%s' (unknown, deleted, or finished longer ago than job_ttl_s)", id);
  return reply_json(c, s, r, 200, json, NULL);
}

enum MHD_Result jobs_http_list(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  auth_owner(s, c, r->owner);
  const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
  long limit = 20;
  if (lim) {
    char *end = NULL;
    limit = strtol(lim, &end, 10);
    if (end == lim || *end || limit < 1 || limit > JOBS_LIST_MAX)
      return reply_errorf(c, s, r, QVL_ERR_INVALID_ARG, "invalid_value",
                          "limit must be an integer from 1 to %s", "100 (JOBS_LIST_MAX)");
  }
  if (after && !valid_job_id(after))
    after = "job-invalid"; /* matches nothing: an empty page */
  char *json = jobs_list_json(s->jobs, r->owner, time_now_s(), (int)limit, after);
  if (!json)
    return reply_errorf(c, s, r, QVL_ERR_BUSY, "server_busy", "%s", "out of memory listing the jobs");
  return reply_json(c, s, r, 200, json, NULL);
}

enum MHD_Result jobs_http_get(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  return handle_job(c, s, r, t->rest, false);
}

enum MHD_Result jobs_http_delete(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  return handle_job(c, s, r, t->rest, true);
}
