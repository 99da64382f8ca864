/*
 * The 16-row panel walk shared by the AVX2 matmul files (avx2.c, avx2_vnni.c): a panel function
 * computes acc[t][h] (rows 8h .. 8h+7 of panel p for token t + k), panel_store adds the bias and
 * writes it, and a tile runs them through tile_generic (simd_common.h).
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

INLINE void panel_store(const kn_mm *m, int64_t p, int64_t t, int TT, __m256 acc[][2]) {
  int64_t n_out = m->w->n_out, r0 = p * PR;
  int rows = (int)(n_out - r0 < PR ? n_out - r0 : PR);
  for (int k = 0; k < TT; k++) {
    float out[PR];
    _mm256_storeu_ps(out, acc[k][0]);
    _mm256_storeu_ps(out + 8, acc[k][1]);
    float *y = m->y + (t + k) * n_out + r0;
    for (int r = 0; r < rows; r++)
      y[r] = m->bias ? out[r] + m->bias[r0 + r] : out[r];
  }
}

#define PANEL_PTR(w, bytes) ((const uint8_t *)(w)->packed + (size_t)p * (bytes))
#define XQ(t) ((const int8_t *)m->xq + (size_t)(t) * m->xq_stride)

#define DEFINE_RUN(NAME, TT, BODY)                          \
  static void NAME(const kn_mm *m, int64_t p, int64_t t) { \
    __m256 acc[TT][2];                                     \
    const kn_weight *w = m->w;                             \
    BODY;                                                  \
    panel_store(m, p, t, TT, acc);                         \
  }

#define DEFINE_TILE(NAME, MAX, ...)                                                           \
  static void NAME(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) { \
    (void)th;                                                                                 \
    static const panel_fn run[] = {__VA_ARGS__};                                              \
    tile_generic(m, r0, r1, t0, t1, run, MAX);                                                \
  }

#endif
