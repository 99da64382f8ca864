/*
 * The AMX matmul kernels, written once against the TL_* tile operations and included twice:
 * x86/amx.c maps TL_* to the AMX intrinsics (the `amx` tier), amx_sim.c maps them to the portable
 * tile model (tile_model.h; the `amxsim` test tier on any CPU). Plain C apart from TL_*, so the
 * model runs exactly this code: packing (pack.c), blocking, padding and accumulation.
 *
 * Tiles (palette 1, configured at the start of every tile call on the calling pool thread and
 * released at its end): C = 16 tokens x 16 output rows (fp32 or int32), A = 16 tokens x 64 bytes
 * of activations, B = one step of a weight panel (KN_LAYOUT_AMX_*).
 *   fast  (F16/BF16, KN_LAYOUT_AMX_BF16): activations rounded to bf16 once per call; 32 tokens x
 *         32 rows per block = C0..C3 from A4,A5 x B6,B7, one TDPBF16PS chain per output over the
 *         steps in order.
 *   exact (F16/BF16, KN_LAYOUT_AMX_BF16X3): x = xh + xl and w = wh + wl in bf16 (w exactly),
 *         three products per step in a fixed order: xh wh, xh wl, xl wh (the dropped xl wl and the
 *         residual of x are below 2^-16 |x w|; docs/KERNELS.md has the measured error).
 *   Q8_0  (KN_LAYOUT_AMX_Q8_0, both tiers): act32 activations (int8 per 32, float scale); per
 *         block one TDPBSSD per C tile (K = 32), then acc = fma((float)isum, d_w d_x, acc), the
 *         float step of the AVX-512 VNNI kernel, so the results equal it bit for bit.
 * A token's output depends only on its own activation row and the weights, in a fixed order:
 * batch and thread invariance hold. Partial blocks of tokens read a zero-padded copy of their
 * rows (per-thread scratch), never past the activation buffer.
 */
#ifndef QVL_KERNELS_AMX_GEMM_H
#define QVL_KERNELS_AMX_GEMM_H

#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/tile_model.h"
#include "tensor/dtype.h"

#define AMX_CST 4096 /* staging for four C tiles */

static void amx_cfg(kn_tilecfg *c, int a_colsb, int b_rows) {
  memset(c, 0, sizeof *c);
  c->palette = 1;
  for (int t = 0; t < 4; t++) {
    c->rows[t] = 16;
    c->colsb[t] = 64;
  }
  for (int t = 4; t < 6; t++) {
    c->rows[t] = 16;
    c->colsb[t] = (uint16_t)a_colsb;
  }
  for (int t = 6; t < 8; t++) {
    c->rows[t] = (uint8_t)b_rows;
    c->colsb[t] = 64;
  }
}

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
  return AMX_CST + 4096 + 2 * 16 * xq_stride;
}

/* y for C tile (half h, panel n) of the block at (token t, panel p): fp32 values in c[16][16]. */
static void amx_put(const kn_mm *m, const float *c, int64_t t, int64_t t1, int64_t p) {
  int64_t n_out = m->w->n_out, r0 = p * PR;
  int rows = (int)(n_out - r0 < PR ? n_out - r0 : PR);
  for (int i = 0; i < 16 && t + i < t1; i++) {
    float *y = m->y + (t + i) * n_out + r0;
    for (int j = 0; j < rows; j++)
      y[j] = m->bias ? c[i * 16 + j] + m->bias[r0 + j] : c[i * 16 + j];
  }
}

/* ---- bf16 activations ---- */
static size_t amx_bf16_row_bytes(int64_t n_in) { return (size_t)KN_AMX_STEPS(n_in) * 64; }
static size_t amx_bf16x3_row_bytes(int64_t n_in) { return 2 * (size_t)KN_AMX_STEPS(n_in) * 64; }

static void amx_bf16_quantize(const float *x, void *xq, int64_t n_in) {
  uint16_t *o = xq;
  int64_t n = KN_AMX_STEPS(n_in) * 32;
  for (int64_t i = 0; i < n; i++)
    o[i] = i < n_in ? f32_to_bf16(x[i]) : 0;
}

