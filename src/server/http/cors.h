/*
 * CORS for browser pages on other origins (--cors-origin ORIGIN, repeatable; "*" for any).
 *
 * With no origin configured nothing changes: no Access-Control-* header is sent and OPTIONS is
 * answered as before. With origins configured, a request whose Origin header matches gets
 * Access-Control-Allow-Origin on every answer (errors and streams included) and an OPTIONS
 * preflight (Origin + Access-Control-Request-Method) is answered 204 before the API key check, since
 * browsers send preflights without credentials. The preflight allows the methods qvl serves and
 * exactly the headers the browser asked for (Authorization, Content-Type, the openai client's
 * x-stainless-*), cached for 10 minutes. Credentials (cookies) are never allowed: qvl's keys travel
 * in the Authorization header, which a page sends explicitly.
 */
#ifndef QVL_SERVER_CORS_H
#define QVL_SERVER_CORS_H

#include <microhttpd.h>
#include <stdbool.h>

#include "server/config/settings.h"

#define CORS_PREFLIGHT_HEADERS 4 /* name/value pairs cors_preflight_headers writes */

/* The configured origin entry that allows this Origin, or NULL. */
const char *cors_match(const server_config *c, const char *origin);
/* Adds Access-Control-Allow-Origin, Vary and Access-Control-Expose-Headers for an allowed Origin. */
void cors_add_headers(const server_config *c, struct MHD_Connection *conn, struct MHD_Response *resp);
/* An OPTIONS preflight from an allowed origin. */
bool cors_is_preflight(const server_config *c, struct MHD_Connection *conn, const char *method);
/* The preflight's extra headers as NULL-terminated name/value pairs (out: CORS_PREFLIGHT_HEADERS*2+1;
 * the values point into the request or static strings). */
void cors_preflight_headers(const server_config *c, struct MHD_Connection *conn, const char **out);

#endif
