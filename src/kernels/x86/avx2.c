/*
 * AVX2 + FMA + F16C variant (compiled with only -mavx2 -mfma -mf16c): the fallback for x86 CPUs
 * without AVX-512. It reads the same 16-row panels as the AVX-512 variant (pack.c), as two 8-row
 * halves per 64-byte group:
 *   - float weights: convert to fp32, one FMA per token with x[t][i] broadcast;
 *   - quantized weights: no VNNI here, so 4-quant dot products are vpmaddubsw (u8 x s8 -> s16
 *     pairs) + vpmaddwd with ones. Pairs of products must not saturate int16: Q4_0/Q4_K (0..15)
 *     and Q6_K (0..63) quants are small enough as stored; Q8_0 (stored +128) is turned back into
 *     signed values and multiplied as |w| x sign(x, w), at most 2 * 128 * 127 = 32512.
 * Every output is accumulated in the same order for any number of tokens (batch invariance).
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/x86/avx2_math.h"
#include "kernels/x86/avx2_panel.h"
#include "tensor/dtype.h"

/* 8 int32 sums of 4 u8 x s8 products each (no saturation for the value ranges above). */
INLINE __m256i dot4(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

INLINE __m256 load_w8(const uint8_t *p, int layout) {
  if (layout == KN_LAYOUT_X16_F32)
    return _mm256_loadu_ps((const float *)p);
  if (layout == KN_LAYOUT_X16_F16)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* acc[t][h]: outputs of rows 8h .. 8h+7 of the panel for token t. */
INLINE void panel_float(const uint8_t *pw, int layout, const float *x, int64_t n_in, int TT,
                        __m256 acc[][2]) {
  size_t esz = layout == KN_LAYOUT_X16_F32 ? 64 : 32;
  panel_zero(TT, acc);
  for (int64_t i = 0; i < n_in; i++) {
    const uint8_t *p = pw + (size_t)i * esz;
    __m256 w0 = load_w8(p, layout), w1 = load_w8(p + esz / 2, layout);
    UNROLL
    for (int t = 0; t < TT; t++) {
      __m256 xv = _mm256_set1_ps(x[t * n_in + i]);
      acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);
    }
  }
}

INLINE void panel_q8_0(const uint8_t *pw, bool q4, const int8_t *xq, size_t xs, int64_t n_in,
                       int TT, __m256 acc[][2]) {
  int64_t nb = n_in / 32;
  panel_zero(TT, acc);
  const __m256i lo4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = pw + (size_t)b * (q4 ? X16_Q4_0_BLK : X16_Q8_0_BLK);
    UNROLL
    for (int h = 0; h < 2; h++) {
      __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
      UNROLL
      for (int t = 0; t < TT; t++) {
        const int8_t *xt = xq + (size_t)t * xs;
        const float *xd = (const float *)(xt + n_in);
        const int8_t *xb = xt + b * 32;
        __m256i is = _mm256_setzero_si256();
        if (q4) {
          const int32_t *xsum = (const int32_t *)(xd + nb);
          is = _mm256_set1_epi32(-8 * xsum[b]);
          UNROLL
          for (int k = 0; k < 4; k++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 32 + k * 64 + 32 * h));
            is = _mm256_add_epi32(is, dot4(_mm256_and_si256(raw, lo4), bcast4(xb + 4 * k)));
            is = _mm256_add_epi32(
                is, dot4(_mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4), bcast4(xb + 16 + 4 * k)));
          }
        } else {
          UNROLL
          for (int c = 0; c < 8; c++) {
            __m256i w = _mm256_xor_si256(
                _mm256_loadu_si256((const __m256i *)(blk + 32 + c * 64 + 32 * h)), flip);
            is = _mm256_add_epi32(is, dot4(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast4(xb + 4 * c), w)));
          }
        }
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(xd[b])),
                                    acc[t][h]);
      }
    }
  }
}

