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
#include "kernels/x86/simd_common.h"
#include "tensor/dtype.h"

INLINE __m256i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

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
  UNROLL
  for (int t = 0; t < TT; t++)
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
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
  UNROLL
  for (int t = 0; t < TT; t++)
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
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

INLINE void panel_q4_K(const uint8_t *pw, const int8_t *xq, size_t xs, int64_t n_in, int TT,
                       __m256 acc[][2]) {
  int64_t ns = n_in / 256;
  UNROLL
  for (int t = 0; t < TT; t++)
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
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
  UNROLL
  for (int t = 0; t < TT; t++)
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
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

#define FLOAT_BODY(TT)                                                                     \
  panel_float(PANEL_PTR(w, (size_t)w->n_in * (w->layout == KN_LAYOUT_X16_F32 ? 64 : 32)), \
              w->layout, m->x + t * w->n_in, w->n_in, TT, acc)
#define Q80_BODY(TT, Q4)                                                                        \
  panel_q8_0(PANEL_PTR(w, (size_t)(w->n_in / 32) * ((Q4) ? X16_Q4_0_BLK : X16_Q8_0_BLK)), Q4, \
             XQ(t), m->xq_stride, w->n_in, TT, acc)
#define Q4K_BODY(TT) \
  panel_q4_K(PANEL_PTR(w, (size_t)(w->n_in / 256) * X16_Q4_K_SB), XQ(t), m->xq_stride, w->n_in, TT, acc)
#define Q6K_BODY(TT) \
  panel_q6_K(PANEL_PTR(w, (size_t)(w->n_in / 256) * X16_Q6_K_SB), XQ(t), m->xq_stride, w->n_in, TT, acc)

DEFINE_RUN(run_f_6, 6, FLOAT_BODY(6))
DEFINE_RUN(run_f_3, 3, FLOAT_BODY(3))
DEFINE_RUN(run_f_1, 1, FLOAT_BODY(1))
DEFINE_RUN(run_q8_4, 4, Q80_BODY(4, false))
DEFINE_RUN(run_q8_2, 2, Q80_BODY(2, false))
DEFINE_RUN(run_q8_1, 1, Q80_BODY(1, false))
DEFINE_RUN(run_q4_4, 4, Q80_BODY(4, true))
DEFINE_RUN(run_q4_2, 2, Q80_BODY(2, true))
DEFINE_RUN(run_q4_1, 1, Q80_BODY(1, true))
DEFINE_RUN(run_q4k_1, 1, Q4K_BODY(1))
DEFINE_RUN(run_q6k_1, 1, Q6K_BODY(1))

typedef void (*panel_fn)(const kn_mm *m, int64_t p, int64_t t);

static void tile_generic(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                         const panel_fn *run, int max_tt) {
  for (int64_t p = r0 / PR; p < (r1 + PR - 1) / PR; p++) {
    int64_t t = t0;
    int k = 0;
    for (int tt = max_tt; tt >= 1; tt /= 2, k++)
      for (; t1 - t >= tt; t += tt)
        run[k](m, p, t);
  }
}

#define DEFINE_TILE(NAME, MAX, ...)                                                           \
  static void NAME(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) { \
    (void)th;                                                                                 \
    static const panel_fn run[] = {__VA_ARGS__};                                              \
    tile_generic(m, r0, r1, t0, t1, run, MAX);                                                \
  }
/* 16 rows x 6 tokens: 12 accumulators + 2 weight vectors + 1 broadcast of the 16 ymm registers
 * (4 tokens left the FMA units half idle behind the loads and conversions). */
DEFINE_TILE(tile_float, 6, run_f_6, run_f_3, run_f_1)
DEFINE_TILE(tile_q8_0, 4, run_q8_4, run_q8_2, run_q8_1)
DEFINE_TILE(tile_q4_0, 4, run_q4_4, run_q4_2, run_q4_1)
DEFINE_TILE(tile_q4_K, 1, run_q4k_1)
DEFINE_TILE(tile_q6_K, 1, run_q6k_1)

static const kn_mm_kernel mm_float = {NULL, NULL, tile_float, PR, NULL};
static const kn_mm_kernel mm_q8_0 = {kn_act32_bytes, kn_act32_quantize_c, tile_q8_0, PR, NULL};
static const kn_mm_kernel mm_q4_0 = {kn_act32_bytes, kn_act32_quantize_c, tile_q4_0, PR, NULL};
static const kn_mm_kernel mm_q4_K = {kn_act256_bytes, kn_act256_quantize_c, tile_q4_K, PR, NULL};
static const kn_mm_kernel mm_q6_K = {kn_act256_bytes, kn_act256_quantize_c, tile_q6_K, PR, NULL};

static const kn_mm_kernel *avx2_mm_select(const kn_weight *w, int64_t n_tokens) {
  (void)n_tokens;
  if (!w->packed)
    return &kn_mm_ref;
  switch (w->layout) {
  case KN_LAYOUT_X16_F32:
  case KN_LAYOUT_X16_F16:
  case KN_LAYOUT_X16_BF16: return &mm_float;
  case KN_LAYOUT_X16_Q8_0: return &mm_q8_0;
  case KN_LAYOUT_X16_Q4_0: return &mm_q4_0;
  case KN_LAYOUT_X16_Q4_K: return &mm_q4_K;
  case KN_LAYOUT_X16_Q6_K: return &mm_q6_K;
  default: return &kn_mm_ref;
  }
}

/* ---------------------------------------------------------------------------------------------
 * Element-wise
 */

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

/* ---------------------------------------------------------------------------------------------
 * Attention: online softmax per query row, dot products and updates 8 lanes at a time.
 */
/* 8 K/V values at element e of a row: fp32, or IEEE half widened in the register (F16C). */
INLINE __m256 kv_load8(const void *row, int e, bool f16) {
  return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + e)))
             : _mm256_loadu_ps((const float *)row + e);
}
INLINE const void *kv_at(const void *base, int64_t e, bool f16) {
  return f16 ? (const void *)((const uint16_t *)base + e) : (const void *)((const float *)base + e);
}

