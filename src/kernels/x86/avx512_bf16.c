/*
 * AVX-512 BF16 kernels (compiled with the avx512.c flags plus -mavx512bf16): the `fast` tier's
 * vdpbf16ps matmul on bf16-pair panels and the head_dim-64 vision attention in bf16. Split from
 * avx512.c so that the AVX-512 tier runs on CPUs without BF16 (Skylake-SP, Cascade Lake, Ice Lake,
 * Tiger Lake); kn_avx512bf16_override adds these entries on top of kn_avx512_override.
 */
#if defined(__x86_64__)

#include <stdlib.h>

#include "kernels/x86/avx512_common.h"

/* ---------------------------------------------------------------------------------------------
 * Fast tier: bf16 dot products (vdpbf16ps) on KN_LAYOUT_X16_BF16P panels. One 64-byte load is the
 * input pair (2k, 2k+1) of 16 rows; the token's activation pair (rounded to bf16 once per matmul)
 * is broadcast as one 32-bit value, and one vdpbf16ps adds both products to the 16 fp32 outputs.
 * NP panels x TT tokens accumulators (2 x 8: 16 independent chains hide the instruction's latency
 * and each broadcast feeds two panels). Every output is one chain over k in order, whatever NP and
 * TT are, so batch and thread invariance hold.
 */
static void act_bf16p(const float *x, void *xq, int64_t n_in) {
  uint16_t *o = xq;
  int64_t i = 0;
  for (; i + 32 <= n_in; i += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(o + i, (__m512i)v);
  }
  for (; i < n_in; i += 16) {
    int64_t left = n_in - i;
    __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
    _mm256_mask_storeu_epi16(o + i, mk, (__m256i)v);
  }
  if (n_in % 2)
    o[n_in] = 0; /* the padding input of the last pair (its weight is zero too) */
}

INLINE __m512bh bcast_pair(const uint16_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(v);
}

INLINE void panel_bf16p(const uint8_t *pw, size_t panel, int NP, const uint16_t *xb, size_t xs,
                        int64_t pairs, int TT, __m512 *acc) {
  UNROLL
  for (int i = 0; i < NP * TT; i++)
    acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < pairs; k++) {
    __m512bh w[2];
    UNROLL
    for (int n = 0; n < NP; n++)
      w[n] = (__m512bh)_mm512_loadu_si512(pw + (size_t)n * panel + (size_t)k * 64);
    UNROLL
    for (int t = 0; t < TT; t++) {
      __m512bh xv = bcast_pair(xb + (size_t)t * xs + 2 * k);
      UNROLL
      for (int n = 0; n < NP; n++)
        acc[n * TT + t] = _mm512_dpbf16_ps(acc[n * TT + t], w[n], xv);
    }
  }
}

#define DEFINE_BF16P_RUN(NP, TT)                                                                \
  static void run_bf16p_##NP##_##TT(const kn_mm *m, int64_t p, int64_t t) {                    \
    __m512 acc[NP * TT];                                                                       \
    int64_t pairs = KN_BF16P_PAIRS(m->w->n_in);                                                \
    size_t panel = (size_t)pairs * 64;                                                         \
    panel_bf16p((const uint8_t *)m->w->packed + (size_t)p * panel, panel, NP,                  \
                (const uint16_t *)((const uint8_t *)m->xq + (size_t)t * m->xq_stride),          \
                m->xq_stride / 2, pairs, TT, acc);                                             \
    UNROLL                                                                                     \
    for (int n = 0; n < NP; n++)                                                               \
      panel_store(m, p + n, t, TT, acc + n * TT);                                              \
  }
DEFINE_BF16P_RUN(2, 8)
DEFINE_BF16P_RUN(2, 4)
DEFINE_BF16P_RUN(2, 2)
DEFINE_BF16P_RUN(2, 1)
DEFINE_BF16P_RUN(1, 8)
DEFINE_BF16P_RUN(1, 4)
DEFINE_BF16P_RUN(1, 2)
DEFINE_BF16P_RUN(1, 1)

