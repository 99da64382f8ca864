/* The hand-made fuzz seeds (tests/fuzz/make_corpus.c) double as regression cases of the readers:
 * valid_* files open, bad_* files are rejected with a message naming the file; files libFuzzer found
 * only have to not crash (make test replays them). Include after test.h. */
#ifndef QVL_CORPUS_TEST_H
#define QVL_CORPUS_TEST_H

#include <glob.h>
#include <stdbool.h>
#include <string.h>

#include "qvl.h"

/* Opens path with the reader under test and closes it again; *opened: whether it handed out a
 * handle. The status is the open's (qvl_last_error() still says why it failed). */
typedef qvl_status (*corpus_open_fn)(const char *path, bool *opened);

/* Checks every seed of the corpus directory dir (e.g. tests/fuzz/corpus/gguf), and that there are
 * at least min_valid valid and min_bad bad ones. */
static inline void check_corpus(const char *dir, corpus_open_fn open_close, int min_valid, int min_bad) {
  char pattern[512];
  snprintf(pattern, sizeof pattern, "%s/*", dir);
  glob_t gl;
  int n_valid = 0, n_bad = 0;
  if (glob(pattern, 0, NULL, &gl) != 0) {
    CHECK(0, "no corpus");
    return;
  }
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    const char *base = strrchr(gl.gl_pathv[i], '/') + 1;
    bool valid = strncmp(base, "valid_", 6) == 0, bad = strncmp(base, "bad_", 4) == 0;
    if (!valid && !bad)
      continue;
    bool opened = false;
    qvl_status s = open_close(gl.gl_pathv[i], &opened);
    const char *err = qvl_last_error();
    if (valid)
      CHECK(s == QVL_OK && opened, "%s: %s", base, err);
    else
      CHECK(s != QVL_OK && !opened && err && strstr(err, base), "%s: status %d: %s", base, (int)s, err);
    n_valid += valid;
    n_bad += bad;
  }
  globfree(&gl);
  CHECK(n_valid >= min_valid && n_bad >= min_bad, "corpus: %d valid, %d bad", n_valid, n_bad);
}

#endif
