/*
 * AVX-512 variant (F/BW/VL/DQ + VNNI; compiled with only its own -m flags): the tier of every
 * AVX-512 CPU with VNNI (Cascade Lake, Ice Lake, Tiger Lake, Zen 4+). The bf16 fast tier lives in
 * avx512_bf16.c (-mavx512bf16 on top), so CPUs without BF16 no longer fall back to AVX2.
 *
 * Matmul works on 16-row panels: kn_weight_init repacks W so that one 64-byte load holds the same
 * input position(s) of 16 consecutive output rows. A zmm accumulator then holds 16 outputs of one
 * token and no horizontal reduction is ever needed:
 *   - float weights (F32/F16/BF16): one load = element i of 16 rows, converted to fp32, one FMA per
 *     token with x[t][i] broadcast;
 *   - quantized weights: one load = 4 consecutive quants of 16 rows (u8), one vpdpbusd per token
 *     with 4 activation quants (s8) broadcast; block scales are applied once per block (Q8_0,
 *     Q4_0) or per sub-block in integers then once per super-block (Q4_K, Q6_K).
 * The same panel kernel serves GEMV (1 token) and GEMM (up to 8 tokens share each weight load), and
 * every output is accumulated in the same order either way, so a token's result does not depend on
 * the batch it is in nor on the thread split.
 *
 * Activations are quantized once per matmul: 8-bit with a float scale per 32 values (for Q8_0/Q4_0
 * weights) or per 256 values plus 16- and 32-element sums (for K-quants), like ggml's q8_0/q8_K.
 * Signed weights are stored with +128 (Q8_0) and the offset removed with the block sums of the
 * activations; the same trick removes Q4_0's -8 and Q6_K's -32.
 */
#if defined(__x86_64__)

#include <stdlib.h>

#include "base/status.h"
#include "kernels/act_quant.h"
#include "kernels/x86/avx512_common.h"

/* ---------------------------------------------------------------------------------------------
 * Activation quantization (formats act32 / act256 in kernels_impl.h).
 */

/* Quantizes 32*k values with one scale: q = round(x * 127 / amax). Returns the sum of the quants
 * in sums16[16] (per 16 values). */
static inline float quant_run(const float *x, int n, int8_t *q, int32_t *sums16) {
  __m512 amax = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16)
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  float a = _mm512_reduce_max_ps(amax);
  float d = a / 127.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m512 vid = _mm512_set1_ps(id);
  for (int i = 0; i < n; i += 16) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid)); /* ties to even */
    __m128i q8 = _mm512_cvtsepi32_epi8(v);
    _mm_storeu_si128((__m128i *)(q + i), q8);
    /* The sum of the stored (saturated) quants, not of v: the same for finite x, and bounded when x
     * holds NaN or Inf (v is then INT_MIN, and 16 of them overflowed the int sums downstream). */
    sums16[i / 16] = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8));
  }
  return d;
}

/* The act32 block sums are stored already multiplied by the weights' offset (-128 for Q8_0, -8
 * for Q4_0): the kernels start each block's int32 sum from a broadcast load of it, with no integer
 * multiply and no register-to-vector move per block and token. */
static void act32_quantize_q8(const float *x, void *xq, int64_t n_in) { kn_act32_fill(x, xq, n_in, -128, quant_run); }
static void act32_quantize_q4(const float *x, void *xq, int64_t n_in) { kn_act32_fill(x, xq, n_in, -8, quant_run); }
static void act256_quantize(const float *x, void *xq, int64_t n_in) { kn_act256_fill(x, xq, n_in, quant_run); }
/* The plain act32 rows (sums as they are), for the AMX int8 kernels. */
void kn_avx512_act32_quantize(const float *x, void *xq, int64_t n_in) { kn_act32_fill(x, xq, n_in, 1, quant_run); }

/* ---------------------------------------------------------------------------------------------
 * Panel kernels. Each computes acc[t] (16 rows) for TT tokens; TT is a compile-time constant in
 * every instantiation (the switch in run_panel), so the arrays below live in registers.
 */

INLINE __m512i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

INLINE __m512 load_w16(const uint8_t *p, int layout) {
  if (layout == KN_LAYOUT_X16_F32)
    return _mm512_loadu_ps(p);
  if (layout == KN_LAYOUT_X16_F16)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

INLINE void panel_float(const uint8_t *pw, int layout, const float *x, int64_t n_in, int TT,
                        __m512 *acc) {
  size_t esz = layout == KN_LAYOUT_X16_F32 ? 64 : 32;
  panel_zero(acc, TT);
  for (int64_t i = 0; i < n_in; i++) {
    __m512 w = load_w16(pw + (size_t)i * esz, layout);
    UNROLL
    for (int t = 0; t < TT; t++)
      acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[t * n_in + i]), acc[t]);
  }
}

INLINE void panel_q8_0(const uint8_t *pw, bool q4, const int8_t *xq, size_t xs, int64_t n_in,
                       int TT, __m512 *acc) {
  int64_t nb = n_in / 32;
  const float *xd[8];
  const int32_t *xsum[8];
  kn_act_rows(xq, xs, n_in, TT, xd, xsum, NULL);
  panel_zero(acc, TT);
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = pw + (size_t)b * (q4 ? X16_Q4_0_BLK : X16_Q8_0_BLK);
    __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    __m512i w[8];
    if (q4) {
      UNROLL
      for (int k = 0; k < 4; k++) {
        __m512i raw = _mm512_loadu_si512(blk + 32 + k * 64);
        w[k] = _mm512_and_si512(raw, lo4);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
      }
    } else {
      UNROLL
      for (int c = 0; c < 8; c++)
        w[c] = _mm512_loadu_si512(blk + 32 + c * 64);
    }
    UNROLL
    for (int t = 0; t < TT; t++) {
      const int8_t *xb = xq + (size_t)t * xs + b * 32;
      __m512i is = _mm512_set1_epi32(xsum[t][b]);
      UNROLL
      for (int c = 0; c < 8; c++)
        is = _mm512_dpbusd_epi32(is, w[c], bcast4(xb + 4 * c));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(xd[t][b])),
                               acc[t]);
    }
  }
}

