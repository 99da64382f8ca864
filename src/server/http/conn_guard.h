/*
 * The server's front door: accepts TCP connections itself and hands them to libmicrohttpd
 * (MHD_add_connection), so that every connection gets an HTTP answer and none can hold a slot for
 * free:
 *  - at most max_conns connections serve requests; past that a connection that has been waiting for
 *    its request headers (or idling between requests) for a second or more is evicted (408), else a
 *    small reserve of extra connections serves only /health and /metrics, else the new connection
 *    gets an immediate 503 with Retry-After (never a bare close);
 *  - at most per_client connections from one client address (429 + Retry-After past that, after the
 *    same eviction attempt among that client's connections);
 *  - deadlines that a slow sender cannot stretch: the request headers must arrive within
 *    header_timeout_s of the connection (or of the previous response), the body within
 *    body_timeout_s of the headers (408 and close otherwise).
 * Rejected sockets are closed gracefully (answer, shutdown for writing, read what the client still
 * sends for up to 2 s) so that the client reads the answer instead of a reset.
 *
 *     conn_guard *g;  conn_guard_new(&opts, &g);
 *     d = MHD_start_daemon(... MHD_USE_NO_LISTEN_SOCKET ..., MHD_OPTION_NOTIFY_CONNECTION, conn_guard_notify, g, ...);
 *     conn_guard_start(g, listen_fd, d);          // the accepting thread
 *     ... in the request handler: conn_guard_headers_done / _body_done / _response_done, _is_reserve
 *     conn_guard_stop(g);  MHD_stop_daemon(d);  conn_guard_free(g);
 *
 * Thread safety: the notify and request functions are called from libmicrohttpd's threads; the
 * rest from the controlling thread.
 */
#ifndef QVL_SERVER_HTTP_CONN_GUARD_H
#define QVL_SERVER_HTTP_CONN_GUARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "qvl.h"

typedef struct conn_guard_opts {
  int max_conns;           /* connections that may serve any request */
  int reserve;             /* extra connections for /health and /metrics only */
  int per_client;          /* connections per client address (0 = no cap) */
  double header_timeout_s; /* request line + headers, from connect or from the previous response */
  double body_timeout_s;   /* the whole body, from the end of the headers */
} conn_guard_opts;

typedef struct conn_guard_stats {
  int open, reserve_open;
  uint64_t accepted, rejected_full, rejected_client, evicted, timed_out;
} conn_guard_stats;

typedef struct conn_guard conn_guard;

qvl_status conn_guard_new(const conn_guard_opts *o, conn_guard **out);
/* Starts accepting on listen_fd (not owned) into d. */
qvl_status conn_guard_start(conn_guard *g, int listen_fd, struct MHD_Daemon *d);
/* Stops accepting (joins the thread, closes the sockets it was lingering on). */
void conn_guard_stop(conn_guard *g);
void conn_guard_free(conn_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls: the conn_guard). */
void conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
/* The request's headers are in (first call of the access handler): the body deadline starts. */
void conn_guard_headers_done(struct MHD_Connection *c);
/* The body is in (or the request was answered early): no deadline while it is handled. */
void conn_guard_body_done(struct MHD_Connection *c);
/* The response was sent (MHD_OPTION_NOTIFY_COMPLETED): waiting for the next request's headers. */
void conn_guard_response_done(struct MHD_Connection *c);
/* A reserve connection: it may only serve /health and /metrics, and closes after the response. */
bool conn_guard_is_reserve(struct MHD_Connection *c);

void conn_guard_get_stats(conn_guard *g, conn_guard_stats *out);

#endif
