/*
 * Weight repacking into 16-row panels (the KN_LAYOUT_X16_* layouts, see kernels_impl.h and
 * docs/KERNELS.md). Plain C compiled without ISA flags, shared by the AVX2 and AVX-512 variants.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/act_quant.h"
#include "kernels/kernels_impl.h"
#include "tensor/dtype.h"


/* Transposes 4-byte groups: dst[g*64 + r*4 + e] = src_r[4g + e] ^ flip, for n_groups groups and the
 * rows present (missing rows of the last panel stay zero). */
static void put_groups(uint8_t *dst, const uint8_t *const *src, int rows, int n_groups, uint8_t flip) {
  for (int g = 0; g < n_groups; g++)
    for (int r = 0; r < rows; r++)
      for (int e = 0; e < 4; e++)
        dst[g * 64 + r * 4 + e] = (uint8_t)(src[r][4 * g + e] ^ flip);
}

/* The repacked copy of w: one zeroed, 64-byte aligned buffer of `panel` bytes per 16-row panel. */
static qvl_status alloc_panels(const kn_weight *w, size_t panel, void **out) {
  int64_t np = (w->n_out + PR - 1) / PR;
  if ((uint64_t)np > SIZE_MAX / panel)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "repacked weight %lld x %lld too large",
                      (long long)w->n_out, (long long)w->n_in);
  size_t total = panel * (size_t)np;
  void *mem = NULL;
  if (posix_memalign(&mem, 64, total ? total : 64) != 0)
    return qvl_errorf(QVL_ERR_NOMEM, "cannot allocate %zu bytes for the repacked weight", total);
  memset(mem, 0, total);
  *out = mem;
  return QVL_OK;
}

/* Float panels: element i of row r at (i * PR + r) * esz (esz a constant at each call, so the
 * copies stay single moves). */
static inline __attribute__((always_inline)) void put_elems(uint8_t *dst, const uint8_t *const *src, int rows,
                                                            int64_t n_in, size_t esz) {
  for (int64_t i = 0; i < n_in; i++)
    for (int r = 0; r < rows; r++)
      memcpy(dst + ((size_t)i * PR + (size_t)r) * esz, src[r] + (size_t)i * esz, esz);
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

qvl_status kn_pack_x16(kn_weight *w) {
  int64_t np = (w->n_out + PR - 1) / PR, n_in = w->n_in;
  int layout;
  switch (w->type) {
  case QVL_DTYPE_F32: layout = KN_LAYOUT_X16_F32; break;
  case QVL_DTYPE_F16: layout = KN_LAYOUT_X16_F16; break;
  case QVL_DTYPE_BF16: layout = KN_LAYOUT_X16_BF16; break;
  case QVL_DTYPE_Q8_0: layout = KN_LAYOUT_X16_Q8_0; break;
  case QVL_DTYPE_Q4_0: layout = KN_LAYOUT_X16_Q4_0; break;
  case QVL_DTYPE_Q4_K: layout = KN_LAYOUT_X16_Q4_K; break;
  case QVL_DTYPE_Q6_K: layout = KN_LAYOUT_X16_Q6_K; break;
  default: return QVL_OK; /* the reference path handles it */
  }
  size_t panel = kn_x16_panel_bytes(layout, n_in);
  void *mem;
  QVL_TRY(alloc_panels(w, panel, &mem));
  uint8_t *dst = mem;
  const uint8_t *data = w->data;
  for (int64_t p = 0; p < np; p++) {
    uint8_t *pd = dst + (size_t)p * panel;
    int rows = kn_panel_rows(w->n_out, p);
    const uint8_t *row[PR];
    for (int r = 0; r < rows; r++)
      row[r] = data + (size_t)(p * PR + r) * w->row_bytes;
    switch (w->type) {
    case QVL_DTYPE_F32: put_elems(pd, row, rows, n_in, 4); break;
    case QVL_DTYPE_F16:
    case QVL_DTYPE_BF16: put_elems(pd, row, rows, n_in, 2); break;
    case QVL_DTYPE_Q8_0:
    case QVL_DTYPE_Q4_0: {
      bool q8 = w->type == QVL_DTYPE_Q8_0;
      size_t bb = q8 ? 34 : 18, pb = q8 ? X16_Q8_0_BLK : X16_Q4_0_BLK;
      for (int64_t b = 0; b < n_in / 32; b++) {
        uint8_t *o = pd + (size_t)b * pb;
        const uint8_t *qs[PR];
        for (int r = 0; r < rows; r++) {
          memcpy(o + r * 2, row[r] + b * bb, 2);
          qs[r] = row[r] + b * bb + 2;
        }
        put_groups(o + 32, qs, rows, q8 ? 8 : 4, q8 ? 0x80 : 0);
      }
      break;
    }
    case QVL_DTYPE_Q4_K:
      for (int64_t sb = 0; sb < n_in / 256; sb++) {
        uint8_t *o = pd + (size_t)sb * X16_Q4_K_SB;
        const uint8_t *qs[PR];
        for (int r = 0; r < rows; r++) {
          const uint8_t *blk = row[r] + sb * 144;
          memcpy(o + r * 2, blk, 2);
          memcpy(o + 32 + r * 2, blk + 2, 2);
          for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            scale_min_k4(s, blk + 4, &sc, &m);
            o[X16_Q4_K_SC + s * 16 + r] = sc;
            o[X16_Q4_K_MIN + (s / 2) * 32 + r * 2 + (s % 2)] = m;
          }
          qs[r] = blk + 16;
        }
        put_groups(o + X16_Q4_K_QS, qs, rows, 32, 0);
      }
      break;
    case QVL_DTYPE_Q6_K:
      for (int64_t sb = 0; sb < n_in / 256; sb++) {
        uint8_t *o = pd + (size_t)sb * X16_Q6_K_SB;
        const uint8_t *ql[PR], *qh[PR];
        for (int r = 0; r < rows; r++) {
          const uint8_t *blk = row[r] + sb * 210;
          memcpy(o + r * 2, blk + 208, 2);
          for (int g = 0; g < 16; g++)
            o[X16_Q6_K_SC + g * 16 + r] = blk[192 + g];
          ql[r] = blk;
          qh[r] = blk + 128;
        }
        for (int g = 0; g < 32; g++) {
          const uint8_t *src[PR];
          for (int r = 0; r < rows; r++)
            src[r] = ql[r] + 4 * g;
          put_groups(o + X16_Q6_K_QL_AT(g), src, rows, 1, 0);
        }
        for (int g = 0; g < 16; g++) {
          const uint8_t *src[PR];
          for (int r = 0; r < rows; r++)
            src[r] = qh[r] + 4 * g;
          put_groups(o + X16_Q6_K_QH_AT(g), src, rows, 1, 0);
        }
      }
      break;
    default:
      break;
    }
  }
  w->packed = dst;
  w->layout = layout;
  return QVL_OK;
}