/* Q8_0 / Q4_0 on two panels (32 rows) at once: each activation broadcast feeds two vpdpbusd and
 * 2 x TT int32 block sums run side by side (TT up to 6: 12 independent chains). The loop goes
 * group by group (one 64-byte weight load per panel and group) instead of holding a whole block of
 * weights in registers. Every output gets exactly the operations of panel_q8_0 (exact integer
 * block sum, then the same fmadd of the same float operands), so it equals the 1-panel path bit
 * for bit and batch/thread invariance hold. */
INLINE void panel2_q8_0(const uint8_t *pw, size_t panel, bool q4, const int8_t *xq, size_t xs,
                        int64_t n_in, int TT, __m512 *acc) {
  int64_t nb = n_in / 32;
  const size_t blk_bytes = q4 ? X16_Q4_0_BLK : X16_Q8_0_BLK;
  const float *xd[6];
  const int32_t *xsum[6];
  kn_act_rows(xq, xs, n_in, TT, xd, xsum, NULL);
  panel_zero(acc, 2 * TT);
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *b0 = pw + (size_t)b * blk_bytes, *b1 = b0 + panel;
    __m512i is[2][6];
    UNROLL
    for (int t = 0; t < TT; t++)
      is[0][t] = is[1][t] = _mm512_set1_epi32(xsum[t][b]);
    if (q4) {
      UNROLL
      for (int k = 0; k < 4; k++) {
        __m512i r0 = _mm512_loadu_si512(b0 + 32 + k * 64), r1 = _mm512_loadu_si512(b1 + 32 + k * 64);
        __m512i w0 = _mm512_and_si512(r0, lo4), w1 = _mm512_and_si512(r1, lo4);
        __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(r0, 4), lo4);
        __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(r1, 4), lo4);
        UNROLL
        for (int t = 0; t < TT; t++) {
          const int8_t *xb = xq + (size_t)t * xs + b * 32;
          __m512i xl = bcast4(xb + 4 * k), xh = bcast4(xb + 16 + 4 * k);
          is[0][t] = _mm512_dpbusd_epi32(is[0][t], w0, xl);
          is[1][t] = _mm512_dpbusd_epi32(is[1][t], w1, xl);
          is[0][t] = _mm512_dpbusd_epi32(is[0][t], h0, xh);
          is[1][t] = _mm512_dpbusd_epi32(is[1][t], h1, xh);
        }
      }
    } else {
      UNROLL
      for (int c = 0; c < 8; c++) {
        __m512i w0 = _mm512_loadu_si512(b0 + 32 + c * 64), w1 = _mm512_loadu_si512(b1 + 32 + c * 64);
        UNROLL
        for (int t = 0; t < TT; t++) {
          __m512i xv = bcast4(xq + (size_t)t * xs + b * 32 + 4 * c);
          is[0][t] = _mm512_dpbusd_epi32(is[0][t], w0, xv);
          is[1][t] = _mm512_dpbusd_epi32(is[1][t], w1, xv);
        }
      }
    }
    __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b0));
    __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b1));
    UNROLL
    for (int t = 0; t < TT; t++) {
      __m512 dx = _mm512_set1_ps(xd[t][b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[0][t]), _mm512_mul_ps(dw0, dx), acc[t]);
      acc[TT + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[1][t]), _mm512_mul_ps(dw1, dx), acc[TT + t]);
    }
  }
}

INLINE void panel_q4_K(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m512 *acc) {
  int64_t ns = n_in / 256;
  const float *xd[4];
  const int16_t *x16[4]; /* the 32-value sums follow at x16 + 16 ns */
  kn_act_rows(xq, xs, n_in, TT, xd, NULL, x16);
  panel_zero(acc, TT);
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < ns; sb++) {
    const uint8_t *blk = pw + (size_t)sb * X16_Q4_K_SB;
    __m512i A[4], B[4];
    UNROLL
    for (int t = 0; t < TT; t++) {
      A[t] = _mm512_setzero_si512();
      B[t] = _mm512_setzero_si512();
    }
    UNROLL
    for (int c = 0; c < 4; c++) {
      __m512i mp = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + X16_Q4_K_MIN + 32 * c)));
      UNROLL
      for (int t = 0; t < TT; t++)
        B[t] = _mm512_dpwssd_epi32(B[t], mp, bcast4((const int8_t *)(x16[t] + ns * 16 + sb * 8 + 2 * c)));
    }
    UNROLL
    for (int k = 0; k < 4; k++) {
      UNROLL
      for (int half = 0; half < 2; half++) {
        __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + X16_Q4_K_SC + 16 * (2 * k + half))));
        __m512i w[8];
        UNROLL
        for (int j = 0; j < 8; j++) {
          __m512i raw = _mm512_loadu_si512(blk + X16_Q4_K_QS + (8 * k + j) * 64);
          w[j] = half ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4) : _mm512_and_si512(raw, lo4);
        }
        UNROLL
        for (int t = 0; t < TT; t++) {
          const int8_t *xb = xq + (size_t)t * xs + sb * 256 + 64 * k + 32 * half;
          __m512i is = _mm512_setzero_si512();
          UNROLL
          for (int j = 0; j < 8; j++)
            is = _mm512_dpbusd_epi32(is, w[j], bcast4(xb + 4 * j));
          A[t] = _mm512_add_epi32(A[t], _mm512_mullo_epi32(is, sc));
        }
      }
    }
    __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
    UNROLL
    for (int t = 0; t < TT; t++) {
      __m512 dx = _mm512_set1_ps(xd[t][sb]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t]), _mm512_mul_ps(dw, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(B[t]), _mm512_mul_ps(dm, dx), acc[t]);
    }
  }
}

