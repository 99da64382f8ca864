/*
 * dtype: fp16/bf16 conversions against properties of IEEE rounding; quantizers against the bytes
 * llama-quantize / the converter wrote into the fixture GGUFs (from the same F32 values);
 * dequantization against the F32 source weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"
#include "test.h"

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

/* Value of a half computed from its fields (independent of fp16_to_f32). */
static double half_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0)
    return s * ldexp(m, -24);
  if (e == 31)
    return m ? NAN : s * INFINITY;
  return s * ldexp(1024 + m, e - 25);
}

static void test_fp16(void) {
  /* Every half converts to the value its fields encode, and back to itself. */
  int bad_decode = 0, bad_round_trip = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = fp16_to_f32((uint16_t)h);
    double v = half_value((uint16_t)h);
    if (isnan(v)) {
      if (!isnan(f))
        bad_decode++;
      uint16_t back = f32_to_fp16(f);
      if ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff) || (back & 0x8000) != (h & 0x8000))
        bad_round_trip++;
      continue;
    }
    if ((double)f != v || !!signbit(f) != !!(h & 0x8000))
      bad_decode++;
    if (f32_to_fp16(f) != h)
      bad_round_trip++;
  }
  CHECK(bad_decode == 0, "%d halves decode wrongly", bad_decode);
  CHECK(bad_round_trip == 0, "%d halves do not round-trip", bad_round_trip);

  /* Random floats in and around the half range round to the nearest half, ties to even. */
  int bad_round = 0;
  for (int i = 0; i < 200000; i++) {
    float f = u2f((rng() & 0x80000000u) | ((0x2f000000u + (rng() % 0x19000000u)) & 0x7fffffffu));
    if (i % 7 == 0) { /* exact ties between neighbouring halves */
      uint16_t h0 = (uint16_t)(rng() % 0x7bff);
      f = (float)((half_value(h0) + half_value((uint16_t)(h0 + 1))) * 0.5);
    }
    uint16_t h = f32_to_fp16(f);
    double hv = half_value(h);
    double fv = f;
    if (fabs(fv) >= 65520.0) {
      if (!isinf(hv) || (hv > 0) != (fv > 0))
        bad_round++;
      continue;
    }
    uint16_t mag = h & 0x7fff;
    double lo = mag > 0 ? half_value((uint16_t)(mag - 1)) : -1.0;
    double hi = mag < 0x7bff ? half_value((uint16_t)(mag + 1)) : INFINITY;
    double a = fabs(fv), c = fabs(hv);
    double err = fabs(a - c);
    if (err > fabs(a - lo) || err > fabs(hi - a))
      bad_round++;
    else if ((err == fabs(a - lo) && mag > 0) || err == fabs(hi - a))
      bad_round += (mag & 1) != 0; /* a tie must pick the even neighbour */
    if (hv != 0 && signbit(hv) != signbit(fv))
      bad_round++;
  }
  CHECK(bad_round == 0, "%d floats not rounded to the nearest half", bad_round);
  /* Ties and edge cases with known answers. */
  CHECK(f32_to_fp16(1.0f + 0x1p-11f) == 0x3c00, "1 + 2^-11 ties to 1.0");
  CHECK(f32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02, "1 + 3*2^-11 ties up to even");
  CHECK(f32_to_fp16(65504.0f) == 0x7bff, "max half");
  CHECK(f32_to_fp16(65519.0f) == 0x7bff, "65519 rounds down");
  CHECK(f32_to_fp16(65520.0f) == 0x7c00, "65520 rounds to inf");
  CHECK(f32_to_fp16(0x1p-24f) == 0x0001, "smallest subnormal");
  CHECK(f32_to_fp16(0x1p-25f) == 0x0000, "half the smallest subnormal ties to zero");
  CHECK(f32_to_fp16(0x1.8p-25f) == 0x0001, "0.75 of the smallest subnormal rounds up");
  CHECK(f32_to_fp16(-0.0f) == 0x8000, "negative zero");
  CHECK(f32_to_fp16(INFINITY) == 0x7c00 && f32_to_fp16(-INFINITY) == 0xfc00, "infinities");
  CHECK((f32_to_fp16(NAN) & 0x7e00) == 0x7e00, "NaN stays a quiet NaN");
  CHECK(f32_to_fp16(0x1.ffcp-15f) == 0x0400, "rounding up into the smallest normal");
}

