/* CORS (see cors.h). */
#include "server/http/cors.h"

#include <string.h>
#include <strings.h>

const char *cors_match(const server_config *c, const char *origin) {
  if (!origin || !*origin)
    return NULL;
  for (int i = 0; i < c->n_cors_origin; i++) {
    const char *o = c->cors_origin[i];
    /* scheme and host are case-insensitive; browsers send them lower-case */
    if (!strcmp(o, "*") || !strcasecmp(o, origin))
      return o;
  }
  return NULL;
}

static bool allows_any(const server_config *c) {
  for (int i = 0; i < c->n_cors_origin; i++)
    if (!strcmp(c->cors_origin[i], "*"))
      return true;
  return false;
}

static const char *request_origin(const server_config *c, struct MHD_Connection *conn) {
  if (c->n_cors_origin == 0)
    return NULL;
  return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
}

void cors_add_headers(const server_config *c, struct MHD_Connection *conn, struct MHD_Response *resp) {
  const char *origin = request_origin(c, conn), *m = cors_match(c, origin);
  if (!m) {
    /* the answer still depends on Origin (another one would get the header): tell caches */
    if (c->n_cors_origin && !allows_any(c))
      MHD_add_response_header(resp, "Vary", "Origin");
    return;
  }
  /* "*" is answered with "*" itself: a cache may then share the answer across origins */
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", strcmp(m, "*") ? origin : "*");
  if (strcmp(m, "*"))
    MHD_add_response_header(resp, "Vary", "Origin");
  /* what a page may read besides the simple headers: back-off hints and job locations */
  MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After, Location, WWW-Authenticate");
}

bool cors_is_preflight(const server_config *c, struct MHD_Connection *conn, const char *method) {
  if (strcmp(method, "OPTIONS"))
    return false;
  const char *origin = request_origin(c, conn);
  return cors_match(c, origin) &&
         MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method") != NULL;
}

void cors_preflight_headers(const server_config *c, struct MHD_Connection *conn, const char **out) {
  (void)c;
  int n = 0;
  out[n++] = "Access-Control-Allow-Methods";
  out[n++] = "GET, HEAD, POST, DELETE, OPTIONS";
  const char *asked = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
  out[n++] = "Access-Control-Allow-Headers";
  out[n++] = asked && *asked ? asked : "Authorization, Content-Type";
  out[n++] = "Access-Control-Max-Age";
  out[n++] = "600";
  out[n] = NULL;
}
