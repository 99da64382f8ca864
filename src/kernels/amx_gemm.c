/*
 * The AMX matmul kernels, written once against the TL_* tile operations and compiled once per
 * target by the build (amx_target.h: the hardware's tiles for the `amx` tier, the portable tile
 * model for `amxsim`, the tile model with the AVX-512 lanes for `amxsim512`). Plain C apart from
 * TL_* and the l16 lanes, so the model runs exactly this code: packing (pack.c), blocking, padding
 * and accumulation.
 *
 * One block loop (amx_run) for every kernel: tiles configured at the start of a tile call on the
 * calling pool thread and released at its end; blocks of 32 tokens (A rows of two halves of 16)
 * x 32 output rows (two 16-row panels), C tile 2h + q = token half h x panel q (fp32 or int32,
 * 16 x 16); tiles 4, 5 hold A operands, 6, 7 B operands. Per block the kernel's function leaves
 * the four 16 x 16 fp32 results in memory and amx_run writes the rows that exist.
 *   fast  (F16/BF16, KN_LAYOUT_AMX_BF16): activations rounded to bf16 once per call; one
 *         TDPBF16PS chain per output over the steps of 32 inputs in order.
 *   exact (F16/BF16, KN_LAYOUT_AMX_BF16X3): x = xh + xl and w = wh + wl in bf16 (w exactly),
 *         three products per step in a fixed order: xh wh, xh wl, xl wh (the dropped xl wl and the
 *         residual of x are below 2^-16 |x w|; docs/KERNELS.md has the measured error).
 *   Q8_0  (KN_LAYOUT_X16_Q8_0, both tiers) and Q4_0 (KN_LAYOUT_X16_Q4_0): the tier below's
 *         packing, so the VNNI kernel runs the same bytes for few tokens (a tile block of one
 *         token is 15/16 padding: decode never runs on tiles) and the tuning (kernels.c, "Tuning")
 *         picks either one for the other token counts by measurement. act32 activations (int8
 *         per 32, float scale); per block one product per C tile (K = 32): TDPBSUD for Q8_0 (its
 *         quants are stored + 128 for vpdpbusd, so 128 x the block's activation sum is taken off
 *         the int32 result) and TDPBSSD for Q4_0, whose nibbles (the int8 B tile two rows per
 *         byte: low nibbles rows 0-3, high nibbles rows 4-7) are widened to q - 8 into a 512-byte
 *         tile buffer as they are used. Then acc = fma((float)isum, d_w d_x, acc), the float step
 *         of the AVX-512 VNNI kernel on the same exact integer, so the results equal it bit for bit.
 * A token's output depends only on its own activation row and the weights, in a fixed order:
 * batch and thread invariance hold. Partial blocks of tokens read a zero-padded copy of their
 * rows (per-thread scratch), never past the activation buffer.
 */
#include "kernels/amx_target.h"

#ifdef AMX_TARGET_BUILT

#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "tensor/dtype.h"

#define AMX_OUT 4096  /* the block's four fp32 C results */
#define AMX_WORK 5120 /* a kernel's own: four int32 C tiles + two widened Q4_0 B tiles */
/* Without a tuned choice, fewer tokens than this (decode, short prompts) run the tier below's
 * Q8_0/Q4_0 kernel: a tile block would be mostly padding, and the VNNI kernel gives the same bits
 * (tested). Below AMX_INT8_TILE_MIN tokens the tiles are never a candidate. */
#define AMX_INT8_MIN_TOKENS 16
#define AMX_INT8_TILE_MIN 4

/* One block as its kernel sees it: token half h (0, and 1 if two_t) x panel q (0, and 1 if
 * two_p). */
typedef struct amx_blk {
  const kn_mm *m;
  const uint8_t *a[2]; /* activation rows of the token halves (xq_stride apart) */
  const uint8_t *b[2]; /* packed weights of the panels */
  bool two_t, two_p;
  float *c;      /* out: [2h + q][16 tokens][16 rows] */
  uint8_t *work; /* AMX_WORK bytes of per-thread scratch */
} amx_blk;