INLINE void attention8(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread, bool f16) {
  int hd = a->head_dim;
  int nv = hd / 8;
  int kvh = h / (a->n_head / a->n_kv_head);
  const void *kb = f16 ? kv_at(a->k16, (int64_t)kvh * hd, true) : kv_at(a->k, (int64_t)kvh * hd, false);
  const void *vb = f16 ? kv_at(a->v16, (int64_t)kvh * hd, true) : kv_at(a->v, (int64_t)kvh * hd, false);
  float *acc = kn_scratch(thread, (size_t)hd * sizeof(float) * 2);
  float *qs = acc + hd;
  for (int64_t i = q0; i < q1; i++) {
    int64_t n_keys = kn_attn_keys(a, i);
    const float *q = a->q + i * a->q_stride + (int64_t)h * hd;
    for (int d = 0; d < hd; d++) {
      qs[d] = q[d] * a->scale;
      acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < n_keys; j++) {
      const void *k = kv_at(kb, j * a->kv_stride, f16), *v = kv_at(vb, j * a->kv_stride, f16);
      __m256 dv = _mm256_setzero_ps();
      for (int c = 0; c < nv; c++)
        dv = _mm256_fmadd_ps(_mm256_loadu_ps(qs + 8 * c), kv_load8(k, 8 * c, f16), dv);
      __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(dv), _mm256_extractf128_ps(dv, 1));
      s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
      float s = _mm_cvtss_f32(s4);
      if (s > m) {
        float c = expf(m - s);
        l *= c;
        __m256 vc = _mm256_set1_ps(c);
        for (int k2 = 0; k2 < nv; k2++)
          _mm256_storeu_ps(acc + 8 * k2, _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * k2), vc));
        m = s;
      }
      float p = expf(s - m);
      l += p;
      __m256 vp = _mm256_set1_ps(p);
      for (int c = 0; c < nv; c++)
        _mm256_storeu_ps(acc + 8 * c, _mm256_fmadd_ps(vp, kv_load8(v, 8 * c, f16), _mm256_loadu_ps(acc + 8 * c)));
    }
    float il = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = a->out + i * a->out_stride + (int64_t)h * hd;
    for (int d = 0; d < hd; d++)
      o[d] = acc[d] * il;
  }
}

/* head_dim 64, f32 K/V (the vision tower): the task's keys are first transposed into blocks of 8
 * (kt[block][d][8], in per-thread scratch, 1/256 of the task's arithmetic), so the 8 scores of a
 * block are 8-lane FMAs with q[d] broadcast (8 chains over d), the softmax of the block is one
 * exp256 (plus one when the maximum grows), and p v is 8 FMAs per key: no horizontal sum or
 * scalar exp per key (the per-key loop below ran at ~5% of the FP32 FMA peak). */
#define ATT2_HD 64
#define ATT2_BLK_BYTES (sizeof(float) * 2 * 8 * ATT2_HD) /* kt[64][8], then v[8][64] */

