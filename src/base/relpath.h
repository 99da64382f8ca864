/* Relative paths that come from outside (a hub listing, a manifest) and are joined under a
 * directory of ours: they must not be able to leave it. */
#ifndef QVL_BASE_RELPATH_H
#define QVL_BASE_RELPATH_H

#include <stdbool.h>

/* True when p is relative, at most 1024 bytes, has no empty, "." or ".." segment, and holds no
 * control character or backslash (a separator on other systems). */
bool relpath_is_safe(const char *p);

#endif
