/*
 * One HTTP request as libmicrohttpd hands it over: its state (conn_req), reading its body under
 * the max_body_mb cap (413 past it), handing it to the router once complete, and the bookkeeping
 * when its response is done (the drain's count, the log line if nobody else wrote it).
 */
#ifndef QVL_SERVER_HTTP_REQUEST_H
#define QVL_SERVER_HTTP_REQUEST_H

#include <microhttpd.h>
#include <stdbool.h>

#include "base/buf.h"
#include "server/http/request_log.h"
#include "server/http/server_state.h"

typedef struct conn_req {
  req_log log;
  buf body;
  bool too_large, responded, log_owned_by_stream;
  char owner[JOBS_OWNER_CAP];      /* jobs: hash of the caller's API key */
  const char *session_hdr;         /* X-Session-Id, valid while the request is handled */
  bool accepted;            /* counted in server.accepted until request_on_completed */
  bool close_after;         /* answer with Connection: close (reserve connections) */
  int fd;                   /* the client's socket (hang-up checks during pre-processing) */
} conn_req;

/* What a route's handler gets besides the connection: the URL and method as received, and for a
 * prefix route (router.h) the rest of the URL after the prefix (the URL itself otherwise). */
typedef struct request_target {
  const char *url, *method, *rest;
} request_target;

/* An endpoint: answers the request (queues a response) or returns MHD_NO to close. */
typedef enum MHD_Result (*request_handler)(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

/* libmicrohttpd's access handler and its completion notice (cls: the server). */
enum MHD_Result request_on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls);
void request_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