/* OP(C, A, B, h, q) for each C tile of the block that exists: C = 2h + q holds token half h x
 * panel q from A = 4 + h and B = 6 + q. Tile numbers are written out as literals because the AMX
 * intrinsics take them as immediates. */
#define AMX_EACH_C(k, OP)  \
  do {                     \
    OP(0, 4, 6, 0, 0);     \
    if ((k)->two_p)        \
      OP(1, 4, 7, 0, 1);   \
    if ((k)->two_t) {      \
      OP(2, 5, 6, 1, 0);   \
      if ((k)->two_p)      \
        OP(3, 5, 7, 1, 1); \
    }                      \
  } while (0)

/* Activation rows of tokens [t, t + 16): the rows themselves when all 16 exist, else a copy of
 * the ones that do, zero-padded to 16 rows, in pad (16 x xq_stride bytes). */
static const uint8_t *amx_rows(const kn_mm *m, int64_t t, int64_t t1, uint8_t *pad) {
  if (t1 - t >= 16)
    return (const uint8_t *)m->xq + (size_t)t * m->xq_stride;
  int64_t n = t1 - t > 0 ? t1 - t : 0;
  if (n > 0) /* (no pointer past the rows when none is left) */
    memcpy(pad, (const uint8_t *)m->xq + (size_t)t * m->xq_stride, (size_t)n * m->xq_stride);
  memset(pad + (size_t)n * m->xq_stride, 0, (size_t)(16 - n) * m->xq_stride);
  return pad;
}

static size_t amx_scratch(int64_t n_in, size_t xq_stride) {
  (void)n_in;
  return AMX_OUT + AMX_WORK + 2 * 16 * xq_stride;
}

/* y for C result c (token rows t.., panel p): fp32 values in c[16][16]. */
static void amx_put(const kn_mm *m, const float *c, int64_t t, int64_t t1, int64_t p) {
  int64_t n_out = m->w->n_out, r0 = p * PR;
  int rows = kn_panel_rows(n_out, p);
  for (int i = 0; i < 16 && t + i < t1; i++) {
    float *y = m->y + (t + i) * n_out + r0;
    for (int j = 0; j < rows; j++)
      y[j] = m->bias ? c[i * 16 + j] + m->bias[r0 + j] : c[i * 16 + j];
  }
}

/* The block loop of every AMX matmul: panel bytes per 16 rows, the tile shape of the A and B
 * operands, and the kernel that fills the block's C results. */
static void amx_run(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread, size_t panel,
                    int a_colsb, int b_rows, void (*block)(const amx_blk *k)) {
  int64_t p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  size_t sa = m->xq_stride;
  uint8_t *scr = kn_scratch(thread, amx_scratch(m->w->n_in, sa));
  uint8_t *pad = scr + AMX_OUT + AMX_WORK;
  amx_blk k = {.m = m, .c = (float *)scr, .work = scr + AMX_OUT};
  kn_tilecfg cfg;
  amx_cfg(&cfg, a_colsb, b_rows);
  TL_CONFIG(&cfg);
  for (int64_t t = t0; t < t1; t += 32) {
    k.a[0] = amx_rows(m, t, t1, pad);
    k.a[1] = amx_rows(m, t + 16, t1, pad + 16 * sa);
    k.two_t = t1 - t > 16;
    for (int64_t p = p0; p < p1; p += 2) {
      k.b[0] = (const uint8_t *)m->w->packed + (size_t)p * panel;
      k.b[1] = k.b[0] + panel;
      k.two_p = p + 1 < p1;
      block(&k);
#define AMX_PUT(C, A, B, H, Q) amx_put(m, k.c + 256 * (C), t + 16 * (H), t1, p + (Q))
      AMX_EACH_C(&k, AMX_PUT);
#undef AMX_PUT
    }
  }
  TL_RELEASE();
}

static void amx_store_c(const amx_blk *k) {
#define AMX_STORE(C, A, B, H, Q) TL_STORE(C, k->c + 256 * (C), 64)
  AMX_EACH_C(k, AMX_STORE);
#undef AMX_STORE
}

