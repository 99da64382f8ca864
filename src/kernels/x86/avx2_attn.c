/*
 * AVX2 attention (compiled with -mavx2 -mfma -mf16c), exact tier; the AVX2 tiers have no fast one.
 *
 * Prefill and the vision tower (head_dim a multiple of 16): flash-attention tiles. The keys of
 * each KV head are converted once per call (attention_prep) into blocks of 8: K transposed
 * (kt[d][8]) then V (v[8][head_dim]), fp32. A task's queries (up to 64) keep their state (scaled
 * q, output row, running max and sum) in scratch; for each chunk of 128 keys (K and V of the chunk,
 * 64-128 KB, stay in L2 for all the task's queries), groups of 6 queries do
 *   S = q K^T  as 6 queries x 16 keys register tiles (12 accumulators, 2 K loads and 6 broadcasts
 *              per 12 FMAs, the shape of the 16 x 6 matmul kernel),
 *   softmax    on whole rows of 128 scores: one max, one rescale of the row only when its
 *              maximum grows, exp256 over 8 scores at a time,
 *   O += P V   as 6 queries x 16 output lanes register tiles, the output row loaded and stored
 *              once per chunk.
 * Each query's arithmetic is the same whichever queries share its group (rows beyond a query's
 * keys get p = 0, which adds +-0), so results do not depend on the task split or thread count.
 * The earlier kernel (one query, 8-key blocks, softmax bookkeeping per 8 keys) reached 25% of the
 * FP32 FMA peak.
 *
 * Decode (a few queries, K/V not prepared): attention_stream, the tiles' arithmetic per query on
 * keys read from the cache; head sizes that are not a multiple of 16: online softmax per key.
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/x86/avx2_math.h"

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
      float s = hsum256(dv);
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

/* ---------------------------------------------------------------------------------------------
 * Tiles
 */
enum {
  KB = 128, /* keys per chunk (a multiple of 16) */
  QR = 6,   /* queries per register tile */
  QT = 64,  /* queries whose state stays in scratch while the chunks go by */
};
INLINE size_t blk_bytes(int hd) { return sizeof(float) * 2 * 8 * (size_t)hd; } /* kt[hd][8], v[8][hd] */
INLINE bool tiled(const kn_attn *a) { return a->head_dim % 16 == 0 && a->head_dim <= 256; }

/* r[i][j] -> r[j][i] for an 8 x 8 block. */
INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  UNROLL
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* a0 b0 a1 b1 | a4 b4 a5 b5 */
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* a2 b2 a3 b3 | a6 b6 a7 b7 */
  }
  UNROLL
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);     /* a0 b0 c0 d0 | a4 .. */
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE); /* a1 b1 c1 d1 | a5 .. */
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  UNROLL
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/* Keys j0 .. j0 + 7 of KV head kvh (those below n: the rest zero), fp32 (f16 K/V widened
 * exactly by F16C, so both paths do the same arithmetic on the same values); K transposed 8 x 8
 * in registers. */
static void t8_block(const kn_attn *a, int kvh, int64_t j0, int64_t n, float *out) {
  int hd = a->head_dim;
  bool f16 = a->k16 != NULL;
  float *kt = out, *vo = out + 8 * hd;
  const void *kr[8], *vr[8];
  for (int jj = 0; jj < 8; jj++) {
    int64_t e = (j0 + jj) * a->kv_stride + (int64_t)kvh * hd;
    bool in = j0 + jj < n;
    kr[jj] = !in ? NULL : f16 ? kv_at(a->k16, e, true) : kv_at(a->k, e, false);
    vr[jj] = !in ? NULL : f16 ? kv_at(a->v16, e, true) : kv_at(a->v, e, false);
  }
  for (int d = 0; d < hd; d += 8) {
    __m256 r[8];
    for (int jj = 0; jj < 8; jj++) {
      r[jj] = kr[jj] ? kv_load8(kr[jj], d, f16) : _mm256_setzero_ps();
      _mm256_storeu_ps(vo + jj * hd + d, vr[jj] ? kv_load8(vr[jj], d, f16) : _mm256_setzero_ps());
    }
    transpose8(r);
    for (int i = 0; i < 8; i++)
      _mm256_storeu_ps(kt + (d + i) * 8, r[i]);
  }
}

/* The dispatcher's one conversion per call (kn_ops.attention_prep): the strided K/V rows of a
 * 3000-patch tower are 3000 pages per head, and converting them per task of 64 queries took a
 * quarter of the time in TLB and cache misses. */