/* Q8_0 for prefill-sized batches, one 8-row half of the panel at a time (h outermost), so that per
 * 4-quant group the signed weights and their absolute values are made once (vpxor + vpabsb) and
 * kept in registers for all TT tokens; per token and group that leaves vpbroadcastd + vpsignb +
 * vpmaddubsw + vpmaddwd + vpaddd (panel_q8_0 redoes the load, vpxor and vpabsb per token).
 * The integer sums are exact and the float steps per block are panel_q8_0's, so the results are
 * bit for bit those of panel_q8_0 (and of avx2_vnni.c) for any TT. */
INLINE void panel_q8_0_halves(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                              __m256 acc[][2]) {
  int64_t nb = n_in / 32;
  const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  UNROLL
  for (int h = 0; h < 2; h++) {
    __m256 a[8];
    UNROLL
    for (int t = 0; t < TT; t++)
      a[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *blk = pw + (size_t)b * X16_Q8_0_BLK;
      __m256i is[8];
      UNROLL
      for (int t = 0; t < TT; t++)
        is[t] = _mm256_setzero_si256();
      /* two groups per iteration: unrolled fully, gcc spills the TT sums; one group per
       * iteration, it copies every sum once per group */
      _Pragma("GCC unroll 1")
      for (int c2 = 0; c2 < 8; c2 += 2) {
        UNROLL
        for (int c = c2; c < c2 + 2; c++) {
          __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 32 + c * 64 + 32 * h)), flip);
          __m256i aw = _mm256_abs_epi8(w);
          UNROLL
          for (int t = 0; t < TT; t++) {
            __m256i sx = _mm256_sign_epi8(bcast4(xq + (size_t)t * xs + b * 32 + 4 * c), w);
            is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
          }
        }
      }
      __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
      UNROLL
      for (int t = 0; t < TT; t++) {
        const float *xd = (const float *)(xq + (size_t)t * xs + n_in);
        a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[b])), a[t]);
      }
    }
    UNROLL
    for (int t = 0; t < TT; t++)
      acc[t][h] = a[t];
  }
}

INLINE void panel_q4_K(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m256 acc[][2]) {
  int64_t ns = n_in / 256;
  panel_zero(TT, acc);
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < ns; sb++) {
    const uint8_t *blk = pw + (size_t)sb * X16_Q4_K_SB;
    UNROLL
    for (int h = 0; h < 2; h++) {
      __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
      __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * h)));
      UNROLL
      for (int t = 0; t < TT; t++) {
        const int8_t *xt = xq + (size_t)t * xs;
        const float *xd = (const float *)(xt + n_in);
        const int16_t *x32 = (const int16_t *)(xd + ns) + ns * 16;
        __m256i A = _mm256_setzero_si256(), B = _mm256_setzero_si256();
        UNROLL
        for (int c = 0; c < 4; c++) {
          __m256i mp = _mm256_cvtepu8_epi16(
              _mm_loadu_si128((const __m128i *)(blk + X16_Q4_K_MIN + 32 * c + 16 * h)));
          B = _mm256_add_epi32(B, _mm256_madd_epi16(mp, bcast4((const int8_t *)(x32 + sb * 8 + 2 * c))));
        }
        UNROLL
        for (int s = 0; s < 8; s++) {
          int k = s / 2, half = s % 2;
          __m256i sc = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64((const __m128i *)(blk + X16_Q4_K_SC + 16 * s + 8 * h)));
          const int8_t *xb = xt + sb * 256 + 64 * k + 32 * half;
          __m256i is = _mm256_setzero_si256();
          UNROLL
          for (int j = 0; j < 8; j++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + X16_Q4_K_QS + (8 * k + j) * 64 + 32 * h));
            __m256i q = half ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4) : _mm256_and_si256(raw, lo4);
            is = _mm256_add_epi32(is, dot4(q, bcast4(xb + 4 * j)));
          }
          A = _mm256_add_epi32(A, _mm256_mullo_epi32(is, sc));
        }
        __m256 dx = _mm256_set1_ps(xd[sb]);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(A), _mm256_mul_ps(dw, dx), acc[t][h]);
        acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(B), _mm256_mul_ps(dm, dx), acc[t][h]);
      }
    }
  }
}

