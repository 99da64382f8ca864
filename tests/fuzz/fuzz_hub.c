/* libFuzzer target for the hub's file listing: parse a tree page and run the file selection on
 * it. The first byte picks the requested quantization; the rest is the JSON. Every selected path
 * must be one the checks let through: relative, no "..", no control characters. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"

/* A path the cache may use: relative, no empty, "." or ".." segment, no control characters. */
static int path_ok(const char *p) {
  if (!p[0] || p[0] == '/')
    return 0;
  for (const char *s = p; *s; s++)
    if ((unsigned char)*s < 0x20)
      return 0;
  for (const char *seg = p;;) {
    const char *e = strchr(seg, '/');
    size_t n = e ? (size_t)(e - seg) : strlen(seg);
    if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
      return 0;
    if (!e)
      return 1;
    seg = e + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const quants[] = {NULL, "Q8_0", "Q4_K_M", "F16", "q4_k", "BF16", "Q8_0-00001", "x"};
  if (size < 1)
    return 0;
  const char *quant = quants[data[0] % (sizeof quants / sizeof *quants)];
  char **paths = NULL;
  size_t n = 0;
  if (hub_select_listing((const char *)data + 1, size - 1, quant, &paths, &n) == QVL_OK) {
    for (size_t i = 0; i < n; i++) {
      if (!path_ok(paths[i]))
        __builtin_trap();
    }
    hub_paths_free(paths, n);
  }
  return 0;
}
