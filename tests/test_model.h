/* Loading the fixture models in the unit tests (include after test.h). */
#ifndef QVL_TEST_MODEL_H
#define QVL_TEST_MODEL_H

#include "engine/vlm.h"
#include "qvl.h"

#define E2E_MODEL "tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf"
#define E2E_MMPROJ "tests/fixtures/models/e2e/gguf/mmproj-e2e-F16.gguf"

/* The model (mmproj may be NULL); its load is a CHECK, NULL when it failed. */
static inline vlm *test_load_vlm(const char *model, const char *mmproj) {
  vlm *m = NULL;
  vlm_paths paths = {.model = model, .mmproj = mmproj};
  qvl_status s = vlm_load(&paths, &m);
  CHECK(s == QVL_OK, "load %s: %s", model, qvl_last_error());
  return s == QVL_OK ? m : NULL;
}

#endif
