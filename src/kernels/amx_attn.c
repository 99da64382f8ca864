/*
 * The AMX vision attention (fast tier, head_dim 64), written once against the TL_* tile
 * operations like amx_gemm.c and compiled once per target by the build (amx_target.h: the
 * hardware's tiles, or the tile model), so the tests run this exact code without AMX.
 *
 * The kernel contract is kn_ops.attention_fast (kernels_impl.h): queries [q0, q1) of one head, or
 * of one KV group when the tier below tiles by group (attn_by_group, followed here so the exact
 * and fast entries share the dispatcher's tiling). Rows are (query, head) pairs, taken 64 per pass
 * and 16 per tile group; keys in blocks of 64, each converted once per call by the dispatcher
 * (attention_fast_prep: 16 KB of bf16 B tiles, see amx_at_kv_block) or, for small calls, per pass.
 * Per group of 16 rows and block of 64 keys:
 *   S  = Q K^T: C0..C3 (16 rows x 16 keys each) += A4, A5 (q scale in bf16, dims 0-31, 32-63)
 *        x B6, B7 (the quarter's keys, same dims): two TDPBF16PS per quarter holding keys.
 *   online softmax in fp32 per row (running max m, sum l), 16 keys per vector (l16_*): c =
 *        e^(m_old - m_new) (the group's 16 rows in one vector) rescales the row's accumulator,
 *        p = e^(s - m_new) rounded to bf16 into the A operand of
 *   PV = P V: C0..C3 (16 rows x 16 dims each) += A6 (p of 32 keys) x B7 (V of those keys as key
 *        pairs), then acc = fma(acc, c, PV) in memory (a tile cannot be rescaled in place).
 * Tiles: all eight 16 rows x 64 bytes (amx_cfg(64, 16)); configured on the pool thread at the start
 * of the call and released at its end. Rounding is the AVX-512 bf16 kernel's (q scale, k, v, p in
 * bf16; scores, softmax and sums in fp32), so the same oracle and tolerance apply. A row's result
 * depends only on its query, its visible keys and the fixed block order: thread and batch
 * invariance hold. The target defines the l16_* vector operations: x86/lanes512.h (AVX-512,
 * the `amx` and `amxsim512` builds) or lane_model.h (portable, `amxsim`), which give the same bits;
 * fmaf / l16_fmadd_ps are written out wherever a product feeds a sum, so every build does the same
 * float operations (no contraction choices left to the compiler).
 */
#include "kernels/amx_target.h"

#ifdef AMX_TARGET_BUILT

#include <math.h>
#include <string.h>

#include "kernels/x86/simd_common.h"

#define AMX_AT_HD 64   /* the head size handled (the vision tower's); others: the tier below */
#define AMX_AT_KB 64   /* keys per block: four S tiles of 16 keys */
#define AMX_AT_ROWS 64 /* (query, head) rows per pass: four groups of 16 */
/* A prepared block: K as [4 quarters][32 dim pairs][16 keys] x 2 bf16 (B tile (quarter, dims
 * 32s..32s+31) at 2048 quarter + 1024 s, 64 bytes per row), then V as [32 key pairs][4 chunks of
 * 16 dims][16] x 2 bf16 (B tile (keys 32s.., chunk c) at 4096 s + 64 c, 256 bytes per row). */
#define AMX_AT_KT 8192
#define AMX_AT_BLOCK (2 * AMX_AT_KT)

/* OP(C) for the C tiles 0..3, with C a literal (the AMX intrinsics take tile numbers as immediates). */
#define AMX_AT_EACH4(OP) \
  do {                   \
    OP(0);               \
    OP(1);               \
    OP(2);               \
    OP(3);               \
  } while (0)

typedef struct amx_at_scr {
  uint16_t qb[AMX_AT_ROWS][AMX_AT_HD]; /* q * scale in bf16; rows past the pass are zero */
  float acc[AMX_AT_ROWS][AMX_AT_HD];   /* unnormalized output */
  float mx[AMX_AT_ROWS], l[AMX_AT_ROWS];
  int64_t nk[AMX_AT_ROWS]; /* keys the row sees */
  float s[16][AMX_AT_KB];  /* one group's scores */
  uint16_t p[16][AMX_AT_KB];
  float pv[16][AMX_AT_HD];
  uint8_t kv[AMX_AT_BLOCK]; /* the block, when the call has none prepared */
} amx_at_scr;