qvl_status kn_pack_x16_int8(kn_weight *w) {
  if ((w->type != QVL_DTYPE_F16 && w->type != QVL_DTYPE_BF16) || w->n_in % 32)
    return kn_pack_x16(w);
  size_t rb = (size_t)(w->n_in / 32) * 34;
  if ((uint64_t)w->n_out > SIZE_MAX / rb)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "quantized weight %lld x %lld too large", (long long)w->n_out,
                      (long long)w->n_in);
  uint8_t *q8 = malloc(rb * (size_t)w->n_out);
  float *row = malloc(sizeof(float) * (size_t)w->n_in);
  if (!q8 || !row) {
    free(q8);
    free(row);
    return qvl_errorf(QVL_ERR_NOMEM, "cannot allocate %zu bytes to quantize a weight", rb * (size_t)w->n_out);
  }
  for (int64_t r = 0; r < w->n_out; r++) {
    dtype_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->n_in);
    dtype_quantize_row(QVL_DTYPE_Q8_0, row, q8 + (size_t)r * rb, w->n_in);
  }
  free(row);
  kn_weight q = *w;
  q.type = QVL_DTYPE_Q8_0;
  q.data = q8;
  q.row_bytes = rb;
  qvl_status st = kn_pack_x16(&q);
  free(q8);
  if (st == QVL_OK) {
    w->packed = q.packed;
    w->layout = q.layout;
  }
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Portable activation quantizers for the X16 kernels (formats in kernels_impl.h). Scale per run
 * d = amax / 127, quants round(x / d) with ties to even, like the AVX-512 versions.
 */
static float quant_run_c(const float *x, int n, int8_t *q, int32_t *sums16) {
  float amax = 0.0f;
  for (int i = 0; i < n; i++)
    amax = fmaxf(amax, fabsf(x[i]));
  float d = amax / 127.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int g = 0; g < n / 16; g++) {
    int32_t s = 0;
    for (int i = 16 * g; i < 16 * g + 16; i++) {
      float f = x[i] * id;
      /* clamped as a float: converting NaN or a huge value to int is undefined (fuzzed weights) */
      int v = f >= 127.0f ? 127 : f <= -127.0f ? -127 : f == f ? (int)nearbyintf(f) : 0;
      q[i] = (int8_t)v;
      s += v;
    }
    sums16[g] = s;
  }
  return d;
}

const kn_mm_kernel *kn_x16_select(const kn_weight *w, const kn_x16_kernels *k) {
  if (!w->packed)
    return &kn_mm_ref;
  switch (w->layout) {
  case KN_LAYOUT_X16_F32:
  case KN_LAYOUT_X16_F16:
  case KN_LAYOUT_X16_BF16: return k->flt;
  case KN_LAYOUT_X16_Q8_0: return k->q8_0;
  case KN_LAYOUT_X16_Q4_0: return k->q4_0;
  case KN_LAYOUT_X16_Q4_K: return k->q4_K;
  case KN_LAYOUT_X16_Q6_K: return k->q6_K;
  default: return &kn_mm_ref;
  }
}

