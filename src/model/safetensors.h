/*
 * safetensors reader and writer. The reader maps the file and checks the JSON header, every dtype,
 * shape and offset range against the file size. The writer produces files the reader, NumPy and
 * the Python safetensors package read back.
 */
#ifndef QVL_MODEL_SAFETENSORS_H
#define QVL_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

typedef enum st_dtype {
  ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_DTYPE_COUNT
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
  const char *name;
  st_dtype dtype;
  int n_dims;
  int64_t shape[ST_MAX_DIMS]; /* PyTorch order: shape[n_dims-1] is contiguous */
  const void *data; /* [nbytes] in the file image; only as aligned as the file's header padding */
  size_t nbytes;
} st_tensor;

typedef struct safetensors safetensors;

qvl_status st_open(const char *path, safetensors **out);
qvl_status st_open_memory(const void *data, size_t size, const char *label, safetensors **out);
void st_close(safetensors *st);
int64_t st_n_tensors(const safetensors *st);
const st_tensor *st_tensor_at(const safetensors *st, int64_t i);
const st_tensor *st_find(const safetensors *st, const char *name);
/* The "__metadata__" string map: value for key, or NULL. */
const char *st_metadata(const safetensors *st, const char *key);
const char *st_dtype_name(st_dtype t);
size_t st_dtype_size(st_dtype t);

/* Writer: collect tensors (data copied), then write. */
typedef struct st_writer st_writer;
st_writer *st_writer_init(void);
qvl_status st_writer_add(st_writer *w, const char *name, st_dtype dtype, int n_dims,
                         const int64_t *shape, const void *data);
/* A "__metadata__" string entry (e.g. "format" = "pt"); setting a key again replaces its value. */
qvl_status st_writer_set_metadata(st_writer *w, const char *key, const char *value);
/* Writes tensors in the order added, the header padded with spaces to a multiple of 8 bytes, via
 * "<path>.tmp" then rename. */
qvl_status st_writer_save(const st_writer *w, const char *path);
/* The same bytes into a malloc'd buffer (caller frees *out). */
qvl_status st_writer_save_mem(const st_writer *w, void **out, size_t *size);
void st_writer_free(st_writer *w);

#endif
