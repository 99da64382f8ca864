/* Patching the bytes of a GGUF file in memory, for the tests and the fuzz seed maker that write
 * malformed variants of a valid file (tests/unit/test_gguf.c, tests/fuzz/make_corpus.c). */
#ifndef QVL_GGUF_BYTES_H
#define QVL_GGUF_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The offset just after the first occurrence of s as a GGUF string (a u64 length, then the bytes)
 * in the size bytes at m; 0 when there is none. */
static inline size_t gguf_after_str(const uint8_t *m, size_t size, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 8; i + n <= size; i++) {
    uint64_t len;
    memcpy(&len, m + i - 8, 8);
    if (len == n && memcmp(m + i, s, n) == 0)
      return i + n;
  }
  return 0;
}

/* Little-endian stores at any alignment (GGUF is little-endian, as is every CPU qvl runs on). */
static inline void put_u32(uint8_t *m, size_t at, uint32_t v) { memcpy(m + at, &v, 4); }
static inline void put_u64(uint8_t *m, size_t at, uint64_t v) { memcpy(m + at, &v, 8); }

#endif
