/*
 * Element types and block formats, bit-compatible with ggml (GGUF files) and gguf-py.
 *
 * The quantizers follow ggml's *reference* quantizers step by step (same float operations in the
 * same order, same round-half-to-even helper), because the goal is byte equality with what
 * llama-quantize writes for the same float input. Any "improvement" to the rounding here would
 * silently make our files differ from llama.cpp's. Floating-point contraction into FMA is disabled
 * for the same reason (gcc does not contract under -std=c11; clang needs the pragma).
 */
#include "tensor/dtype.h"

#include <assert.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256
#define QK8_0 32
#define QK4_0 32

/* Block layouts (little-endian, packed, as in ggml-common.h). Sizes are asserted below. */
typedef struct {
  uint16_t d; /* fp16 scale */
  int8_t qs[QK8_0];
} blk_q8_0;

typedef struct {
  uint16_t d;            /* fp16 scale */
  uint8_t qs[QK4_0 / 2]; /* element j: qs[j] & 0xF (j < 16), qs[j - 16] >> 4 (j >= 16) */
} blk_q4_0;

typedef struct {
  uint16_t d;          /* fp16 super-block scale for the 6-bit scales */
  uint16_t dmin;       /* fp16 super-block scale for the 6-bit mins */
  uint8_t scales[12];  /* 8 scales + 8 mins, 6 bits each, packed (see scale_min_k4) */
  uint8_t qs[QK_K / 2]; /* 4-bit quants: 64-element groups, low nibbles first 32, high next 32 */
} blk_q4_K;

typedef struct {
  uint8_t ql[QK_K / 2];     /* low 4 bits of the 6-bit quants */
  uint8_t qh[QK_K / 4];     /* high 2 bits */
  int8_t scales[QK_K / 16]; /* 16 signed 8-bit scales, one per 16 elements */
  uint16_t d;               /* fp16 super-block scale */
} blk_q6_K;

typedef struct {
  float d;                  /* float32 scale */
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16]; /* sums of qs per 16 elements (used by the K-quant dot products) */
} blk_q8_K;

_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(blk_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K block size");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K block size");

/* ---------------------------------------------------------------------------------------------
 * Type table: ggml's names and block geometry for every id, so error messages can name types we
 * do not support and a reader can size their data.
 */
typedef struct {
  const char *name;
  int blck;     /* elements per block; 0 = removed id */
  size_t bytes; /* bytes per block */
  bool supported;
} type_info;

static const type_info types[QVL_DTYPE_MAX] = {
    [0] = {"F32", 1, 4, true},        [1] = {"F16", 1, 2, true},
    [2] = {"Q4_0", 32, 18, true},     [3] = {"Q4_1", 32, 20, false},
    [4] = {"Q4_2", 0, 0, false},      [5] = {"Q4_3", 0, 0, false},
    [6] = {"Q5_0", 32, 22, false},    [7] = {"Q5_1", 32, 24, false},
    [8] = {"Q8_0", 32, 34, true},     [9] = {"Q8_1", 32, 36, false},
    [10] = {"Q2_K", 256, 84, false},  [11] = {"Q3_K", 256, 110, false},
    [12] = {"Q4_K", 256, 144, true},  [13] = {"Q5_K", 256, 176, false},
    [14] = {"Q6_K", 256, 210, true},  [15] = {"Q8_K", 256, 292, false},
    [16] = {"IQ2_XXS", 256, 66, false}, [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false}, [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false},   [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false},   [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},         [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},        [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},        [29] = {"IQ1_M", 256, 56, false},
    [30] = {"BF16", 1, 2, true},        [31] = {"Q4_0_4_4", 0, 0, false},
    [32] = {"Q4_0_4_8", 0, 0, false},   [33] = {"Q4_0_8_8", 0, 0, false},
    [34] = {"TQ1_0", 256, 54, false},   [35] = {"TQ2_0", 256, 66, false},
    [36] = {"IQ4_NL_4_4", 0, 0, false}, [37] = {"IQ4_NL_4_8", 0, 0, false},
    [38] = {"IQ4_NL_8_8", 0, 0, false}, [39] = {"MXFP4", 32, 17, false},
};

bool dtype_supported(int type_id) {
  return type_id >= 0 && type_id < QVL_DTYPE_MAX && types[type_id].supported;
}

const char *dtype_name(int type_id) {
  if (type_id < 0 || type_id >= QVL_DTYPE_MAX || !types[type_id].name)
    return "unknown";
  return types[type_id].name;
}

bool dtype_from_name(const char *name, qvl_dtype *out) {
  if (!name)
    return false;
  for (int i = 0; i < QVL_DTYPE_MAX; i++) {
    if ((types[i].supported || i == QVL_DTYPE_Q8_K) && !strcasecmp(name, types[i].name)) {
      *out = (qvl_dtype)i;
      return true;
    }
  }
  return false;
}