/* Which rows a call covers: (query, head) pairs of one head, or of one KV group. */
typedef struct amx_at_map {
  int kvh, head;
  int64_t G;
  bool by_group;
} amx_at_map;
static int64_t amx_at_query(const amx_at_map *m, int64_t R) { return m->by_group ? R / m->G : R; }
static int amx_at_head(const amx_at_map *m, int64_t R) {
  return m->by_group ? m->kvh * (int)m->G + (int)(R % m->G) : m->head;
}

/* e^x in 16 lanes, about 1 ulp for x in [-87, 88] (below -87 it gives e^-87, far below any sum it
 * joins; masked lanes are replaced after): KN_EXP_CORE, then 2^n through the exponent bits. */
static inline l16 amx_exp16(l16 x) {
  x = l16_min_ps(l16_max_ps(x, l16_set1_ps(-87.0f)), l16_set1_ps(88.0f));
  KN_EXP_CORE(l16, l16, l16_round_ps, x, n, p);
  return l16_scale2n_ps(p, n);
}

/* Key j's row of KV head kvh in K or V (base). */
static const float *amx_at_kv_row(const kn_attn *a, const float *base, int kvh, int64_t j) {
  return base + j * a->kv_stride + (int64_t)kvh * AMX_AT_HD;
}

/* Keys j0 .. j0 + 63 (those that exist) of KV head kvh as the prepared block (zeros elsewhere):
 * per quarter of 16 keys, each key's 32 dim pairs as two vectors of bf16 pairs, transposed so a
 * row holds one pair for the 16 keys; V as the bf16 of two keys zipped per dim. */
static void amx_at_kv_block(const kn_attn *a, int kvh, int64_t j0, uint8_t *out) {
  int nb = (int)(a->n_kv - j0 < AMX_AT_KB ? a->n_kv - j0 : AMX_AT_KB);
  float *kt = (float *)out, *vt = kt + AMX_AT_KT / 4; /* 32-bit lanes of bf16 pairs */
  const l16 zero = l16_set1_ps(0.0f);
  for (int qt = 0; qt < 4; qt++) {
    l16 lo[16], hi[16]; /* dim pairs 0-15 and 16-31 of the quarter's keys */
    for (int jj = 0; jj < 16; jj++) {
      lo[jj] = hi[jj] = zero;
      if (16 * qt + jj < nb) {
        const float *k = amx_at_kv_row(a, a->k, kvh, j0 + 16 * qt + jj);
        lo[jj] = l16_bf16_pairs(l16_load_ps(k), l16_load_ps(k + 16));
        hi[jj] = l16_bf16_pairs(l16_load_ps(k + 32), l16_load_ps(k + 48));
      }
    }
    l16_transpose(lo);
    l16_transpose(hi);
    for (int p = 0; p < 16; p++) {
      l16_store_ps(kt + (qt * 32 + p) * 16, lo[p]);
      l16_store_ps(kt + (qt * 32 + 16 + p) * 16, hi[p]);
    }
  }
  for (int jp = 0; jp < AMX_AT_KB / 2; jp++) {
    const float *v0 = 2 * jp < nb ? amx_at_kv_row(a, a->v, kvh, j0 + 2 * jp) : NULL;
    const float *v1 = 2 * jp + 1 < nb ? amx_at_kv_row(a, a->v, kvh, j0 + 2 * jp + 1) : NULL;
    for (int c = 0; c < 4; c++)
      l16_store_ps(vt + (jp * 4 + c) * 16, l16_bf16_zip(v0 ? l16_load_ps(v0 + 16 * c) : zero,
                                                        v1 ? l16_load_ps(v1 + 16 * c) : zero));
  }
}

