#include "base/rcbuf.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct rcbuf_impl {
  rcbuf pub; /* first: a rcbuf * is a rcbuf_impl * */
  atomic_int refs;
  char *owned;
} rcbuf_impl;

rcbuf *rcbuf_take(buf *b) {
  rcbuf_impl *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->owned = b->data;
  r->pub.data = (const unsigned char *)b->data;
  r->pub.len = b->len;
  atomic_init(&r->refs, 1);
  memset(b, 0, sizeof *b);
  return &r->pub;
}

rcbuf *rcbuf_ref(rcbuf *r) {
  if (r)
    atomic_fetch_add(&((rcbuf_impl *)r)->refs, 1);
  return r;
}

void rcbuf_unref(rcbuf *r) {
  if (!r)
    return;
  rcbuf_impl *i = (rcbuf_impl *)r;
  if (atomic_fetch_sub(&i->refs, 1) == 1) {
    free(i->owned);
    free(i);
  }
}