INLINE void panel_q6_K(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m256 acc[][2]) {
  int64_t ns = n_in / 256;
  panel_zero(TT, acc);
  const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int64_t sb = 0; sb < ns; sb++) {
    const uint8_t *blk = pw + (size_t)sb * X16_Q6_K_SB;
    UNROLL
    for (int h2 = 0; h2 < 2; h2++) {
      __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h2)));
      UNROLL
      for (int t = 0; t < TT; t++) {
        const int8_t *xt = xq + (size_t)t * xs;
        const float *xd = (const float *)(xt + n_in);
        const int16_t *x16 = (const int16_t *)(xd + ns);
        __m256i A = _mm256_setzero_si256();
        UNROLL
        for (int g = 0; g < 16; g++) {
          int n = g / 8, h = (g / 4) & 1, j0 = 4 * (g % 4);
          __m256i sc = _mm256_cvtepi8_epi32(
              _mm_loadl_epi64((const __m128i *)(blk + X16_Q6_K_SC + 16 * g + 8 * h2)));
          const int8_t *xb = xt + sb * 256 + 16 * g;
          __m256i is = _mm256_set1_epi32(-32 * (int32_t)x16[sb * 16 + g]);
          UNROLL
          for (int e = 0; e < 4; e++) {
            int j = j0 + e;
            int G = 16 * n + j, H = 8 * n + (j & 7), sh = 2 * (2 * h + j / 8);
            __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + X16_Q6_K_QL_AT(G) + 32 * h2));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + X16_Q6_K_QH_AT(H) + 32 * h2));
            __m256i a = h ? _mm256_srli_epi16(ql, 4) : ql;
            __m256i bq = sh <= 4 ? _mm256_slli_epi16(qh, 4 - sh) : _mm256_srli_epi16(qh, sh - 4);
            __m256i q = _mm256_or_si256(_mm256_and_si256(a, m0f), _mm256_and_si256(bq, m30));
            is = _mm256_add_epi32(is, dot4(q, bcast4(xb + 4 * e)));
          }
          A = _mm256_add_epi32(A, _mm256_mullo_epi32(is, sc));
        }
        acc[t][h2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(A), _mm256_mul_ps(dw, _mm256_set1_ps(xd[sb])),
                                     acc[t][h2]);
      }
    }
  }
}

/* One float run for the three layouts: panel_float widens by w->layout. */
DEFINE_RUN(run_f_6, 6, FLOAT_BODY(6, w->layout))
DEFINE_RUN(run_f_3, 3, FLOAT_BODY(3, w->layout))
DEFINE_RUN(run_f_1, 1, FLOAT_BODY(1, w->layout))
/* Q8_0 from 3 tokens on 8-row halves (each weight group's sign/abs made once for all tokens). */
#define Q80H_BODY(TT) panel_q8_0_halves(X16_PANEL(KN_LAYOUT_X16_Q8_0), XQ(t), m->xq_stride, w->n_in, TT, acc)
DEFINE_RUN(run_q8_6, 6, Q80H_BODY(6))
DEFINE_RUN(run_q8_3, 3, Q80H_BODY(3))
DEFINE_RUN(run_q8_1, 1, Q80_BODY(1, false))
DEFINE_RUN(run_q4_4, 4, Q80_BODY(4, true))
DEFINE_RUN(run_q4_2, 2, Q80_BODY(2, true))
DEFINE_RUN(run_q4_1, 1, Q80_BODY(1, true))
DEFINE_RUN(run_q4k_1, 1, Q4K_BODY(1))
DEFINE_RUN(run_q6k_1, 1, Q6K_BODY(1))

/* 16 rows x 6 tokens: 12 accumulators + 2 weight vectors + 1 broadcast of the 16 ymm registers
 * (4 tokens left the FMA units half idle behind the loads and conversions). */
