/*
 * Normalising http(s) URLs before they are compared with the allow list and fetched, so that the
 * string that is checked is the string that is fetched and no spelling of a URL reaches past a
 * prefix: scheme and host to lower case, the default port dropped, percent-encoding made canonical
 * (unreserved characters decoded, other escapes in upper case, bytes that must be escaped escaped),
 * dot segments removed (RFC 3986 5.2.4, after decoding, so %2e%2e counts), the fragment dropped.
 * Refused: other schemes, user info (http://allowed@evil/), backslashes, control characters,
 * malformed escapes, ports outside 1..65535, an empty host, and anything longer than URL_MAX.
 *
 * Thread safety: reentrant.
 */
#ifndef QVL_SERVER_FETCH_URL_H
#define QVL_SERVER_FETCH_URL_H

#include <stddef.h>

#include "qvl.h"

#define URL_MAX 4096

/* Writes the normal form of url into out (cap bytes, NUL-terminated). QVL_ERR_INVALID_ARG with a
 * message when the URL is refused. */
qvl_status url_normalize(const char *url, char *out, size_t cap);

#endif