static size_t avx2_attention_prep_bytes(const kn_attn *a, int64_t *keys_per_block) {
  if (!tiled(a))
    return 0;
  *keys_per_block = 8;
  return blk_bytes(a->head_dim);
}
static void avx2_attention_prep(const kn_attn *a, int kvh, int64_t b, void *out) {
  t8_block(a, kvh, b * 8, a->n_kv, out);
}

typedef struct group {
  const float *qs; /* R scaled query rows, hd apart */
  const char *blocks;
  size_t bb;
  int hd;
  int64_t blk0; /* first 8-key block of the chunk */
  int nblk;     /* 8-key blocks this group needs in the chunk */
  float *s;     /* R rows of KB scores, then probabilities */
  float *o;     /* R output rows, hd apart */
} group;

INLINE const float *kt_at(const group *g, int b) {
  return (const float *)(g->blocks + (size_t)(g->blk0 + b) * g->bb);
}

/* s[r][8b .. 8b + 8 NB) = q_r . k for NB (1 or 2) blocks of 8 keys. */
INLINE void qk_tile(const group *g, int b, int R, int NB) {
  __m256 acc[QR][2];
  const float *k0 = kt_at(g, b), *k1 = NB > 1 ? kt_at(g, b + 1) : k0;
  UNROLL
  for (int r = 0; r < R; r++)
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  _Pragma("GCC unroll 4") for (int d = 0; d < g->hd; d++) {
    __m256 w0 = _mm256_load_ps(k0 + 8 * d), w1 = NB > 1 ? _mm256_load_ps(k1 + 8 * d) : w0;
    UNROLL
    for (int r = 0; r < R; r++) {
      __m256 q = _mm256_broadcast_ss(g->qs + r * g->hd + d);
      acc[r][0] = _mm256_fmadd_ps(q, w0, acc[r][0]);
      if (NB > 1)
        acc[r][1] = _mm256_fmadd_ps(q, w1, acc[r][1]);
    }
  }
  UNROLL
  for (int r = 0; r < R; r++)
    for (int n = 0; n < NB; n++)
      _mm256_storeu_ps(g->s + r * KB + 8 * (b + n), acc[r][n]);
}

/* o[r][c .. c + 16) += sum over the chunk's keys of p[r][j] v[j][c .. c + 16). */
INLINE void pv_tile(const group *g, int c, int R) {
  __m256 acc[QR][2];
  int hd = g->hd;
  UNROLL
  for (int r = 0; r < R; r++) {
    acc[r][0] = _mm256_loadu_ps(g->o + r * hd + c);
    acc[r][1] = _mm256_loadu_ps(g->o + r * hd + c + 8);
  }
  for (int b = 0; b < g->nblk; b++) {
    const float *vb = kt_at(g, b) + 8 * hd + c;
    UNROLL
    for (int jj = 0; jj < 8; jj++) {
      __m256 v0 = _mm256_load_ps(vb + jj * hd), v1 = _mm256_load_ps(vb + jj * hd + 8);
      UNROLL
      for (int r = 0; r < R; r++) {
        __m256 p = _mm256_broadcast_ss(g->s + r * KB + 8 * b + jj);
        acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
      }
    }
  }
  UNROLL
  for (int r = 0; r < R; r++) {
    _mm256_storeu_ps(g->o + r * hd + c, acc[r][0]);
    _mm256_storeu_ps(g->o + r * hd + c + 8, acc[r][1]);
  }
}

INLINE void group_qk(const group *g, int R) {
  int b = 0;
  for (; b + 2 <= g->nblk; b += 2)
    qk_tile(g, b, R, 2);
  if (b < g->nblk)
    qk_tile(g, b, R, 1);
}
INLINE void group_pv(const group *g, int R) {
  for (int c = 0; c < g->hd; c += 16)
    pv_tile(g, c, R);
}

#define DEFINE_GROUP(R)                                     \
  static void group_qk_##R(const group *g) { group_qk(g, R); } \
  static void group_pv_##R(const group *g) { group_pv(g, R); }
DEFINE_GROUP(1)
DEFINE_GROUP(2)
DEFINE_GROUP(3)
DEFINE_GROUP(4)
DEFINE_GROUP(5)
DEFINE_GROUP(6)
typedef void (*group_fn)(const group *g);
static const group_fn g_qk[QR + 1] = {NULL, group_qk_1, group_qk_2, group_qk_3, group_qk_4, group_qk_5, group_qk_6};
static const group_fn g_pv[QR + 1] = {NULL, group_pv_1, group_pv_2, group_pv_3, group_pv_4, group_pv_5, group_pv_6};