DEFINE_TILE(tile_float, 6, run_f_6, run_f_3, run_f_1)
/* Q8_0: 8 rows x 6 tokens per pass (6 int32 sums + w + |w| + 1 temporary in registers) */
DEFINE_TILE(tile_q8_0, 6, run_q8_6, run_q8_3, run_q8_1)
DEFINE_TILE(tile_q4_0, 4, run_q4_4, run_q4_2, run_q4_1)
DEFINE_TILE(tile_q4_K, 1, run_q4k_1)
DEFINE_TILE(tile_q6_K, 1, run_q6k_1)

DEFINE_X16_SELECT(kn_avx2_mm_select, kn_act32_quantize_c, kn_act32_quantize_c, kn_act256_quantize_c)

/* ---------------------------------------------------------------------------------------------
 * Element-wise
 */

static void avx2_gelu_tanh(float *x, int64_t n) {
  const __m256 k2b = _mm256_set1_ps(-2.0f * 0.7978845608028654f), kk = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(kk, v), _mm256_mul_ps(v, v), v);
    __m256 e = exp256(_mm256_mul_ps(k2b, inner));
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
  }
  if (i < n)
    kn_ops_ref.gelu_tanh(x + i, n - i);
}

static void avx2_silu_mul(float *gate, const float *up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  if (i < n)
    kn_ops_ref.silu_mul(gate + i, up + i, n - i);
}

static void avx2_add(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; i++)
    y[i] += x[i];
}

/* Round to nearest even (_MM_FROUND_TO_NEAREST_INT), bit-identical to the reference. */
static void avx2_to_f16(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n)
    kn_ops_ref.to_f16(x + i, y + i, n - i);
}

PEAK_PROBE_N(peak_f32, __m256, 12, _mm256_set1_ps(1e-3f * (float)i),
             _mm256_fmadd_ps(v[i], _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-7f)), _mm256_add_ps(s, v[i]))
/* the int8 chains: v = v + madd(maddubs(w, x_i), 1) with x_i = v's low bytes, so each step depends
 * on the previous one and nothing can be hoisted */
PEAK_PROBE_N(peak_int8, __m256i, 8, _mm256_set1_epi32(i),
             _mm256_add_epi32(v[i], dot4(_mm256_set1_epi8(3), v[i])), _mm256_add_epi32(s, v[i]))

/* fp32: 8 lanes x 1 FMA; int8: vpmaddubsw + vpmaddwd + vpaddd = 32 multiply-adds per 3 instructions
 * (what the Q8_0/Q4_0 kernels issue per 4-quant group) */
double kn_avx2_peak_loop(kn_peak_kind kind, int64_t iters) {
  if (kind == KN_PEAK_F32_FMA)
    return peak_f32(iters) * 12 * 8 * 2;
  if (kind == KN_PEAK_INT8_DOT)
    return peak_int8(iters) * 8 * 32 * 2;
  return 0;
}

void kn_avx2_override(kn_ops *ops) {
  ops->peak_loop = kn_avx2_peak_loop;
  ops->choice[KN_OP_MM_FLOAT] = (kn_choice){"avx2 fma 16x6", "FP32 FMA, F16 widened by F16C in the panel loads"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){"avx2 maddubs", "no bf16 dot product: F16/BF16 as Q8_0 blocks (quantized at load), the int8 kernel"};
  ops->choice[KN_OP_MM_Q8_0] = (kn_choice){"avx2 maddubs", "int8 blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_MM_Q4_0] = (kn_choice){"avx2 maddubs", "int8 blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_MM_KQUANT] = (kn_choice){"avx2 maddubs", "int8 super-blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_ROWS] = (kn_choice){"avx2", "8 lanes (norms: scalar double)"};
  ops->to_f16 = avx2_to_f16;
  ops->weight_pack = kn_pack_x16;
  ops->weight_pack_fast = kn_pack_x16_int8;
  ops->fast_int8 = true;
  ops->mm_select = kn_avx2_mm_select;
  ops->gelu_tanh = avx2_gelu_tanh;
  ops->silu_mul = avx2_silu_mul;
  ops->add = avx2_add;
  kn_avx2_attn_override(ops);
}

#endif
