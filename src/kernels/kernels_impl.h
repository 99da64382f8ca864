/*
 * Private to src/kernels/: the dispatch table and the contracts between the dispatcher
 * (kernels.c, which owns threading and scratch memory) and the ISA variants (ref/, x86/).
 *
 * Each variant fills in what it improves on top of the reference table (kn_ops_ref), so every
 * entry always has an implementation. Variants never start threads: the dispatcher splits work
 * into independent tiles and runs them on the pool; a tile's result must not depend on how the
 * work was split (that is what makes results bit-identical for any thread count).
 */
#ifndef QVL_KERNELS_IMPL_H
#define QVL_KERNELS_IMPL_H

#include "kernels/kernels.h"

#include <stddef.h>

/* kn_weight.layout values: unique across variants so a variant can recognise its own packing and
 * fall back to the plain rows (w->data, always kept) for anything else. */
enum {
  KN_LAYOUT_PLAIN = 0,
  /* x86/avx512.c: 16-row panels (see docs/KERNELS.md "Packed layouts") */
  KN_LAYOUT_X16_F32 = 0x5101,
  KN_LAYOUT_X16_F16 = 0x5102,
  KN_LAYOUT_X16_BF16 = 0x5103,
  KN_LAYOUT_X16_Q8_0 = 0x5104,
  KN_LAYOUT_X16_Q4_0 = 0x5105,
  KN_LAYOUT_X16_Q4_K = 0x5106,
  KN_LAYOUT_X16_Q6_K = 0x5107,
};

/* One matmul call as seen by a tile function. */
typedef struct kn_mm {
  const kn_weight *w;
  const float *x;   /* [n_tokens][n_in] */
  const void *xq;   /* [n_tokens][xq_stride bytes]: activations quantized by act_quantize, or NULL */
  size_t xq_stride;
  int64_t n_tokens;
  const float *bias; /* [n_out] or NULL */
  float *y;          /* [n_tokens][n_out] */
} kn_mm;

/* How a variant computes y = W x for one weight: optional activation quantization (done once per
 * call, per token row), then tiles of output rows x tokens. */
typedef struct kn_mm_kernel {
  /* Bytes of one quantized activation row for n_in inputs; NULL = the tile reads float x. */
  size_t (*act_row_bytes)(int64_t n_in);
  void (*act_quantize)(const float *x, void *xq, int64_t n_in);
  /* Computes y[t][r] for r in [r0, r1), t in [t0, t1). thread indexes per-thread scratch. */
  void (*tile)(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread);
  int64_t row_align; /* tiles start at multiples of this row count */
} kn_mm_kernel;

/* Attention problem (see kn_attention in kernels.h). */
typedef struct kn_attn {
  const float *q;   /* [n_q][n_head][head_dim], rows q_stride apart */
  const float *k;   /* [n_kv][n_kv_head][head_dim], rows kv_stride apart */
  const float *v;   /* same layout as k */
  float *out;       /* [n_q][n_head][head_dim], rows out_stride apart */
  int64_t n_q, q_stride, n_kv, kv_stride, out_stride;
  int n_head, n_kv_head, head_dim;
  float scale;
  int64_t causal_base; /* < 0: not causal */
} kn_attn;

typedef struct kn_ops {
  const char *name;
  /* May set w->packed / w->layout (owned by w, freed with free()). */
  qvl_status (*weight_pack)(kn_weight *w);
  /* The matmul kernel for this weight and batch size (never NULL). */
  const kn_mm_kernel *(*mm_select)(const kn_weight *w, int64_t n_tokens);
  void (*weight_row)(const kn_weight *w, int64_t r, float *out);
  void (*rmsnorm)(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *y);
  void (*layernorm)(const float *x, const float *w, const float *b, int64_t n_rows, int64_t n,
                    float eps, float *y);
  void (*gelu_tanh)(float *x, int64_t n);
  void (*gelu_erf)(float *x, int64_t n);
  void (*silu_mul)(float *gate, const float *up, int64_t n);
  void (*add)(float *y, const float *x, int64_t n);
  /* Queries [q0, q1) of head h. */
  void (*attention)(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread);
} kn_ops;

extern const kn_ops kn_ops_ref;
/* Override the entries the ISA improves (x86/avx2.c, x86/avx512.c). */
void kn_avx2_override(kn_ops *ops);
void kn_avx512_override(kn_ops *ops);

/* Per-thread scratch owned by the dispatcher: at least `bytes`, 64-byte aligned, kept between
 * calls (grows, never shrinks). NULL on allocation failure. */
void *kn_scratch(int thread, size_t bytes);

/* Reference matmul kernel (float x, weights dequantized row by row, double accumulation). */
extern const kn_mm_kernel kn_mm_ref;

#endif