static void amx_bf16x3_quantize(const float *x, void *xq, int64_t n_in) {
  uint16_t *hi = xq;
  int64_t n = KN_AMX_STEPS(n_in) * 32;
  uint16_t *lo = hi + n;
  for (int64_t i = 0; i < n; i++) {
    float f = i < n_in ? x[i] : 0.0f;
    hi[i] = f32_to_bf16(f);
    lo[i] = f32_to_bf16(f - bf16_to_f32(hi[i]));
  }
}

static void amx_tile_bf16(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  int64_t ks = KN_AMX_STEPS(m->w->n_in), p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  size_t panel = (size_t)ks * 1024, sa = m->xq_stride;
  uint8_t *scr = kn_scratch(thread, amx_scratch(m->w->n_in, sa));
  float *cst = (float *)scr;
  uint8_t *pad = scr + AMX_CST + 4096;
  kn_tilecfg cfg;
  amx_cfg(&cfg, 64, 16);
  TL_CONFIG(&cfg);
  for (int64_t t = t0; t < t1; t += 32) {
    const uint8_t *A0 = amx_rows(m, t, t1, pad), *A1 = amx_rows(m, t + 16, t1, pad + 16 * sa);
    bool two = t1 - t > 16;
    for (int64_t p = p0; p < p1; p += 2) {
      bool twop = p + 1 < p1;
      const uint8_t *B0 = (const uint8_t *)m->w->packed + (size_t)p * panel, *B1 = B0 + panel;
      TL_ZERO(0);
      TL_ZERO(1);
      TL_ZERO(2);
      TL_ZERO(3);
      for (int64_t s = 0; s < ks; s++) {
        TL_LOAD(4, A0 + s * 64, sa);
        TL_LOAD(6, B0 + s * 1024, 64);
        TL_DPBF16(0, 4, 6);
        if (twop) {
          TL_LOAD(7, B1 + s * 1024, 64);
          TL_DPBF16(1, 4, 7);
        }
        if (two) {
          TL_LOAD(5, A1 + s * 64, sa);
          TL_DPBF16(2, 5, 6);
          if (twop)
            TL_DPBF16(3, 5, 7);
        }
      }
      TL_STORE(0, cst, 64);
      amx_put(m, cst, t, t1, p);
      if (twop) {
        TL_STORE(1, cst + 256, 64);
        amx_put(m, cst + 256, t, t1, p + 1);
      }
      if (two) {
        TL_STORE(2, cst + 512, 64);
        amx_put(m, cst + 512, t + 16, t1, p);
        if (twop) {
          TL_STORE(3, cst + 768, 64);
          amx_put(m, cst + 768, t + 16, t1, p + 1);
        }
      }
    }
  }
  TL_RELEASE();
}

/* Exact tier: C0 / C1 = tokens t .. t+15 / t+16 .. t+31 of one panel; A2, A3 = hi, lo of the first
 * half, A4, A5 of the second; B6, B7 = hi, lo of the step. */