int dtype_block_elems(qvl_dtype t) {
  if ((int)t < 0 || (int)t >= QVL_DTYPE_MAX)
    return 0;
  return types[t].blck;
}

size_t dtype_block_bytes(qvl_dtype t) {
  if ((int)t < 0 || (int)t >= QVL_DTYPE_MAX)
    return 0;
  return types[t].bytes;
}

bool dtype_row_bytes(qvl_dtype t, int64_t n, size_t *out) {
  int blck = dtype_block_elems(t);
  if (blck <= 0 || n < 0 || n % blck != 0)
    return false;
  uint64_t nb = (uint64_t)(n / blck);
  size_t bb = dtype_block_bytes(t);
  if (nb > SIZE_MAX / bb)
    return false;
  *out = (size_t)nb * bb;
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * fp16 / bf16
 */
static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float fp16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    /* zero or subnormal: mant * 2^-24, exact in float */
    float v = (float)mant * 5.9604644775390625e-8f;
    return u2f(f2u(v) | sign);
  }
  if (exp == 31)
    return u2f(sign | 0x7f800000u | (mant << 13));
  return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_fp16(float f) {
  uint32_t u = f2u(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) /* Inf or NaN (keep the top payload bits, force quiet) */
    return sign | (a > 0x7f800000u ? (uint16_t)(0x7e00 | ((a >> 13) & 0x3ff)) : 0x7c00);
  if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
    return sign | 0x7c00;
  if (a < 0x38800000u) { /* below the smallest normal half (2^-14): subnormal or zero */
    if (a <= 0x33000000u) /* <= 2^-25: rounds (ties to even) to zero */
      return sign;
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* value = m * 2^(e-150) = h * 2^-24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      h++;
    return sign | (uint16_t)h;
  }
  uint32_t h = (a - (112u << 23)) >> 13;
  uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++; /* a carry into the exponent is the correct result */
  return sign | (uint16_t)h;
}

float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and payload top, force quiet */
    return (uint16_t)((u >> 16) | 64);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---------------------------------------------------------------------------------------------
 * Dequantization (same float operations and order as ggml's dequantize_row_* and gguf-py).
 */

/* Unpacks scale j and min j (6 bits each) of a Q4_K block. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

static void dequant_q8_0(const void *src, float *y, int64_t nb) {
  const blk_q8_0 *b = src;
  for (int64_t i = 0; i < nb; i++) {
    float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < QK8_0; j++)
      y[i * QK8_0 + j] = (float)b[i].qs[j] * d;
  }
}

static void dequant_q4_0(const void *src, float *y, int64_t nb) {
  const blk_q4_0 *b = src;
  for (int64_t i = 0; i < nb; i++) {
    float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < QK4_0 / 2; j++) {
      y[i * QK4_0 + j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
      y[i * QK4_0 + j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

static void dequant_q4_K(const void *src, float *y, int64_t nb) {
  const blk_q4_K *b = src;
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t *q = b[i].qs;
    float d = fp16_to_f32(b[i].d);
    float min = fp16_to_f32(b[i].dmin);
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
      uint8_t sc, m;
      scale_min_k4(is + 0, b[i].scales, &sc, &m);
      float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, b[i].scales, &sc, &m);
      float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; l++)
        *y++ = d1 * (float)(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; l++)
        *y++ = d2 * (float)(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

static void dequant_q6_K(const void *src, float *y, int64_t nb) {
  const blk_q6_K *b = src;
  for (int64_t i = 0; i < nb; i++) {
    float d = fp16_to_f32(b[i].d);
    const uint8_t *ql = b[i].ql;
    const uint8_t *qh = b[i].qh;
    const int8_t *sc = b[i].scales;
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; l++) {
        int is = l / 16;
        int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * (float)sc[is + 0] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

static void dequant_q8_K(const void *src, float *y, int64_t nb) {
  const blk_q8_K *b = src;
  for (int64_t i = 0; i < nb; i++)
    for (int j = 0; j < QK_K; j++)
      y[i * QK_K + j] = b[i].d * (float)b[i].qs[j];
}

/* F16 and BF16 rows: one 16-bit element a block. */
static void widen_16bit(const void *src, float *y, int64_t n, float (*to_f32)(uint16_t)) {
  const uint8_t *s = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    y[i] = to_f32(h);
  }
}

static void dequant_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * sizeof(float)); }
static void dequant_f16(const void *src, float *y, int64_t n) { widen_16bit(src, y, n, fp16_to_f32); }
static void dequant_bf16(const void *src, float *y, int64_t n) { widen_16bit(src, y, n, bf16_to_f32); }

