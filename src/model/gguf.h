/*
 * GGUF reader (versions 2 and 3). The file is mapped read-only; every count, length, offset and
 * shape is checked against the bytes present before use. Failures return a status and set a
 * message naming the file, the key or tensor, what was expected and what was found.
 * A gguf object is immutable after gguf_open and may be read from any thread.
 */
#ifndef QVL_MODEL_GGUF_H
#define QVL_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"
#include "tensor/tensor.h"

typedef enum gguf_type {
  GGUF_TYPE_UINT8 = 0,
  GGUF_TYPE_INT8 = 1,
  GGUF_TYPE_UINT16 = 2,
  GGUF_TYPE_INT16 = 3,
  GGUF_TYPE_UINT32 = 4,
  GGUF_TYPE_INT32 = 5,
  GGUF_TYPE_FLOAT32 = 6,
  GGUF_TYPE_BOOL = 7,
  GGUF_TYPE_STRING = 8,
  GGUF_TYPE_ARRAY = 9,
  GGUF_TYPE_UINT64 = 10,
  GGUF_TYPE_INT64 = 11,
  GGUF_TYPE_FLOAT64 = 12,
  GGUF_TYPE_COUNT
} gguf_type;

typedef struct gguf gguf;

qvl_status gguf_open(const char *path, gguf **out);
/* Parses a GGUF image held in memory (not copied; must outlive the object). label names it in errors. */
qvl_status gguf_open_memory(const void *data, size_t size, const char *label, gguf **out);
void gguf_close(gguf *g);

const char *gguf_path(const gguf *g);
uint32_t gguf_version(const gguf *g);
const char *gguf_type_name(gguf_type t);
/* Byte size of a fixed-size value type; 0 for STRING / ARRAY / invalid. */
size_t gguf_type_size(gguf_type t);
/* general.alignment (default 32) and the file offset where the data section starts. */
uint32_t gguf_alignment(const gguf *g);
uint64_t gguf_data_offset(const gguf *g);

/* Metadata. Index lookups return -1 when the key is absent. */
int64_t gguf_n_kv(const gguf *g);
int64_t gguf_find_key(const gguf *g, const char *key);
const char *gguf_key_name(const gguf *g, int64_t idx);
gguf_type gguf_key_type(const gguf *g, int64_t idx);
gguf_type gguf_array_type(const gguf *g, int64_t idx); /* element type of an ARRAY value */
uint64_t gguf_array_len(const gguf *g, int64_t idx);
/* gguf_key_type / gguf_array_type give GGUF_TYPE_COUNT for a bad index or a non-array key. */
/* Raw element data of a non-string array (little-endian, packed), or NULL. The pointer is into the
 * file image and may be unaligned: read elements with memcpy. Arrays of arrays are rejected at open. */
const void *gguf_array_data(const gguf *g, int64_t idx);
/* Element i of a string array; *len receives its byte length (strings may hold NULs). The pointer is
 * into the file image and NOT NUL-terminated; NULL (and *len = 0) if idx/i is out of range. */
const char *gguf_array_str(const gguf *g, int64_t idx, uint64_t i, size_t *len);
/* Value of a STRING key by index: NUL-terminated copy owned by g, *len its byte length; else NULL. */
const char *gguf_key_str(const gguf *g, int64_t idx, size_t *len);

/* Typed getters: QVL_ERR_NOT_FOUND if absent, QVL_ERR_FORMAT (with expected vs found type) if the
 * stored type differs. Integer getters accept any integer type whose value fits. */
qvl_status gguf_get_u32(const gguf *g, const char *key, uint32_t *out);
qvl_status gguf_get_i64(const gguf *g, const char *key, int64_t *out);
qvl_status gguf_get_f32(const gguf *g, const char *key, float *out);
qvl_status gguf_get_bool(const gguf *g, const char *key, bool *out);
/* String value, NUL-terminated and owned by g. */
qvl_status gguf_get_str(const gguf *g, const char *key, const char **out);
/* Integer array converted to int64 (caller frees *out). */
qvl_status gguf_get_int_array(const gguf *g, const char *key, int64_t **out, uint64_t *n);
/* Float array converted to float (caller frees *out). */
qvl_status gguf_get_f32_array(const gguf *g, const char *key, float **out, uint64_t *n);

/* Tensors. data points into the file image at data_start + offset (a multiple of the alignment);
 * nbytes is the exact size implied by type and ne. Regions of different tensors may overlap. */
int64_t gguf_n_tensors(const gguf *g);
const tensor *gguf_tensor_at(const gguf *g, int64_t i);
const tensor *gguf_find_tensor(const gguf *g, const char *name); /* NULL if absent */

/* A vision projector (llama.cpp's mmproj: architecture "clip" or general.type "mmproj"), so that
 * loading one as the text model can say which flag it belongs to. */
bool gguf_is_mmproj(const gguf *g);
/* The message for that mistake, one wording wherever it is caught. */
#define GGUF_MMPROJ_AS_MODEL_FMT                                                                                  \
  "%s is a vision projector (mmproj), not a text model: pass it with --mmproj, and the text model with -m "      \
  "(-m MODEL.gguf --mmproj MMPROJ.gguf)"

#endif
