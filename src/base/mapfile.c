#include "base/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

qvl_status map_file(const char *path, size_t min_size, const char *kind, void **map, size_t *size) {
  *map = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return qvl_errorf(errno == ENOENT ? QVL_ERR_NOT_FOUND : QVL_ERR_IO, "%s: cannot open: %s", path,
                      strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return qvl_errorf(QVL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return qvl_errorf(QVL_ERR_IO, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size < min_size) {
    close(fd);
    return qvl_errorf(QVL_ERR_FORMAT, "%s: not a %s file (only %lld bytes)", path, kind, (long long)st.st_size);
  }
  if ((uint64_t)st.st_size > SIZE_MAX / 2) {
    close(fd);
    return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: file of %lld bytes is too large to map", path, (long long)st.st_size);
  }
  size_t n = (size_t)st.st_size;
  void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED)
    return qvl_errorf(QVL_ERR_IO, "%s: cannot map %zu bytes: %s", path, n, strerror(e));
  *map = m;
  *size = n;
  return QVL_OK;
}

static qvl_status image_init(const void *data, size_t size, void *map, const char *label, file_image *out) {
  *out = (file_image){0};
  char *l = strdup(label);
  if (!l) {
    if (map)
      munmap(map, size);
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", label);
  }
  *out = (file_image){.label = l, .data = data, .size = size, .map = map};
  return QVL_OK;
}

qvl_status file_image_map(const char *path, size_t min_size, const char *kind, file_image *out) {
  *out = (file_image){0};
  void *map;
  size_t size;
  QVL_TRY(map_file(path, min_size, kind, &map, &size));
  return image_init(map, size, map, path, out);
}

qvl_status file_image_memory(const void *data, size_t size, const char *label, file_image *out) {
  *out = (file_image){0};
  const char *l = label ? label : "(memory)";
  if (!data && size)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: NULL data", l);
  return image_init(data ? data : "", size, NULL, l, out);
}

void file_image_close(file_image *im) {
  if (im->map)
    munmap(im->map, im->size);
  free(im->label);
  *im = (file_image){0};
}

qvl_status array_grow(void **arr, size_t *cap, size_t n, size_t elem, const char *what) {
  if (n < *cap)
    return QVL_OK;
  size_t nc = *cap ? *cap * 2 : 16;
  while (nc <= n)
    nc *= 2;
  if (nc > SIZE_MAX / elem)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: array size overflow", what);
  void *p = realloc(*arr, nc * elem);
  if (!p)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", what);
  *arr = p;
  *cap = nc;
  return QVL_OK;
}
