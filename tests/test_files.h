/* Reading fixture files in the unit tests: a failure is recorded as a failed CHECK naming the file
 * (include after test.h; cJSON and buf come from the test's own includes). */
#ifndef QVL_TEST_FILES_H
#define QVL_TEST_FILES_H

#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "qvl.h"

/* The whole file (at most 64 MiB) into *b; 0 after a failed CHECK. */
static inline int test_read_file(const char *path, buf *b) {
  memset(b, 0, sizeof *b);
  if (buf_read_file(path, (size_t)64 << 20, b) != QVL_OK) {
    CHECK(0, "cannot read %s: %s", path, qvl_last_error());
    return 0;
  }
  return 1;
}

/* The file parsed as JSON; NULL after a failed CHECK. */
static inline cJSON *test_read_json(const char *path) {
  buf b;
  if (!test_read_file(path, &b))
    return NULL;
  cJSON *j = cJSON_Parse(b.data);
  buf_free(&b);
  CHECK(j != NULL, "cannot parse %s", path);
  return j;
}

#endif
