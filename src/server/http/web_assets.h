/* web_assets — the files of the web UI (web/), compiled into the binary.
 *
 * The table is generated at build time by tools/embed.c into $(BUILD)/gen/web_assets.c; this
 * header is all the server needs:
 *
 *     const web_asset *a = web_asset_find(url_path);     // "/" gives "/index.html"
 *     if (!a) -> 404
 *     else    -> 200, Content-Type: a->content_type, ETag: a->etag, body a->data[0 .. a->len)
 *
 * (answer 304 when the request's If-None-Match equals a->etag). Everything here is immutable
 * static data: safe to use from any thread, nothing to free. */
#ifndef QVL_SERVER_HTTP_WEB_ASSETS_H
#define QVL_SERVER_HTTP_WEB_ASSETS_H

#include <stddef.h>

typedef struct web_asset {
  const char *path;          /* URL path, e.g. "/index.html", "/vendor/marked.umd.js" */
  const char *content_type;  /* full header value, e.g. "text/javascript; charset=utf-8" */
  const unsigned char *data; /* [len] bytes (followed by one NUL byte not counted in len) */
  size_t len;
  const char *etag; /* quoted strong ETag of the content, e.g. "\"9f2c...\"" */
} web_asset;

/* Content-Security-Policy to send with every asset (with X-Content-Type-Options: nosniff). The page loads nothing from other origins and needs no inline
 * script or eval (it sets styles only through the CSSOM), so this policy is strict; the browser
 * tests serve the page with exactly this string (tests/browser/mock_server.mjs reads it from here),
 * so a page change that needs more fails there first. */
#define WEB_ASSETS_CSP                                                                                          \
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; " \
  "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The generated table, sorted by path (strcmp order). */
extern const web_asset web_assets[];
extern const size_t web_assets_count;

/* The asset served at `path` (a URL path starting with '/'; anything from a '?' or '#' on is
 * ignored; "/" means "/index.html"), or NULL when there is none. Never matches "..". */
const web_asset *web_asset_find(const char *path);

#endif