static void test_bf16(void) {
  CHECK(f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
  CHECK(f32_to_bf16(u2f(0x3f808000u)) == 0x3f80, "tie to even (down)");
  CHECK(f32_to_bf16(u2f(0x3f818000u)) == 0x3f82, "tie to even (up)");
  CHECK(f32_to_bf16(u2f(0x3f808001u)) == 0x3f81, "above the tie rounds up");
  CHECK(f32_to_bf16(u2f(0x7f7fffffu)) == 0x7f80, "max float rounds to inf");
  CHECK(f32_to_bf16(u2f(0x00018000u)) == 0x0002, "subnormals round, not flush");
  CHECK(f32_to_bf16(-0.0f) == 0x8000, "negative zero");
  uint16_t n = f32_to_bf16(u2f(0x7f800001u));
  CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "signalling NaN stays NaN (got %04x)", n);
  CHECK(f32_to_bf16(u2f(0xffc00000u)) == 0xffc0, "quiet negative NaN");
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = bf16_to_f32((uint16_t)h);
    if (f2u(f) != h << 16)
      bad++;
    if (!isnan(f) && f32_to_bf16(f) != h)
      bad++;
  }
  CHECK(bad == 0, "%d bf16 values do not round-trip", bad);
  for (int i = 0; i < 100000; i++) {
    uint32_t u = rng() << 1 ^ rng();
    float f = u2f(u);
    if (isnan(f))
      continue;
    uint16_t b = f32_to_bf16(f);
    double lo = bf16_to_f32((uint16_t)(u >> 16)), hi = bf16_to_f32((uint16_t)((u >> 16) + 1));
    double pick = bf16_to_f32(b);
    if (isinf(hi)) /* beyond the largest bf16: the next step up is 2^128 */
      hi = copysign(ldexp(1.0, 128), (double)f);
    double el = fabs((double)f - lo), eh = fabs((double)f - hi);
    double want = el < eh ? lo : eh < el ? hi : (((u >> 16) & 1) ? hi : lo);
    if (pick != want && !(fabs(want) == ldexp(1.0, 128) && isinf(pick)))
      bad++;
  }
  CHECK(bad == 0, "%d floats not rounded to the nearest bf16", bad);
}

static void test_tables(void) {
  CHECK(dtype_supported(QVL_DTYPE_F32) && dtype_supported(QVL_DTYPE_Q4_K) &&
            dtype_supported(QVL_DTYPE_BF16) && !dtype_supported(QVL_DTYPE_Q8_K) &&
            !dtype_supported(6) && !dtype_supported(-1) && !dtype_supported(40),
        "supported set");
  CHECK(!strcmp(dtype_name(6), "Q5_0") && !strcmp(dtype_name(7), "Q5_1") &&
            !strcmp(dtype_name(10), "Q2_K") && !strcmp(dtype_name(11), "Q3_K") &&
            !strcmp(dtype_name(13), "Q5_K") && !strcmp(dtype_name(16), "IQ2_XXS") &&
            !strcmp(dtype_name(23), "IQ4_XS") && !strcmp(dtype_name(30), "BF16") &&
            !strcmp(dtype_name(39), "MXFP4") && !strcmp(dtype_name(99), "unknown"),
        "ggml names");
  qvl_dtype t;
  CHECK(dtype_from_name("q4_k", &t) && t == QVL_DTYPE_Q4_K, "from name q4_k");
  CHECK(dtype_from_name("F16", &t) && t == QVL_DTYPE_F16, "from name F16");
  CHECK(!dtype_from_name("q5_0", &t) && !dtype_from_name("", &t), "unsupported names rejected");
  size_t rb = 0;
  CHECK(dtype_row_bytes(QVL_DTYPE_Q6_K, 512, &rb) && rb == 420, "q6_K row bytes");
  CHECK(dtype_row_bytes(QVL_DTYPE_Q8_0, 64, &rb) && rb == 68, "q8_0 row bytes");
  CHECK(!dtype_row_bytes(QVL_DTYPE_Q4_0, 33, &rb), "ragged q4_0 row rejected");
  CHECK(!dtype_row_bytes(QVL_DTYPE_Q8_0, INT64_MAX - 31, &rb) || rb > 0, "overflow handled");
  CHECK(dtype_block_bytes(QVL_DTYPE_Q4_K) == 144 && dtype_block_elems(QVL_DTYPE_Q4_K) == 256,
        "q4_K geometry");
}

