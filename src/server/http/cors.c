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

static bool tchar(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

size_t cors_filter_headers(const char *asked, char *out, size_t cap) {
  size_t len = 0;
  if (cap)
    out[0] = '\0';
  for (const char *p = asked ? asked : ""; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',')
      p++;
    const char *start = p;
    while (*p && *p != ',')
      p++;
    const char *end = p;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
      end--;
    size_t n = (size_t)(end - start);
    bool token = n > 0;
    for (size_t i = 0; token && i < n; i++)
      token = tchar((unsigned char)start[i]);
    /* an element that is not a token is dropped, not the whole value: the browser gets the rest */
    if (!token || len + (len ? 2 : 0) + n + 1 > cap)
      continue;
    if (len) {
      memcpy(out + len, ", ", 2);
      len += 2;
    }
    memcpy(out + len, start, n);
    len += n;
    out[len] = '\0';
  }
  return len;
}

void cors_preflight_headers(const server_config *c, struct MHD_Connection *conn, const char **out,
                            char scratch[CORS_ALLOW_HEADERS_CAP]) {
  (void)c;
  int n = 0;
  out[n++] = "Access-Control-Allow-Methods";
  out[n++] = "GET, HEAD, POST, DELETE, OPTIONS";
  const char *asked = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
  out[n++] = "Access-Control-Allow-Headers";
  /* only token characters are echoed: never a control byte, CR/LF or non-UTF-8 from the request */
  out[n++] = cors_filter_headers(asked, scratch, CORS_ALLOW_HEADERS_CAP) ? scratch : "Authorization, Content-Type";
  out[n++] = "Access-Control-Max-Age";
  out[n++] = "600";
  out[n] = NULL;
}
