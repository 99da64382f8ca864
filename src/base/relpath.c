#include "base/relpath.h"

#include <string.h>

bool relpath_is_safe(const char *p) {
  if (!*p || p[0] == '/' || strlen(p) > 1024)
    return false;
  for (const char *s = p; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == '\\')
      return false;
  for (const char *seg = p;;) {
    const char *e = strchr(seg, '/');
    size_t n = e ? (size_t)(e - seg) : strlen(seg);
    if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
      return false;
    if (!e)
      return true;
    seg = e + 1;
  }
}
