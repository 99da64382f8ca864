/* base64 and RFC 2397 data: URLs ("data:image/png;base64,...."), decoded with caps. */
#ifndef QVL_BASE_DATAURL_H
#define QVL_BASE_DATAURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "qvl.h"

/* Decodes standard or URL-safe base64 (padding optional, ASCII whitespace ignored) into out.
 * Fails with ERR_FORMAT on any other character or bad padding, ERR_TOO_LARGE above max_bytes. */
qvl_status base64_decode(const char *s, size_t len, size_t max_bytes, buf *out);

/* Standard base64 with padding. */
qvl_status base64_encode(const void *data, size_t len, buf *out);
/* Appends the data: URL "data:<mime>;base64,<data in base64>" to out. */
qvl_status dataurl_encode(const char *mime, const void *data, size_t len, buf *out);

/* True if url starts with "data:" (case-insensitive). */
bool dataurl_is(const char *url);

/* Parses a data: URL; media type copied into mime (may be empty), payload decoded into out
 * (base64 or percent-encoded). */
qvl_status dataurl_decode(const char *url, size_t max_bytes, char *mime, size_t mime_cap, buf *out);

#endif
