/*
 * Helpers shared by the x86 variant files (avx2.c, avx512.c, avx512_bf16.c, and amx_attn.c). Everything
 * here is static inline and written with macros over the vector type, so each file compiles it
 * with its own -m flags: one source for the exp polynomial instead of a copy per ISA file.
 */
#ifndef QVL_KERNELS_X86_SIMD_COMMON_H
#define QVL_KERNELS_X86_SIMD_COMMON_H

#include "kernels/kernels_impl.h"

#define INLINE static inline __attribute__((always_inline))
/* Fixed-count loops are unrolled so that indices become constants and arrays stay in registers. */
#define UNROLL _Pragma("GCC unroll 16")

/* exp(x) range reduction and polynomial, about 1 ulp: x = n ln2 + r with |r| <= ln2/2 (ln2 split
 * in two parts so n ln2 is exact enough), degree-6 Cephes expf polynomial for e^r. V is the
 * vector type, P the intrinsic prefix (_mm256 / _mm512), ROUND rounds to the nearest integer.
 * Leaves n (as float) and p = e^r; the caller scales by 2^n its own way (the ISA decides how). */
#define KN_EXP_CORE(V, P, ROUND, x, n, p)                                   \
  V n = ROUND(P##_mul_ps(x, P##_set1_ps(1.44269504088896341f)));            \
  V p;                                                                      \
  do {                                                                      \
    V r_ = P##_fnmadd_ps(n, P##_set1_ps(0.693359375f), x);                  \
    r_ = P##_fnmadd_ps(n, P##_set1_ps(-2.12194440e-4f), r_);                \
    p = P##_set1_ps(1.9875691500e-4f);                                      \
    p = P##_fmadd_ps(p, r_, P##_set1_ps(1.3981999507e-3f));                 \
    p = P##_fmadd_ps(p, r_, P##_set1_ps(8.3334519073e-3f));                 \
    p = P##_fmadd_ps(p, r_, P##_set1_ps(4.1665795894e-2f));                 \
    p = P##_fmadd_ps(p, r_, P##_set1_ps(1.6666665459e-1f));                 \
    p = P##_fmadd_ps(p, r_, P##_set1_ps(5.0000001201e-1f));                 \
    p = P##_fmadd_ps(p, P##_mul_ps(r_, r_), P##_add_ps(r_, P##_set1_ps(1.0f))); \
  } while (0)

/* Peak probe: N independent accumulators (enough to cover the latency of each instruction at two
 * per cycle, few enough to stay in registers with the constants: 16 of 32 zmm, 12 of 16 ymm), one
 * function per kind; the results are summed and stored so the loop cannot be dropped. Returns the
 * number of instructions issued per chain (iters). */
#define PEAK_PROBE_N(NAME, T, N, INIT, STEP, SUM)                 \
  static __attribute__((noinline)) double NAME(int64_t iters) {  \
    T v[N];                                                       \
    UNROLL                                                        \
    for (int i = 0; i < N; i++)                                   \
      v[i] = INIT;                                                \
    for (int64_t it = 0; it < iters; it++) {                      \
      UNROLL                                                      \
      for (int i = 0; i < N; i++)                                 \
        v[i] = STEP;                                              \
    }                                                             \
    T s = v[0];                                                   \
    UNROLL                                                        \
    for (int i = 1; i < N; i++)                                   \
      s = SUM;                                                    \
    volatile T sink = s;                                          \
    (void)sink;                                                   \
    return (double)iters;                                         \
  }
/* Runs panels [r0/16, r1/16) x tokens [t0, t1) with the widest token count first. run[0] handles
 * the largest chunk (max_tt tokens), run[1] half of it, ... down to 1 token. */
typedef void (*panel_fn)(const kn_mm *m, int64_t p, int64_t t);
static inline void tile_generic(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                                const panel_fn *run, int max_tt) {
  int64_t p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  for (int64_t p = p0; p < p1; p++) {
    int64_t t = t0;
    int k = 0;
    for (int tt = max_tt; tt >= 1; tt /= 2, k++)
      for (; t1 - t >= tt; t += tt)
        run[k](m, p, t);
  }
}

#define PEAK_PROBE(NAME, T, INIT, STEP, SUM) PEAK_PROBE_N(NAME, T, 16, INIT, STEP, SUM)

/* Matmul runs: NAME computes panel p for tokens t .. t+TT-1 of the kn_mm m with BODY (one of the
 * *_BODY calls below) into acc, then panel_store writes them. Each ISA's panel header defines
 * PANEL_ACC (its accumulator array for TT tokens) and panel_store; each matmul file defines the
 * panel functions with the parameters of the bodies. */
#define DEFINE_RUN(NAME, TT, BODY)                          \
  static void NAME(const kn_mm *m, int64_t p, int64_t t) { \
    PANEL_ACC(acc, TT);                                    \
    const kn_weight *w = m->w;                             \
    BODY;                                                  \
    panel_store(m, p, t, TT, acc);                         \
  }
#define X16_PANEL(L) ((const uint8_t *)w->packed + (size_t)p * kn_x16_panel_bytes(L, w->n_in))
#define XQ(t) ((const int8_t *)m->xq + (size_t)(t) * m->xq_stride)
#define FLOAT_BODY(TT, L) panel_float(X16_PANEL(L), L, m->x + t * w->n_in, w->n_in, TT, acc)
#define Q80_BODY(TT, Q4)                                                                             \
  panel_q8_0(X16_PANEL((Q4) ? KN_LAYOUT_X16_Q4_0 : KN_LAYOUT_X16_Q8_0), Q4, XQ(t), m->xq_stride, \
             w->n_in, TT, acc)
#define Q4K_BODY(TT) panel_q4_K(X16_PANEL(KN_LAYOUT_X16_Q4_K), XQ(t), m->xq_stride, w->n_in, TT, acc)
#define Q6K_BODY(TT) panel_q6_K(X16_PANEL(KN_LAYOUT_X16_Q6_K), XQ(t), m->xq_stride, w->n_in, TT, acc)

/* run_q8_TT and run_q4_TT: the Q8_0 and Q4_0 runs of TT tokens (one panel_q8_0 for both). */
#define DEFINE_Q80_RUNS(TT)                            \
  DEFINE_RUN(run_q8_##TT, TT, Q80_BODY(TT, false)) \
  DEFINE_RUN(run_q4_##TT, TT, Q80_BODY(TT, true))

/* A tile function over runs of MAX, MAX/2, ..., 1 tokens (tile_generic). */
#define DEFINE_TILE(NAME, MAX, ...)                                                           \
  static void NAME(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) { \
    (void)th;                                                                                 \
    static const panel_fn run[] = {__VA_ARGS__};                                              \
    tile_generic(m, r0, r1, t0, t1, run, MAX);                                                \
  }

/* NAME, a variant's matmul choice for X16 weights: its tile functions tile_float, tile_q8_0,
 * tile_q4_0, tile_q4_K, tile_q6_K, with act32 activations quantized by ACT_Q8 / ACT_Q4 for Q8_0 /
 * Q4_0 and act256 activations quantized by ACT_K for the K-quants (kn_x16_select). */
#define DEFINE_X16_SELECT(NAME, ACT_Q8, ACT_Q4, ACT_K)                            \
  const kn_mm_kernel *NAME(const kn_weight *w, int64_t n_tokens) {              \
    (void)n_tokens;                                                              \
    static const kn_mm_kernel flt = {NULL, NULL, tile_float, PR, NULL};         \
    static const kn_mm_kernel q8_0 = {kn_act32_bytes, ACT_Q8, tile_q8_0, PR, NULL}; \
    static const kn_mm_kernel q4_0 = {kn_act32_bytes, ACT_Q4, tile_q4_0, PR, NULL}; \
    static const kn_mm_kernel q4_K = {kn_act256_bytes, ACT_K, tile_q4_K, PR, NULL}; \
    static const kn_mm_kernel q6_K = {kn_act256_bytes, ACT_K, tile_q6_K, PR, NULL}; \
    static const kn_x16_kernels k = {&flt, &q8_0, &q4_0, &q4_K, &q6_K};         \
    return kn_x16_select(w, &k);                                                 \
  }

#endif