/* ---------------------------------------------------------------------------------------------
 * Quantization (ggml reference algorithms).
 */

/* Round half to even for |x| < 2^22, done the way ggml does it (adding 1.5 * 2^23 makes the FPU
 * round the fraction away); rintf would agree, but this keeps the exact same operation. */
static inline int nearest_int(float fval) {
  assert(fabsf(fval) <= 4194303.f);
  float val = fval + 12582912.f;
  int i;
  memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

#define GROUP_MAX_EPS 1e-15f

/* The element of x[0..n) largest in magnitude, signed (the first of equals; 0 when all are 0), and
 * that magnitude in *amax. */
static float largest_magnitude(const float *x, int n, float *amax) {
  float max = 0, a = 0;
  for (int i = 0; i < n; i++) {
    float ax = fabsf(x[i]);
    if (ax > a) {
      a = ax;
      max = x[i];
    }
  }
  *amax = a;
  return max;
}

static void quant_q8_0(const float *x, void *dst, int64_t nb) {
  blk_q8_0 *y = dst;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) {
      float v = fabsf(x[i * QK8_0 + j]);
      amax = amax > v ? amax : v;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK8_0; j++)
      y[i].qs[j] = (int8_t)roundf(x[i * QK8_0 + j] * id);
  }
}

static void quant_q4_0(const float *x, void *dst, int64_t nb) {
  blk_q4_0 *y = dst;
  for (int64_t i = 0; i < nb; i++) {
    const float *xb = x + i * QK4_0;
    float amax;
    float max = largest_magnitude(xb, QK4_0, &amax);
    float d = max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; j++) {
      float x0 = xb[j] * id;
      float x1 = xb[QK4_0 / 2 + j] * id;
      int xi0 = (int8_t)(x0 + 8.5f); /* truncation, as ggml does */
      int xi1 = (int8_t)(x1 + 8.5f);
      xi0 = xi0 < 15 ? xi0 : 15;
      xi1 = xi1 < 15 ? xi1 : 15;
      y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
    }
  }
}

/* Fits x ~ scale * L + min with L in [0, nmax], min <= 0, minimizing the weighted squared error
 * over a small sweep of candidate scales (ggml's make_qkx2_quants with use_mad = false).
 * Returns the scale; *the_min receives -min. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; i++) {
    if (x[i] < min)
      min = x[i];
    if (x[i] > max)
      max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0)
    min = 0;
  if (max == min) {
    for (int i = 0; i < n; i++)
      L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; i++) {
    int l = nearest_int(iscale * (x[i] - min));
    l = l < 0 ? 0 : l > nmax ? nmax : l;
    L[i] = (uint8_t)l;
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    float w = weights[i];
    best_error += w * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; i++) {
      int l = nearest_int(iscale * (x[i] - min));
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      Laux[i] = (uint8_t)l;
      float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; i++) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        float w = weights[i];
        cur_error += w * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; i++)
          L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/* Symmetric fit x ~ scale * (L - nmax), L in [0, 2 nmax), weights x^2, over a sweep of 19 candidate
 * scales (ggml's make_qx_quants with rmse_type = 1 and no importance weights). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
  float amax;
  float max = largest_magnitude(x, n, &amax);
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < n; i++)
      L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; i++) {
    int l = nearest_int(iscale * x[i]);
    l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
    L[i] = (int8_t)(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0)
      continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; i++) {
      int l = nearest_int(iscale * x[i]);
      l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

static void quant_q4_K(const float *x, void *dst, int64_t nb) {
  blk_q4_K *y = dst;
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (int64_t i = 0; i < nb; i++) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; l++)
        sum_x2 += x[32 * j + l] * x[32 * j + l];
      float av_x = sqrtf(sum_x2 / 32);
      for (int l = 0; l < 32; l++)
        weights[l] = av_x + fabsf(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f,
                                   0.1f, 20);
      if (scales[j] > max_scale)
        max_scale = scales[j];
      if (mins[j] > max_min)
        max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
      int ls = nearest_int(inv_scale * scales[j]);
      int lm = nearest_int(inv_min * mins[j]);
      ls = ls < 63 ? ls : 63;
      lm = lm < 63 ? lm : 63;
      if (j < 4) {
        y[i].scales[j] = (uint8_t)ls;
        y[i].scales[j + 4] = (uint8_t)lm;
      } else {
        y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
        y[i].scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
      }
    }
    y[i].d = f32_to_fp16(max_scale / 63.f);
    y[i].dmin = f32_to_fp16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; j++) {
      uint8_t sc, m;
      scale_min_k4(j, y[i].scales, &sc, &m);
      float d = fp16_to_f32(y[i].d) * sc;
      if (!d)
        continue; /* keeps the quants of the fit, like ggml */
      float dm = fp16_to_f32(y[i].dmin) * m;
      for (int ii = 0; ii < 32; ii++) {
        int l = nearest_int((x[32 * j + ii] + dm) / d);
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        L[32 * j + ii] = (uint8_t)l;
      }
    }
    uint8_t *q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64) {
      for (int l = 0; l < 32; l++)
        q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
    x += QK_K;
  }
}