/* Hand-built blocks with known values: pins the bit layouts independently of the fixtures. */
static void test_known_blocks(void) {
  /* Q4_0: d = 2, element j = (nibble - 8) * 2 with nibble j in the low half for j < 16. */
  uint8_t q40[18];
  uint16_t two = 0x4000;
  memcpy(q40, &two, 2);
  for (int j = 0; j < 16; j++)
    q40[2 + j] = (uint8_t)((j & 0xF) | ((15 - j) << 4));
  float out[256];
  dtype_dequantize_row(QVL_DTYPE_Q4_0, q40, out, 32);
  int bad = 0;
  for (int j = 0; j < 32; j++)
    bad += out[j] != (float)(((j < 16) ? j : 15 - (j - 16)) - 8) * 2.0f;
  CHECK(bad == 0, "q4_0 layout (%d wrong)", bad);

  /* Q8_0: d = 0.5. */
  uint8_t q80[34];
  uint16_t half = 0x3800;
  memcpy(q80, &half, 2);
  for (int j = 0; j < 32; j++)
    q80[2 + j] = (uint8_t)(int8_t)(j - 16);
  dtype_dequantize_row(QVL_DTYPE_Q8_0, q80, out, 32);
  bad = 0;
  for (int j = 0; j < 32; j++)
    bad += out[j] != (float)(j - 16) * 0.5f;
  CHECK(bad == 0, "q8_0 layout");

  /* Q4_K: d = 1, dmin = 1; sub-block s has scale s+1 and min 2s (6-bit packing across bytes
   * 0..11); every quant = its position mod 16. */
  uint8_t q4k[144] = {0};
  uint16_t one = 0x3c00;
  memcpy(q4k, &one, 2);
  memcpy(q4k + 2, &one, 2);
  uint8_t *sc = q4k + 4;
  for (int s = 0; s < 8; s++) {
    int ls = s + 1 + (s >= 4 ? 48 : 0), lm = 2 * s + (s >= 4 ? 32 : 0); /* high bits used */
    if (s < 4) {
      sc[s] = (uint8_t)ls;
      sc[s + 4] = (uint8_t)lm;
    } else {
      sc[s + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
      sc[s - 4] |= (uint8_t)((ls >> 4) << 6);
      sc[s] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  for (int g = 0; g < 4; g++)
    for (int l = 0; l < 32; l++)
      q4k[16 + g * 32 + l] = (uint8_t)((l % 16) | (((l + 1) % 16) << 4));
  dtype_dequantize_row(QVL_DTYPE_Q4_K, q4k, out, 256);
  bad = 0;
  for (int i = 0; i < 256; i++) {
    int s = i / 32, l = i % 32;
    int q = (s % 2 == 0) ? l % 16 : (l + 1) % 16;
    int ls = s + 1 + (s >= 4 ? 48 : 0), lm = 2 * s + (s >= 4 ? 32 : 0);
    bad += out[i] != (float)ls * (float)q - (float)lm;
  }
  CHECK(bad == 0, "q4_K layout (%d wrong)", bad);

  /* Q6_K: d = 1, scale of group g (16 elements) = g - 8; quant of element i = (i * 7) % 64. */
  uint8_t q6k[210] = {0};
  int qv[256];
  for (int i = 0; i < 256; i++)
    qv[i] = (i * 7) % 64;
  for (int h = 0; h < 2; h++)
    for (int l = 0; l < 32; l++) {
      const int *L = qv + 128 * h;
      q6k[64 * h + l] = (uint8_t)((L[l] & 0xF) | ((L[l + 64] & 0xF) << 4));
      q6k[64 * h + l + 32] = (uint8_t)((L[l + 32] & 0xF) | ((L[l + 96] & 0xF) << 4));
      q6k[128 + 32 * h + l] = (uint8_t)((L[l] >> 4) | ((L[l + 32] >> 4) << 2) |
                                        ((L[l + 64] >> 4) << 4) | ((L[l + 96] >> 4) << 6));
    }
  for (int g = 0; g < 16; g++)
    q6k[192 + g] = (uint8_t)(int8_t)(g - 8);
  memcpy(q6k + 208, &one, 2);
  dtype_dequantize_row(QVL_DTYPE_Q6_K, q6k, out, 256);
  bad = 0;
  for (int i = 0; i < 256; i++)
    bad += out[i] != (float)(i / 16 - 8) * (float)(qv[i] - 32);
  CHECK(bad == 0, "q6_K layout (%d wrong)", bad);
}

/* Worst |dequantized - x| / max|x of the block|: half a quantization step plus the fp16
 * rounding of the scale (2^-11 relative, times the largest quant); Q4_0 clamps the value opposite
 * the largest one to 7 steps (a full step of error); K-quants add their 6/8-bit sub-scales.
 * These are sanity bounds: a wrong bit layout gives errors of order 1. */
#define Q8_0_BOUND (1.0 / 254 + 1.0 / 2048 + 1e-6)
#define Q4_0_BOUND (1.0 / 8 + 1.0 / 2048 + 1e-6)
#define Q4_K_BOUND 0.1
#define Q6_K_BOUND 0.02

/* Quantize-dequantize of random data: the error is bounded by each format's step. */
static void test_round_trip(void) {
  enum { N = 4096 };
  static float x[N], y[N];
  static uint8_t q[N * 2];
  for (int i = 0; i < N; i++)
    x[i] = ((float)(rng() % 20001) - 10000.0f) / 3000.0f * ((i / 256) % 3 == 0 ? 0.01f : 1.0f);
  x[5] = 0;
  struct {
    qvl_dtype t;
    double rel; /* bound on |err| / max|x| per block */
  } cases[] = {{QVL_DTYPE_Q8_0, Q8_0_BOUND}, {QVL_DTYPE_Q4_0, Q4_0_BOUND},
               {QVL_DTYPE_Q4_K, Q4_K_BOUND}, {QVL_DTYPE_Q6_K, Q6_K_BOUND},
               {QVL_DTYPE_Q8_K, 1.0 / 254 + 1e-6}, {QVL_DTYPE_F16, 1.0 / 2048},
               {QVL_DTYPE_BF16, 1.0 / 256}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    dtype_quantize_row(cases[c].t, x, q, N);
    dtype_dequantize_row(cases[c].t, q, y, N);
    int blk = dtype_block_elems(cases[c].t) > 1 ? dtype_block_elems(cases[c].t) : 32;
    double worst = 0;
    for (int b = 0; b < N / blk; b++) {
      double amax = 0;
      for (int j = 0; j < blk; j++)
        amax = fmax(amax, fabs(x[b * blk + j]));
      for (int j = 0; j < blk; j++)
        worst = fmax(worst, fabs((double)y[b * blk + j] - x[b * blk + j]) / amax);
    }
    CHECK(worst <= cases[c].rel, "%s round trip: error %g of the block max, bound %g",
          dtype_name(cases[c].t), worst, cases[c].rel);
  }
  /* All-zero blocks quantize to zeros. */
  memset(x, 0, sizeof x);
  qvl_dtype zt[] = {QVL_DTYPE_Q8_0, QVL_DTYPE_Q4_0, QVL_DTYPE_Q4_K, QVL_DTYPE_Q6_K, QVL_DTYPE_Q8_K};
  for (size_t c = 0; c < sizeof zt / sizeof zt[0]; c++) {
    dtype_quantize_row(zt[c], x, q, 512);
    dtype_dequantize_row(zt[c], q, y, 512);
    int nz = 0;
    for (int i = 0; i < 512; i++)
      nz += y[i] != 0.0f;
    CHECK(nz == 0, "%s of zeros gives %d non-zeros", dtype_name(zt[c]), nz);
  }
}

/* Compares a quantized tensor with its F32 source: exact bytes when quantized with our quantizer,
 * and the dequantized values within `rel` * max|row| of the source. */
static void compare_tensor(const char *file, const tensor *qt, const float *src, double rel,
                           bool want_exact, int *n_exact, int *n_close) {
  int64_t n_in = qt->ne[0], rows = tensor_nrows(qt);
  size_t rb;
  if (!dtype_row_bytes(qt->type, n_in, &rb)) {
    CHECK(false, "%s: %s: bad row length %lld", file, qt->name, (long long)n_in);
    return;
  }
  uint8_t *buf = malloc(rb);
  float *deq = malloc((size_t)n_in * sizeof(float));
  int64_t bad_bytes_rows = 0, bad_vals = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = src + r * n_in;
    const uint8_t *stored = (const uint8_t *)qt->data + (size_t)r * rb;
    dtype_quantize_row(qt->type, x, buf, n_in);
    if (memcmp(buf, stored, rb))
      bad_bytes_rows++;
    dtype_dequantize_row(qt->type, stored, deq, n_in);
    double amax = 0;
    for (int64_t i = 0; i < n_in; i++)
      amax = fmax(amax, fabs(x[i]));
    for (int64_t i = 0; i < n_in; i++)
      bad_vals += !(fabs((double)deq[i] - x[i]) <= rel * amax);
  }
  if (want_exact) {
    CHECK(bad_bytes_rows == 0, "%s: %s (%s): %lld of %lld rows differ from our quantizer", file,
          qt->name, dtype_name(qt->type), (long long)bad_bytes_rows, (long long)rows);
    *n_exact += bad_bytes_rows == 0;
  }
  CHECK(bad_vals == 0, "%s: %s (%s): %lld values off by more than %g of the row max", file,
        qt->name, dtype_name(qt->type), (long long)bad_vals, rel);
  *n_close += bad_vals == 0;
  free(buf);
  free(deq);
}

static void test_micro_a(void) {
  const char *dir = "tests/fixtures/models/micro-a/gguf/";
  char path[256];
  snprintf(path, sizeof path, "%smicro-a-F32.gguf", dir);
  gguf *f32 = NULL;
  qvl_status st = gguf_open(path, &f32);
  CHECK(st == QVL_OK, "open %s: %s", path, qvl_last_error());
  if (st != QVL_OK)
    return;
  struct {
    const char *suffix;
    qvl_dtype t;
    double rel;
  } files[] = {{"F16", QVL_DTYPE_F16, 1.0 / 2048}, {"BF16", QVL_DTYPE_BF16, 1.0 / 256},
               {"Q8_0", QVL_DTYPE_Q8_0, Q8_0_BOUND}, {"Q4_0", QVL_DTYPE_Q4_0, Q4_0_BOUND}};
  for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
    snprintf(path, sizeof path, "%smicro-a-%s.gguf", dir, files[fi].suffix);
    gguf *g = NULL;
    st = gguf_open(path, &g);
    CHECK(st == QVL_OK, "open %s: %s", path, qvl_last_error());
    if (st != QVL_OK)
      continue;
    int n_q = 0, n_exact = 0, n_close = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
      const tensor *qt = gguf_tensor_at(g, i);
      if (qt->type == QVL_DTYPE_F32)
        continue;
      CHECK(qt->type == files[fi].t, "%s: %s has type %s", path, qt->name, dtype_name(qt->type));
      const tensor *ft = gguf_find_tensor(f32, qt->name);
      CHECK(ft && ft->type == QVL_DTYPE_F32 && tensor_nelements(ft) == tensor_nelements(qt),
            "%s: no matching F32 tensor", qt->name);
      if (!ft || ft->type != QVL_DTYPE_F32 || tensor_nelements(ft) != tensor_nelements(qt))
        continue;
      n_q++;
      compare_tensor(path, qt, ft->data, files[fi].rel, true, &n_exact, &n_close);
    }
    CHECK(n_q == 30, "%s: %d quantized matrices, expected 30", path, n_q);
    printf("  %s: %d matrices, %d byte-identical to our quantizer, %d close\n", files[fi].suffix,
           n_q, n_exact, n_close);
    gguf_close(g);
  }
  gguf_close(f32);
}

