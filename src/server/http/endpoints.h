/*
 * The endpoints that answer from the server's state, without generating: /health (readiness),
 * /livez (liveness), /metrics, /v1/models, the web UI's files and CORS preflights.
 */
#ifndef QVL_SERVER_HTTP_ENDPOINTS_H
#define QVL_SERVER_HTTP_ENDPOINTS_H

#include "server/http/request.h"

enum MHD_Result endpoints_health(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
enum MHD_Result endpoints_livez(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
enum MHD_Result endpoints_metrics(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* GET /v1/models and GET /v1/models/ID (t->rest). */
enum MHD_Result endpoints_models(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
enum MHD_Result endpoints_model(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* A file of the web UI (404 when there is none at url). */
enum MHD_Result endpoints_asset(struct MHD_Connection *c, server *s, conn_req *r, const char *url);
/* A CORS preflight from an allowed origin (cors.h): 204 with what the browser asked to send. */
enum MHD_Result endpoints_preflight(struct MHD_Connection *c, server *s, conn_req *r);

#endif
