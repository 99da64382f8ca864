/*
 * Async jobs on the HTTP side: opening the store with the replica's name (--replica-id, else
 * "HOST-PORT"), a job's result body, and GET /v1/jobs, GET and DELETE /v1/jobs/ID (POST /v1/jobs
 * is a chat request: http/chat_endpoint.h). A caller sees only the jobs made with its key.
 */
#ifndef QVL_SERVER_JOBS_JOBS_HTTP_H
#define QVL_SERVER_JOBS_JOBS_HTTP_H

#include <stdint.h>

#include "server/config/settings.h"
#include "server/http/request.h"
#include "server/jobs/jobs.h"
#include "server/openai/result.h"

/* The job store (jobs.h): --jobs-db or memory; ids carry --replica-id, else "HOST-PORT". */
qvl_status jobs_http_open(const server_config *cfg, int port, jobs **out);
/* What a finished job reads: the chat.completion object, or the error's inner object (malloc'd). */
char *jobs_http_result_json(const char *id, int64_t created, const char *model, const api_result *res);

/* GET /v1/jobs?limit=N&after=ID: the caller's jobs, newest first. */
enum MHD_Result jobs_http_list(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* GET /v1/jobs/ID (t->rest). */
enum MHD_Result jobs_http_get(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* DELETE /v1/jobs/ID: a finished job is removed, a pending one cancelled. */
enum MHD_Result jobs_http_delete(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

#endif
