/* Reading a token-id reference file (tests/fixtures/tokenizer/NAME.ids.txt: decimal ids separated by
 * white space), for the tokenizer test and its benchmark. */
#ifndef QVL_IDS_FILE_H
#define QVL_IDS_FILE_H

#include <stdint.h>
#include <stdlib.h>

#include "base/buf.h"

/* The ids in path (at most 64 MiB), *n of them, the array malloc'd; NULL when the file cannot be
 * read. Reading stops at the first thing that is not a number. */
static inline int32_t *read_ids_file(const char *path, size_t *n) {
  buf f = {0};
  *n = 0;
  if (buf_read_file(path, 64u << 20, &f) != QVL_OK)
    return NULL;
  size_t cap = 1024;
  int32_t *v = malloc(cap * sizeof *v);
  char *p = f.data;
  for (;;) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p)
      break;
    if (*n == cap)
      v = realloc(v, (cap *= 2) * sizeof *v);
    v[(*n)++] = (int32_t)x;
    p = end;
  }
  buf_free(&f);
  return v;
}

#endif
