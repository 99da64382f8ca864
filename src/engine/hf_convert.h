/*
 * Hugging Face Qwen3-VL directory -> llama.cpp GGUF pair (text model + mmproj), as llama.cpp's
 * convert_hf_to_gguf.py writes them (docs: /work/shared/docs/gguf-layout.md section 6): the same
 * metadata keys in the same order with the same types, the same tensor names, shapes and storage
 * types, and the tokenizer as tokenizer.ggml.* (tokens padded with [PADn] rows up to vocab_size,
 * token types, merges, special ids, the chat template).
 *
 * Storage types: 1-D tensors, *_norm weights and v.position_embd stay F32; the patch kernels are
 * F16 for outtype f16 and F32 otherwise; every other matrix gets outtype (rows that are not a
 * multiple of its block size fall back as wtable_target_type says). Quantized types use ggml's
 * rounding (tensor/dtype.h), so q8_0 gives the bytes llama-quantize gives from the F32 file.
 */
#ifndef QVL_ENGINE_HF_CONVERT_H
#define QVL_ENGINE_HF_CONVERT_H

#include "qvl.h"
#include "tensor/dtype.h"

typedef struct hf_convert_opts {
  qvl_dtype outtype;      /* F32, F16, BF16, Q8_0, Q4_0 or Q4_K */
  const char *out_text;   /* text GGUF path, or NULL to skip */
  const char *out_mmproj; /* mmproj GGUF path, or NULL to skip */
  const char *name;       /* general.name; NULL: the directory's base name */
} hf_convert_opts;

qvl_status hf_convert(const char *hf_dir, const hf_convert_opts *o);

/* general.file_type (llama.cpp's LlamaFileType) for an outtype: F32 0, F16 1, Q4_0 2, Q8_0 7,
 * Q4_K 15 (Q4_K_M, as llama-quantize --pure labels it), BF16 32. */
int hf_convert_file_type(qvl_dtype outtype);

#endif