static void tile_bf16p(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int th) {
  (void)th;
  static const panel_fn two[] = {run_bf16p_2_8, run_bf16p_2_4, run_bf16p_2_2, run_bf16p_2_1};
  static const panel_fn one[] = {run_bf16p_1_8, run_bf16p_1_4, run_bf16p_1_2, run_bf16p_1_1};
  int64_t p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  for (int64_t p = p0; p < p1;) {
    const panel_fn *run = p + 1 < p1 ? two : one;
    int64_t t = t0;
    int k = 0;
    for (int tt = 8; tt >= 1; tt /= 2, k++)
      for (; t1 - t >= tt; t += tt)
        run[k](m, p, t);
    p += run == two ? 2 : 1;
  }
}

static const kn_mm_kernel mm_bf16p = {kn_bf16p_row_bytes, act_bf16p, tile_bf16p, PR, NULL};

/* Fast tier, head_dim 64: the tile path above with bf16 dot products for q.k and p v (vdpbf16ps),
 * on blocks of ATT_KB_BF = 64 keys (NH = 4 quarters of 16). Per block, once per tile: K rounded to
 * bf16 and transposed so that lane j of kt2[h][m] holds the pair (k_j[2m], k_j[2m+1]) of key
 * 16h + j (32 pairs per key); V rounded to bf16 as pairs of keys, lane d of vt2[kp][c] =
 * (v_{2kp}[16c+d], v_{2kp+1}[16c+d]). Per query: q (scaled) rounded to bf16 pairs once; the
 * probabilities p rounded to bf16 pairs (p_{2kp}, p_{2kp+1}) for the p v products, while the
 * softmax itself (max, exp, the sum l) stays in fp32. Half the multiply-add instructions of the
 * fp32 path. 64-key blocks (not 32): 4 rows x 4 quarters = 16 independent score chains cover the
 * latency of vdpbf16ps (8 chains did not), and the per-row bookkeeping (max and sum reductions,
 * the rescale of the accumulator, the scalar exp of the max change) is paid once per 64 keys. */
#define ATT_HD_BF 64
#define ATT_KB_BF 64
/* Keys j0 .. j0 + nb - 1 (nb <= ATT_KB_BF) of KV head kvh in the fast tier's layout: kt2
 * [NH][NP][16] (quarters without keys are zero) and vt2 [KB/2][NV][16] (pairs past the last key
 * are zero). */
static void bf16_kv_block(const kn_attn *a, int kvh, int64_t j0, int nb, uint32_t *kt2, uint32_t *vt2) {
  enum { HD = ATT_HD_BF, NV = HD / 16, NP = HD / 2, KB = ATT_KB_BF, NH = KB / 16 };
  /* interleave the bf16 of two vectors: lane d = (a_d, b_d) */
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const float *kj = a->k + (int64_t)kvh * HD + j0 * a->kv_stride, *vj = a->v + (int64_t)kvh * HD + j0 * a->kv_stride;
  int nhb = (nb + 15) / 16;
  for (int hh = 0; hh < nhb; hh++) {
    __m512 lo[16], hi[16];
    UNROLL
    for (int jj = 0; jj < 16; jj++) {
      if (16 * hh + jj < nb) {
        const float *k = kj + (16 * hh + jj) * a->kv_stride;
        lo[jj] = (__m512)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + 16), _mm512_loadu_ps(k));
        hi[jj] = (__m512)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + 48), _mm512_loadu_ps(k + 32));
      } else {
        lo[jj] = hi[jj] = _mm512_setzero_ps();
      }
    }
    transpose16(lo);
    transpose16(hi);
    UNROLL
    for (int m = 0; m < 16; m++) {
      _mm512_storeu_ps(kt2 + (hh * NP + m) * 16, lo[m]);
      _mm512_storeu_ps(kt2 + (hh * NP + 16 + m) * 16, hi[m]);
    }
  }
  int nkp = (nb + 1) / 2;
  for (int kp = 0; kp < nkp; kp++) {
    const float *v0 = vj + (2 * kp) * a->kv_stride, *v1 = v0 + a->kv_stride;
    bool has1 = 2 * kp + 1 < nb;
    UNROLL
    for (int c = 0; c < NV; c++) {
      __m512 x0 = _mm512_loadu_ps(v0 + 16 * c), x1 = has1 ? _mm512_loadu_ps(v1 + 16 * c) : _mm512_setzero_ps();
      __m512i t = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
      _mm512_storeu_si512(vt2 + (kp * NV + c) * 16, _mm512_permutexvar_epi16(ilv, t));
    }
  }
  for (int m = nhb * NP * 16; m < NH * NP * 16; m += 16)
    _mm512_storeu_si512(kt2 + m, _mm512_setzero_si512());
  for (int m = nkp * NV * 16; m < (KB / 2) * NV * 16; m += 16)
    _mm512_storeu_si512(vt2 + m, _mm512_setzero_si512());
}

