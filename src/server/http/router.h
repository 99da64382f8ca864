/*
 * Routing: the endpoint table (router.c) and the checks every request passes first, in order:
 * an over-large body (413), a reserve connection (503 but for /health and /metrics), a CORS
 * preflight (204), the API key (every /v1/ URL, known or not, and routes marked ROUTE_KEY), then
 * the route's handler, 405 with Allow for a known path and another method, or 404 / a web UI file.
 *
 * Adding an endpoint: one line in the table in router.c plus its request_handler (request.h).
 */
#ifndef QVL_SERVER_HTTP_ROUTER_H
#define QVL_SERVER_HTTP_ROUTER_H

#include "server/http/request.h"

/* Answers a request whose body has been read (or that is known to be too large). */
enum MHD_Result router_dispatch(struct MHD_Connection *c, server *s, conn_req *r, const char *url, const char *method);

#endif