/* Q6_K: one qh group (2 high bits of 4 c-groups) and the two ql groups that share it give 4
 * c-groups of 16 rows x 4 quants: elements 128n + 32m + 4jq for m = 0..3. The 16-element scale
 * groups are g = 8n + 2m + jq/4, so four isum accumulators (one per m) run over jq = 4jb..4jb+3. */
INLINE void panel_q6_K(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m512 *acc) {
  int64_t ns = n_in / 256;
  const float *xd[4];
  const int16_t *x16[4];
  kn_act_rows(xq, xs, n_in, TT, xd, NULL, x16);
  panel_zero(acc, TT);
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  for (int64_t sb = 0; sb < ns; sb++) {
    const uint8_t *blk = pw + (size_t)sb * X16_Q6_K_SB;
    if (TT == 1) /* GEMV streams from DRAM: fetch the super-block after next (3360 B) early */
      for (int l = 0; l < X16_Q6_K_SB; l += 64)
        _mm_prefetch((const char *)blk + 2 * X16_Q6_K_SB + l, _MM_HINT_T0);
    __m512i A[4];
    UNROLL
    for (int t = 0; t < TT; t++)
      A[t] = _mm512_setzero_si512();
    UNROLL
    for (int n = 0; n < 2; n++) {
      UNROLL
      for (int jb = 0; jb < 2; jb++) {
        __m512i is[4][4]; /* [t][m] */
        UNROLL
        for (int t = 0; t < TT; t++) {
          UNROLL
          for (int m = 0; m < 4; m++)
            is[t][m] = _mm512_set1_epi32(-32 * (int32_t)x16[t][sb * 16 + 8 * n + 2 * m + jb]);
        }
        UNROLL
        for (int jq = 4 * jb; jq < 4 * jb + 4; jq++) {
          __m512i qh = _mm512_loadu_si512(blk + X16_Q6_K_QH_AT(8 * n + jq));
          __m512i qa = _mm512_loadu_si512(blk + X16_Q6_K_QL_AT(16 * n + jq));
          __m512i qb = _mm512_loadu_si512(blk + X16_Q6_K_QL_AT(16 * n + jq + 8));
          __m512i q[4];
          /* (low nibble & 0x0F) | (high bits & 0x30): ternary logic 0xEA = (A & B) | C */
          q[0] = _mm512_ternarylogic_epi32(qa, m0f, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30), 0xEA);
          q[1] = _mm512_ternarylogic_epi32(qb, m0f, _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30), 0xEA);
          q[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qa, 4), m0f, _mm512_and_si512(qh, m30), 0xEA);
          q[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qb, 4), m0f,
                                           _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30), 0xEA);
          UNROLL
          for (int t = 0; t < TT; t++) {
            const int8_t *xb = xq + (size_t)t * xs + sb * 256 + 128 * n + 4 * jq;
            UNROLL
            for (int m = 0; m < 4; m++)
              is[t][m] = _mm512_dpbusd_epi32(is[t][m], q[m], bcast4(xb + 32 * m));
          }
        }
        UNROLL
        for (int m = 0; m < 4; m++) {
          __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128((const __m128i *)(blk + X16_Q6_K_SC + 16 * (8 * n + 2 * m + jb))));
          UNROLL
          for (int t = 0; t < TT; t++)
            A[t] = _mm512_add_epi32(A[t], _mm512_mullo_epi32(is[t][m], sc));
        }
      }
    }
    __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    UNROLL
    for (int t = 0; t < TT; t++)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[t][sb])), acc[t]);
  }
}


