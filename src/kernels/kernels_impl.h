/*
 * Private to src/kernels/: the dispatch table and the contracts between the dispatcher
 * (kernels.c, which owns threading and scratch memory) and the ISA variants (ref/, x86/).
 *
 * Each variant fills in what it improves on top of the reference table (kn_ops_ref), so every
 * entry always has an implementation. Variants never start threads: the dispatcher splits work
 * into independent tiles and runs them on the pool; a tile's result must not depend on how the
 * work was split (that is what makes results bit-identical for any thread count).
 */
#ifndef QVL_KERNELS_KERNELS_IMPL_H
#define QVL_KERNELS_KERNELS_IMPL_H

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
  /* x86/avx512.c, fast tier: 16-row panels of bf16 pairs (inputs 2k, 2k+1 of a row in one 32-bit
   * lane) for vdpbf16ps; F16 weights are rounded to bf16 when packed */
  KN_LAYOUT_X16_BF16P = 0x5108,
  /* x86/amx.c and amx_sim.c (pack.c builds them): per 16-row panel and step of 32 inputs, one
   * 1 KB B tile of 16 input pairs x 16 rows (bf16 pairs, the X16_BF16P order padded to whole
   * steps with zeros); BF16X3 has the hi tile then the lo tile of each step (w = hi + lo, exact
   * for F16/BF16). Q8_0 keeps X16_Q8_0 (one 8 x 64 byte B tile per block, quants + 128, read by
   * TDPBSUD) and Q4_0 X16_Q4_0 (that B tile two rows per byte, widened as it is used), so the
   * tier below's kernels run the same bytes. */
  KN_LAYOUT_AMX_BF16 = 0x5109,
  KN_LAYOUT_AMX_BF16X3 = 0x510A,
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
  /* Per-thread scratch the tile function needs beyond the default (NULL: none); the dispatcher
   * allocates it before the tiles run. */
  size_t (*scratch_bytes)(int64_t n_in, size_t xq_stride);
} kn_mm_kernel;

/* Attention problem (see kn_attention in kernels.h). */
typedef struct kn_attn {
  const float *q;   /* [n_q][n_head][head_dim], rows q_stride apart */
  const float *k;   /* [n_kv][n_kv_head][head_dim], rows kv_stride apart (NULL when k16 is set) */
  const float *v;   /* same layout as k */
  const uint16_t *k16, *v16; /* the same as IEEE half (kn_attention_f16kv), or NULL */
  float *out;       /* [n_q][n_head][head_dim], rows out_stride apart */
  int64_t n_q, q_stride, n_kv, kv_stride, out_stride;
  int n_head, n_kv_head, head_dim;
  float scale;
  int64_t causal_base; /* < 0: not causal */
  bool fast;           /* fast tier (kn_attention_prec) */
  /* Fast tier: K and V of every KV head already converted by attention_fast_prep (block b of KV
   * head h at kv_prep + (h * kv_prep_blocks + b) * kv_prep_block_bytes), or NULL (the tiles convert
   * what they read). */
  const void *kv_prep;
  int64_t kv_prep_blocks;
  size_t kv_prep_block_bytes;
} kn_attn;

/* The keys query row i sees: all n_kv, or with causal_base >= 0 the first causal_base + i + 1. */
static inline int64_t kn_attn_keys(const kn_attn *a, int64_t i) {
  return a->causal_base >= 0 && a->causal_base + i + 1 < a->n_kv ? a->causal_base + i + 1 : a->n_kv;
}

/* Operations of the per-operation dispatch table (kernels_dispatch in kernels.h). */
enum {
  KN_OP_MM_FLOAT,  /* matmul, F32/F16/BF16 weights, exact tier */
  KN_OP_MM_FAST,   /* matmul, F16/BF16 weights, fast tier */
  KN_OP_MM_Q8_0,
  KN_OP_MM_Q4_0,
  KN_OP_MM_KQUANT, /* Q4_K, Q6_K */
  KN_OP_ATTN,      /* attention, exact tier (f32 and f16 K/V) */
  KN_OP_ATTN_FAST, /* attention, fast tier */
  KN_OP_ROWS,      /* norms, activations, element-wise */
  KN_OP_COUNT
};
/* The kernel a variant put in charge of an operation and why (static strings, or the
 * dispatcher's buffer when a start-up probe decided). */
typedef struct kn_choice {
  const char *kernel, *why;
} kn_choice;

