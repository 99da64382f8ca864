/*
 * Pieces shared by the AVX-512 files: avx512.c (F/BW/VL/DQ + VNNI, the tier for CPUs without
 * BF16) and avx512_bf16.c (the vdpbf16ps kernels, compiled with -mavx512bf16 on top). Static
 * inline only, so each file compiles them with its own flags.
 */
#ifndef QVL_KERNELS_X86_AVX512_COMMON_H
#define QVL_KERNELS_X86_AVX512_COMMON_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/x86/simd_common.h"

/* acc[t]: the panel's 16 rows for token t (DEFINE_RUN in simd_common.h). */
#define PANEL_ACC(name, TT) __m512 name[TT]

/* Zeroes n accumulators (a run's, or a panel pair's 2 TT). */
INLINE void panel_zero(__m512 *acc, int n) {
  UNROLL
  for (int k = 0; k < n; k++)
    acc[k] = _mm512_setzero_ps();
}

/* Stores the (masked) 16 outputs per token of panel p for TT tokens starting at t, plus bias. */
INLINE void panel_store(const kn_mm *m, int64_t p, int64_t t, int TT, const __m512 *acc) {
  int64_t n_out = m->w->n_out, r0 = p * PR;
  int rows = kn_panel_rows(n_out, p);
  __mmask16 mask = (__mmask16)((1u << rows) - 1);
  __m512 bias = m->bias ? _mm512_maskz_loadu_ps(mask, m->bias + r0) : _mm512_setzero_ps();
  for (int k = 0; k < TT; k++)
    _mm512_mask_storeu_ps(m->y + (t + k) * n_out + r0, mask, _mm512_add_ps(acc[k], bias));
}

#define ROUND512(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* exp(x) for float32, about 1 ulp (KN_EXP_CORE), scaled by 2^n with vscalefps (which handles
 * overflow and underflow to inf/0). */
INLINE __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
  KN_EXP_CORE(__m512, _mm512, ROUND512, x, n, p);
  return _mm512_scalef_ps(p, n);
}

INLINE __mmask16 tail_mask(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* In-register transpose of a 16x16 float matrix (rows r[i] become columns): unpack ps, unpack pd,
 * then two rounds of 128-bit lane shuffles; 64 shuffles. */
INLINE void transpose16(__m512 *r) {
  __m512 t[16];
  UNROLL
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  UNROLL
  for (int i = 0; i < 4; i++) { /* r[4i+k] lane L = column 4L+k of rows 4i..4i+3 */
    __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);
    __m512d b0 = _mm512_castps_pd(t[4 * i + 2]), b1 = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));
  }
  UNROLL
  for (int k = 0; k < 4; k++) {
    __m512 a = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44), b = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xEE);
    __m512 c = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44), d = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xEE);
    t[k] = _mm512_shuffle_f32x4(a, c, 0x88);      /* column k */
    t[4 + k] = _mm512_shuffle_f32x4(a, c, 0xDD);  /* column 4 + k */
    t[8 + k] = _mm512_shuffle_f32x4(b, d, 0x88);  /* column 8 + k */
    t[12 + k] = _mm512_shuffle_f32x4(b, d, 0xDD); /* column 12 + k */
  }
  UNROLL
  for (int i = 0; i < 16; i++)
    r[i] = t[i];
}
#define ATT_QT 64 /* (query, head) rows per tile: K/V are streamed once per tile */

/* Rows of a tile are (query i, head h) pairs of one KV group: row R is query R / G of head
 * kvh * G + R % G (G = n_head / n_kv_head), so the query heads sharing a KV head read each key
 * block once. */
#define ROW_I(R) ((R) / G)
#define ROW_H(R) (kvh * G + (int)((R) % G))

/* A row's output accumulator (nv vectors of 16) in registers for one key block: loaded rescaled
 * by c (the online softmax's correction for a grown maximum), stored back after the block. */
INLINE void acc_row_load(__m512 *av, const float *acc, int nv, __m512 c) {
  UNROLL
  for (int k = 0; k < nv; k++)
    av[k] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * k), c);
}
INLINE void acc_row_store(float *acc, const __m512 *av, int nv) {
  UNROLL
  for (int k = 0; k < nv; k++)
    _mm512_storeu_ps(acc + 16 * k, av[k]);
}

/* The keys each row of the tile [i0, i0 + nq) sees, into nk[r]; returns the most
 * any of them sees. */
INLINE int64_t tile_keys(const kn_attn *a, int64_t i0, int nq, int64_t *nk) {
  const int64_t G = a->n_head / a->n_kv_head;
  int64_t kmax = 0;
  for (int r = 0; r < nq; r++) {
    nk[r] = kn_attn_keys(a, ROW_I(i0 + r));
    kmax = nk[r] > kmax ? nk[r] : kmax;
  }
  return kmax;
}

/* The query vector of tile row R. */
INLINE const float *tile_row_q(const kn_attn *a, int kvh, int64_t R) {
  const int64_t G = a->n_head / a->n_kv_head;
  return a->q + ROW_I(R) * a->q_stride + (int64_t)ROW_H(R) * a->head_dim;
}

/* The output of tile row R: acc / l in nv chunks of 16 (the last one masked by lm); zeros when l
 * is 0 (a row that saw no key). */
INLINE void tile_row_store(const kn_attn *a, int kvh, int64_t R, const float *acc, float l, int nv, __mmask16 lm) {
  const int64_t G = a->n_head / a->n_kv_head;
  __m512 il = _mm512_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
  float *o = a->out + ROW_I(R) * a->out_stride + (int64_t)ROW_H(R) * a->head_dim;
  for (int c = 0; c < nv; c++)
    _mm512_mask_storeu_ps(o + 16 * c, c == nv - 1 ? lm : 0xFFFF, _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * c), il));
}

/* The exact-tier attention of avx512.c (the fast tier falls back to it). */
void kn_avx512_attention(const kn_attn *a, int kvh, int64_t q0, int64_t q1, int thread);
/* avx512.c's matmul kernel choice (the bf16 file adds its own layouts on top). */
const kn_mm_kernel *kn_avx512_mm_select(const kn_weight *w, int64_t n_tokens);

/* avx512.c's peak probe (fp32 FMA, int8 VNNI; 0 for bf16). */
double kn_avx512_peak_loop(kn_peak_kind kind, int64_t iters);

#endif