#define DEFINE_FLOAT_RUNS(SUF, L)                              \
  DEFINE_RUN(run_##SUF##_8, 8, FLOAT_BODY(8, L))         \
  DEFINE_RUN(run_##SUF##_4, 4, FLOAT_BODY(4, L))         \
  DEFINE_RUN(run_##SUF##_2, 2, FLOAT_BODY(2, L))         \
  DEFINE_RUN(run_##SUF##_1, 1, FLOAT_BODY(1, L))
DEFINE_FLOAT_RUNS(f32, KN_LAYOUT_X16_F32)
DEFINE_FLOAT_RUNS(f16, KN_LAYOUT_X16_F16)
DEFINE_FLOAT_RUNS(bf16, KN_LAYOUT_X16_BF16)
DEFINE_Q80_RUNS(8)
DEFINE_Q80_RUNS(4)
DEFINE_Q80_RUNS(2)
DEFINE_Q80_RUNS(1)
DEFINE_RUN(run_q4k_4, 4, Q4K_BODY(4))
DEFINE_RUN(run_q4k_2, 2, Q4K_BODY(2))
DEFINE_RUN(run_q4k_1, 1, Q4K_BODY(1))
DEFINE_RUN(run_q6k_4, 4, Q6K_BODY(4))
DEFINE_RUN(run_q6k_2, 2, Q6K_BODY(2))
DEFINE_RUN(run_q6k_1, 1, Q6K_BODY(1))


/* Two panels (p, p + 1) x TT tokens for Q8_0 / Q4_0. */
#define DEFINE_Q80_PAIR_RUN(NAME, TT, Q4)                                                        \
  static void NAME(const kn_mm *m, int64_t p, int64_t t) {                                      \
    __m512 acc[2 * TT];                                                                         \
    size_t panel = kn_x16_panel_bytes((Q4) ? KN_LAYOUT_X16_Q4_0 : KN_LAYOUT_X16_Q8_0, m->w->n_in); \
    panel2_q8_0((const uint8_t *)m->w->packed + (size_t)p * panel, panel, Q4, XQ(t),            \
                m->xq_stride, m->w->n_in, TT, acc);                                             \
    panel_store(m, p, t, TT, acc);                                                              \
    panel_store(m, p + 1, t, TT, acc + TT);                                                     \
  }
DEFINE_Q80_PAIR_RUN(run2_q8_6, 6, false)
DEFINE_Q80_PAIR_RUN(run2_q8_4, 4, false)
DEFINE_Q80_PAIR_RUN(run2_q8_2, 2, false)
DEFINE_Q80_PAIR_RUN(run2_q8_1, 1, false)
DEFINE_Q80_PAIR_RUN(run2_q4_6, 6, true)
DEFINE_Q80_PAIR_RUN(run2_q4_4, 4, true)
DEFINE_Q80_PAIR_RUN(run2_q4_2, 2, true)
DEFINE_Q80_PAIR_RUN(run2_q4_1, 1, true)


/* GEMV on float weights: one FMA chain per panel is latency-bound (4 cycles per 16 outputs), so
 * four panels run side by side. Each output keeps exactly the same operation sequence as in
 * panel_float, so results equal the batched path bit for bit. */
INLINE void gemv_float4(const kn_mm *m, int64_t p, int L) {
  const kn_weight *w = m->w;
  size_t esz = L == KN_LAYOUT_X16_F32 ? 64 : 32, panel = kn_x16_panel_bytes(L, w->n_in);
  const uint8_t *pw = (const uint8_t *)w->packed + (size_t)p * panel;
  const float *x = m->x;
  __m512 acc[4];
  panel_zero(acc, 4);
  for (int64_t i = 0; i < w->n_in; i++) {
    __m512 xv = _mm512_set1_ps(x[i]);
    UNROLL
    for (int k = 0; k < 4; k++)
      acc[k] = _mm512_fmadd_ps(load_w16(pw + (size_t)k * panel + (size_t)i * esz, L), xv, acc[k]);
  }
  UNROLL
  for (int k = 0; k < 4; k++)
    panel_store(m, p + k, 0, 1, &acc[k]);
}
static void gemv4_f32(const kn_mm *m, int64_t p) { gemv_float4(m, p, KN_LAYOUT_X16_F32); }
static void gemv4_f16(const kn_mm *m, int64_t p) { gemv_float4(m, p, KN_LAYOUT_X16_F16); }
static void gemv4_bf16(const kn_mm *m, int64_t p) { gemv_float4(m, p, KN_LAYOUT_X16_BF16); }

/* Panel pairs x chunks of 6, 4, 2, 1 tokens; an odd last panel goes through the 1-panel kernels
 * (one[]: 8, 4, 2, 1 tokens). GEMV (a single token in the whole call) keeps the 1-panel path. */
static void tile_pairs(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                       const panel_fn *two, const panel_fn *one) {
  int64_t p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  if (m->n_tokens == 1) {
    tile_generic(m, r0, r1, t0, t1, one, 8);
    return;
  }
  /* The next pair's weights (35 KB per 1024 inputs) are fetched into L2 a slice per token chunk
   * while this pair computes: otherwise the first chunk of every pair waits for them from L3 or
   * DRAM (the merger's 16 MB matrices do not stay in a shared L3). Its effect alone was not
   * separated from the pair kernel's in the noisy measurements (docs/KERNELS.md). */
  bool q4 = m->w->layout == KN_LAYOUT_X16_Q4_0;
  size_t pair = 2 * kn_x16_panel_bytes(q4 ? KN_LAYOUT_X16_Q4_0 : KN_LAYOUT_X16_Q8_0, m->w->n_in);
  int64_t n_chunks = (t1 - t0 + 5) / 6;
  size_t slice = (pair / (size_t)n_chunks + 63) & ~(size_t)63;
  int64_t p = p0;
  for (; p + 2 <= p1; p += 2) {
    const char *next = (const char *)m->w->packed + (size_t)(p + 2) * (pair / 2);
    bool pf = p + 4 <= p1;
    size_t done = 0;
    int64_t t = t0;
    for (; t1 - t >= 6; t += 6) {
      if (pf)
        for (size_t e = done + slice; done < e && done < pair; done += 64)
          _mm_prefetch(next + done, _MM_HINT_T1);
      two[0](m, p, t);
    }
    static const int rest[] = {4, 2, 1};
    for (int k = 0; k < 3; k++)
      for (; t1 - t >= rest[k]; t += rest[k])
        two[k + 1](m, p, t);
  }
  if (p < p1)
    tile_generic(m, p * PR, r1, t0, t1, one, 8);
}

static void tile_float(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) {
  (void)th;
  static const panel_fn f32[] = {run_f32_8, run_f32_4, run_f32_2, run_f32_1};
  static const panel_fn f16[] = {run_f16_8, run_f16_4, run_f16_2, run_f16_1};
  static const panel_fn bf16[] = {run_bf16_8, run_bf16_4, run_bf16_2, run_bf16_1};
  int l = m->w->layout;
  if (t0 == 0 && t1 == 1 && m->n_tokens == 1) {
    int64_t p = r0 / PR, p1 = (r1 + PR - 1) / PR;
    void (*g4)(const kn_mm *, int64_t) =
        l == KN_LAYOUT_X16_F32 ? gemv4_f32 : l == KN_LAYOUT_X16_F16 ? gemv4_f16 : gemv4_bf16;
    for (; p + 4 <= p1; p += 4)
      g4(m, p);
    r0 = p * PR; /* the remaining panels go through the normal path */
    if (r0 >= r1)
      return;
  }
  tile_generic(m, r0, r1, t0, t1, l == KN_LAYOUT_X16_F32 ? f32 : l == KN_LAYOUT_X16_F16 ? f16 : bf16, 8);
}
static void tile_q8_0(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) {
  (void)th;
  static const panel_fn one[] = {run_q8_8, run_q8_4, run_q8_2, run_q8_1};
  static const panel_fn two[] = {run2_q8_6, run2_q8_4, run2_q8_2, run2_q8_1};
  tile_pairs(m, r0, r1, t0, t1, two, one);
}
static void tile_q4_0(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) {
  (void)th;
  static const panel_fn one[] = {run_q4_8, run_q4_4, run_q4_2, run_q4_1};
  static const panel_fn two[] = {run2_q4_6, run2_q4_4, run2_q4_2, run2_q4_1};
  tile_pairs(m, r0, r1, t0, t1, two, one);
}
DEFINE_TILE(tile_q4_K, 4, run_q4k_4, run_q4k_2, run_q4k_1)
DEFINE_TILE(tile_q6_K, 4, run_q6k_4, run_q6k_2, run_q6k_1)

DEFINE_X16_SELECT(kn_avx512_mm_select, act32_quantize_q8, act32_quantize_q4, act256_quantize)

/* ---------------------------------------------------------------------------------------------
 * Element-wise and row operations
 */


/* gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3):
 * the same function as PyTorch's formula, written so it has no cancellation near u = 0. */
static void avx512_gelu_tanh(float *x, int64_t n) {
  const __m512 k2b = _mm512_set1_ps(-2.0f * 0.7978845608028654f), kk = _mm512_set1_ps(0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 mk = tail_mask(n - i);
    __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
    __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(kk, v), _mm512_mul_ps(v, v), v);
    __m512 e = exp512(_mm512_mul_ps(k2b, inner));
    _mm512_mask_storeu_ps(x + i, mk, _mm512_div_ps(v, _mm512_add_ps(one, e)));
  }
}

static void avx512_silu_mul(float *gate, const float *up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 mk = tail_mask(n - i);
    __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
    __m512 u = _mm512_maskz_loadu_ps(mk, up + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(gate + i, mk, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

static void avx512_add(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 mk = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, mk, _mm512_add_ps(_mm512_maskz_loadu_ps(mk, y + i),
                                                   _mm512_maskz_loadu_ps(mk, x + i)));
  }
}

/* Sums are accumulated in double (two 8-lane halves) so long rows lose nothing. */
static void avx512_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps,
                           float *y) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
      __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), xr + i);
      __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      s0 = _mm512_fmadd_pd(lo, lo, s0);
      s1 = _mm512_fmadd_pd(hi, hi, s1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 mk = tail_mask(n - i);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xr + i), inv);
      if (w)
        v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + i));
      _mm512_mask_storeu_ps(yr + i, mk, v);
    }
  }
}