typedef struct kn_ops {
  const char *name;
  kn_choice choice[KN_OP_COUNT];
  /* May set w->packed / w->layout (owned by w, freed with free()). */
  qvl_status (*weight_pack)(kn_weight *w);
  /* Packing for the fast tier (NULL: the variant has no fast path, weight_pack is used). */
  qvl_status (*weight_pack_fast)(kn_weight *w);
  /* weight_pack_fast is kn_pack_x16_int8: fast-tier F16/BF16 matmuls run on int8 blocks */
  bool fast_int8;
  /* The matmul kernel for this weight and batch size (never NULL). */
  const kn_mm_kernel *(*mm_select)(const kn_weight *w, int64_t n_tokens);
  /* Optional: kernels of this tier beyond mm_select that could run this packed weight for
   * n_tokens with the same bits (the AMX tiles for X16 Q8_0/Q4_0); the tuning times them with the
   * lower tiers' and mm_select's (kn_mm_candidates). Returns the count. */
  int (*mm_candidates)(const kn_weight *w, int64_t n_tokens, const kn_mm_kernel **k, const char **name, int max);
  void (*weight_row)(const kn_weight *w, int64_t r, float *out);
  void (*rmsnorm)(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *y);
  void (*layernorm)(const float *x, const float *w, const float *b, int64_t n_rows, int64_t n,
                    float eps, float *y);
  void (*gelu_tanh)(float *x, int64_t n);
  void (*gelu_erf)(float *x, int64_t n);
  void (*silu_mul)(float *gate, const float *up, int64_t n);
  void (*add)(float *y, const float *x, int64_t n);
  void (*to_f16)(const float *x, uint16_t *y, int64_t n); /* round to nearest even */
  /* Queries [q0, q1) of head h; or, if attn_by_group, of every query head of KV head h (so that
   * heads sharing K/V read it once). Reads k/v, or k16/v16 when those are set. */
  void (*attention)(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread);
  /* Fast tier (bf16 dot products, f32 K/V only); NULL = attention. Same tiling as attention. */
  void (*attention_fast)(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread);
  /* Optional, fast tier: the bytes of one prepared block of keys (0: this problem is not
   * prepared; *keys_per_block is set otherwise), and the conversion of block b of KV head h into
   * out. The dispatcher runs it once per call for every (KV head, block) before the tiles, so a
   * head's K/V are converted once instead of once per tile of queries. */
  size_t (*attention_fast_prep_bytes)(const kn_attn *a, int64_t *keys_per_block);
  void (*attention_fast_prep)(const kn_attn *a, int h, int64_t b, void *out);
  /* The same for the exact tier (NULL: none): used when the fast-tier entries do not apply. */
  size_t (*attention_prep_bytes)(const kn_attn *a, int64_t *keys_per_block);
  void (*attention_prep)(const kn_attn *a, int h, int64_t b, void *out);
  bool attn_by_group;
  /* Peak probe: runs `iters` iterations of the kind's register-only loop; returns the operations
   * done (0: not available). NULL = no probe. */
  double (*peak_loop)(kn_peak_kind kind, int64_t iters);
} kn_ops;

/* 16-row panel layouts shared by the x86 variants (built by kn_pack_x16 in pack.c). A panel holds
 * rows 16p .. 16p+15 (missing rows of the last panel are zero); panels follow each other. Within a
 * panel, per element (float types) or per block, "groups" are 4 consecutive bytes of a row's block
 * data for all 16 rows: group g, row r, byte e at g*64 + r*4 + e. */
#define PR 16 /* rows per panel */
/* Rows of panel p of a matrix with n_out rows that exist (PR, fewer in a last partial panel). */
static inline int kn_panel_rows(int64_t n_out, int64_t p) {
  return (int)(n_out - p * PR < PR ? n_out - p * PR : PR);
}

#define QK8_0 32
#define QK_K 256

/* Bytes per block (or per element for float types) of one 16-row panel. */
#define X16_Q8_0_BLK (32 + 8 * 64)   /* 16 fp16 scales + 8 groups of 16x4 quants */
#define X16_Q4_0_BLK (32 + 4 * 64)   /* 16 fp16 scales + 4 groups of 16x4 nibble pairs */
#define X16_Q4_K_SB (64 + 128 + 128 + 32 * 64) /* d, dmin, scales [8][16], min pairs, quants */
#define X16_Q4_K_SC 64
#define X16_Q4_K_MIN 192
#define X16_Q4_K_QS 320
#define X16_Q6_K_SB (32 + 256 + 32 * 64 + 16 * 64) /* d, scales [16][16], ql, qh */
#define X16_Q6_K_SC 32
/* Q6_K quants: for n = 0..1, jq = 0..7 one 192-byte unit [qh group 8n+jq][ql group 16n+jq]
 * [ql group 16n+jq+8]: the three groups one unpacking step needs, contiguous in memory. */
