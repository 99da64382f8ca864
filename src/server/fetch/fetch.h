/*
 * http(s) image URLs for the server, through libcurl: only URLs under an allow-listed prefix (both
 * normalised first, server/url.h, and the normalised URL is what is fetched), no
 * redirects (a redirect could leave the allow list), a byte cap and a time limit. Plugs into
 * image_source_opts.fetch_remote.
 *
 * Prefix rule: a prefix ending in '/', '?', '&', '=' or '#' matches any URL that starts with it;
 * otherwise the URL must equal the prefix or continue with '/', '?' or '#', so
 * "https://img.example.com" does not allow "https://img.example.com.evil.net/" and ".../pics" does
 * not allow ".../picsx/". Comparison is on the normal forms (so "http://h/img/../x" is "http://h/x").
 *
 * Thread safety: call fetch_global_init once before any thread uses fetch_remote.
 */
#ifndef QVL_SERVER_FETCH_FETCH_H
#define QVL_SERVER_FETCH_FETCH_H

#include <stdbool.h>

#include "base/buf.h"
#include "base/stop.h"
#include "qvl.h"

typedef struct fetch_opts {
  const char *const *allow; /* [n_allow] URL prefixes */
  int n_allow;
  double timeout_s;
} fetch_opts;

qvl_status fetch_global_init(void);
/* True when url is under one of the prefixes. */
bool fetch_allowed(const fetch_opts *o, const char *url);
/* image_source_opts.fetch_remote: user is a fetch_opts. Errors: QVL_ERR_INVALID_ARG (not allowed,
 * HTTP error status, connection failure), QVL_ERR_TOO_LARGE, QVL_ERR_TIMEOUT. */
qvl_status fetch_remote(void *user, const char *url, size_t max_bytes, buf *out);
/* The same, polling stop (may be NULL) while the download runs: ends with its status. */
qvl_status fetch_remote_stoppable(void *user, const char *url, size_t max_bytes, qvl_stop_fn stop, void *stop_user,
                                  buf *out);

#endif
