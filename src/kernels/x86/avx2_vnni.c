/*
 * AVX2 + AVX-VNNI variant (compiled with -mavx2 -mfma -mf16c -mavxvnni): the int8 matmuls
 * (Q8_0, Q4_0: text prefill and a Q8_0 vision tower) on CPUs with the VEX-encoded vpdpbusd but no
 * AVX-512 (Alder Lake and later Intel client cores, Sierra Forest; Zen 4/5 and Sapphire Rapids
 * have AVX-512 and use those tiers). Everything else is the AVX2 variant's
 * (kn_avx2vnni_override runs after kn_avx2_override).
 *
 * vpdpbusd multiplies unsigned by signed bytes and adds the 4 products to an int32 lane in one
 * instruction, where AVX2 needs vpmaddubsw + vpmaddwd + vpaddd (and, for Q8_0, vpabsb + vpsignb to
 * keep the int16 pairs from saturating). The panels are the same (pack.c); Q8_0 quants are stored
 * as u = q + 128 and Q4_0 nibbles as 0..15, so sum u x = sum q x + 128 sum x (8 sum x for Q4_0):
 * each block's int32 sum starts at -128 (or -8) times the block's activation sum, which the
 * activation quantizer stores. The int32 sums are exact, and the float steps after them are the
 * AVX2 kernel's, so the results are bit-identical to the AVX2 tier's.
 */
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/kernels_impl.h"
#include "kernels/x86/avx2_panel.h"

/* The weight vectors of one 4-quant group are loaded once and used by every token of the tile
 * (the AVX2 kernel reloads them per token: with one instruction per group left, loads would bound
 * it). */
INLINE void panel_q8_0(const uint8_t *pw, bool q4, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m256 acc[][2]) {
  int64_t nb = n_in / 32;
  panel_zero(TT, acc);
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = pw + (size_t)b * (q4 ? X16_Q4_0_BLK : X16_Q8_0_BLK);
    __m256i is[4][2];
    UNROLL
    for (int t = 0; t < TT; t++) {
      const int32_t *xsum = (const int32_t *)((const float *)(xq + (size_t)t * xs + n_in) + nb);
      is[t][0] = is[t][1] = _mm256_set1_epi32((q4 ? -8 : -128) * xsum[b]);
    }
    int groups = q4 ? 4 : 8;
    UNROLL
    for (int c = 0; c < groups; c++) {
      __m256i w[2][2]; /* [nibble][half]; Q8_0 uses [0] */
      UNROLL
      for (int h = 0; h < 2; h++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 32 + c * 64 + 32 * h));
        if (q4) {
          w[0][h] = _mm256_and_si256(raw, lo4);
          w[1][h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
        } else {
          w[0][h] = raw;
        }
      }
      UNROLL
      for (int t = 0; t < TT; t++) {
        const int8_t *xb = xq + (size_t)t * xs + b * 32;
        __m256i x0 = bcast4(xb + 4 * c);
        is[t][0] = _mm256_dpbusd_avx_epi32(is[t][0], w[0][0], x0);
        is[t][1] = _mm256_dpbusd_avx_epi32(is[t][1], w[0][1], x0);
        if (q4) {
          __m256i x1 = bcast4(xb + 16 + 4 * c);
          is[t][0] = _mm256_dpbusd_avx_epi32(is[t][0], w[1][0], x1);
          is[t][1] = _mm256_dpbusd_avx_epi32(is[t][1], w[1][1], x1);
        }
      }
    }
    UNROLL
    for (int h = 0; h < 2; h++) {
      __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
      UNROLL
      for (int t = 0; t < TT; t++) {
        const float *xd = (const float *)(xq + (size_t)t * xs + n_in);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][h]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[b])),
                                    acc[t][h]);
      }
    }
  }
}

DEFINE_Q80_RUNS(4)
DEFINE_Q80_RUNS(2)
DEFINE_Q80_RUNS(1)
/* 16 rows x 4 tokens: 8 int32 sums + 2 (Q4_0: 4) weight vectors + 1 broadcast in registers; the 8
 * float sums are touched once per block. */
DEFINE_TILE(tile_q8_0, 4, run_q8_4, run_q8_2, run_q8_1)
DEFINE_TILE(tile_q4_0, 4, run_q4_4, run_q4_2, run_q4_1)

static const kn_mm_kernel mm_q8_0 = {kn_act32_bytes, kn_act32_quantize_c, tile_q8_0, PR, NULL};
static const kn_mm_kernel mm_q4_0 = {kn_act32_bytes, kn_act32_quantize_c, tile_q4_0, PR, NULL};

static const kn_mm_kernel *avx2vnni_mm_select(const kn_weight *w, int64_t n_tokens) {
  if (w->packed && w->layout == KN_LAYOUT_X16_Q8_0)
    return &mm_q8_0;
  if (w->packed && w->layout == KN_LAYOUT_X16_Q4_0)
    return &mm_q4_0;
  return kn_avx2_mm_select(w, n_tokens);
}

/* the int8 chains: v = vpdpbusd(v, 3, v), each step depending on the previous one */
PEAK_PROBE_N(peak_vnni, __m256i, 12, _mm256_set1_epi32(i),
             _mm256_dpbusd_avx_epi32(v[i], _mm256_set1_epi8(3), v[i]), _mm256_add_epi32(s, v[i]))

/* int8: one vpdpbusd = 8 lanes x 4 multiply-adds */
static double avx2vnni_peak_loop(kn_peak_kind kind, int64_t iters) {
  if (kind == KN_PEAK_INT8_DOT)
    return peak_vnni(iters) * 12 * 8 * 4 * 2;
  return kn_avx2_peak_loop(kind, iters);
}

void kn_avx2vnni_override(kn_ops *ops) {
  ops->mm_select = avx2vnni_mm_select;
  ops->peak_loop = avx2vnni_peak_loop;
  ops->choice[KN_OP_MM_Q8_0] = (kn_choice){"avx2 vnni 16x4", "int8 blocks, VEX vpdpbusd (AVX-VNNI): 1 instruction per 32 multiply-adds against 3-5"};
  ops->choice[KN_OP_MM_Q4_0] = (kn_choice){"avx2 vnni 16x4", "int8 blocks, VEX vpdpbusd (AVX-VNNI)"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){"avx2 vnni 16x4", "no bf16 dot product: F16/BF16 as Q8_0 blocks (quantized at load), vpdpbusd"};
}

#endif