INLINE void attn_tile_bf16(const kn_attn *a, int kvh, int64_t i0, int64_t i1, float *scr) {
  enum { HD = ATT_HD_BF, NV = HD / 16, NP = HD / 2, QB = 4, KB = ATT_KB_BF, NH = KB / 16 };
  /* scratch: qb [QT][NP] pairs, acc [QT][HD], mv [QT][16] (the running max in every lane),
   * lv [QT][16] (16 partial sums of the probabilities, added up at the end), kt2 [NH][NP][16],
   * vt2 [KB/2][NV][16], ps [QB][KB/2] pairs */
  uint32_t *qb = (uint32_t *)scr;
  float *acc = scr + ATT_QT * NP, *mv = acc + ATT_QT * HD, *lv = mv + ATT_QT * 16;
  uint32_t *kt2s = (uint32_t *)(lv + ATT_QT * 16), *vt2s = kt2s + NH * NP * 16, *ps = vt2s + (KB / 2) * NV * 16;
  int nq = (int)(i1 - i0);
  int64_t nk[ATT_QT], kmax = tile_keys(a, i0, nq, nk);
  __m512 sc = _mm512_set1_ps(a->scale);
  for (int r = 0; r < nq; r++) {
    const float *q = tile_row_q(a, kvh, i0 + r);
    for (int c = 0; c < NV; c += 2)
      _mm512_storeu_si512(qb + r * NP + 8 * c,
                          (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(q + 16 * c + 16), sc),
                                                       _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), sc)));
    for (int c = 0; c < NV; c++)
      _mm512_storeu_ps(acc + r * HD + 16 * c, _mm512_setzero_ps());
    _mm512_storeu_ps(mv + 16 * r, _mm512_set1_ps(-INFINITY));
    _mm512_storeu_ps(lv + 16 * r, _mm512_setzero_ps());
  }
  for (int64_t j0 = 0; j0 < kmax; j0 += KB) {
    int nb = (int)(kmax - j0 < KB ? kmax - j0 : KB);
    int nhb = (nb + 15) / 16; /* quarters holding keys */
    int nkp = (nb + 1) / 2;
    const uint32_t *kt2 = kt2s, *vt2 = vt2s;
    if (a->kv_prep) { /* converted once per call by the dispatcher (avx512_attention_fast_prep) */
      kt2 = (const uint32_t *)((const char *)a->kv_prep +
                               (size_t)(kvh * a->kv_prep_blocks + j0 / KB) * a->kv_prep_block_bytes);
      vt2 = kt2 + NH * NP * 16;
    } else {
      bf16_kv_block(a, kvh, j0, nb, kt2s, vt2s);
    }
    for (int g0 = 0; g0 < nq; g0 += QB) {
      int rr[QB];
      __mmask16 km[QB][NH];
      bool any = false;
      UNROLL
      for (int r = 0; r < QB; r++) {
        rr[r] = g0 + r < nq ? g0 + r : nq - 1;
        UNROLL
        for (int hh = 0; hh < NH; hh++) {
          int64_t left = nk[rr[r]] - j0 - 16 * hh;
          km[r][hh] = left <= 0 ? 0 : tail_mask(left);
        }
        any |= km[r][0] != 0;
      }
      if (!any)
        continue;
      __m512 s[QB][NH];
      UNROLL
      for (int r = 0; r < QB; r++)
        UNROLL
        for (int hh = 0; hh < NH; hh++)
          s[r][hh] = _mm512_setzero_ps();
      if (nhb > 2) {
        for (int m = 0; m < NP; m++) {
          __m512bh k[NH];
          UNROLL
          for (int hh = 0; hh < NH; hh++)
            k[hh] = (__m512bh)_mm512_loadu_si512(kt2 + (hh * NP + m) * 16);
          UNROLL
          for (int r = 0; r < QB; r++) {
            __m512bh qd = (__m512bh)_mm512_set1_epi32((int32_t)qb[rr[r] * NP + m]);
            UNROLL
            for (int hh = 0; hh < NH; hh++)
              s[r][hh] = _mm512_dpbf16_ps(s[r][hh], k[hh], qd);
          }
        }
      } else { /* a short last block: only the first two quarters hold keys */
        for (int m = 0; m < NP; m++) {
          __m512bh k0 = (__m512bh)_mm512_loadu_si512(kt2 + m * 16);
          __m512bh k1 = (__m512bh)_mm512_loadu_si512(kt2 + (NP + m) * 16);
          UNROLL
          for (int r = 0; r < QB; r++) {
            __m512bh qd = (__m512bh)_mm512_set1_epi32((int32_t)qb[rr[r] * NP + m]);
            s[r][0] = _mm512_dpbf16_ps(s[r][0], k0, qd);
            s[r][1] = _mm512_dpbf16_ps(s[r][1], k1, qd);
          }
        }
      }
      __m512 av[QB][NV];
      UNROLL
      for (int r = 0; r < QB; r++) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        __m512 sv[NH];
        UNROLL
        for (int hh = 0; hh < NH; hh++)
          sv[hh] = _mm512_mask_blend_ps(km[r][hh], ninf, s[r][hh]);
        /* Branch-free, all in vectors: the block maximum reaches every lane by a butterfly of
         * max operations, the rescale factor c = exp(m_old - m_new) is one more exp512, and the
         * sum l stays as 16 lane-wise partial sums. (m_new = -inf happens only for a row with no
         * key yet; then c is forced to 1 and the row's zero state stays zero.) */
        __m512 bm = _mm512_max_ps(_mm512_max_ps(sv[0], sv[1]), _mm512_max_ps(sv[2], sv[3]));
        bm = _mm512_max_ps(bm, _mm512_shuffle_f32x4(bm, bm, 0x4E));
        bm = _mm512_max_ps(bm, _mm512_shuffle_f32x4(bm, bm, 0xB1));
        bm = _mm512_max_ps(bm, _mm512_permute_ps(bm, 0x4E));
        bm = _mm512_max_ps(bm, _mm512_permute_ps(bm, 0xB1));
        __m512 mo = _mm512_loadu_ps(mv + 16 * rr[r]);
        __m512 mn = _mm512_max_ps(mo, bm);
        __mmask16 grew = _mm512_cmp_ps_mask(bm, mo, _CMP_GT_OQ);
        __m512 vc = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), grew, exp512(_mm512_sub_ps(mo, mn)));
        __m512 p[NH];
        UNROLL
        for (int hh = 0; hh < NH; hh++)
          p[hh] = km[r][hh] ? _mm512_maskz_mov_ps(km[r][hh], exp512(_mm512_sub_ps(sv[hh], mn)))
                            : _mm512_setzero_ps();
        __m512 lnew = _mm512_fmadd_ps(_mm512_loadu_ps(lv + 16 * rr[r]), vc,
                                      _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3])));
        if (g0 + r < nq) { /* padded rows must not update the shared state */
          _mm512_storeu_ps(mv + 16 * rr[r], mn);
          _mm512_storeu_ps(lv + 16 * rr[r], lnew);
        }
        _mm512_storeu_si512(ps + (KB / 2) * r, (__m512i)_mm512_cvtne2ps_pbh(p[1], p[0]));
        _mm512_storeu_si512(ps + (KB / 2) * r + 16, (__m512i)_mm512_cvtne2ps_pbh(p[3], p[2]));
        acc_row_load(av[r], acc + rr[r] * HD, NV, vc);
      }
      for (int kp = 0; kp < nkp; kp++) {
        UNROLL
        for (int k = 0; k < NV; k++) {
          __m512bh vv = (__m512bh)_mm512_loadu_si512(vt2 + (kp * NV + k) * 16);
          UNROLL
          for (int r = 0; r < QB; r++)
            av[r][k] = _mm512_dpbf16_ps(av[r][k], vv, (__m512bh)_mm512_set1_epi32((int32_t)ps[(KB / 2) * r + kp]));
        }
      }
      UNROLL
      for (int r = 0; r < QB; r++)
        if (g0 + r < nq)
          acc_row_store(acc + rr[r] * HD, av[r], NV);
    }
  }
  for (int r = 0; r < nq; r++)
    tile_row_store(a, kvh, i0 + r, acc + r * HD, _mm512_reduce_add_ps(_mm512_loadu_ps(lv + 16 * r)), NV, 0xFFFF);
}

