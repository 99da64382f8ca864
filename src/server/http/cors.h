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
#ifndef QVL_SERVER_HTTP_CORS_H
#define QVL_SERVER_HTTP_CORS_H

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
#define CORS_ALLOW_HEADERS_CAP 1024 /* bytes of the Access-Control-Allow-Headers value echoed */

/* The preflight's extra headers as NULL-terminated name/value pairs (out: CORS_PREFLIGHT_HEADERS*2+1;
 * the values point into scratch (CORS_ALLOW_HEADERS_CAP bytes) or static strings). */
void cors_preflight_headers(const server_config *c, struct MHD_Connection *conn, const char **out,
                            char scratch[CORS_ALLOW_HEADERS_CAP]);
/* The comma-separated header names of an Access-Control-Request-Headers value that are RFC 7230
 * tokens (tchar: ALPHA DIGIT !#$%&'*+-.^_`|~), joined by ", " into out (cap bytes, NUL included);
 * an element with any other byte (control, non-ASCII, space inside, quote...) is dropped, and
 * elements that do not fit are dropped too. Returns the length written (0: nothing usable). */
size_t cors_filter_headers(const char *asked, char *out, size_t cap);

#endif
