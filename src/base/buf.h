/* A growable byte buffer (strings, files) with checked growth. */
#ifndef QVL_BASE_BUF_H
#define QVL_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

typedef struct buf {
  char *data; /* always NUL-terminated when non-NULL */
  size_t len;
  size_t cap;
} buf;

qvl_status buf_reserve(buf *b, size_t extra);
qvl_status buf_append(buf *b, const void *data, size_t len);
qvl_status buf_append_str(buf *b, const char *s);
qvl_status buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(buf *b);
/* Ends building b under status s: on success hands its bytes (never NULL, NUL-terminated) to the
 * caller in *out and *len (len may be NULL); on failure frees them and leaves *out NULL. Returns s
 * or an out-of-memory error. */
qvl_status buf_finish(buf *b, qvl_status s, char **out, size_t *len);

/* Reads a whole file into *out (NUL-terminated). Fails with ERR_TOO_LARGE above max_bytes. */
qvl_status buf_read_file(const char *path, size_t max_bytes, buf *out);

#endif