/* Fast-tier entry: head_dim 64 tiles in bf16; anything else as the exact path. */
static void avx512_attention_fast(const kn_attn *a, int kvh, int64_t q0, int64_t q1, int thread) {
  if (a->head_dim != ATT_HD_BF || a->k16) {
    kn_avx512_attention(a, kvh, q0, q1, thread);
    return;
  }
  const int64_t G = a->n_head / a->n_kv_head;
  /* qb, acc, ml, kt2, vt2, ps of attn_tile_bf16 */
  float *scr = kn_scratch(thread, sizeof(float) * (size_t)(ATT_QT * (ATT_HD_BF / 2 + ATT_HD_BF) + 2 * ATT_QT * 16 +
                                                          (ATT_KB_BF / 16) * (ATT_HD_BF / 2) * 16 +
                                                          (ATT_KB_BF / 2) * (ATT_HD_BF / 16) * 16 +
                                                          4 * (ATT_KB_BF / 2)));
  if (!scr) {
    kn_avx512_attention(a, kvh, q0, q1, thread);
    return;
  }
  int64_t R1 = q1 * G;
  for (int64_t r0 = q0 * G; r0 < R1; r0 += ATT_QT)
    attn_tile_bf16(a, kvh, r0, r0 + ATT_QT < R1 ? r0 + ATT_QT : R1, scr);
}