static void amx_tile_bf16x3(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  int64_t ks = KN_AMX_STEPS(m->w->n_in), p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  size_t panel = (size_t)ks * 2048, sa = m->xq_stride, lo = (size_t)ks * 64;
  uint8_t *scr = kn_scratch(thread, amx_scratch(m->w->n_in, sa));
  float *cst = (float *)scr;
  uint8_t *pad = scr + AMX_CST + 4096;
  kn_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  TL_CONFIG(&cfg);
  for (int64_t t = t0; t < t1; t += 32) {
    const uint8_t *A0 = amx_rows(m, t, t1, pad), *A1 = amx_rows(m, t + 16, t1, pad + 16 * sa);
    bool two = t1 - t > 16;
    for (int64_t p = p0; p < p1; p++) {
      const uint8_t *B = (const uint8_t *)m->w->packed + (size_t)p * panel;
      TL_ZERO(0);
      TL_ZERO(1);
      for (int64_t s = 0; s < ks; s++) {
        TL_LOAD(6, B + s * 2048, 64);
        TL_LOAD(7, B + s * 2048 + 1024, 64);
        TL_LOAD(2, A0 + s * 64, sa);
        TL_LOAD(3, A0 + lo + s * 64, sa);
        TL_DPBF16(0, 2, 6);
        TL_DPBF16(0, 2, 7);
        TL_DPBF16(0, 3, 6);
        if (two) {
          TL_LOAD(4, A1 + s * 64, sa);
          TL_LOAD(5, A1 + lo + s * 64, sa);
          TL_DPBF16(1, 4, 6);
          TL_DPBF16(1, 4, 7);
          TL_DPBF16(1, 5, 6);
        }
      }
      TL_STORE(0, cst, 64);
      amx_put(m, cst, t, t1, p);
      if (two) {
        TL_STORE(1, cst + 256, 64);
        amx_put(m, cst + 256, t + 16, t1, p);
      }
    }
  }
  TL_RELEASE();
}

/* ---- Q8_0: int8 tiles ---- */
/* acc[16 tokens][16 rows] += isum * (d_w d_x), per block. */
static void amx_q8_epilogue(float *acc, const int32_t *c, const uint8_t *blk, const uint8_t *a, size_t sa,
                            int64_t n_in, int64_t b) {
  float dw[16];
  for (int j = 0; j < 16; j++) {
    uint16_t h;
    memcpy(&h, blk + 2 * j, 2);
    dw[j] = fp16_to_f32(h);
  }
  for (int i = 0; i < 16; i++) {
    float dx;
    memcpy(&dx, a + (size_t)i * sa + (size_t)n_in + 4 * (size_t)b, 4);
    for (int j = 0; j < 16; j++)
      acc[i * 16 + j] = fmaf((float)c[i * 16 + j], dw[j] * dx, acc[i * 16 + j]);
  }
}

static void amx_tile_q8_0(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1, int thread) {
  int64_t nb = m->w->n_in / 32, n_in = m->w->n_in, p0 = r0 / PR, p1 = (r1 + PR - 1) / PR;
  size_t panel = (size_t)nb * X16_Q8_0_BLK, sa = m->xq_stride;
  uint8_t *scr = kn_scratch(thread, amx_scratch(n_in, sa));
  int32_t *cst = (int32_t *)scr;
  float *acc = (float *)(scr + AMX_CST);
  uint8_t *pad = scr + AMX_CST + 4096;
  kn_tilecfg cfg;
  amx_cfg(&cfg, 32, 8);
  TL_CONFIG(&cfg);
  for (int64_t t = t0; t < t1; t += 32) {
    const uint8_t *A0 = amx_rows(m, t, t1, pad), *A1 = amx_rows(m, t + 16, t1, pad + 16 * sa);
    bool two = t1 - t > 16;
    for (int64_t p = p0; p < p1; p += 2) {
      bool twop = p + 1 < p1;
      const uint8_t *B0 = (const uint8_t *)m->w->packed + (size_t)p * panel, *B1 = B0 + panel;
      memset(acc, 0, 4096);
      for (int64_t b = 0; b < nb; b++) {
        const uint8_t *b0 = B0 + (size_t)b * X16_Q8_0_BLK, *b1 = B1 + (size_t)b * X16_Q8_0_BLK;
        TL_ZERO(0);
        TL_LOAD(4, A0 + b * 32, sa);
        TL_LOAD(6, b0 + 32, 64);
        TL_DPBSSD(0, 4, 6);
        TL_STORE(0, cst, 64);
        amx_q8_epilogue(acc, cst, b0, A0, sa, n_in, b);
        if (twop) {
          TL_ZERO(1);
          TL_LOAD(7, b1 + 32, 64);
          TL_DPBSSD(1, 4, 7);
          TL_STORE(1, cst + 256, 64);
          amx_q8_epilogue(acc + 256, cst + 256, b1, A0, sa, n_in, b);
        }
        if (two) {
          TL_ZERO(2);
          TL_LOAD(5, A1 + b * 32, sa);
          TL_DPBSSD(2, 5, 6);
          TL_STORE(2, cst + 512, 64);
          amx_q8_epilogue(acc + 512, cst + 512, b0, A1, sa, n_in, b);
          if (twop) {
            TL_ZERO(3);
            TL_DPBSSD(3, 5, 7);
            TL_STORE(3, cst + 768, 64);
            amx_q8_epilogue(acc + 768, cst + 768, b1, A1, sa, n_in, b);
          }
        }
      }
      amx_put(m, acc, t, t1, p);
      if (twop)
        amx_put(m, acc + 256, t, t1, p + 1);
      if (two) {
        amx_put(m, acc + 512, t + 16, t1, p);
        if (twop)
          amx_put(m, acc + 768, t + 16, t1, p + 1);
      }
    }
  }
  TL_RELEASE();
}

