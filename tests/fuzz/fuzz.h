/* What the fuzz targets share: the entry point libFuzzer and tests/fuzz/replay.c call, FUZZ_ASSERT
 * (a broken invariant aborts, which both report as a finding), reading bytes so that ASan checks the
 * ranges a parser handed out, and the check that an answer the code wrote is JSON. */
#ifndef QVL_FUZZ_H
#define QVL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c) \
  do {                 \
    if (!(c))          \
      abort();         \
  } while (0)

/* Where fuzz_touch leaves what it read (volatile, so that the reads are not optimized away); unused
 * in the targets that do not touch. */
static volatile uint8_t fuzz_sink __attribute__((unused));

/* Reads every one of the n bytes at p. */
static inline void fuzz_touch(const void *p, size_t n) {
  const uint8_t *b = p;
  uint8_t x = 0;
  for (size_t i = 0; i < n; i++)
    x ^= b[i];
  fuzz_sink ^= x;
}

/* Aborts unless s is a string of valid JSON (NULL is not). */
static inline void fuzz_assert_json(const char *s) {
  cJSON *j = s ? cJSON_Parse(s) : NULL;
  FUZZ_ASSERT(j != NULL);
  cJSON_Delete(j);
}

#endif