/* The dispatcher's one conversion of K/V per call (kn_ops.attention_fast_prep). */
static size_t avx512_attention_fast_prep_bytes(const kn_attn *a, int64_t *keys_per_block) {
  if (a->head_dim != ATT_HD_BF)
    return 0;
  *keys_per_block = ATT_KB_BF;
  return sizeof(uint32_t) * (size_t)((ATT_KB_BF / 16) * (ATT_HD_BF / 2) * 16 + (ATT_KB_BF / 2) * (ATT_HD_BF / 16) * 16);
}
static void avx512_attention_fast_prep(const kn_attn *a, int kvh, int64_t b, void *out) {
  int64_t j0 = b * ATT_KB_BF;
  int nb = (int)(a->n_kv - j0 < ATT_KB_BF ? a->n_kv - j0 : ATT_KB_BF);
  uint32_t *kt2 = out;
  bf16_kv_block(a, kvh, j0, nb, kt2, kt2 + (ATT_KB_BF / 16) * (ATT_HD_BF / 2) * 16);
}

static const kn_mm_kernel *avx512bf16_mm_select(const kn_weight *w, int64_t n_tokens) {
  if (w->packed && w->layout == KN_LAYOUT_X16_BF16P)
    return &mm_bf16p;
  return kn_avx512_mm_select(w, n_tokens);
}

PEAK_PROBE(peak_bf16, __m512, _mm512_set1_ps(1e-3f * (float)i),
           _mm512_dpbf16_ps(v[i], (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3380)),
           _mm512_add_ps(s, v[i]))

static double avx512bf16_peak_loop(kn_peak_kind kind, int64_t iters) {
  if (kind != KN_PEAK_BF16_DOT)
    return kn_avx512_peak_loop(kind, iters);
  return peak_bf16(iters) * 16 * 64; /* 16 lanes x 2 bf16 MACs x 2 operations */
}

void kn_avx512bf16_override(kn_ops *ops) {
  ops->choice[KN_OP_MM_FAST] = (kn_choice){"avx512 bf16 32x8", "vdpbf16ps on bf16-pair panels"};
  ops->choice[KN_OP_ATTN_FAST] = (kn_choice){"avx512 bf16 tiles", "vdpbf16ps for q.k and p.v (head_dim 64)"};
  ops->peak_loop = avx512bf16_peak_loop;
  ops->weight_pack_fast = kn_pack_x16_fast;
  ops->fast_int8 = false;
  ops->mm_select = avx512bf16_mm_select;
  ops->attention_fast = avx512_attention_fast;
  ops->attention_fast_prep_bytes = avx512_attention_fast_prep_bytes;
  ops->attention_fast_prep = avx512_attention_fast_prep;
}

#endif