static void quant_q6_K(const float *x, void *dst, int64_t nb) {
  blk_q6_K *y = dst;
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < nb; i++) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ib++) {
      float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      float abs_scale = fabsf(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
      memset(&y[i], 0, sizeof y[i]);
      y[i].d = f32_to_fp16(0.f);
      x += QK_K;
      continue;
    }
    float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ib++) {
      int v = nearest_int(iscale * scales[ib]);
      y[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; j++) {
      float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (!d)
        continue;
      for (int ii = 0; ii < 16; ii++) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        L[16 * j + ii] = (int8_t)(l + 32);
      }
    }
    uint8_t *ql = y[i].ql;
    uint8_t *qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128) {
      for (int l = 0; l < 32; l++) {
        uint8_t q1 = L[j + l + 0] & 0xF;
        uint8_t q2 = L[j + l + 32] & 0xF;
        uint8_t q3 = L[j + l + 64] & 0xF;
        uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
        ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
        qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                          ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
    x += QK_K;
  }
}

static void quant_q8_K(const float *x, void *dst, int64_t nb) {
  blk_q8_K *y = dst;
  for (int64_t i = 0; i < nb; i++) {
    float amax;
    float max = largest_magnitude(x, QK_K, &amax);
    if (!amax) {
      memset(&y[i], 0, sizeof y[i]);
      x += QK_K;
      continue;
    }
    /* -127 (not -128) keeps every quant in [-127, 127], which the VNNI kernels rely on when they
     * move a weight's sign onto the activation. */
    float iscale = -127.f / max;
    for (int j = 0; j < QK_K; j++) {
      int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; j++) {
      int sum = 0;
      for (int ii = 0; ii < 16; ii++)
        sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = (int16_t)sum;
    }
    y[i].d = 1 / iscale;
    x += QK_K;
  }
}

static void narrow_16bit(const float *x, void *dst, int64_t n, uint16_t (*from_f32)(float)) {
  uint8_t *d = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = from_f32(x[i]);
    memcpy(d + 2 * i, &h, 2);
  }
}

static void quant_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }
static void quant_f16(const float *x, void *dst, int64_t n) { narrow_16bit(x, dst, n, f32_to_fp16); }
static void quant_bf16(const float *x, void *dst, int64_t n) { narrow_16bit(x, dst, n, f32_to_bf16); }

/* ---------------------------------------------------------------------------------------------
 * Rows: a type's block converters, called on the whole blocks of a row (types[].blck elements
 * each; 1 for F32, F16, BF16).
 */
typedef struct {
  void (*dequant)(const void *src, float *y, int64_t n_blocks);
  void (*quant)(const float *x, void *dst, int64_t n_blocks);
} row_codec;

static const row_codec codecs[QVL_DTYPE_MAX] = {
    [QVL_DTYPE_F32] = {dequant_f32, quant_f32},   [QVL_DTYPE_F16] = {dequant_f16, quant_f16},
    [QVL_DTYPE_BF16] = {dequant_bf16, quant_bf16}, [QVL_DTYPE_Q8_0] = {dequant_q8_0, quant_q8_0},
    [QVL_DTYPE_Q4_0] = {dequant_q4_0, quant_q4_0}, [QVL_DTYPE_Q4_K] = {dequant_q4_K, quant_q4_K},
    [QVL_DTYPE_Q6_K] = {dequant_q6_K, quant_q6_K}, [QVL_DTYPE_Q8_K] = {dequant_q8_K, quant_q8_K},
};

/* The codec of t, or NULL (with an assertion) for a type without one; n must fill whole blocks. */
static const row_codec *codec_of(qvl_dtype t, int64_t n) {
  if ((int)t < 0 || (int)t >= QVL_DTYPE_MAX || !codecs[t].dequant) {
    assert(!"dtype row conversion: unsupported type");
    return NULL;
  }
  assert(n % types[t].blck == 0);
  return &codecs[t];
}

void dtype_dequantize_row(qvl_dtype t, const void *src, float *dst, int64_t n) {
  const row_codec *c = codec_of(t, n);
  if (c)
    c->dequant(src, dst, n / types[t].blck);
}

void dtype_quantize_row(qvl_dtype t, const float *src, void *dst, int64_t n) {
  const row_codec *c = codec_of(t, n);
  if (c)
    c->quant(src, dst, n / types[t].blck);
}