/* Keys j0 .. j0 + 7 of KV head kvh (those below n: the rest zero): kt[d][8] and v[8][64], fp32
 * (f16 K/V widened exactly, so both paths do the same arithmetic on the same values). */
INLINE float kv_val(const kn_attn *a, bool v, int64_t e) {
  if (a->k16)
    return fp16_to_f32((v ? a->v16 : a->k16)[e]);
  return (v ? a->v : a->k)[e];
}
static void t8_block(const kn_attn *a, int kvh, int64_t j0, int64_t n, float *out) {
  enum { HD = ATT2_HD };
  float *kt = out, *vo = out + 8 * HD;
  for (int jj = 0; jj < 8; jj++) {
    int64_t j = j0 + jj, e = j * a->kv_stride + (int64_t)kvh * HD;
    for (int d = 0; d < HD; d++) {
      kt[d * 8 + jj] = j < n ? kv_val(a, false, e + d) : 0.0f;
      vo[jj * HD + d] = j < n ? kv_val(a, true, e + d) : 0.0f;
    }
  }
}

/* The dispatcher's one conversion per call (kn_ops.attention_prep): the strided K/V rows of a
 * 3000-patch tower are 3000 pages per head, and converting them per task of 64 queries took a
 * quarter of the time in TLB and cache misses. */
static size_t avx2_attention_prep_bytes(const kn_attn *a, int64_t *keys_per_block) {
  if (a->head_dim != ATT2_HD)
    return 0;
  *keys_per_block = 8;
  return ATT2_BLK_BYTES;
}
static void avx2_attention_prep(const kn_attn *a, int kvh, int64_t b, void *out) {
  t8_block(a, kvh, b * 8, a->n_kv, out);
}

static bool attention_t8(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  enum { HD = ATT2_HD, NV = HD / 8 };
  int kvh = h / (a->n_head / a->n_kv_head);
  const char *blocks;
  if (a->kv_prep) {
    blocks = (const char *)a->kv_prep + (size_t)kvh * (size_t)a->kv_prep_blocks * a->kv_prep_block_bytes;
  } else {
    int64_t kmax = 0;
    for (int64_t i = q0; i < q1; i++)
      if (kn_attn_keys(a, i) > kmax)
        kmax = kn_attn_keys(a, i);
    int64_t nblk = (kmax + 7) / 8;
    char *buf = kn_scratch(thread, ATT2_BLK_BYTES * (size_t)nblk + 64);
    if (!buf)
      return false;
    for (int64_t b = 0; b < nblk; b++)
      t8_block(a, kvh, b * 8, kmax, (float *)(buf + (size_t)b * ATT2_BLK_BYTES));
    blocks = buf;
  }
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t i = q0; i < q1; i++) {
    int64_t n_keys = kn_attn_keys(a, i);
    const float *q = a->q + i * a->q_stride + (int64_t)h * HD;
    float qs[HD];
    for (int d = 0; d < HD; d++)
      qs[d] = q[d] * a->scale;
    /* The output row lives in memory between blocks: the 8 score chains and the 8 output vectors
     * do not fit the 16 ymm registers together, and 8 loads + 8 stores per 128 FMAs are cheap. */
    float accm[HD];
    __m256 lv = _mm256_setzero_ps();
    memset(accm, 0, sizeof accm);
    float m = -INFINITY;
    for (int64_t j0 = 0; j0 < n_keys; j0 += 8) {
      const float *kt_b = (const float *)(blocks + (size_t)(j0 / 8) * ATT2_BLK_BYTES), *vt_b = kt_b + 8 * HD;
      __m256 s8[8];
      UNROLL
      for (int c = 0; c < 8; c++)
        s8[c] = _mm256_mul_ps(_mm256_broadcast_ss(qs + c), _mm256_loadu_ps(kt_b + 8 * c));
      for (int d0 = 8; d0 < HD; d0 += 8) /* 8 chains: the FMA latency is covered */
        UNROLL
        for (int c = 0; c < 8; c++)
          s8[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(qs + d0 + c), _mm256_loadu_ps(kt_b + 8 * (d0 + c)), s8[c]);
      __m256 sv = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s8[0], s8[1]), _mm256_add_ps(s8[2], s8[3])),
                                _mm256_add_ps(_mm256_add_ps(s8[4], s8[5]), _mm256_add_ps(s8[6], s8[7])));
      int nb = (int)(n_keys - j0 < 8 ? n_keys - j0 : 8);
      if (nb < 8) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        sv = _mm256_blendv_ps(ninf, sv, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nb), lane)));
      }
      __m256 mx = _mm256_max_ps(sv, _mm256_permute2f128_ps(sv, sv, 1));
      mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0x4E));
      mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0xB1));
      float bm = _mm256_cvtss_f32(mx);
      __m256 acc[NV];
      UNROLL
      for (int k = 0; k < NV; k++)
        acc[k] = _mm256_loadu_ps(accm + 8 * k);
      if (bm > m) {
        __m256 c = exp256(_mm256_set1_ps(m - bm)); /* 0 for the first block (m = -inf) */
        lv = _mm256_mul_ps(lv, c);
        UNROLL
        for (int k = 0; k < NV; k++)
          acc[k] = _mm256_mul_ps(acc[k], c);
        m = bm;
      }
      __m256 p = exp256(_mm256_sub_ps(sv, _mm256_set1_ps(m)));
      if (nb < 8) /* exp256 clamps its argument: -inf keys must give exactly 0 */
        p = _mm256_and_ps(p, _mm256_cmp_ps(sv, ninf, _CMP_NEQ_OQ));
      lv = _mm256_add_ps(lv, p);
      float ps[8];
      _mm256_storeu_ps(ps, p);
      for (int jj = 0; jj < nb; jj++) {
        const float *v = vt_b + jj * HD;
        __m256 pj = _mm256_broadcast_ss(ps + jj);
        UNROLL
        for (int k = 0; k < NV; k++)
          acc[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * k), acc[k]);
      }
      UNROLL
      for (int k = 0; k < NV; k++)
        _mm256_storeu_ps(accm + 8 * k, acc[k]);
    }
    __m128 l4 = _mm_add_ps(_mm256_castps256_ps128(lv), _mm256_extractf128_ps(lv, 1));
    l4 = _mm_add_ps(l4, _mm_movehl_ps(l4, l4));
    l4 = _mm_add_ss(l4, _mm_movehdup_ps(l4));
    float l = _mm_cvtss_f32(l4);
    __m256 il = _mm256_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
    float *o = a->out + i * a->out_stride + (int64_t)h * HD;
    UNROLL
    for (int k = 0; k < NV; k++)
      _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(_mm256_loadu_ps(accm + 8 * k), il));
  }
  return true;
}

