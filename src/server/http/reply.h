/*
 * Queuing a whole response on a connection: the headers every response carries (nosniff, CORS,
 * Connection: close on a reserve connection), JSON bodies made valid UTF-8, OpenAI-style errors
 * with their Retry-After / WWW-Authenticate headers, or in the error shape of another dialect.
 * Counts each status for /metrics and records it for the log line.
 */
#ifndef QVL_SERVER_HTTP_REPLY_H
#define QVL_SERVER_HTTP_REPLY_H

#include <microhttpd.h>
#include <stddef.h>

#include "server/dialects/dialect.h"
#include "server/http/request.h"
#include "server/openai/api_error.h"

/* Adds the headers every response carries (nosniff). */
void reply_common_headers(struct MHD_Response *resp);
/* Counts a response's status class for /metrics. */
void reply_count_status(server *s, int status);

/* Queues resp, its headers all added (the reference is taken), and records status for the log line
 * and /metrics. */
enum MHD_Result reply_queue(struct MHD_Connection *c, server *s, conn_req *r, int status, struct MHD_Response *resp);
/* Queues a response whose body (malloc'd) is taken. extra: NULL-terminated name, value pairs. */
enum MHD_Result reply(struct MHD_Connection *c, server *s, conn_req *r, int status, const char *ctype, char *body,
                      size_t len, const char *const *extra);
/* A JSON body (malloc'd, taken; NULL: out of memory, the connection closes). */
enum MHD_Result reply_json(struct MHD_Connection *c, server *s, conn_req *r, int status, char *json,
                           const char *const *extra);
/* An OpenAI error body with its status, Retry-After on 503 and WWW-Authenticate on 401. */
enum MHD_Result reply_error(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                            const char *const *extra);
/* reply_error of api_error_status(st, code, NULL, fmt, arg). */
enum MHD_Result reply_errorf(struct MHD_Connection *c, server *s, conn_req *r, qvl_status st, const char *code,
                             const char *fmt, const char *arg);
/* An error in the shape of the API that was called (fmt: its formatter, NULL for OpenAI's), with
 * reply_error's headers. */
enum MHD_Result reply_error_as(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                               const compat_format *fmt, void *state);

#endif