/* One query's softmax over its n (<= KB) scores of the chunk, in place: the running maximum *m
 * grows (and the output row o and the 8 partial sums lv are rescaled) only when the chunk's
 * maximum is above it; scores from n up to 8 nblk become 0. */
static void softmax_row(float *s, int n, int nblk, float *m, float *lv, float *o, int hd) {
  int nv = n > 0 ? (n + 7) / 8 : 0;
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  if (nv > 0) {
    __m256 mx = ninf;
    for (int k = 0; k < nv; k++) {
      __m256 x = _mm256_loadu_ps(s + 8 * k);
      if (k == nv - 1)
        x = _mm256_blendv_ps(ninf, x, lanes_below(n - 8 * k));
      mx = _mm256_max_ps(mx, x);
    }
    float bm = hmax256(mx);
    if (bm > *m) {
      if (*m != -INFINITY) {
        __m256 c = _mm256_set1_ps(expf(*m - bm));
        for (int d = 0; d < hd; d += 8)
          _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), c));
        _mm256_storeu_ps(lv, _mm256_mul_ps(_mm256_loadu_ps(lv), c));
      }
      *m = bm;
    }
  }
  __m256 mv = _mm256_set1_ps(*m), l = _mm256_loadu_ps(lv);
  for (int k = 0; k < nblk; k++) {
    __m256 p = _mm256_setzero_ps();
    if (k < nv) {
      p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * k), mv));
      if (k == nv - 1) /* exp256 clamps its argument: keys past n must give exactly 0 */
        p = _mm256_and_ps(p, lanes_below(n - 8 * k));
    }
    _mm256_storeu_ps(s + 8 * k, p);
    l = _mm256_add_ps(l, p);
  }
  _mm256_storeu_ps(lv, l);
}

/* Decode (a few queries, K/V not prepared): each query alone, reading its keys straight from the
 * cache (8 rows transposed in registers per 8 dims), with the tile path's arithmetic for one
 * query: the same FMA chain per score, the same 128-key softmax_row, the same p.v order, keys past
 * its own count zero. So a query's result does not depend on how many queries share the call: a
 * prompt prefilled in chunks of 1-3 tokens equals one prefilled whole (the engine's batch and
 * prefix-cache invariance). Scratch: the scaled query and output row [hd], partial sums [8],
 * scores [KB]. */
/* Scores of NB blocks of 8 keys (rows kr, NULL past the query's keys: zero) for the scaled query
 * qs: one FMA chain over d per key, as qk_tile's; the NB chains are independent, so they overlap
 * in the FMA pipes (one chain alone waits on the FMA latency). */
INLINE void scores8(const void *const *kr, const float *qs, int hd, int NB, bool full, bool f16, float *s) {
  __m256 acc[4];
  UNROLL
  for (int x = 0; x < 4; x++)
    acc[x] = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    UNROLL
    for (int x = 0; x < 4; x++) {
      if (x >= NB)
        break;
      __m256 r[8];
      if (full) {
        UNROLL
        for (int jj = 0; jj < 8; jj++)
          r[jj] = kv_load8(kr[8 * x + jj], d, f16);
      } else {
        for (int jj = 0; jj < 8; jj++)
          r[jj] = kr[8 * x + jj] ? kv_load8(kr[8 * x + jj], d, f16) : _mm256_setzero_ps();
      }
      transpose8(r);
      UNROLL
      for (int e = 0; e < 8; e++)
        acc[x] = _mm256_fmadd_ps(_mm256_broadcast_ss(qs + d + e), r[e], acc[x]);
    }
  }
  UNROLL
  for (int x = 0; x < 4; x++)
    if (x < NB)
      _mm256_storeu_ps(s + 8 * x, acc[x]);
}

/* o[c .. c + 8 NC) += sum over the chunk's n keys of p[j] v[j][c ..]: per lane the keys in order,
 * as pv_tile (keys from n on have p = 0 there: adding their products leaves o as it is). */