static void avx512_layernorm(const float *x, const float *w, const float *b, int64_t n_rows,
                             int64_t n, float eps, float *y) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    __m512d s = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
      __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), xr + i);
      s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
      s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
    double mean = _mm512_reduce_add_pd(s) / (double)n;
    __m512d vm = _mm512_set1_pd(mean), q = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 mk = tail_mask(n - i);
      __m512 v = _mm512_maskz_loadu_ps(mk, xr + i);
      __m512d lo = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vm);
      __m512d hi = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), vm);
      __mmask8 ml = (__mmask8)(mk & 0xFF), mh = (__mmask8)(mk >> 8);
      q = _mm512_mask3_fmadd_pd(lo, lo, q, ml);
      q = _mm512_mask3_fmadd_pd(hi, hi, q, mh);
    }
    double var = _mm512_reduce_add_pd(q) / (double)n;
    float inv = (float)(1.0 / sqrt(var + (double)eps));
    __m512 vinv = _mm512_set1_ps(inv), vmean = _mm512_set1_ps((float)mean);
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 mk = tail_mask(n - i);
      __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, xr + i), vmean), vinv);
      if (w)
        v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + i));
      if (b)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, b + i));
      _mm512_mask_storeu_ps(yr + i, mk, v);
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Attention: online softmax over blocks of 16 keys per query row; q, the output accumulator and
 * one key/value row live in registers (head_dim <= 256).
 */
#define ATT_MAXV 16

/* K/V rows are fp32 or IEEE half (the F16 KV cache, kn_attn.k16/v16): element e of a row, and 16
 * values from it widened to fp32 in the register (vcvtph2ps), masked or not. Every tile function
 * takes `f16` as a constant, so each path compiles to its own loop. */
INLINE const void *kv_at(const void *base, int64_t e, bool f16) {
  return f16 ? (const void *)((const uint16_t *)base + e) : (const void *)((const float *)base + e);
}
INLINE __m512 kv_ld(const void *row, int64_t e, bool f16) {
  return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e)))
             : _mm512_loadu_ps((const float *)row + e);
}
INLINE __m512 kv_ldm(__mmask16 m, const void *row, int64_t e, bool f16) {
  return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + e))
             : _mm512_maskz_loadu_ps(m, (const float *)row + e);
}
/* Layer base of KV head kvh. */
INLINE const void *kv_base(const kn_attn *a, bool v, int64_t e, bool f16) {
  return f16 ? kv_at(v ? a->v16 : a->k16, e, true) : kv_at(v ? a->v : a->k, e, false);
}

/* r[j] = sum of the 16 lanes of v[j], for 16 vectors at once (transpose-and-add tree: 45 shuffles
 * and adds instead of 16 full horizontal reductions). */
