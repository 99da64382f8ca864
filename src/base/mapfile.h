/* Read-only file mappings and growable arrays shared by the file parsers and writers. */
#ifndef QVL_BASE_MAPFILE_H
#define QVL_BASE_MAPFILE_H

#include <stddef.h>

#include "qvl.h"

/* Maps a regular file read-only. Files shorter than min_size are "not a <kind> file (only N bytes)"
 * (QVL_ERR_FORMAT); a missing file is QVL_ERR_NOT_FOUND; other failures QVL_ERR_IO. Unmap with
 * munmap(*map, *size). */
qvl_status map_file(const char *path, size_t min_size, const char *kind, void **map, size_t *size);

/* Makes room for element n of *arr (capacity *cap, elements of elem bytes), doubling as needed.
 * what names the owner in the out-of-memory message. */
qvl_status array_grow(void **arr, size_t *cap, size_t n, size_t elem, const char *what);

#endif
