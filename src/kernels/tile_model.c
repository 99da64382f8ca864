/*
 * The portable tile model (tile_model.h). Plain C, no ISA flags: it runs wherever the tests run.
 */
#include "kernels/tile_model.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "base/log.h"

typedef struct tm_state {
  bool configured;
  kn_tilecfg cfg;
  uint8_t t[KN_TM_TILES][KN_TM_ROWS][KN_TM_COLSB];
} tm_state;

static _Thread_local tm_state t_tm;
static atomic_uint_least64_t g_faults, g_dots;

static bool fault(const char *what) {
  if (atomic_fetch_add(&g_faults, 1) == 0)
    log_error("tile model: %s", what);
  return false;
}

static bool tile_ok(int t) {
  if (!t_tm.configured)
    return fault("tile instruction without a tile configuration");
  if (t < 0 || t >= KN_TM_TILES)
    return fault("tile register out of range");
  if (t_tm.cfg.rows[t] == 0 || t_tm.cfg.colsb[t] == 0)
    return fault("tile used but not configured (0 rows or bytes)");
  return true;
}

void kn_tm_config(const kn_tilecfg *cfg) {
  t_tm.configured = false;
  if (cfg->palette != 1) {
    fault("palette must be 1");
    return;
  }
  if (cfg->start_row != 0) {
    fault("start_row must be 0");
    return;
  }
  for (int i = 0; i < 16; i++) {
    bool used = cfg->rows[i] || cfg->colsb[i];
    if (i >= KN_TM_TILES && used) {
      fault("only 8 tiles exist");
      return;
    }
    if (used && (cfg->rows[i] > KN_TM_ROWS || cfg->colsb[i] > KN_TM_COLSB || !cfg->rows[i] || !cfg->colsb[i])) {
      fault("tile shape beyond 16 rows x 64 bytes");
      return;
    }
  }
  t_tm.cfg = *cfg;
  memset(t_tm.t, 0, sizeof t_tm.t);
  t_tm.configured = true;
}

void kn_tm_release(void) {
  t_tm.configured = false;
  memset(t_tm.t, 0, sizeof t_tm.t);
}

void kn_tm_zero(int t) {
  if (tile_ok(t))
    memset(t_tm.t[t], 0, sizeof t_tm.t[t]);
}

void kn_tm_load(int t, const void *base, size_t stride) {
  if (!tile_ok(t))
    return;
  memset(t_tm.t[t], 0, sizeof t_tm.t[t]); /* bytes past colsb read as zero */
  for (int r = 0; r < t_tm.cfg.rows[t]; r++)
    memcpy(t_tm.t[t][r], (const uint8_t *)base + (size_t)r * stride, t_tm.cfg.colsb[t]);
}

void kn_tm_store(int t, void *base, size_t stride) {
  if (!tile_ok(t))
    return;
  for (int r = 0; r < t_tm.cfg.rows[t]; r++)
    memcpy((uint8_t *)base + (size_t)r * stride, t_tm.t[t][r], t_tm.cfg.colsb[t]);
}

/* The shapes of a dot-product instruction: c (M x N dwords) += a (M x K dwords) . b (K x N). */
static bool dp_ok(int c, int a, int b) {
  if (!tile_ok(c) || !tile_ok(a) || !tile_ok(b))
    return false;
  if (c == a || c == b || a == b)
    return fault("dot product with repeated tile registers");
  const kn_tilecfg *g = &t_tm.cfg;
  if (g->colsb[a] % 4 || g->colsb[b] % 4 || g->colsb[c] % 4)
    return fault("dot product on a tile whose width is not whole dwords");
  if (g->rows[c] != g->rows[a])
    return fault("dot product: c.rows != a.rows");
  if (g->colsb[c] != g->colsb[b])
    return fault("dot product: c.colsb != b.colsb");
  if (g->colsb[a] / 4 != g->rows[b])
    return fault("dot product: a.colsb / 4 != b.rows (K)");
  atomic_fetch_add_explicit(&g_dots, 1, memory_order_relaxed);
  return true;
}

static float bf16_daz(uint16_t h) {
  if ((h & 0x7F80) == 0)
    h &= 0x8000; /* denormal (or zero) input: zero, sign kept */
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float ftz(float f) { return fabsf(f) < 1.17549435e-38f ? copysignf(0.0f, f) : f; }

void kn_tm_dpbf16ps(int c, int a, int b) {
  if (!dp_ok(c, a, b))
    return;
  int M = t_tm.cfg.rows[c], N = t_tm.cfg.colsb[c] / 4, K = t_tm.cfg.colsb[a] / 4;
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      uint16_t a2[2];
      memcpy(a2, &t_tm.t[a][m][4 * k], 4);
      float a0 = bf16_daz(a2[0]), a1 = bf16_daz(a2[1]);
      for (int n = 0; n < N; n++) {
        uint16_t b2[2];
        float acc;
        memcpy(b2, &t_tm.t[b][k][4 * n], 4);
        memcpy(&acc, &t_tm.t[c][m][4 * n], 4);
        acc = ftz(acc + a0 * bf16_daz(b2[0])); /* products of bf16 are exact in fp32 */
        acc = ftz(acc + a1 * bf16_daz(b2[1]));
        memcpy(&t_tm.t[c][m][4 * n], &acc, 4);
      }
    }
}

static void dp8(int c, int a, int b, bool a_signed, bool b_signed) {
  if (!dp_ok(c, a, b))
    return;
  int M = t_tm.cfg.rows[c], N = t_tm.cfg.colsb[c] / 4, K = t_tm.cfg.colsb[a] / 4;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      uint32_t acc;
      memcpy(&acc, &t_tm.t[c][m][4 * n], 4);
      for (int k = 0; k < K; k++) {
        int32_t s = 0;
        for (int e = 0; e < 4; e++) {
          uint8_t ua = t_tm.t[a][m][4 * k + e], ub = t_tm.t[b][k][4 * n + e];
          int32_t va = a_signed ? (int8_t)ua : ua, vb = b_signed ? (int8_t)ub : ub;
          s += va * vb;
        }
        acc += (uint32_t)s; /* int32 wrap-around, as the instruction */
      }
      memcpy(&t_tm.t[c][m][4 * n], &acc, 4);
    }
}

void kn_tm_dpbssd(int c, int a, int b) { dp8(c, a, b, true, true); }
void kn_tm_dpbusd(int c, int a, int b) { dp8(c, a, b, false, true); }
void kn_tm_dpbsud(int c, int a, int b) { dp8(c, a, b, true, false); }

uint64_t kn_tm_faults(void) { return atomic_load(&g_faults); }
uint64_t kn_tm_dot_products(void) { return atomic_load(&g_dots); }