/* Rows r0 .. r0 + nr - 1 of the pass against the block of keys j0.. (blk). */
static void amx_at_group(amx_at_scr *w, const uint8_t *blk, int r0, int nr, int64_t j0) {
  int vis[16], seen = 0;
  for (int r = 0; r < 16; r++) {
    int64_t v = r < nr ? w->nk[r0 + r] - j0 : 0;
    vis[r] = v <= 0 ? 0 : v > AMX_AT_KB ? AMX_AT_KB : (int)v;
    seen = vis[r] > seen ? vis[r] : seen;
  }
  if (seen == 0)
    return; /* causal: no row of the group reaches this block */
  int quarters = (seen + 15) / 16, steps = (seen + 31) / 32;
  TL_LOAD(4, w->qb[r0], 2 * AMX_AT_HD);
  TL_LOAD(5, w->qb[r0] + 32, 2 * AMX_AT_HD);
#define AMX_AT_QK(C)                                 \
  if (quarters > (C)) {                              \
    TL_ZERO(C);                                      \
    TL_LOAD(6, blk + 2048 * (C), 64);                \
    TL_DPBF16(C, 4, 6);                              \
    TL_LOAD(7, blk + 2048 * (C) + 1024, 64);         \
    TL_DPBF16(C, 5, 7);                              \
    TL_STORE(C, &w->s[0][16 * (C)], 4 * AMX_AT_KB);  \
  }
  AMX_AT_EACH4(AMX_AT_QK);
#undef AMX_AT_QK
  /* Online softmax, 16 keys a vector: first each row's new running max (a masked lane is -inf),
   * then the 16 rows' rescale factors in one exp, then p = e^(s - m) (masked lanes 0) and its sum. */
  float mo[16], mn[16], resc[16];
  for (int r = 0; r < 16; r++) {
    mo[r] = mn[r] = 0.0f; /* rows without keys here: factor 1, nothing else changes */
    if (!vis[r])
      continue;
    l16 bm = l16_set1_ps(-INFINITY);
    for (int c = 0; 16 * c < vis[r]; c++)
      bm = l16_max_ps(bm, l16_first_ps(l16_load_ps(&w->s[r][16 * c]), vis[r] - 16 * c, -INFINITY));
    float b = l16_hmax(bm);
    mo[r] = w->mx[r0 + r];
    mn[r] = b > mo[r] ? b : mo[r]; /* (mo = -inf: acc and l are still zero, the factor is moot) */
  }
  l16 grow = amx_exp16(l16_sub_ps(l16_load_ps(mo), l16_load_ps(mn)));
  l16_store_ps(resc, grow);
  for (int r = 0; r < 16; r++) {
    memset(w->p[r], 0, sizeof w->p[r]);
    if (!vis[r])
      continue;
    if (!(mn[r] > mo[r]))
      resc[r] = 1.0f;
    l16 m = l16_set1_ps(mn[r]), sum = l16_set1_ps(0.0f);
    for (int c = 0; 16 * c < vis[r]; c++) {
      l16 e = amx_exp16(l16_sub_ps(l16_load_ps(&w->s[r][16 * c]), m));
      if (vis[r] - 16 * c < 16)
        e = l16_first_ps(e, vis[r] - 16 * c, 0.0f);
      sum = l16_add_ps(sum, e);
      l16_store_bf16(&w->p[r][16 * c], e);
    }
    w->mx[r0 + r] = mn[r];
    w->l[r0 + r] = fmaf(w->l[r0 + r], resc[r], l16_hsum(sum));
  }
  AMX_AT_EACH4(TL_ZERO);
  for (int st = 0; st < steps; st++) {
    TL_LOAD(6, &w->p[0][32 * st], 2 * AMX_AT_KB);
#define AMX_AT_PV(C)                                             \
  do {                                                           \
    TL_LOAD(7, blk + AMX_AT_KT + 4096 * st + 64 * (C), 256);     \
    TL_DPBF16(C, 6, 7);                                          \
  } while (0)
    AMX_AT_EACH4(AMX_AT_PV);
#undef AMX_AT_PV
  }
#define AMX_AT_STORE_PV(C) TL_STORE(C, &w->pv[0][16 * (C)], 4 * AMX_AT_HD)
  AMX_AT_EACH4(AMX_AT_STORE_PV);
#undef AMX_AT_STORE_PV
  for (int r = 0; r < nr; r++)
    if (vis[r])
      for (int d = 0; d < AMX_AT_HD; d += 16)
        l16_store_ps(&w->acc[r0 + r][d],
                     l16_fmadd_ps(l16_load_ps(&w->acc[r0 + r][d]), l16_set1_ps(resc[r]), l16_load_ps(&w->pv[r][d])));
}