static void avx2_attention(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  if (a->head_dim == ATT2_HD && attention_t8(a, h, q0, q1, thread))
    return;
  if (a->head_dim % 8 != 0)
    kn_ops_ref.attention(a, h, q0, q1, thread);
  else if (a->k16)
    attention8(a, h, q0, q1, thread, true);
  else
    attention8(a, h, q0, q1, thread, false);
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
static double avx2_peak_loop(kn_peak_kind kind, int64_t iters) {
  if (kind == KN_PEAK_F32_FMA)
    return peak_f32(iters) * 12 * 8 * 2;
  if (kind == KN_PEAK_INT8_DOT)
    return peak_int8(iters) * 8 * 32 * 2;
  return 0;
}

void kn_avx2_override(kn_ops *ops) {
  ops->peak_loop = avx2_peak_loop;
  ops->choice[KN_OP_MM_FLOAT] = (kn_choice){"avx2 fma 16x6", "FP32 FMA, F16 widened by F16C in the panel loads"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){"avx2 fma 16x6", "no bf16 dot product: the exact FP32 FMA kernel"};
  ops->choice[KN_OP_MM_Q8_0] = (kn_choice){"avx2 maddubs", "int8 blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_MM_Q4_0] = (kn_choice){"avx2 maddubs", "int8 blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_MM_KQUANT] = (kn_choice){"avx2 maddubs", "int8 super-blocks, vpmaddubsw + vpmaddwd"};
  ops->choice[KN_OP_ATTN] = (kn_choice){"avx2 8-key blocks", "head_dim 64 f32 K/V: transposed 8-key blocks; else per key"};
  ops->choice[KN_OP_ATTN_FAST] = (kn_choice){"avx2 8-key blocks", "no bf16 dot product: as exact"};
  ops->choice[KN_OP_ROWS] = (kn_choice){"avx2", "8 lanes (norms: scalar double)"};
  ops->to_f16 = avx2_to_f16;
  ops->weight_pack = kn_pack_x16;
  ops->mm_select = avx2_mm_select;
  ops->gelu_tanh = avx2_gelu_tanh;
  ops->silu_mul = avx2_silu_mul;
  ops->add = avx2_add;
  ops->attention = avx2_attention;
  ops->attention_prep_bytes = avx2_attention_prep_bytes;
  ops->attention_prep = avx2_attention_prep;
}

#else
#include "kernels/kernels_impl.h"
void kn_avx2_override(kn_ops *ops) { (void)ops; }
#endif
