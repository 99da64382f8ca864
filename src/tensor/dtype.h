/* Tensor element types and their block formats. Values are ggml's type ids, as stored in GGUF. */
#ifndef QVL_TENSOR_DTYPE_H
#define QVL_TENSOR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qvl_dtype {
  QVL_DTYPE_F32 = 0,
  QVL_DTYPE_F16 = 1,
  QVL_DTYPE_Q4_0 = 2,
  QVL_DTYPE_Q8_0 = 8,
  QVL_DTYPE_Q4_K = 12,
  QVL_DTYPE_Q6_K = 14,
  QVL_DTYPE_Q8_K = 15, /* activation blocks for K-quant dot products; never stored in files here */
  QVL_DTYPE_BF16 = 30,
  QVL_DTYPE_MAX = 40 /* ggml ids are < 40; the tables below are indexed by id */
} qvl_dtype;

/* True for the types this engine can load and compute with. */
bool dtype_supported(int type_id);
/* "F32", "Q4_K", ...; "type <id>" style names are not returned: unknown ids give "unknown". */
const char *dtype_name(int type_id);
/* Parses "f32", "Q8_0", "q4_k" (case-insensitive). Returns false if unknown. */
bool dtype_from_name(const char *name, qvl_dtype *out);
/* Elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0, 256 for K-quants). */
int dtype_block_elems(qvl_dtype t);
/* Bytes per block. */
size_t dtype_block_bytes(qvl_dtype t);
/* Bytes of a row of n elements; false if n is not a multiple of the block size or overflows. */
bool dtype_row_bytes(qvl_dtype t, int64_t n, size_t *out);

/* Exact dequantization of n elements (n a multiple of the block size). */
void dtype_dequantize_row(qvl_dtype t, const void *src, float *dst, int64_t n);
/* Quantization of n floats into t (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K), rounding like ggml's
 * reference quantizers so files we write match what llama.cpp writes for the same values. */
void dtype_quantize_row(qvl_dtype t, const float *src, void *dst, int64_t n);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN preserved). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
