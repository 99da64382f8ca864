/* A fake environment for the tests of option and settings parsing, which take a getenv-like
 * function: the test points fake_env at a NULL-terminated list of "NAME=VALUE" strings. */
#ifndef QVL_FAKE_ENV_H
#define QVL_FAKE_ENV_H

#include <string.h>

static const char *const *fake_env;

/* getenv over fake_env: the value of the first NAME=VALUE entry, NULL when there is none. */
static inline const char *env_get(const char *name) {
  size_t n = strlen(name);
  for (int i = 0; fake_env && fake_env[i]; i++)
    if (!strncmp(fake_env[i], name, n) && fake_env[i][n] == '=')
      return fake_env[i] + n + 1;
  return NULL;
}

#endif