INLINE __m512 hsum16(const __m512 *v) {
  __m512 t[8], u[4], w[2];
  UNROLL
  for (int i = 0; i < 8; i++) /* per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3) */
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  UNROLL
  for (int i = 0; i < 4; i++) { /* per lane: partial sums of 4 vectors */
    __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  UNROLL
  for (int i = 0; i < 2; i++) /* lanes (0+1, 2+3) of two groups of 4 vectors */
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}

/* One block of up to 16 keys for one query: scores, online-softmax update of (m, l, acc). The
 * accumulator lives in memory (acc[hd]) because the caller walks a tile of queries per key block:
 * that keeps the block's K and V rows in L1 for all the queries of the tile, instead of streaming
 * the whole K/V of the head from L3 once per query. */
INLINE void attn_block(const float *qs, const void *kb, const void *vb, int64_t kv_stride,
                       int nb, float *mp, float *lp, float *acc, int nv, __mmask16 lm, bool f16) {
  __m512 part[16];
  UNROLL
  for (int jj = 0; jj < 16; jj++) {
    if (jj >= nb) {
      part[jj] = _mm512_setzero_ps();
      continue;
    }
    const void *k = kv_at(kb, jj * kv_stride, f16);
    __m512 d = _mm512_mul_ps(_mm512_loadu_ps(qs), kv_ldm(nv == 1 ? lm : 0xFFFF, k, 0, f16));
    UNROLL
    for (int c = 1; c < nv; c++)
      d = _mm512_fmadd_ps(_mm512_loadu_ps(qs + 16 * c), kv_ldm(c == nv - 1 ? lm : 0xFFFF, k, 16 * c, f16), d);
    part[jj] = d;
  }
  __mmask16 km = tail_mask(nb);
  __m512 sv = _mm512_mask_blend_ps(km, _mm512_set1_ps(-INFINITY), hsum16(part));
  float bm = _mm512_reduce_max_ps(sv);
  float m = *mp;
  float c = 1.0f;
  if (bm > m) {
    c = expf(m - bm); /* 0 for the first block (m = -inf) */
    m = bm;
    *mp = m;
  }
  __m512 p = _mm512_maskz_mov_ps(km, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(m))));
  *lp = *lp * c + _mm512_reduce_add_ps(p);
  float ps[16];
  _mm512_storeu_ps(ps, p);
  __m512 av[ATT_MAXV] = {0};
  acc_row_load(av, acc, nv, _mm512_set1_ps(c));
  for (int jj = 0; jj < nb; jj++) {
    const void *v = kv_at(vb, jj * kv_stride, f16);
    __m512 pj = _mm512_set1_ps(ps[jj]);
    UNROLL
    for (int k = 0; k < nv; k++)
      av[k] = _mm512_fmadd_ps(pj, kv_ldm(k == nv - 1 ? lm : 0xFFFF, v, 16 * k, f16), av[k]);
  }
  acc_row_store(acc, av, nv);
}