/* ---- bf16 activations ---- */
static size_t amx_bf16_row_bytes(int64_t n_in) { return (size_t)KN_AMX_STEPS(n_in) * 64; }
static size_t amx_bf16x3_row_bytes(int64_t n_in) { return 2 * (size_t)KN_AMX_STEPS(n_in) * 64; }

/* x[i .. i + 15], zeros past n_in. */
static l16 amx_x16(const float *x, int64_t i, int64_t n_in) {
  if (i + 16 <= n_in)
    return l16_load_ps(x + i);
  float t[16] = {0};
  if (i < n_in)
    memcpy(t, x + i, sizeof(float) * (size_t)(n_in - i));
  return l16_load_ps(t);
}

/* The activation row in bf16 (vcvtneps2bf16's rounding: denormals read as zero, as TDPBF16PS reads
 * its inputs anyway), zero-padded to whole steps; 16 lanes, since on AMX a scalar conversion per
 * value would cost more than the tile products of the row. */
static void amx_bf16_quantize(const float *x, void *xq, int64_t n_in) {
  uint16_t *o = xq;
  for (int64_t i = 0, n = KN_AMX_STEPS(n_in) * 32; i < n; i += 16)
    l16_store_bf16(o + i, amx_x16(x, i, n_in));
}

/* hi = bf16(x) and lo = bf16(x - hi), the two halves of the exact tier's split. */
static void amx_bf16x3_quantize(const float *x, void *xq, int64_t n_in) {
  uint16_t *hi = xq;
  int64_t n = KN_AMX_STEPS(n_in) * 32;
  uint16_t *lo = hi + n;
  for (int64_t i = 0; i < n; i += 16) {
    l16 f = amx_x16(x, i, n_in);
    l16_store_bf16(hi + i, f);
    l16_store_bf16(lo + i, l16_sub_ps(f, l16_round_bf16_ps(f)));
  }
}

/* Fast: per step A4, A5 = the token halves, B6, B7 = the panels' step, one product per C. */
static void amx_block_bf16(const amx_blk *k) {
  int64_t ks = KN_AMX_STEPS(k->m->w->n_in);
  size_t sa = k->m->xq_stride;
  TL_ZERO(0);
  TL_ZERO(1);
  TL_ZERO(2);
  TL_ZERO(3);
  for (int64_t s = 0; s < ks; s++) {
    TL_LOAD(4, k->a[0] + s * 64, sa);
    if (k->two_t)
      TL_LOAD(5, k->a[1] + s * 64, sa);
    TL_LOAD(6, k->b[0] + s * 1024, 64);
    if (k->two_p)
      TL_LOAD(7, k->b[1] + s * 1024, 64);
#define AMX_DP(C, A, B, H, Q) TL_DPBF16(C, A, B)
    AMX_EACH_C(k, AMX_DP);
#undef AMX_DP
  }
  amx_store_c(k);
}

/* Exact: per step and C tile, A4, A5 = xh, xl of its token half (loaded with the half's first
 * panel) and B6, B7 = wh, wl of its panel; C += xh wh, xh wl, xl wh in that order. */
static void amx_block_bf16x3(const amx_blk *k) {
  int64_t ks = KN_AMX_STEPS(k->m->w->n_in);
  size_t sa = k->m->xq_stride, lo = (size_t)ks * 64;
  TL_ZERO(0);
  TL_ZERO(1);
  TL_ZERO(2);
  TL_ZERO(3);
  for (int64_t s = 0; s < ks; s++) {
#define AMX_X3(C, A, B, H, Q)                      \
  do {                                             \
    if ((Q) == 0) {                                \
      TL_LOAD(4, k->a[H] + s * 64, sa);            \
      TL_LOAD(5, k->a[H] + lo + s * 64, sa);       \
    }                                              \
    TL_LOAD(6, k->b[Q] + s * 2048, 64);            \
    TL_LOAD(7, k->b[Q] + s * 2048 + 1024, 64);     \
    TL_DPBF16(C, 4, 6);                            \
    TL_DPBF16(C, 4, 7);                            \
    TL_DPBF16(C, 5, 6);                            \
  } while (0)
    AMX_EACH_C(k, AMX_X3);
#undef AMX_X3
  }
  amx_store_c(k);
}

