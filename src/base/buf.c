#include "base/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

qvl_status buf_reserve(buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len - 1)
    return qvl_errorf(QVL_ERR_NOMEM, "buffer size overflow");
  size_t need = b->len + extra + 1;
  if (need <= b->cap)
    return QVL_OK;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  char *p = realloc(b->data, cap);
  if (!p)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory growing a buffer to %zu bytes", cap);
  b->data = p;
  b->cap = cap;
  return QVL_OK;
}

qvl_status buf_append(buf *b, const void *data, size_t len) {
  QVL_TRY(buf_reserve(b, len));
  if (len)
    memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = 0;
  return QVL_OK;
}

qvl_status buf_append_str(buf *b, const char *s) { return buf_append(b, s, strlen(s)); }

qvl_status buf_printf(buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return qvl_errorf(QVL_ERR_INTERNAL, "bad format string");
  QVL_TRY(buf_reserve(b, (size_t)n));
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return QVL_OK;
}

void buf_free(buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

qvl_status buf_finish(buf *b, qvl_status s, char **out, size_t *len) {
  *out = NULL;
  if (s == QVL_OK && !b->data)
    s = buf_append(b, "", 0);
  if (s != QVL_OK) {
    buf_free(b);
    return s;
  }
  *out = b->data;
  if (len)
    *len = b->len;
  return QVL_OK;
}

qvl_status buf_read_file(const char *path, size_t max_bytes, buf *out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return qvl_errorf(errno == ENOENT ? QVL_ERR_NOT_FOUND : QVL_ERR_IO, "%s: cannot open: %s", path,
                      strerror(errno));
  out->len = 0;
  char chunk[65536];
  size_t n;
  qvl_status s = QVL_OK;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (out->len + n > max_bytes) {
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: file larger than the %zu byte limit", path, max_bytes);
      break;
    }
    if ((s = buf_append(out, chunk, n)) != QVL_OK)
      break;
  }
  if (s == QVL_OK && ferror(f))
    s = qvl_errorf(QVL_ERR_IO, "%s: read error", path);
  if (s == QVL_OK && !out->data)
    s = buf_append(out, "", 0);
  fclose(f);
  return s;
}