INLINE void attn_tile(const kn_attn *a, int kvh, int64_t i0, int64_t i1, float *scr, int nv, bool f16) {
  int hd = a->head_dim, hp = nv * 16; /* padded head dim */
  __mmask16 lm = tail_mask(hd - (nv - 1) * 16);
  const void *kb = kv_base(a, false, (int64_t)kvh * hd, f16), *vb = kv_base(a, true, (int64_t)kvh * hd, f16);
  float *qs = scr, *acc = scr + ATT_QT * hp, *ml = acc + ATT_QT * hp; /* ml: m[QT], l[QT] */
  int nq = (int)(i1 - i0);
  int64_t nk[ATT_QT], kmax = tile_keys(a, i0, nq, nk);
  for (int r = 0; r < nq; r++) {
    const float *q = tile_row_q(a, kvh, i0 + r);
    __m512 sc = _mm512_set1_ps(a->scale);
    for (int c = 0; c < nv; c++) {
      _mm512_storeu_ps(qs + r * hp + 16 * c,
                       _mm512_mul_ps(_mm512_maskz_loadu_ps(c == nv - 1 ? lm : 0xFFFF, q + 16 * c), sc));
      _mm512_storeu_ps(acc + r * hp + 16 * c, _mm512_setzero_ps());
    }
    ml[r] = -INFINITY;
    ml[ATT_QT + r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < kmax; j0 += 16) {
    const void *kj = kv_at(kb, j0 * a->kv_stride, f16), *vj = kv_at(vb, j0 * a->kv_stride, f16);
    for (int r = 0; r < nq; r++) {
      if (j0 >= nk[r])
        continue;
      int nb = (int)(nk[r] - j0 < 16 ? nk[r] - j0 : 16);
      attn_block(qs + r * hp, kj, vj, a->kv_stride, nb, &ml[r], &ml[ATT_QT + r], acc + r * hp, nv, lm, f16);
    }
  }
  for (int r = 0; r < nq; r++)
    tile_row_store(a, kvh, i0 + r, acc + r * hp, ml[ATT_QT + r], nv, lm);
}


/* Tile path for head_dim = 16 NV (64, 128): the tile's queries go through each block of 16 keys
 * in groups of QB, with the block's keys transposed once per tile (kt[d][16]) so that 16 scores
 * are 16-lane FMAs with q[d] broadcast (no horizontal sums), and each V row loaded once serves QB
 * queries. Per query and key: NV FMAs for q.k and NV for p v. Rows of a partial group repeat the
 * last query and are not stored, so a query's result does not depend on its position. */
INLINE void attn_tile_t(const kn_attn *a, int kvh, int64_t i0, int64_t i1, float *scr, int NV, int QB,
                        bool f16) {
  const int hd = 16 * NV;
  const void *kb = kv_base(a, false, (int64_t)kvh * hd, f16), *vb = kv_base(a, true, (int64_t)kvh * hd, f16);
  float *qs = scr, *acc = qs + ATT_QT * hd, *ml = acc + ATT_QT * hd, *kt = ml + 2 * ATT_QT;
  float *ps = kt + 32 * hd; /* [QB][32] */
  int nq = (int)(i1 - i0);
  int64_t nk[ATT_QT], kmax = tile_keys(a, i0, nq, nk);
  __m512 sc = _mm512_set1_ps(a->scale);
  for (int r = 0; r < nq; r++) {
    const float *q = tile_row_q(a, kvh, i0 + r);
    for (int c = 0; c < NV; c++) {
      _mm512_storeu_ps(qs + r * hd + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), sc));
      _mm512_storeu_ps(acc + r * hd + 16 * c, _mm512_setzero_ps());
    }
    ml[r] = -INFINITY;
    ml[ATT_QT + r] = 0.0f;
  }
  /* Blocks of 32 keys: kt[half][d][16] holds keys j0 + 16 half + 0..15 transposed. */
  for (int64_t j0 = 0; j0 < kmax; j0 += 32) {
    int nb = (int)(kmax - j0 < 32 ? kmax - j0 : 32);
    const void *kj = kv_at(kb, j0 * a->kv_stride, f16), *vj = kv_at(vb, j0 * a->kv_stride, f16);
    for (int hh = 0; hh < 2; hh++)
      for (int c = 0; c < NV; c++) {
        __m512 rows[16];
        UNROLL
        for (int jj = 0; jj < 16; jj++)
          rows[jj] = 16 * hh + jj < nb ? kv_ld(kj, (16 * hh + jj) * a->kv_stride + 16 * c, f16)
                                       : _mm512_setzero_ps();
        transpose16(rows);
        UNROLL
        for (int d = 0; d < 16; d++)
          _mm512_storeu_ps(kt + hh * 16 * hd + (16 * c + d) * 16, rows[d]);
      }
    for (int g0 = 0; g0 < nq; g0 += QB) {
      int rr[4];
      __mmask16 km[4][2];
      bool any = false;
      UNROLL
      for (int r = 0; r < QB; r++) {
        rr[r] = g0 + r < nq ? g0 + r : nq - 1;
        UNROLL
        for (int hh = 0; hh < 2; hh++) {
          int64_t left = nk[rr[r]] - j0 - 16 * hh;
          km[r][hh] = left <= 0 ? 0 : tail_mask(left);
        }
        any |= km[r][0] != 0;
      }
      if (!any)
        continue;
      __m512 s[4][2];
      UNROLL
      for (int r = 0; r < QB; r++)
        s[r][0] = s[r][1] = _mm512_setzero_ps();
      for (int d = 0; d < hd; d++) {
        __m512 k0 = _mm512_loadu_ps(kt + d * 16), k1 = _mm512_loadu_ps(kt + 16 * hd + d * 16);
        UNROLL
        for (int r = 0; r < QB; r++) {
          __m512 qd = _mm512_set1_ps(qs[rr[r] * hd + d]);
          s[r][0] = _mm512_fmadd_ps(qd, k0, s[r][0]);
          s[r][1] = _mm512_fmadd_ps(qd, k1, s[r][1]);
        }
      }
      __m512 av[4][8];
      UNROLL
      for (int r = 0; r < QB; r++) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        __m512 sv0 = _mm512_mask_blend_ps(km[r][0], ninf, s[r][0]);
        __m512 sv1 = _mm512_mask_blend_ps(km[r][1], ninf, s[r][1]);
        float *mp = &ml[rr[r]], *lp = &ml[ATT_QT + rr[r]];
        float bm = km[r][0] ? _mm512_reduce_max_ps(_mm512_max_ps(sv0, sv1)) : -INFINITY;
        float m = *mp, c = 1.0f;
        if (bm > m) {
          c = expf(m - bm);
          m = bm;
        }
        __m512 vm = _mm512_set1_ps(m);
        __m512 p0 = _mm512_maskz_mov_ps(km[r][0], exp512(_mm512_sub_ps(sv0, vm)));
        __m512 p1 = _mm512_maskz_mov_ps(km[r][1], exp512(_mm512_sub_ps(sv1, vm)));
        float lnew = *lp * c + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
        if (g0 + r < nq) { /* padded rows must not update the shared state */
          *mp = m;
          *lp = lnew;
        }
        _mm512_storeu_ps(ps + 32 * r, p0);
        _mm512_storeu_ps(ps + 32 * r + 16, p1);
        acc_row_load(av[r], acc + rr[r] * hd, NV, _mm512_set1_ps(c));
      }
      for (int jj = 0; jj < nb; jj++) {
        const void *v = kv_at(vj, jj * a->kv_stride, f16);
        UNROLL
        for (int k = 0; k < NV; k++) {
          __m512 vv = kv_ld(v, 16 * k, f16);
          UNROLL
          for (int r = 0; r < QB; r++)
            av[r][k] = _mm512_fmadd_ps(_mm512_set1_ps(ps[32 * r + jj]), vv, av[r][k]);
        }
      }
      UNROLL
      for (int r = 0; r < QB; r++)
        if (g0 + r < nq)
          acc_row_store(acc + rr[r] * hd, av[r], NV);
    }
  }
  for (int r = 0; r < nq; r++)
    tile_row_store(a, kvh, i0 + r, acc + r * hd, ml[ATT_QT + r], NV, 0xFFFF);
}

/* Called once per KV head (kn_ops.attn_by_group): queries [q0, q1) of every query head of the
 * group, as rows (query, head) in tiles of ATT_QT rows. */
