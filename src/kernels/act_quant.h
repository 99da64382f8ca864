/*
 * The act32 / act256 activation rows (formats in kernels_impl.h) filled from a run quantizer:
 * `run` quantizes n = 32 k values with one scale d (returned), stores the quants and the sum of
 * each 16 of them in sums16. The portable quantizers (pack.c) and the AVX-512 ones (avx512.c)
 * differ only in their run; the layout of the rows is written here once. Static inline, so each
 * includer compiles it with its own flags and its run inlined.
 */
#ifndef QVL_KERNELS_ACT_QUANT_H
#define QVL_KERNELS_ACT_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef float (*kn_quant_run_fn)(const float *x, int n, int8_t *q, int32_t *sums16);

/* act32: one run per 32 values; the block sum is stored multiplied by `off` (1 for the plain
 * format, or a weight offset the kernel would otherwise multiply in per block and token). */
static inline __attribute__((always_inline)) void kn_act32_fill(const float *x, void *xq, int64_t n_in,
                                                                int32_t off, kn_quant_run_fn run) {
  int8_t *q = xq;
  int64_t nb = n_in / 32;
  float *d = (float *)(q + n_in);
  int32_t *s = (int32_t *)(d + nb);
  for (int64_t b = 0; b < nb; b++) {
    int32_t s16[2];
    d[b] = run(x + b * 32, 32, q + b * 32, s16);
    s[b] = off * (s16[0] + s16[1]);
  }
}

/* act256: one run per 256 values, then its 16-value and 32-value sums as int16. */
static inline __attribute__((always_inline)) void kn_act256_fill(const float *x, void *xq, int64_t n_in,
                                                                 kn_quant_run_fn run) {
  int8_t *q = xq;
  int64_t ns = n_in / 256;
  float *d = (float *)(q + n_in);
  int16_t *s16 = (int16_t *)(d + ns);
  int16_t *s32 = s16 + ns * 16;
  for (int64_t b = 0; b < ns; b++) {
    int32_t sums[16];
    d[b] = run(x + b * 256, 256, q + b * 256, sums);
    for (int g = 0; g < 16; g++)
      s16[b * 16 + g] = (int16_t)sums[g];
    for (int g = 0; g < 8; g++)
      s32[b * 8 + g] = (int16_t)(sums[2 * g] + sums[2 * g + 1]);
  }
}

/* The rows the kernels read, for tokens t < TT of an activation block (row t at xq + t xs): the
 * scales xd[t] and, after them, the act32 block sums xsum[t] or (for act256) the 16-value sums
 * s16[t], whose 32-value sums follow at s16[t] + 16 (n_in / 256); pass NULL for the one the
 * format lacks. Unrolled, so that with a constant TT the pointers stay in registers. */
static inline __attribute__((always_inline)) void kn_act_rows(const int8_t *xq, size_t xs, int64_t n_in, int TT,
                                                              const float **xd, const int32_t **xsum,
                                                              const int16_t **s16) {
  _Pragma("GCC unroll 16")
  for (int t = 0; t < TT; t++) {
    xd[t] = (const float *)(xq + (size_t)t * xs + n_in);
    if (xsum)
      xsum[t] = (const int32_t *)(xd[t] + n_in / 32);
    if (s16)
      s16[t] = (const int16_t *)(xd[t] + n_in / 256);
  }
}

#endif