#define X16_Q6_K_Q 288
#define X16_Q6_K_QH_AT(H) (X16_Q6_K_Q + (H) * 192)
#define X16_Q6_K_QL_AT(G) (X16_Q6_K_Q + (((G) / 16) * 8 + ((G) % 8)) * 192 + 64 + 64 * (((G) % 16) / 8))

/* Bytes of one 16-row panel in X16 layout `layout` for n_in inputs (0 for other layouts). */
static inline size_t kn_x16_panel_bytes(int layout, int64_t n_in) {
  switch (layout) {
  case KN_LAYOUT_X16_F32: return (size_t)n_in * 64;
  case KN_LAYOUT_X16_F16:
  case KN_LAYOUT_X16_BF16: return (size_t)n_in * 32;
  case KN_LAYOUT_X16_Q8_0: return (size_t)(n_in / 32) * X16_Q8_0_BLK;
  case KN_LAYOUT_X16_Q4_0: return (size_t)(n_in / 32) * X16_Q4_0_BLK;
  case KN_LAYOUT_X16_Q4_K: return (size_t)(n_in / 256) * X16_Q4_K_SB;
  case KN_LAYOUT_X16_Q6_K: return (size_t)(n_in / 256) * X16_Q6_K_SB;
  default: return 0;
  }
}

/* Repacks F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K weights into the X16 layout (other types untouched). */
qvl_status kn_pack_x16(kn_weight *w);
/* A variant's kernel for each X16 layout; kn_x16_select picks the one for w (kn_mm_ref when w is
 * not packed or its layout has none). */
typedef struct kn_x16_kernels {
  const kn_mm_kernel *flt, *q8_0, *q4_0, *q4_K, *q6_K; /* flt: F32, F16 and BF16 panels */
} kn_x16_kernels;
const kn_mm_kernel *kn_x16_select(const kn_weight *w, const kn_x16_kernels *k);
/* Fast tier: F16/BF16 into KN_LAYOUT_X16_BF16P (per panel and input pair k: 16 lanes of
 * {bf16 w[r][2k], bf16 w[r][2k+1]}, an odd n_in padded with a zero weight); other types as
 * kn_pack_x16. Activations for it: kn_bf16p_row_bytes(n_in) bytes of bf16, zero-padded to a pair. */
qvl_status kn_pack_x16_fast(kn_weight *w);
/* Fast tier without a fast bf16 dot product: F16/BF16 rows whose length is a multiple of 32 are
 * quantized to Q8_0 (the reference quantizer, as llama-quantize would) and packed as
 * KN_LAYOUT_X16_Q8_0, so the tier's Q8_0 kernel runs them; everything else as kn_pack_x16.
 * w->type and w->data stay the F16/BF16 rows (kn_weight_row stays exact). */
qvl_status kn_pack_x16_int8(kn_weight *w);
#define KN_BF16P_PAIRS(n_in) (((n_in) + 1) / 2)
/* AMX layouts (see the enum): k-steps of 32 inputs per panel. */
#define KN_AMX_STEPS(n_in) (((n_in) + 31) / 32)
qvl_status kn_pack_amx_bf16(kn_weight *w, bool split);
size_t kn_bf16p_row_bytes(int64_t n_in);

/* Quantized activation rows for the X16 integer kernels (8-bit, scale d = amax / 127):
 *   act32  (Q8_0/Q4_0 weights): int8 q[n_in], float d[n_in/32], int32 sum[n_in/32]
 *   act256 (Q4_K/Q6_K weights): int8 q[n_in], float d[n_in/256], int16 sum16[n_in/256][16],
 *                               int16 sum32[n_in/256][8]
 * The sums remove the weights' offsets (+128 for Q8_0, -8 Q4_0, -32 Q6_K) and apply Q4_K's mins. */
size_t kn_act32_bytes(int64_t n_in);
size_t kn_act256_bytes(int64_t n_in);
void kn_act32_quantize_c(const float *x, void *xq, int64_t n_in);
/* The same rows quantized in 16 lanes (x86/avx512.c; AVX-512 CPUs only), bit-identical for finite x. */
void kn_avx512_act32_quantize(const float *x, void *xq, int64_t n_in);
void kn_act256_quantize_c(const float *x, void *xq, int64_t n_in);