/* ---- int8 tiles: Q8_0, Q4_0 ---- */
/* acc[16 tokens][16 rows] += isum * (d_w d_x), per block, isum = c - off x (the token's activation
 * sum of the block): off = 128 takes the Q8_0 quants' storage offset back out. */
static void amx_q8_epilogue(float *acc, const int32_t *c, const uint8_t *blk, const uint8_t *a, size_t sa,
                            int64_t n_in, int64_t b, int32_t off) {
  /* 16 lanes (a row of 16 outputs) per token: at the tile rate a scalar step per value, or a call
   * per scale conversion, costs more than the block's TDPBSUD itself */
  l16 dw = l16_load_f16_ps(blk);
  for (int i = 0; i < 16; i++) {
    float dx;
    int32_t xs;
    const uint8_t *row = a + (size_t)i * sa + (size_t)n_in; /* act32: the scales, then the sums */
    memcpy(&dx, row + 4 * (size_t)b, 4);
    memcpy(&xs, row + 4 * (size_t)(n_in / 32) + 4 * (size_t)b, 4);
    l16 isum = l16_cvt_sub_epi32(c + 16 * i, off * xs);
    l16_store_ps(acc + 16 * i, l16_fmadd_ps(isum, l16_mul_ps(dw, l16_set1_ps(dx)), l16_load_ps(acc + 16 * i)));
  }
}

/* The int8 B tile (8 rows x 64 bytes) of a X16_Q4_0 block's nibbles, widened to q - 8. */
static const uint8_t *amx_q4_tile(const uint8_t *restrict nib, int8_t *restrict out) {
  for (int i = 0; i < 256; i++) {
    out[i] = (int8_t)((nib[i] & 15) - 8);
    out[256 + i] = (int8_t)((nib[i] >> 4) - 8);
  }
  return (const uint8_t *)out;
}

/* Per block of 32 inputs: B6, B7 = the panels' int8 tiles, A4, A5 = the token halves' quants,
 * one TDPBSSD per C tile, stored and folded into the fp32 results. */
static inline void amx_block_int8(const amx_blk *k, bool q4) {
  int64_t n_in = k->m->w->n_in, nb = n_in / 32;
  size_t sa = k->m->xq_stride, blk_bytes = q4 ? X16_Q4_0_BLK : X16_Q8_0_BLK;
  int32_t *cst = (int32_t *)k->work;
  int8_t *wide = (int8_t *)(k->work + 4096);
  memset(k->c, 0, AMX_OUT);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk[2] = {k->b[0] + (size_t)b * blk_bytes, k->b[1] + (size_t)b * blk_bytes};
    TL_LOAD(6, q4 ? amx_q4_tile(blk[0] + 32, wide) : blk[0] + 32, 64);
    if (k->two_p)
      TL_LOAD(7, q4 ? amx_q4_tile(blk[1] + 32, wide + 512) : blk[1] + 32, 64);
    TL_LOAD(4, k->a[0] + b * 32, sa);
    if (k->two_t)
      TL_LOAD(5, k->a[1] + b * 32, sa);
#define AMX_I8(C, A, B, H, Q)                                                                  \
  do {                                                                                         \
    TL_ZERO(C);                                                                                \
    if (q4)                                                                                    \
      TL_DPBSSD(C, A, B);                                                                      \
    else                                                                                       \
      TL_DPBSUD(C, A, B);                                                                      \
    TL_STORE(C, cst + 256 * (C), 64);                                                          \
    amx_q8_epilogue(k->c + 256 * (C), cst + 256 * (C), blk[Q], k->a[H], sa, n_in, b, q4 ? 0 : 128); \
  } while (0)
    AMX_EACH_C(k, AMX_I8);
#undef AMX_I8
  }
}
static void amx_block_q8_0(const amx_blk *k) { amx_block_int8(k, false); }
static void amx_block_q4_0(const amx_blk *k) { amx_block_int8(k, true); }

