/*
 * A portable C model of the 16-lane fp32 vector operations the AMX attention's softmax is written
 * with (l16_*), the partner of the tile model: the `sim` target of amx_target.h includes this, the
 * `hw` and `sim512` targets x86/lanes512.h, which defines the same names on AVX-512 registers.
 * Each function here states the exact result the AVX-512 form gives (operand order of max/min,
 * rounding, the reduction tree, denormals and NaN in the bf16 conversion), so the three builds do the same float
 * operations and the test tier `amxsim512` can check the hardware build's vector code against this
 * model bit for bit on any AVX-512 BF16 CPU.
 */
#ifndef QVL_KERNELS_LANE_MODEL_H
#define QVL_KERNELS_LANE_MODEL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/dtype.h"

typedef struct l16 {
  float v[16];
} l16;

#define L16_MAP(expr)          \
  l16 r_;                      \
  for (int i = 0; i < 16; i++) \
    r_.v[i] = (expr);          \
  return r_

static inline l16 l16_load_ps(const float *p) {
  l16 r;
  memcpy(r.v, p, sizeof r.v);
  return r;
}
static inline void l16_store_ps(float *p, l16 a) { memcpy(p, a.v, sizeof a.v); }
/* 16 IEEE halves widened (vcvtph2ps: exact, so any correct conversion gives these bits). */
static inline l16 l16_load_f16_ps(const uint8_t *p) {
  l16 r;
  for (int i = 0; i < 16; i++) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    r.v[i] = fp16_to_f32(h);
  }
  return r;
}
/* (float)(p[i] - sub) for 16 int32 (vpsubd wraps, vcvtdq2ps rounds to nearest even, as the cast). */
static inline l16 l16_cvt_sub_epi32(const int32_t *p, int32_t sub) {
  L16_MAP((float)(int32_t)((uint32_t)p[i] - (uint32_t)sub));
}
static inline l16 l16_set1_ps(float a) { L16_MAP(a); }
static inline l16 l16_add_ps(l16 a, l16 b) { L16_MAP(a.v[i] + b.v[i]); }
static inline l16 l16_sub_ps(l16 a, l16 b) { L16_MAP(a.v[i] - b.v[i]); }
static inline l16 l16_mul_ps(l16 a, l16 b) { L16_MAP(a.v[i] * b.v[i]); }
static inline l16 l16_fmadd_ps(l16 a, l16 b, l16 c) { L16_MAP(fmaf(a.v[i], b.v[i], c.v[i])); }
static inline l16 l16_fnmadd_ps(l16 a, l16 b, l16 c) { L16_MAP(fmaf(-a.v[i], b.v[i], c.v[i])); }
/* vmaxps / vminps: the second operand unless the first is strictly greater (smaller). */
static inline l16 l16_max_ps(l16 a, l16 b) { L16_MAP(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
static inline l16 l16_min_ps(l16 a, l16 b) { L16_MAP(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
/* Round to the nearest integer, ties to even (vrndscaleps, imm 0); |a| < 2^22 here. */
static inline l16 l16_round_ps(l16 a) { L16_MAP((a.v[i] + 12582912.0f) - 12582912.0f); }
/* p 2^n for integral n in [-126, 127] with p near 1 (vscalefps; exact, the result is normal). */
static inline l16 l16_scale2n_ps(l16 p, l16 n) {
  l16 r;
  for (int i = 0; i < 16; i++) {
    int32_t bits = ((int32_t)n.v[i] + 127) * (1 << 23);
    float s;
    memcpy(&s, &bits, 4);
    r.v[i] = p.v[i] * s;
  }
  return r;
}
/* Lanes 0 .. n-1 of a, fill in the others (n <= 0: all fill). */
static inline l16 l16_first_ps(l16 a, int n, float fill) { L16_MAP(i < n ? a.v[i] : fill); }

/* Horizontal sum and max in the order of lanes512.h: halves, then quarters, then pairs. */
#define L16_REDUCE(name, OP)                       \
  static inline float name(l16 a) {                \
    for (int w = 8; w >= 1; w /= 2)                \
      for (int i = 0; i < w; i++)                  \
        a.v[i] = OP(a.v[i], a.v[i + w]);           \
    return a.v[0];                                 \
  }
#define L16_ADD(x, y) ((x) + (y))
#define L16_MAX(x, y) ((x) > (y) ? (x) : (y))
L16_REDUCE(l16_hsum, L16_ADD)
L16_REDUCE(l16_hmax, L16_MAX)
#undef L16_ADD
#undef L16_MAX
#undef L16_REDUCE

/* bf16 as vcvtneps2bf16 rounds: f32_to_bf16 (nearest even, NaN kept quiet) after reading a
 * denormal input as zero of its sign. */
static inline uint16_t l16_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (u & 0x7f800000u) == 0 ? (uint16_t)((u >> 16) & 0x8000u) : f32_to_bf16(x);
}
/* The 16 lanes rounded to bf16 and stored. */
static inline void l16_store_bf16(uint16_t *p, l16 a) {
  for (int i = 0; i < 16; i++)
    p[i] = l16_bf16(a.v[i]);
}
/* Each lane rounded to bf16 (as l16_store_bf16) and widened back. */
static inline l16 l16_round_bf16_ps(l16 a) {
  l16 r;
  for (int i = 0; i < 16; i++) {
    uint32_t u = (uint32_t)l16_bf16(a.v[i]) << 16;
    memcpy(&r.v[i], &u, 4);
  }
  return r;
}
/* A lane holding two bf16 as its bits: lo in the low half, hi in the high half. */
static inline void l16_put_pair(l16 *r, int i, float lo, float hi) {
  uint32_t u = (uint32_t)l16_bf16(lo) | (uint32_t)l16_bf16(hi) << 16;
  memcpy(&r->v[i], &u, 4);
}
/* Lane i: the bf16 of x[2i] (low half) and x[2i + 1] (high half), x = lo then hi (32 values). */
static inline l16 l16_bf16_pairs(l16 lo, l16 hi) {
  l16 r;
  for (int i = 0; i < 16; i++)
    l16_put_pair(&r, i, i < 8 ? lo.v[2 * i] : hi.v[2 * i - 16], i < 8 ? lo.v[2 * i + 1] : hi.v[2 * i - 15]);
  return r;
}
/* Lane i: the bf16 of a[i] (low half) and b[i] (high half). */
static inline l16 l16_bf16_zip(l16 a, l16 b) {
  l16 r;
  for (int i = 0; i < 16; i++)
    l16_put_pair(&r, i, a.v[i], b.v[i]);
  return r;
}
/* r[i] lane j <- r[j] lane i (bits moved with memcpy, never computed on). */
static inline void l16_transpose(l16 *r) {
  l16 t[16];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++)
      memcpy(&t[i].v[j], &r[j].v[i], 4);
  memcpy(r, t, sizeof t);
}

#undef L16_MAP
#endif