/* Rows R0 .. R0 + n - 1 (n <= AMX_AT_ROWS) of the call. */
static void amx_at_pass(const kn_attn *a, const amx_at_map *mp, int64_t R0, int n, amx_at_scr *w) {
  int groups = (n + 15) / 16;
  int64_t kmax = 0;
  memset(w->qb, 0, sizeof w->qb[0] * (size_t)(16 * groups));
  for (int r = 0; r < n; r++) {
    int64_t i = amx_at_query(mp, R0 + r);
    const float *q = a->q + i * a->q_stride + (int64_t)amx_at_head(mp, R0 + r) * AMX_AT_HD;
    for (int d = 0; d < AMX_AT_HD; d += 16)
      l16_store_bf16(&w->qb[r][d], l16_mul_ps(l16_load_ps(q + d), l16_set1_ps(a->scale)));
    memset(w->acc[r], 0, sizeof w->acc[r]);
    w->nk[r] = kn_attn_keys(a, i);
    kmax = w->nk[r] > kmax ? w->nk[r] : kmax;
    w->mx[r] = -INFINITY;
    w->l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < kmax; j0 += AMX_AT_KB) {
    const uint8_t *blk = w->kv;
    if (a->kv_prep)
      blk = (const uint8_t *)a->kv_prep + (size_t)(mp->kvh * a->kv_prep_blocks + j0 / AMX_AT_KB) * a->kv_prep_block_bytes;
    else
      amx_at_kv_block(a, mp->kvh, j0, w->kv);
    for (int g = 0; g < groups; g++)
      amx_at_group(w, blk, 16 * g, n - 16 * g < 16 ? n - 16 * g : 16, j0);
  }
  for (int r = 0; r < n; r++) {
    float il = w->l[r] > 0.0f ? 1.0f / w->l[r] : 0.0f;
    float *o = a->out + amx_at_query(mp, R0 + r) * a->out_stride + (int64_t)amx_at_head(mp, R0 + r) * AMX_AT_HD;
    for (int d = 0; d < AMX_AT_HD; d += 16)
      l16_store_ps(o + d, l16_mul_ps(l16_load_ps(&w->acc[r][d]), l16_set1_ps(il)));
  }
}

/* The tier below's fast entry (or its exact one), for the head sizes not handled here. */
static void (*amx_at_prev)(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread);
static bool amx_at_by_group;

static void amx_attention_fast(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  amx_at_scr *w = a->head_dim == AMX_AT_HD && !a->k16 ? kn_scratch(thread, sizeof(amx_at_scr)) : NULL;
  if (!w) {
    amx_at_prev(a, h, q0, q1, thread);
    return;
  }
  int64_t G = a->n_head / a->n_kv_head;
  amx_at_map mp = {amx_at_by_group ? h : h / (int)G, h, G, amx_at_by_group};
  int64_t R0 = amx_at_by_group ? q0 * G : q0, R1 = amx_at_by_group ? q1 * G : q1;
  kn_tilecfg cfg;
  amx_cfg(&cfg, 64, 16);
  TL_CONFIG(&cfg);
  for (int64_t r = R0; r < R1; r += AMX_AT_ROWS)
    amx_at_pass(a, &mp, r, (int)(R1 - r < AMX_AT_ROWS ? R1 - r : AMX_AT_ROWS), w);
  TL_RELEASE();
}

/* The dispatcher's one conversion of K/V per call (kn_ops.attention_fast_prep). */
static size_t amx_at_prep_bytes(const kn_attn *a, int64_t *keys_per_block) {
  if (a->head_dim != AMX_AT_HD)
    return 0;
  *keys_per_block = AMX_AT_KB;
  return AMX_AT_BLOCK;
}
static void amx_at_prep(const kn_attn *a, int kvh, int64_t b, void *out) {
  amx_at_kv_block(a, kvh, b * AMX_AT_KB, out);
}

void AMX_SYM(kn_amx_attn_install)(kn_ops *ops, const char *name) {
  amx_at_prev = ops->attention_fast ? ops->attention_fast : ops->attention;
  amx_at_by_group = ops->attn_by_group;
  ops->attention_fast = amx_attention_fast;
  ops->attention_fast_prep_bytes = amx_at_prep_bytes;
  ops->attention_fast_prep = amx_at_prep;
  ops->choice[KN_OP_ATTN_FAST] =
      (kn_choice){name, "head_dim 64: TDPBF16PS tiles for QK^T and PV (16 rows x 64 keys), online softmax in "
                        "fp32; other sizes: the tier below"};
}

#endif