size_t kn_act32_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 32) * 8; }
size_t kn_act256_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 256) * 52; }

void kn_act32_quantize_c(const float *x, void *xq, int64_t n_in) { kn_act32_fill(x, xq, n_in, 1, quant_run_c); }
void kn_act256_quantize_c(const float *x, void *xq, int64_t n_in) { kn_act256_fill(x, xq, n_in, quant_run_c); }

/* ---------------------------------------------------------------------------------------------
 * Fast tier: bf16 pairs for vdpbf16ps (KN_LAYOUT_X16_BF16P). Lane r of pair k holds the bf16 of
 * w[r][2k] (low half) and w[r][2k+1] (high half), the order vdpbf16ps multiplies them with the
 * activation pair {x[2k], x[2k+1]}. F16 values are converted exactly to float, then rounded to
 * nearest-even bf16 (f32_to_bf16, the same rounding the activations get).
 */
size_t kn_bf16p_row_bytes(int64_t n_in) { return (size_t)KN_BF16P_PAIRS(n_in) * 4; }

qvl_status kn_pack_x16_fast(kn_weight *w) {
  if (w->type != QVL_DTYPE_F16 && w->type != QVL_DTYPE_BF16)
    return kn_pack_x16(w);
  int64_t np = (w->n_out + PR - 1) / PR, n_in = w->n_in, pairs = KN_BF16P_PAIRS(n_in);
  size_t panel = (size_t)pairs * 64;
  void *mem;
  QVL_TRY(alloc_panels(w, panel, &mem));
  uint16_t *dst = mem;
  const bool f16 = w->type == QVL_DTYPE_F16;
  for (int64_t p = 0; p < np; p++) {
    uint16_t *pd = dst + (size_t)p * (panel / 2);
    int rows = kn_panel_rows(w->n_out, p);
    for (int r = 0; r < rows; r++) {
      const uint16_t *src = (const uint16_t *)((const uint8_t *)w->data + (size_t)(p * PR + r) * w->row_bytes);
      for (int64_t i = 0; i < n_in; i++) {
        uint16_t h;
        memcpy(&h, src + i, 2); /* rows of a mapped file need not be 2-byte aligned */
        pd[(size_t)(i / 2) * 32 + (size_t)r * 2 + (size_t)(i % 2)] = f16 ? f32_to_bf16(fp16_to_f32(h)) : h;
      }
    }
  }
  w->packed = dst;
  w->layout = KN_LAYOUT_X16_BF16P;
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * AMX tile layouts (KN_LAYOUT_AMX_*). Step s of panel p holds inputs 32s .. 32s+31 as the B tile
 * of TDPBF16PS: row k (input pair 16s + k) = 16 lanes of {w[r][2k'], w[r][2k'+1]}. With split,
 * the step is the hi tile (bf16 rounding of w) then the lo tile (bf16 rounding of w - hi): for
 * F16 and BF16 weights hi + lo == w exactly (11 significant bits at most).
 */
qvl_status kn_pack_amx_bf16(kn_weight *w, bool split) {
  if (w->type != QVL_DTYPE_F16 && w->type != QVL_DTYPE_BF16)
    return qvl_errorf(QVL_ERR_INTERNAL, "AMX bf16 packing of a %s matrix", dtype_name(w->type));
  int64_t np = (w->n_out + PR - 1) / PR, n_in = w->n_in, ks = KN_AMX_STEPS(n_in);
  size_t step = split ? 2048 : 1024, panel = (size_t)ks * step;
  void *mem;
  QVL_TRY(alloc_panels(w, panel, &mem));
  uint8_t *dst = mem;
  const bool f16 = w->type == QVL_DTYPE_F16;
  for (int64_t p = 0; p < np; p++) {
    uint8_t *pd = dst + (size_t)p * panel;
    int rows = kn_panel_rows(w->n_out, p);
    for (int r = 0; r < rows; r++) {
      const uint8_t *src = (const uint8_t *)w->data + (size_t)(p * PR + r) * w->row_bytes;
      for (int64_t i = 0; i < n_in; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        float f = f16 ? fp16_to_f32(h) : bf16_to_f32(h);
        uint16_t hi = f32_to_bf16(f);
        size_t at = (size_t)(i / 32) * step + (size_t)((i % 32) / 2) * 64 + (size_t)r * 4 + (size_t)(i % 2) * 2;
        memcpy(pd + at, &hi, 2);
        if (split) {
          uint16_t lo = f32_to_bf16(f - bf16_to_f32(hi));
          memcpy(pd + at + 1024, &lo, 2);
        }
      }
    }
  }
  w->packed = dst;
  w->layout = split ? KN_LAYOUT_AMX_BF16X3 : KN_LAYOUT_AMX_BF16;
  return QVL_OK;
}
