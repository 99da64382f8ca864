/* Read-only file mappings and growable arrays shared by the file parsers and writers. */
#ifndef QVL_BASE_MAPFILE_H
#define QVL_BASE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

/* Maps a regular file read-only. Files shorter than min_size are "not a <kind> file (only N bytes)"
 * (QVL_ERR_FORMAT); a missing file is QVL_ERR_NOT_FOUND; other failures QVL_ERR_IO. Unmap with
 * munmap(*map, *size). */
qvl_status map_file(const char *path, size_t min_size, const char *kind, void **map, size_t *size);

/* The bytes a file parser reads: a read-only mapping of a file, or memory the caller keeps alive.
 * label is the path or the caller's name for the memory, for messages. */
typedef struct file_image {
  char *label;
  const uint8_t *data; /* [size] */
  size_t size;
  void *map; /* the mapping's base, NULL for caller memory */
} file_image;

/* Maps path as map_file does (min_size, kind) into *out. */
qvl_status file_image_map(const char *path, size_t min_size, const char *kind, file_image *out);
/* Wraps the caller's [data, data + size) (data may be NULL when size is 0) under label. */
qvl_status file_image_memory(const void *data, size_t size, const char *label, file_image *out);
/* Unmaps a mapping and frees the label; a zeroed file_image is a no-op. */
void file_image_close(file_image *im);

/* Makes room for element n of *arr (capacity *cap, elements of elem bytes), doubling as needed.
 * what names the owner in the out-of-memory message. */
qvl_status array_grow(void **arr, size_t *cap, size_t n, size_t elem, const char *what);

#endif
