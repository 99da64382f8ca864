/*
 * GGUF writer: collect key/values and tensors, then write a GGUF v3 file that llama.cpp and
 * gguf_open read back.
 *
 *   gguf_writer *w = gguf_writer_init();
 *   gguf_writer_set_str(w, "general.architecture", "qwen3vl");
 *   gguf_writer_set_u32(w, "qwen3vl.block_count", 28);
 *   gguf_writer_add_tensor(w, "token_embd.weight", QVL_DTYPE_Q8_0, 2, (int64_t[]){2048, 151936}, q);
 *   qvl_status s = gguf_writer_save(w, "model.gguf");
 *   gguf_writer_free(w);
 *
 * Key/values are written in the order they were first set; setting an existing key replaces its
 * value in place. Tensors are written in the order added, each at a multiple of the alignment
 * (32, or the uint32 value of "general.alignment" if it was set: a nonzero power of two), with zero
 * padding between them and after the last one, as llama.cpp writes them.
 *
 * Tensor data: gguf_writer_add_tensor copies the bytes (safe, costs memory);
 * gguf_writer_add_tensor_ref borrows them (no copy; the caller keeps them alive and unchanged until
 * the last save). Converters writing multi-GB models should borrow (e.g. from a mapped file).
 *
 * Names: keys are 1..65535 bytes; tensor names 1..63 bytes (ggml's GGML_MAX_NAME is 64 with the
 * NUL, and llama.cpp rejects longer names). Neither may contain NUL bytes.
 * A writer is not thread-safe; different writers are independent.
 */
#ifndef QVL_MODEL_GGUF_WRITE_H
#define QVL_MODEL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "qvl.h"
#include "tensor/dtype.h"

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_init(void); /* NULL if out of memory */
void gguf_writer_free(gguf_writer *w);

qvl_status gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
qvl_status gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
qvl_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
qvl_status gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
qvl_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
qvl_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
qvl_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
qvl_status gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
qvl_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
qvl_status gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
qvl_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
qvl_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* A string of len bytes that may contain NULs. */
qvl_status gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, size_t len);
/* Array of n fixed-size elements of elem_type (any type but STRING and ARRAY), packed in host
 * (little-endian) order; copied. Bool elements are bytes and must be 0 or 1. */
qvl_status gguf_writer_set_array(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                                 uint64_t n);
/* Array of n strings; lens[i] gives the byte length of strs[i] (may contain NULs), or lens == NULL
 * for NUL-terminated strings. Copied. */
qvl_status gguf_writer_set_str_array(gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n);

/* Tensor of type `type` (a qvl dtype; ne[0] must be a multiple of its block size) with n_dims
 * (1..4) sizes in ggml order (ne[0] contiguous). data holds the exact byte size. */
qvl_status gguf_writer_add_tensor(gguf_writer *w, const char *name, qvl_dtype type, int n_dims,
                                  const int64_t *ne, const void *data);
qvl_status gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, qvl_dtype type, int n_dims,
                                      const int64_t *ne, const void *data);

/* Writes the file (via "<path>.tmp" then rename, so a failed save leaves no half file at path). */
qvl_status gguf_writer_save(const gguf_writer *w, const char *path);
/* The same bytes into a malloc'd buffer (caller frees *out). */
qvl_status gguf_writer_save_mem(const gguf_writer *w, void **out, size_t *size);

#endif
