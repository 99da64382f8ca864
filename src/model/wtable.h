/*
 * A weight table: tensors under their llama.cpp GGUF names ("blk.3.attn_q.weight"), each a view
 * into a mapped file or into memory the table owns. It is what the decoder and the vision tower
 * read through a tensor_source (wtable_source), whatever the weights came from: a GGUF file (wtable_from_gguf), a
 * Hugging Face directory (engine/hf_model.h), and optionally re-encoded at load into another dtype
 * (wtable_convert: "quantize on load").
 *
 *   wtable *t;
 *   QVL_TRY(wtable_from_gguf(g, &t));                          // takes g (closed by wtable_free)
 *   QVL_TRY(wtable_convert(t, QVL_DTYPE_Q8_0, WTABLE_TEXT));    // matrices -> Q8_0, norms kept
 *   tensor_source src = wtable_source(t);                      // decoder_init / vision_init take it
 *
 * Not thread-safe while being built; immutable afterwards (find may be called from any thread).
 */
#ifndef QVL_MODEL_WTABLE_H
#define QVL_MODEL_WTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/tensor_source.h"
#include "qvl.h"
#include "tensor/tensor.h"

typedef struct wtable wtable;

/* An empty table; label names the file or directory in errors (copied). */
qvl_status wtable_init(const char *label, wtable **out);
/* Frees the table, its owned data, then calls the owner's release (if any). NULL is a no-op. */
void wtable_free(wtable *t);
/* Storage the views point into (a mapped file, a reference-counted directory): released by
 * wtable_free after everything else. Replaces a previous owner without releasing it. */
void wtable_set_owner(wtable *t, void (*release)(void *user), void *user);

const char *wtable_label(const wtable *t);
int64_t wtable_count(const wtable *t);
const tensor *wtable_at(const wtable *t, int64_t i);
/* Index of a tensor by name, or -1. */
int64_t wtable_index(const wtable *t, const char *name);

/* Adds a view (name and shape copied, data borrowed: it must outlive the table). A name added
 * twice is an error (QVL_ERR_FORMAT). */
qvl_status wtable_add_view(wtable *t, const char *name, const tensor *view);
/* Adds a tensor whose data the table takes over (freed with free(); on error too). n_dims 1..4,
 * ne in ggml order; nbytes must be the exact size implied by type and ne. */
qvl_status wtable_add_owned(wtable *t, const char *name, qvl_dtype type, int n_dims, const int64_t *ne,
                            void *data, size_t nbytes);

/* The tensor-source callbacks: user is the wtable. find returns NULL for an unknown name. */
const tensor *wtable_find(void *user, const char *name);
void wtable_release(void *user);
/* The table as a tensor source (those callbacks, its label); release frees the table. */
tensor_source wtable_source(wtable *t);

/* Which tensors a conversion re-encodes. */
typedef enum wtable_kind {
  WTABLE_TEXT,   /* every 2-D *.weight but the *_norm weights (token_embd and output included) */
  WTABLE_VISION, /* the mmproj matrices llama-quantize quantizes: attn_qkv, attn_out, ffn_up/down,
                  * mm.*, v.deepstack.*.fc1/fc2; never the patch kernels or the position table */
} wtable_kind;

/* True if a conversion of a table of that kind re-encodes this tensor. */
bool wtable_is_matrix(wtable_kind kind, const char *name, const tensor *t);

/* The type a matrix with rows of n_in elements gets when `to` is asked for: `to` itself when n_in
 * is a multiple of its block size; otherwise the fallback llama.cpp's tools use for such rows
 * (K-quants -> Q8_0 when n_in is a multiple of 32, else F16; Q8_0/Q4_0 -> F16). */
qvl_dtype wtable_target_type(qvl_dtype to, int64_t n_in);

/* Re-encodes every matrix of the table (wtable_is_matrix) into `to` (F32, F16, BF16, Q8_0, Q4_0,
 * Q4_K; see wtable_target_type for rows that do not fit), by exact dequantization to float and
 * dtype_quantize_row (ggml's rounding). Tensors already of the target type are left as they are.
 * Every other tensor (norms, biases, the vision position table and patch kernels) stored as F16 or
 * BF16 becomes F32, as llama.cpp's converter stores them; F32 ones are untouched. */
qvl_status wtable_convert(wtable *t, qvl_dtype to, wtable_kind kind);

/* A table of every tensor of an open GGUF (views into its mapping). Takes ownership of g: it is
 * closed by wtable_free, or here on failure. */
qvl_status wtable_from_gguf(gguf *g, wtable **out);

/* Parses a --dtype value: f32 bf16 f16 q8_0 q4_0 q4_k (case-insensitive). */
bool wtable_parse_dtype(const char *s, qvl_dtype *out);

#endif