/* HF name of a GGUF text tensor (the converter's mapping, gguf-layout.md section 6). */
static bool hf_name(const char *gg, char *out, size_t n) {
  static const struct {
    const char *gg, *hf;
  } map[] = {{"attn_q", "self_attn.q_proj"},  {"attn_k", "self_attn.k_proj"},
             {"attn_v", "self_attn.v_proj"},  {"attn_output", "self_attn.o_proj"},
             {"ffn_gate", "mlp.gate_proj"},   {"ffn_up", "mlp.up_proj"},
             {"ffn_down", "mlp.down_proj"}};
  if (!strcmp(gg, "token_embd.weight")) {
    snprintf(out, n, "model.language_model.embed_tokens.weight");
    return true;
  }
  int layer, len = 0;
  char what[64];
  if (sscanf(gg, "blk.%d.%63[a-z_].weight%n", &layer, what, &len) != 2 || gg[len])
    return false;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(what, map[i].gg)) {
      snprintf(out, n, "model.language_model.layers.%d.%s.weight", layer, map[i].hf);
      return true;
    }
  return false;
}

/* micro-b: Q4_K and Q6_K files (llama-quantize --pure) against the HF F32 weights; Q8_0/Q4_0 too. */
static void test_micro_b(void) {
  safetensors *st = NULL;
  const char *stp = "tests/fixtures/models/micro-b/hf/model.safetensors";
  qvl_status s = st_open(stp, &st);
  CHECK(s == QVL_OK, "open %s: %s", stp, qvl_last_error());
  if (s != QVL_OK)
    return;
  struct {
    const char *suffix;
    qvl_dtype t;
    double rel;
  } files[] = {{"Q4_K", QVL_DTYPE_Q4_K, Q4_K_BOUND}, {"Q6_K", QVL_DTYPE_Q6_K, Q6_K_BOUND},
               {"Q8_0", QVL_DTYPE_Q8_0, Q8_0_BOUND}, {"Q4_0", QVL_DTYPE_Q4_0, Q4_0_BOUND}};
  for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/micro-b/gguf/micro-b-%s.gguf",
             files[fi].suffix);
    gguf *g = NULL;
    s = gguf_open(path, &g);
    CHECK(s == QVL_OK, "open %s: %s", path, qvl_last_error());
    if (s != QVL_OK)
      continue;
    int n_q = 0, n_exact = 0, n_close = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
      const tensor *qt = gguf_tensor_at(g, i);
      if (qt->type == QVL_DTYPE_F32)
        continue;
      CHECK(qt->type == files[fi].t, "%s: %s has type %s", path, qt->name, dtype_name(qt->type));
      char hn[160];
      bool mapped = hf_name(qt->name, hn, sizeof hn);
      CHECK(mapped, "%s: no HF name for %s", path, qt->name);
      const st_tensor *ft = mapped ? st_find(st, hn) : NULL;
      CHECK(ft && ft->dtype == ST_F32 && ft->n_dims == 2 && ft->shape[1] == qt->ne[0] &&
                ft->shape[0] == qt->ne[1],
            "%s: HF tensor %s missing or of another shape", qt->name, hn);
      if (!ft || ft->dtype != ST_F32 || ft->n_dims != 2 || ft->shape[1] != qt->ne[0] ||
          ft->shape[0] != qt->ne[1])
        continue;
      n_q++;
      compare_tensor(path, qt, ft->data, files[fi].rel, true, &n_exact, &n_close);
    }
    CHECK(n_q == 15, "%s: %d quantized matrices, expected 15", path, n_q);
    printf("  micro-b %s: %d matrices, %d byte-identical to our quantizer, %d close\n",
           files[fi].suffix, n_q, n_exact, n_close);
    gguf_close(g);
  }
  st_close(st);
}

int main(void) {
  test_tables();
  test_fp16();
  test_bf16();
  test_known_blocks();
  test_round_trip();
  test_micro_a();
  test_micro_b();
  return TEST_SUMMARY("test_dtype");
}