INLINE void pv_stream(float *o, const float *p, const void *vb, int64_t stride, int n, int c, int NC, bool f16) {
  __m256 acc[8];
  UNROLL
  for (int k = 0; k < 8; k++)
    acc[k] = k < NC ? _mm256_loadu_ps(o + c + 8 * k) : _mm256_setzero_ps();
  for (int j = 0; j < n; j++) {
    const void *v = kv_at(vb, j * stride, f16);
    __m256 pj = _mm256_broadcast_ss(p + j);
    UNROLL
    for (int k = 0; k < 8; k++)
      if (k < NC)
        acc[k] = _mm256_fmadd_ps(pj, kv_load8(v, c + 8 * k, f16), acc[k]);
  }
  UNROLL
  for (int k = 0; k < 8; k++)
    if (k < NC)
      _mm256_storeu_ps(o + c + 8 * k, acc[k]);
}

/* Decode (a few queries, K/V not prepared): each query alone, reading its keys straight from the
 * cache (8 rows transposed in registers per 8 dims), with the tile path's arithmetic for one
 * query: the same FMA chain per score, the same 128-key softmax_row, the same p.v order, keys past
 * its own count zero. So a query's result does not depend on how many queries share the call: a
 * prompt prefilled in chunks of 1-3 tokens equals one prefilled whole (the engine's batch and
 * prefix-cache invariance). Scratch: the scaled query and output row [hd], partial sums [8],
 * scores [KB]. */
INLINE bool attention_stream(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread, bool f16) {
  int hd = a->head_dim;
  int kvh = h / (a->n_head / a->n_kv_head);
  const void *kb = f16 ? kv_at(a->k16, (int64_t)kvh * hd, true) : kv_at(a->k, (int64_t)kvh * hd, false);
  const void *vb = f16 ? kv_at(a->v16, (int64_t)kvh * hd, true) : kv_at(a->v, (int64_t)kvh * hd, false);
  float *qs = kn_scratch(thread, sizeof(float) * ((size_t)2 * hd + 8 + KB));
  if (!qs)
    return false;
  float *o = qs + hd, *lv = o + hd, *s = lv + 8;
  for (int64_t i = q0; i < q1; i++) {
    const float *q = a->q + i * a->q_stride + (int64_t)h * hd;
    for (int d = 0; d < hd; d++) {
      qs[d] = q[d] * a->scale;
      o[d] = 0.0f;
    }
    memset(lv, 0, sizeof(float) * 8);
    float m = -INFINITY;
    int64_t n_keys = kn_attn_keys(a, i);
    for (int64_t j0 = 0; j0 < n_keys; j0 += KB) {
      int n = (int)(n_keys - j0 < KB ? n_keys - j0 : KB), nblk = (n + 7) / 8;
      const void *kc = kv_at(kb, j0 * a->kv_stride, f16), *vc = kv_at(vb, j0 * a->kv_stride, f16);
      for (int b = 0; b < nblk; b += 4) {
        int nb = nblk - b < 4 ? nblk - b : 4;
        const void *kr[32];
        for (int jj = 0; jj < 8 * nb; jj++)
          kr[jj] = 8 * b + jj < n ? kv_at(kc, (8 * b + jj) * a->kv_stride, f16) : NULL;
        bool full = 8 * (b + nb) <= n;
        if (nb == 4)
          scores8(kr, qs, hd, 4, full, f16, s + 8 * b);
        else
          scores8(kr, qs, hd, nb, full, f16, s + 8 * b);
      }
      softmax_row(s, n, nblk, &m, lv, o, hd);
      for (int c = 0; c < hd; c += 64)
        pv_stream(o, s, vc, a->kv_stride, n, c, hd - c < 64 ? (hd - c) / 8 : 8, f16);
    }
    float l = hsum256(_mm256_loadu_ps(lv));
    __m256 il = _mm256_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
    float *out = a->out + i * a->out_stride + (int64_t)h * hd;
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), il));
  }
  return true;
}

/* Scratch: scaled queries and output rows [QT][hd], partial sums [QT][8], maxima [QT], scores
 * [QR][KB] (every part a multiple of 64 bytes), then the converted blocks when not prepared. */
INLINE size_t state_bytes(int hd) { return sizeof(float) * ((size_t)2 * QT * hd + QT * 8 + QT + QR * KB); }

