/*
 * Freeing what a struct owns in one statement. A destructor of a struct that owns several arrays
 * lists them once, FREE_EACH(t->a, t->b, t->c), instead of one free() a line: the list is what
 * the reader checks against the struct, and a member added to the struct is added to one list.
 *
 * Thread safety: none needed (plain free of the pointers given).
 */
#ifndef QVL_BASE_FREE_EACH_H
#define QVL_BASE_FREE_EACH_H

#include <stdlib.h>

static inline void free_each_of(void *const *ptrs, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(ptrs[i]);
}

/* free() of every argument (NULLs are fine, as with free). */
#define FREE_EACH(...)                                                                              \
  free_each_of((void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

#endif
