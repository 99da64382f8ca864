/*
 * AVX2 vector math shared by the AVX2 variant files (avx2.c, avx2_attn.c, avx2_vnni.c): static
 * inline, so each file compiles it with its own -m flags (all of them include -mavx2 -mfma).
 */
#ifndef QVL_KERNELS_X86_AVX2_MATH_H
#define QVL_KERNELS_X86_AVX2_MATH_H

#include <immintrin.h>

#include "kernels/x86/simd_common.h"

/* exp(x), about 1 ulp (KN_EXP_CORE); 2^n built in the exponent field, so x is clamped
 * to the range where that is a normal float (results below 1.2e-38 come out as 1.2e-38, far
 * below anything the callers can see). */
#define ROUND256(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
INLINE __m256 exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365478515625f));
  KN_EXP_CORE(__m256, _mm256, ROUND256, x, n, p);
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  /* n can be 128 at the top of the range: split 2^n = 2^(n-1) * 2 */
  return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_sub_epi32(e, _mm256_set1_epi32(1 << 23)))),
                       _mm256_set1_ps(2.0f));
}

/* Sum and maximum of the 8 lanes (a fixed order, so results do not depend on anything else). */
INLINE float hsum256(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}
INLINE float hmax256(__m256 v) {
  __m256 mx = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0x4E));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0xB1));
  return _mm256_cvtss_f32(mx);
}

/* Lanes 0 .. n-1 set (n in 0..8). */
INLINE __m256 lanes_below(int n) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

#endif
