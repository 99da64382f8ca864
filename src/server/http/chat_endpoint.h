/*
 * The endpoints that generate: POST /v1/chat/completions and POST /v1/jobs, and (through
 * dialect_endpoints.h) every dialect translated into a chat request. Admission (linearised with
 * the drain), submission, then waiting on the connection's thread: a whole answer, a stream, or
 * 202 with the job's id.
 */
#ifndef QVL_SERVER_HTTP_CHAT_ENDPOINT_H
#define QVL_SERVER_HTTP_CHAT_ENDPOINT_H

#include <stdbool.h>

#include "server/dialects/dialect.h"
#include "server/http/request.h"

/* Serves a chat request: r's body, or cr's translation of another dialect's body (its formatter
 * shapes the answer and the errors). job: answered 202 at once, the result kept in the job store. */
enum MHD_Result chat_endpoint_serve(struct MHD_Connection *c, server *s, conn_req *r, bool job, compat_request *cr);
/* POST /v1/chat/completions. */
enum MHD_Result chat_endpoint_chat(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* POST /v1/jobs. */
enum MHD_Result chat_endpoint_job(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

#endif