/* ---- tile functions ---- */
static void amx_tile_bf16(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  amx_run(m, r0, r1, t0, t1, thread, (size_t)KN_AMX_STEPS(m->w->n_in) * 1024, 64, 16, amx_block_bf16);
}
static void amx_tile_bf16x3(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  amx_run(m, r0, r1, t0, t1, thread, (size_t)KN_AMX_STEPS(m->w->n_in) * 2048, 64, 16, amx_block_bf16x3);
}
static void amx_tile_q8_0(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  amx_run(m, r0, r1, t0, t1, thread, (size_t)(m->w->n_in / 32) * X16_Q8_0_BLK, 32, 8, amx_block_q8_0);
}
static void amx_tile_q4_0(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  amx_run(m, r0, r1, t0, t1, thread, (size_t)(m->w->n_in / 32) * X16_Q4_0_BLK, 32, 8, amx_block_q4_0);
}

static const kn_mm_kernel amx_mm_bf16 = {amx_bf16_row_bytes, amx_bf16_quantize, amx_tile_bf16, PR, amx_scratch};
static const kn_mm_kernel amx_mm_bf16x3 = {amx_bf16x3_row_bytes, amx_bf16x3_quantize, amx_tile_bf16x3, PR, amx_scratch};
/* AMX_ACT32_QUANTIZE (the including file's): the act32 quantizer in 16 lanes (amx, amxsim512) or
 * in C (amxsim); the two give the same bits for finite values (test_amx_int8_matches_vnni). */
static const kn_mm_kernel amx_mm_q8_0 = {kn_act32_bytes, AMX_ACT32_QUANTIZE, amx_tile_q8_0, PR, amx_scratch};
static const kn_mm_kernel amx_mm_q4_0 = {kn_act32_bytes, AMX_ACT32_QUANTIZE, amx_tile_q4_0, PR, amx_scratch};

/* The entries of the tier below, which the AMX entries fall back to for everything else. */
static double (*amx_prev_peak)(kn_peak_kind kind, int64_t iters);
static const char *amx_name;
static qvl_status (*amx_prev_pack)(kn_weight *w);
static qvl_status (*amx_prev_pack_fast)(kn_weight *w);
static const kn_mm_kernel *(*amx_prev_select)(const kn_weight *w, int64_t n_tokens);

/* Q8_0 and Q4_0 keep the tier below's X16 panels, which are the tiles' B operands. */
static qvl_status amx_pack(kn_weight *w) {
  if (w->type == QVL_DTYPE_F16 || w->type == QVL_DTYPE_BF16)
    return kn_pack_amx_bf16(w, true);
  if (w->type == QVL_DTYPE_Q8_0) /* (also when the tier below is the reference, which packs nothing) */
    return kn_pack_x16(w);
  return amx_prev_pack(w);
}
static qvl_status amx_pack_fast(kn_weight *w) {
  if (w->type == QVL_DTYPE_F16 || w->type == QVL_DTYPE_BF16)
    return kn_pack_amx_bf16(w, false);
  if (w->type == QVL_DTYPE_Q8_0)
    return kn_pack_x16(w);
  return amx_prev_pack_fast ? amx_prev_pack_fast(w) : amx_prev_pack(w);
}
/* The int8 tile kernel for this weight, or NULL. */
static const kn_mm_kernel *amx_int8(const kn_weight *w) {
  if (!w->packed)
    return NULL;
  return w->layout == KN_LAYOUT_X16_Q8_0 ? &amx_mm_q8_0 : w->layout == KN_LAYOUT_X16_Q4_0 ? &amx_mm_q4_0 : NULL;
}
/* The tile peak (as ../shared/perf/amxpeak.c): per iteration four independent products, C0..C3
 * from A4, A5 x B6, B7 (full 16 x 64-byte tiles of zeros), so the loop is bound by the tile unit's
 * throughput, not a chain's latency. 16 x 16 outputs x 32 bf16 (64 int8) MACs x 2 per product. */
