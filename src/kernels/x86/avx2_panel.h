/*
 * The 16-row panels of the AVX2 matmul files (avx2.c, avx2_vnni.c): a panel function computes
 * acc[t][h] (rows 8h .. 8h+7 of panel p for token t + k), panel_store adds the bias and writes it;
 * DEFINE_RUN and DEFINE_TILE (simd_common.h) make runs and tiles of them.
 */
#ifndef QVL_KERNELS_X86_AVX2_PANEL_H
#define QVL_KERNELS_X86_AVX2_PANEL_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/x86/simd_common.h"

INLINE __m256i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

INLINE void panel_zero(int TT, __m256 acc[][2]) {
  UNROLL
  for (int t = 0; t < TT; t++)
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
}

INLINE void panel_store(const kn_mm *m, int64_t p, int64_t t, int TT, __m256 acc[][2]) {
  int64_t n_out = m->w->n_out, r0 = p * PR;
  int rows = kn_panel_rows(n_out, p);
  for (int k = 0; k < TT; k++) {
    float out[PR];
    _mm256_storeu_ps(out, acc[k][0]);
    _mm256_storeu_ps(out + 8, acc[k][1]);
    float *y = m->y + (t + k) * n_out + r0;
    for (int r = 0; r < rows; r++)
      y[r] = m->bias ? out[r] + m->bias[r0 + r] : out[r];
  }
}

/* acc[t][h]: rows 8h .. 8h+7 of the panel for token t (DEFINE_RUN in simd_common.h). */
#define PANEL_ACC(name, TT) __m256 name[TT][2]

#endif
