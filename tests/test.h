/* Minimal test harness: CHECK records a pass or a failure; TEST_MAIN_END prints the summary line
 * "name: N passed, N failed" that tests/run.sh adds up, and returns non-zero on any failure. */
#ifndef QVL_TEST_H
#define QVL_TEST_H

#include <stdio.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (cond) {                                                  \
      test_passed++;                                             \
    } else {                                                     \
      test_failed++;                                             \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fputc('\n', stderr);                                       \
    }                                                            \
  } while (0)

#define TEST_SUMMARY(name)                                                   \
  (printf("%s: %d passed, %d failed\n", (name), test_passed, test_failed), \
   test_failed ? 1 : 0)

#endif