static double amx_peak_loop(kn_peak_kind kind, int64_t iters) {
  if (kind != KN_PEAK_AMX_BF16 && kind != KN_PEAK_AMX_INT8)
    return amx_prev_peak ? amx_prev_peak(kind, iters) : 0;
  static const uint8_t zeros[1024] __attribute__((aligned(64)));
  static float sink[256] __attribute__((aligned(64)));
  kn_tilecfg cfg;
  amx_cfg(&cfg, 64, 16);
  TL_CONFIG(&cfg);
  TL_ZERO(0);
  TL_ZERO(1);
  TL_ZERO(2);
  TL_ZERO(3);
  TL_LOAD(4, zeros, 64);
  TL_LOAD(5, zeros, 64);
  TL_LOAD(6, zeros, 64);
  TL_LOAD(7, zeros, 64);
  for (int64_t i = 0; i < iters; i++) {
    if (kind == KN_PEAK_AMX_BF16) {
      TL_DPBF16(0, 4, 6);
      TL_DPBF16(1, 4, 7);
      TL_DPBF16(2, 5, 6);
      TL_DPBF16(3, 5, 7);
    } else {
      TL_DPBSSD(0, 4, 6);
      TL_DPBSSD(1, 4, 7);
      TL_DPBSSD(2, 5, 6);
      TL_DPBSSD(3, 5, 7);
    }
  }
  TL_STORE(0, sink, 64); /* the results are used */
  TL_RELEASE();
  return (double)iters * 4 * 16 * 16 * (kind == KN_PEAK_AMX_BF16 ? 32 : 64) * 2;
}

/* Untuned (a forced tier): tiles for F16/BF16, and for Q8_0/Q4_0 from AMX_INT8_MIN_TOKENS tokens. */
static const kn_mm_kernel *amx_select(const kn_weight *w, int64_t n_tokens) {
  if (w->packed) {
    if (w->layout == KN_LAYOUT_AMX_BF16)
      return &amx_mm_bf16;
    if (w->layout == KN_LAYOUT_AMX_BF16X3)
      return &amx_mm_bf16x3;
    if (amx_int8(w) && n_tokens >= AMX_INT8_MIN_TOKENS)
      return amx_int8(w);
  }
  return amx_prev_select(w, n_tokens);
}
/* Q8_0/Q4_0 from AMX_INT8_TILE_MIN tokens: the tier below's VNNI kernel or the tiles, on the same
 * bytes with the same bits; which is faster depends on the core and the shape (on the first AMX
 * CPU measured, the VNNI kernel won at 512 tokens: 792 against 502 GOP/s). */
static int amx_candidates(const kn_weight *w, int64_t n_tokens, const kn_mm_kernel **k, const char **name, int max) {
  const kn_mm_kernel *tiles = amx_int8(w);
  if (!tiles || n_tokens < AMX_INT8_TILE_MIN || max < 1)
    return 0;
  k[0] = tiles;
  name[0] = amx_name;
  return 1;
}

void AMX_SYM(kn_amx_gemm_install)(kn_ops *ops, const char *name) {
  amx_prev_pack = ops->weight_pack;
  amx_prev_pack_fast = ops->weight_pack_fast;
  amx_prev_select = ops->mm_select;
  amx_prev_peak = ops->peak_loop;
  ops->peak_loop = amx_peak_loop;
  amx_name = name;
  ops->mm_candidates = amx_candidates;
  ops->weight_pack = amx_pack;
  ops->weight_pack_fast = amx_pack_fast;
  ops->fast_int8 = false; /* F16/BF16 fast = bf16 tiles */
  ops->mm_select = amx_select;
  ops->choice[KN_OP_MM_FLOAT] =
      (kn_choice){name, "F16/BF16: split bf16 (hi+lo, three TDPBF16PS products); F32: the tier below"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){name, "F16/BF16: TDPBF16PS tiles, 32 tokens x 32 rows"};
  ops->choice[KN_OP_MM_Q8_0] =
      (kn_choice){name, "1-3 tokens: the tier below; more: tiles (TDPBSUD per block, VNNI-identical float step) or "
                        "the tier below, whichever the tuning measured faster (forced tier: tiles from 16 tokens)"};
  if (amx_prev_pack != kn_ops_ref.weight_pack) /* the tier below packs Q4_0 into X16 panels */
    ops->choice[KN_OP_MM_Q4_0] = (kn_choice){
        name, "as Q8_0, the tiles on nibbles widened per block (TDPBSSD)"};
}

#endif
