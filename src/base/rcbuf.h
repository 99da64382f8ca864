/*
 * An immutable byte buffer shared by reference count: encoded media bytes that a prompt, the engine
 * and a stored conversation hold at once without copying them.
 *
 * Thread safety: rcbuf_ref / rcbuf_unref may be called from any thread (atomic count); the bytes
 * never change after rcbuf_take.
 */
#ifndef QVL_BASE_RCBUF_H
#define QVL_BASE_RCBUF_H

#include <stddef.h>

#include "base/buf.h"
#include "qvl.h"

typedef struct rcbuf {
  const unsigned char *data;
  size_t len;
} rcbuf;

/* Takes the bytes of b (left empty) into a new buffer with one reference. NULL when out of memory
 * (b is then left as it was). */
rcbuf *rcbuf_take(buf *b);
/* Another reference to r (NULL stays NULL). */
rcbuf *rcbuf_ref(rcbuf *r);
/* Drops one reference; the last one frees it. NULL is a no-op. */
void rcbuf_unref(rcbuf *r);

#endif