static bool attention_tiles(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  int hd = a->head_dim;
  int kvh = h / (a->n_head / a->n_kv_head);
  size_t bb = blk_bytes(hd), st = state_bytes(hd);
  char *buf;
  const char *blocks;
  if (a->kv_prep) {
    if (!(buf = kn_scratch(thread, st)))
      return false;
    blocks = (const char *)a->kv_prep + (size_t)kvh * (size_t)a->kv_prep_blocks * a->kv_prep_block_bytes;
  } else {
    int64_t kmax = kn_attn_keys(a, q1 - 1) > kn_attn_keys(a, q0) ? kn_attn_keys(a, q1 - 1) : kn_attn_keys(a, q0);
    int64_t nblk = (kmax + 7) / 8;
    if (!(buf = kn_scratch(thread, st + bb * (size_t)nblk)))
      return false;
    for (int64_t b = 0; b < nblk; b++)
      t8_block(a, kvh, b * 8, kmax, (float *)(buf + st + (size_t)b * bb));
    blocks = buf + st;
  }
  float *qs = (float *)buf, *o = qs + QT * hd, *lv = o + QT * hd, *m = lv + QT * 8, *s = m + QT;
  for (int64_t t0 = q0; t0 < q1; t0 += QT) {
    int nq = (int)(q1 - t0 < QT ? q1 - t0 : QT);
    int64_t kmax = 0;
    for (int i = 0; i < nq; i++) {
      const float *q = a->q + (t0 + i) * a->q_stride + (int64_t)h * hd;
      for (int d = 0; d < hd; d++) {
        qs[i * hd + d] = q[d] * a->scale;
        o[i * hd + d] = 0.0f;
      }
      memset(lv + i * 8, 0, sizeof(float) * 8);
      m[i] = -INFINITY;
      if (kn_attn_keys(a, t0 + i) > kmax)
        kmax = kn_attn_keys(a, t0 + i);
    }
    for (int64_t j0 = 0; j0 < kmax; j0 += KB) {
      for (int i0 = 0; i0 < nq; i0 += QR) {
        int R = nq - i0 < QR ? nq - i0 : QR, n[QR], gk = 0;
        for (int r = 0; r < R; r++) {
          int64_t left = kn_attn_keys(a, t0 + i0 + r) - j0;
          n[r] = (int)(left < 0 ? 0 : left > KB ? KB : left);
          gk = n[r] > gk ? n[r] : gk;
        }
        if (gk == 0)
          continue;
        group g = {qs + i0 * hd, blocks, bb, hd, j0 / 8, (gk + 7) / 8, s, o + i0 * hd};
        g_qk[R](&g);
        for (int r = 0; r < R; r++)
          softmax_row(s + r * KB, n[r], g.nblk, m + i0 + r, lv + (i0 + r) * 8, o + (i0 + r) * hd, hd);
        g_pv[R](&g);
      }
    }
    for (int i = 0; i < nq; i++) {
      float l = hsum256(_mm256_loadu_ps(lv + i * 8));
      __m256 il = _mm256_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
      float *out = a->out + (t0 + i) * a->out_stride + (int64_t)h * hd;
      for (int d = 0; d < hd; d += 8)
        _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(o + i * hd + d), il));
    }
  }
  return true;
}

static void avx2_attention(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  /* Unprepared K/V with few queries (decode): converting every key for them costs as much as the
   * attention, so each query streams its keys (same results as the tiles). */
  if (tiled(a) && (a->kv_prep || q1 - q0 >= 4) && attention_tiles(a, h, q0, q1, thread))
    return;
  if (tiled(a) && !a->kv_prep && (a->k16 ? attention_stream(a, h, q0, q1, thread, true)
                                          : attention_stream(a, h, q0, q1, thread, false)))
    return;
  if (a->head_dim % 8 != 0)
    kn_ops_ref.attention(a, h, q0, q1, thread);
  else if (a->k16)
    attention8(a, h, q0, q1, thread, true);
  else
    attention8(a, h, q0, q1, thread, false);
}

void kn_avx2_attn_override(kn_ops *ops) {
  ops->choice[KN_OP_ATTN] = (kn_choice){"avx2 flash 6x16", "head_dim % 16 == 0: 6-query x 16-key FMA tiles over prepared 8-key blocks, 128-key softmax chunks; decode (under 4 queries) streams the keys with the same arithmetic"};
  ops->choice[KN_OP_ATTN_FAST] = (kn_choice){"avx2 flash 6x16", "no bf16 dot product: as exact"};
  ops->attention = avx2_attention;
  ops->attention_prep_bytes = avx2_attention_prep_bytes;
  ops->attention_prep = avx2_attention_prep;
}

#endif