static const kn_mm_kernel amx_mm_bf16 = {amx_bf16_row_bytes, amx_bf16_quantize, amx_tile_bf16, PR, amx_scratch};
static const kn_mm_kernel amx_mm_bf16x3 = {amx_bf16x3_row_bytes, amx_bf16x3_quantize, amx_tile_bf16x3, PR, amx_scratch};
static const kn_mm_kernel amx_mm_q8_0 = {kn_act32_bytes, kn_act32_quantize_c, amx_tile_q8_0, PR, amx_scratch};

/* The entries of the tier below, which the AMX entries fall back to for everything else. */
static qvl_status (*amx_prev_pack)(kn_weight *w);
static qvl_status (*amx_prev_pack_fast)(kn_weight *w);
static const kn_mm_kernel *(*amx_prev_select)(const kn_weight *w, int64_t n_tokens);

static qvl_status amx_pack(kn_weight *w) {
  if (w->type == QVL_DTYPE_F16 || w->type == QVL_DTYPE_BF16)
    return kn_pack_amx_bf16(w, true);
  if (w->type == QVL_DTYPE_Q8_0)
    return kn_pack_amx_q8_0(w);
  return amx_prev_pack(w);
}
static qvl_status amx_pack_fast(kn_weight *w) {
  if (w->type == QVL_DTYPE_F16 || w->type == QVL_DTYPE_BF16)
    return kn_pack_amx_bf16(w, false);
  if (w->type == QVL_DTYPE_Q8_0)
    return kn_pack_amx_q8_0(w);
  return amx_prev_pack_fast ? amx_prev_pack_fast(w) : amx_prev_pack(w);
}
static const kn_mm_kernel *amx_select(const kn_weight *w, int64_t n_tokens) {
  if (w->packed) {
    if (w->layout == KN_LAYOUT_AMX_BF16)
      return &amx_mm_bf16;
    if (w->layout == KN_LAYOUT_AMX_BF16X3)
      return &amx_mm_bf16x3;
    if (w->layout == KN_LAYOUT_AMX_Q8_0)
      return &amx_mm_q8_0;
  }
  return amx_prev_select(w, n_tokens);
}

static void amx_install(kn_ops *ops, const char *name) {
  amx_prev_pack = ops->weight_pack;
  amx_prev_pack_fast = ops->weight_pack_fast;
  amx_prev_select = ops->mm_select;
  ops->weight_pack = amx_pack;
  ops->weight_pack_fast = amx_pack_fast;
  ops->mm_select = amx_select;
  ops->choice[KN_OP_MM_FLOAT] =
      (kn_choice){name, "F16/BF16: split bf16 (hi+lo, three TDPBF16PS products); F32: the tier below"};
  ops->choice[KN_OP_MM_FAST] = (kn_choice){name, "F16/BF16: TDPBF16PS tiles, 32 tokens x 32 rows"};
  ops->choice[KN_OP_MM_Q8_0] = (kn_choice){name, "TDPBSSD tiles per block, VNNI-identical float step"};
}

#endif