INLINE void attention_rows(const kn_attn *a, int kvh, int64_t q0, int64_t q1, int thread, bool f16) {
  int hd = a->head_dim;
  const int64_t G = a->n_head / a->n_kv_head;
  if (hd > 16 * ATT_MAXV) {
    for (int64_t g = 0; g < G; g++)
      kn_ops_ref.attention(a, (int)(kvh * G + g), q0, q1, thread);
    return;
  }
  int nv = (hd + 15) / 16;
  float *scr = kn_scratch(thread, sizeof(float) * (size_t)(2 * ATT_QT * nv * 16 + 2 * ATT_QT +
                                                          32 * nv * 16 + 4 * 32));
  if (!scr) {
    for (int64_t g = 0; g < G; g++)
      kn_ops_ref.attention(a, (int)(kvh * G + g), q0, q1, thread);
    return;
  }
  int64_t R1 = q1 * G;
  for (int64_t r0 = q0 * G; r0 < R1; r0 += ATT_QT) {
    int64_t r1 = r0 + ATT_QT < R1 ? r0 + ATT_QT : R1;
    /* Head sizes 64 and 128: the transposed tile path for any number of rows, since a row's
     * arithmetic must not depend on how many rows share its tile (a decode step, a chunk of a
     * prompt and the whole prompt give the same bits; test_attention_split). The group size QB
     * only decides how many rows share a pass over the block, not a row's operations. */
    if (hd == 64) {
      if (r1 - r0 >= 4)
        attn_tile_t(a, kvh, r0, r1, scr, 4, 4, f16);
      else if (r1 - r0 >= 2)
        attn_tile_t(a, kvh, r0, r1, scr, 4, 2, f16);
      else
        attn_tile_t(a, kvh, r0, r1, scr, 4, 1, f16);
      continue;
    }
    if (hd == 128) {
      if (r1 - r0 >= 2)
        attn_tile_t(a, kvh, r0, r1, scr, 8, 2, f16);
      else
        attn_tile_t(a, kvh, r0, r1, scr, 8, 1, f16);
      continue;
    }
    switch (nv) {
    case 4: attn_tile(a, kvh, r0, r1, scr, 4, f16); break;
    case 8: attn_tile(a, kvh, r0, r1, scr, 8, f16); break;
    default: attn_tile(a, kvh, r0, r1, scr, nv, f16); break;
    }
  }
}

void kn_avx512_attention(const kn_attn *a, int kvh, int64_t q0, int64_t q1, int thread) {
  if (a->k16)
    attention_rows(a, kvh, q0, q1, thread, true);
  else
    attention_rows(a, kvh, q0, q1, thread, false);
}

/* Round to nearest even, bit-identical to the reference (vcvtps2ph). */
static void avx512_to_f16(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n)
    _mm256_mask_storeu_epi16(y + i, tail_mask(n - i),
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(tail_mask(n - i), x + i), _MM_FROUND_TO_NEAREST_INT));
}

PEAK_PROBE(peak_f32, __m512, _mm512_set1_ps(1e-3f * (float)i),
           _mm512_fmadd_ps(v[i], _mm512_set1_ps(0.999f), _mm512_set1_ps(1e-7f)), _mm512_add_ps(s, v[i]))
PEAK_PROBE(peak_int8, __m512i, _mm512_set1_epi32(i),
           _mm512_dpbusd_epi32(v[i], _mm512_set1_epi8(3), _mm512_set1_epi8(-2)), _mm512_add_epi32(s, v[i]))

double kn_avx512_peak_loop(kn_peak_kind kind, int64_t iters) {
  /* per instruction: 16 lanes x (1 FMA | 2 bf16 MACs | 4 int8 MACs), 2 operations per MAC */
  if (kind != KN_PEAK_F32_FMA && kind != KN_PEAK_INT8_DOT)
    return 0; /* bf16: avx512_bf16.c; tiles: amx_gemm.c */
  double per = kind == KN_PEAK_F32_FMA ? 32 : 128;
  double n = kind == KN_PEAK_F32_FMA ? peak_f32(iters) : peak_int8(iters);
  return n * 16 * per;
}

void kn_avx512_override(kn_ops *ops) {
  ops->choice[KN_OP_MM_FLOAT] = (kn_choice){"avx512 fma 16x8", "FP32 FMA, F16/BF16 widened in the panel loads"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){"avx512 vnni 32x6", "no AVX512_BF16: F16/BF16 as Q8_0 blocks (quantized at load), vpdpbusd"};
  ops->choice[KN_OP_MM_Q8_0] = (kn_choice){"avx512 vnni 32x6", "int8 blocks, vpdpbusd, panel pairs"};
  ops->choice[KN_OP_MM_Q4_0] = (kn_choice){"avx512 vnni 32x6", "int8 blocks, vpdpbusd, panel pairs"};
  ops->choice[KN_OP_MM_KQUANT] = (kn_choice){"avx512 vnni 16x4", "int8 super-blocks, vpdpbusd"};
  ops->choice[KN_OP_ATTN] = (kn_choice){"avx512 fp32 tiles", "online softmax, 64-row KV-group tiles"};
  ops->choice[KN_OP_ATTN_FAST] = (kn_choice){"avx512 fp32 tiles", "no AVX512_BF16: as exact"};
  ops->choice[KN_OP_ROWS] = (kn_choice){"avx512", "16 lanes, masked tails"};
  ops->peak_loop = kn_avx512_peak_loop;
  ops->weight_pack = kn_pack_x16;
  ops->weight_pack_fast = kn_pack_x16_int8;
  ops->fast_int8 = true;
  ops->mm_select = kn_avx512_mm_select;
  ops->rmsnorm = avx512_rmsnorm;
  ops->layernorm = avx512_layernorm;
  ops->gelu_tanh = avx512_gelu_tanh;
  ops->silu_mul = avx512_silu_mul;
  ops->add = avx512_add;
  ops->to_f16 = avx512_to_f16;
  ops->attention = kn_avx512_attention;
  ops->attention_prep_bytes = NULL; /* avx2.c's prepared blocks are not this kernel's input */
  ops->attention_prep = NULL;
  ops->attn_by_group = true;
}

#endif
