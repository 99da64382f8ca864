/*
 * The l16_* vector operations of the AMX attention's softmax on AVX-512 registers (F/DQ/BF16), for
 * the hw and sim512 targets of the AMX kernels (amx_target.h). lane_model.h is the
 * portable model of exactly these results; the test tier `amxsim512` holds the two equal bit for bit.
 */
#ifndef QVL_KERNELS_X86_LANES512_H
#define QVL_KERNELS_X86_LANES512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/x86/avx512_common.h"

typedef __m512 l16;

static inline l16 l16_load_ps(const float *p) { return _mm512_loadu_ps(p); }
static inline l16 l16_load_f16_ps(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline l16 l16_cvt_sub_epi32(const int32_t *p, int32_t sub) {
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(p), _mm512_set1_epi32(sub)));
}
static inline void l16_store_ps(float *p, l16 a) { _mm512_storeu_ps(p, a); }
static inline l16 l16_set1_ps(float a) { return _mm512_set1_ps(a); }
static inline l16 l16_add_ps(l16 a, l16 b) { return _mm512_add_ps(a, b); }
static inline l16 l16_sub_ps(l16 a, l16 b) { return _mm512_sub_ps(a, b); }
static inline l16 l16_mul_ps(l16 a, l16 b) { return _mm512_mul_ps(a, b); }
static inline l16 l16_fmadd_ps(l16 a, l16 b, l16 c) { return _mm512_fmadd_ps(a, b, c); }
static inline l16 l16_fnmadd_ps(l16 a, l16 b, l16 c) { return _mm512_fnmadd_ps(a, b, c); }
static inline l16 l16_max_ps(l16 a, l16 b) { return _mm512_max_ps(a, b); }
static inline l16 l16_min_ps(l16 a, l16 b) { return _mm512_min_ps(a, b); }
static inline l16 l16_round_ps(l16 a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* vscalefps: exact here (n in [-126, 127] and p near 1, so the result is normal). */
static inline l16 l16_scale2n_ps(l16 p, l16 n) { return _mm512_scalef_ps(p, n); }
static inline l16 l16_first_ps(l16 a, int n, float fill) {
  __mmask16 keep = n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
  return _mm512_mask_blend_ps(keep, _mm512_set1_ps(fill), a);
}

/* Halves (lane i with i + 8), quarters, pairs, then lanes 0 and 1: lane_model.h's order. */
#define L16_REDUCE(name, OP256, OP128)                                                  \
  static inline float name(l16 a) {                                                     \
    __m256 lo = _mm512_castps512_ps256(a);                                              \
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));       \
    __m256 h = OP256(lo, hi);                                                           \
    __m128 q = OP128(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));           \
    q = OP128(q, _mm_movehl_ps(q, q));                                                  \
    return _mm_cvtss_f32(OP128(q, _mm_shuffle_ps(q, q, 1)));                            \
  }
L16_REDUCE(l16_hsum, _mm256_add_ps, _mm_add_ps)
L16_REDUCE(l16_hmax, _mm256_max_ps, _mm_max_ps)
#undef L16_REDUCE

/* vcvtneps2bf16: nearest even, denormal inputs read as zero, NaN kept quiet (the AVX-512 BF16
 * kernel's rounding). */
static inline void l16_store_bf16(uint16_t *p, l16 a) { _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(a)); }

/* Each lane rounded to bf16 (as l16_store_bf16) and widened back. */
static inline l16 l16_round_bf16_ps(l16 a) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a)), 16));
}
/* Lane i: the bf16 of x[2i] (low half) and x[2i + 1] (high half), x = lo then hi (32 values). */
static inline l16 l16_bf16_pairs(l16 lo, l16 hi) { return (__m512)_mm512_cvtne2ps_pbh(hi, lo); }
/* Lane i: the bf16 of a[i] (low half) and b[i] (high half). */
static inline l16 l16_bf16_zip(l16 a, l16 b) {
  const __m512i zip = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_castsi512_ps(_mm512_permutexvar_epi16(zip, (__m512i)_mm512_cvtne2ps_pbh(b, a)));
}
/* r[i] lane j <- r[j] lane i (bits moved, never computed on). */
static inline void l16_transpose(l16 *r) { transpose16(r); }

#endif