extern const kn_ops kn_ops_ref;
/* Override the entries the ISA improves, each on top of the one before: x86/avx2.c, x86/avx512.c
 * (F/BW/VL/DQ + VNNI), x86/avx512_bf16.c (+ BF16), x86/amx.c (+ AMX tiles; the caller has the
 * tile permission). kn_amxsim_override installs the same AMX kernels running through the portable
 * tile model (tile_model.c), on any CPU: the test tier `amxsim`. */
void kn_avx2_override(kn_ops *ops);
void kn_avx2_attn_override(kn_ops *ops); /* x86/avx2_attn.c, called by kn_avx2_override */
/* x86/avx2_vnni.c: the int8 matmuls with AVX-VNNI, on top of kn_avx2_override (tier avx2vnni;
 * the AVX-512 tiers replace them); it falls back to avx2.c's selection and probe. */
void kn_avx2vnni_override(kn_ops *ops);
const kn_mm_kernel *kn_avx2_mm_select(const kn_weight *w, int64_t n_tokens);
double kn_avx2_peak_loop(kn_peak_kind kind, int64_t iters);
void kn_avx512_override(kn_ops *ops);
void kn_avx512bf16_override(kn_ops *ops);
void kn_amx_override(kn_ops *ops);
void kn_amxsim_override(kn_ops *ops);
/* The same on the tile model with the `amx` build's AVX-512 vector code (x86/amx_sim512.c): the test
 * tier `amxsim512` on AVX-512 BF16 CPUs. */
void kn_amxsim512_override(kn_ops *ops);
/* The AMX kernels' entry points, one per target object (amx_target.h; _hw and _sim512 exist on
 * x86-64 only): each installs its matmul or attention entries on top of the tier below. */
void kn_amx_gemm_install_hw(kn_ops *ops, const char *name);
void kn_amx_attn_install_hw(kn_ops *ops, const char *name);
void kn_amx_gemm_install_sim(kn_ops *ops, const char *name);
void kn_amx_attn_install_sim(kn_ops *ops, const char *name);
void kn_amx_gemm_install_sim512(kn_ops *ops, const char *name);
void kn_amx_attn_install_sim512(kn_ops *ops, const char *name);

/* Per-thread scratch owned by the dispatcher: at least `bytes`, 64-byte aligned, kept between
 * calls (grows, never shrinks). NULL on allocation failure. */
void *kn_scratch(int thread, size_t bytes);

/* Reference matmul kernel (float x, weights dequantized row by row, double accumulation). */
extern const kn_mm_kernel kn_mm_ref;

/* kn_matmul with a given kernel (the tuning's measurements). */
qvl_status kn_matmul_with(const kn_weight *w, const kn_mm_kernel *k, const float *x, int64_t n_tokens,
                          const float *bias, float *y);
/* The active table (after kernels_init). */
const kn_ops *kn_active_ops(void);
/* The x86 tiers below the active one that this CPU runs, lowest first, with their matmul
 * selection: for the X16 layouts every tier's kernels give the same bits, so the tuning times them
 * against the active tier's (a kernel never replaces a lower tier's unless measured faster). */
#define N_LOWER_MAX 8
typedef struct kn_lower_tier {
  const char *name;
  const kn_mm_kernel *(*select)(const kn_weight *w, int64_t n_tokens);
} kn_lower_tier;
int kn_lower_tiers(const kn_lower_tier **out);
/* The tuning's candidates for w at n tokens (tune.c), lowest tier first: the lower tiers' kernels
 * and the active tier's own for X16 panels (each kernel once), then the tier's extra candidates
 * (kn_ops.mm_candidates: AMX tiles). *n_safe: how many come before the extras (the ones the
 * tuning may keep without measuring, KN_TUNE_OFF). */
int kn_mm_candidates(const kn_weight *w, int64_t n_tokens, const kn_mm_kernel **k, const char **name, int max,
                     int *n_safe);
/* tune.c: chooses w->pick for each class (called by kn_weight_init after packing); tier_forced
 * says whether kernels_init took a forced tier. Never fails: without a measurement it keeps the
 * first candidate. */
void kn_tune_weight(kn_weight *w, bool tier_forced);
/* tune.c: the key of this CPU, build and thread count (set by kernels_init). */
void kn_tune_set_key(const char *cpu_signature, const char *tier, int threads);
/* Tests: adds usec of sleep to every timed run of the candidate named `kernel` (NULL: none), so a
 * test can make a candidate slow on purpose. */
void kn_tune_test_delay(const char *kernel, int usec);
/* How many candidate timings this process ran (tests: a result from the file costs none). */
int64_t kn_tune_measurements(void);

#endif
