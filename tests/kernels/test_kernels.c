/*
 * Every kernels.h entry of every variant this CPU runs (ref, avx2, avx2vnni, avx512, ...) against
 * independent double-precision computations written here (matmul on exactly dequantized weights, attention
 * with an explicit softmax over all scores), on ragged sizes, with the named tolerances below
 * (documented in docs/KERNELS.md). Also: results bit-identical for 1 and 3 threads, and for a
 * token computed alone or inside a batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "kernels/kernels.h"
#include "kernels/tile_model.h"
#include "test.h"

/* ---- Named tolerances. Error metric for matmul element y[t][o]:
 *   |y - exact| <= prod * sum_i |w_i x_i|  +  act * sum_i |w_i| * amax(block of x_i)
 *                  + wq * sum_i amax(block of w_i) * (|x_i| + act * amax(block of x_i))
 * prod covers float rounding of products and sums; act covers activation quantization (a value
 * moves by at most half a step = amax/254 of its block, plus the fp16 rounding of the Q8_0 scale);
 * wq covers weights quantized by the kernels themselves (the int8 fast tier's F16/BF16 -> Q8_0:
 * half a step plus the fp16 scale's rounding, amax/254 + amax/2048 of the weight's block), with
 * its product by the activation's error. */
typedef struct tol {
  const char *name;
  double prod, act, wq;
} tol;

static const tol TOL_REF = {"ref (double accumulation)", 1e-6, 0, 0};
static const tol TOL_F32_SIMD = {"simd fp32 accumulation", 1e-5, 0, 0};
static const tol TOL_Q8_ACT = {"q8_0 activations (vpdpbusd)", 1e-5, 1.0 / 254 + 1.0 / 2048, 0};
/* Fast tier without a fast bf16 dot product (avx2, avx2vnni, avx512, a core whose vdpbf16ps loses
 * to FP32 FMA): F16/BF16 weights quantized to Q8_0 at load and multiplied on int8 blocks. */
static const tol TOL_Q8_WEIGHTS = {"f16/bf16 as q8_0 blocks, q8_0 activations (int8 fast tier)", 1e-5,
                                   1.0 / 254 + 1.0 / 2048, 1.0 / 254 + 1.0 / 2048};
static const tol TOL_Q8K_ACT = {"q8_K activations (vpdpbusd)", 1e-5, 1.0 / 254 + 1e-6, 0};
/* Fast tier, bf16 dot products, fp32 accumulation: the activation is rounded to bf16 (unit
 * roundoff 2^-8), and so is an F16 weight (BF16 weights are used as they are). */
static const tol TOL_BF16_DOT = {"bf16 dot products (vdpbf16ps), bf16 weights", 1.0 / 256 + 1e-5, 0, 0};
static const tol TOL_BF16_DOT_F16 = {"bf16 dot products (vdpbf16ps), f16 weights rounded to bf16",
                                     2.0 / 256 + 1e-5, 0, 0};
/* Exact tier on AMX, F16/BF16 weights: x = xh + xl and w = wh + wl in bf16 (w exact), products
 * xh wh + xh wl + xl wh. Per product the error is the residual of x (at most 2^-16 |x|) and the
 * dropped xl wl (at most 2^-16 |x w|): 2^-15 relative, plus fp32 accumulation as TOL_F32_SIMD. */
static const tol TOL_BF16X3 = {"split bf16, three tile products (AMX exact)", 1.0 / 32768 + 1e-5, 0, 0};

/* Attention, norms and activations: |got - exact| <= rel * scale of the output (max |v| for
 * attention, |exact| + 1e-30 elementwise otherwise) + abs. */
#define TOL_ATTN_REL 2e-6
/* Attention in the fast tier (bf16 q.k and p v: AVX-512 BF16, AMX tiles), against an oracle that
 * rounds q*scale, k and v to bf16 as the kernels do: rel = expm1(2 TOL_ATTN_BF16_DOT max_j
 * sum_d |q_d k_jd|) + TOL_ATTN_BF16_P + TOL_ATTN_BF16_SUM, of max |v|. The fp32 score sums move a
 * weight by at most e^(2 eps); the probabilities are rounded to bf16 (2^-8); fp32 accumulation. */
#define TOL_ATTN_BF16_DOT 1e-5
#define TOL_ATTN_BF16_P (1.0 / 256)
#define TOL_ATTN_BF16_SUM (1.0 / 4096)
#define TOL_ELEM_REF_REL 1e-6  /* ref: double math, one rounding */
#define TOL_ELEM_SIMD_REL 4e-6 /* simd: float math, polynomial exp/tanh/erf */
#define TOL_ELEM_ABS 1e-7

static uint64_t rs = 88172645463325252ull;
static double rnd(void) { /* uniform in [-1, 1) */
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (double)(rs >> 11) / 4503599627370496.0 - 1.0;
}

static const char *isa_now;
/* The AMX kernels run (on the hardware, or through the tile model). */
static bool amx_now(void) { return !strncmp(isa_now, "amx", 3); }

static tol matmul_tol(qvl_dtype t, kn_precision prec, int64_t n_in) {
  if (!strcmp(isa_now, "ref"))
    return TOL_REF;
  if (prec == KN_PREC_FAST && kernels_fast_int8() && (t == QVL_DTYPE_F16 || t == QVL_DTYPE_BF16) && n_in % 32 == 0)
    return TOL_Q8_WEIGHTS;
  if (prec == KN_PREC_FAST && kernels_fast_bf16() && (t == QVL_DTYPE_F16 || t == QVL_DTYPE_BF16))
    return t == QVL_DTYPE_F16 ? TOL_BF16_DOT_F16 : TOL_BF16_DOT;
  if (prec == KN_PREC_EXACT && amx_now() && (t == QVL_DTYPE_F16 || t == QVL_DTYPE_BF16))
    return TOL_BF16X3;
  switch (t) {
  case QVL_DTYPE_Q8_0:
  case QVL_DTYPE_Q4_0:
    return TOL_Q8_ACT;
  case QVL_DTYPE_Q4_K:
  case QVL_DTYPE_Q6_K:
    return TOL_Q8K_ACT;
  default:
    return TOL_F32_SIMD;
  }
}

/* Random weight in type t: values drawn in float, stored with our quantizer. */
typedef struct test_w {
  tensor t;
  void *data;
  float *deq; /* [n_out][n_in] exactly dequantized */
} test_w;

static void make_weight(test_w *w, qvl_dtype type, int64_t n_in, int64_t n_out) {
  size_t rb;
  dtype_row_bytes(type, n_in, &rb);
  w->data = malloc(rb * (size_t)n_out);
  w->deq = malloc(sizeof(float) * (size_t)(n_in * n_out));
  float *row = malloc(sizeof(float) * (size_t)n_in);
  for (int64_t o = 0; o < n_out; o++) {
    double s = (o % 5 == 0) ? 0.01 : 1.0; /* rows of different magnitude */
    for (int64_t i = 0; i < n_in; i++)
      row[i] = (float)(rnd() * s);
    dtype_quantize_row(type, row, (char *)w->data + rb * (size_t)o, n_in);
    dtype_dequantize_row(type, (char *)w->data + rb * (size_t)o, w->deq + o * n_in, n_in);
  }
  free(row);
  w->t = (tensor){.name = "test", .type = type, .n_dims = 2, .ne = {n_in, n_out, 1, 1},
                  .data = w->data, .nbytes = rb * (size_t)n_out};
}

static void free_weight(test_w *w) {
  free(w->data);
  free(w->deq);
}

static int64_t blk_of(qvl_dtype t) {
  return t == QVL_DTYPE_Q4_K || t == QVL_DTYPE_Q6_K ? 256 : t == QVL_DTYPE_Q8_0 || t == QVL_DTYPE_Q4_0 ? 32 : 1;
}

static double worst_ratio; /* largest error / allowed seen, for the report */
static double worst_f32;   /* the same against TOL_F32_SIMD (for the AMX exact tier's report) */
static double worst_attn_fast; /* the fast tier's attention: largest error / allowed */

static void check_matmul_prec(qvl_dtype type, int64_t n_in, int64_t n_out, int64_t n_tok, bool bias,
                              kn_precision prec) {
  test_w w;
  make_weight(&w, type, n_in, n_out);
  kn_weight kw;
  qvl_status st = kn_weight_init_prec(&kw, &w.t, prec);
  CHECK(st == QVL_OK, "kn_weight_init: %s", qvl_last_error());
  if (st != QVL_OK) {
    free_weight(&w);
    return;
  }
  float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
  float *b = malloc(sizeof(float) * (size_t)n_out);
  float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
  float *y1 = malloc(sizeof(float) * (size_t)n_out);
  for (int64_t i = 0; i < n_tok * n_in; i++)
    x[i] = (float)(rnd() * ((i / 32) % 7 == 3 ? 50.0 : 1.0)); /* some loud blocks */
  for (int64_t o = 0; o < n_out; o++)
    b[o] = (float)rnd();
  kn_matmul(&kw, x, n_tok, bias ? b : NULL, y);
  tol tl = matmul_tol(type, prec, n_in);
  int64_t blk = tl.wq > 0 ? 32 : blk_of(type);
  int bad = 0;
  for (int64_t t = 0; t < n_tok; t++) {
    const float *xt = x + t * n_in;
    for (int64_t o = 0; o < n_out; o++) {
      const float *wr = w.deq + o * n_in;
      double exact = bias ? b[o] : 0.0, sabs = fabs(exact), sact = 0.0, swq = 0.0;
      for (int64_t i0 = 0; i0 < n_in; i0 += blk) {
        double amax = 0, wmax = 0;
        for (int64_t i = i0; i < i0 + blk && i < n_in; i++) {
          amax = fmax(amax, fabs(xt[i]));
          wmax = fmax(wmax, fabs((double)wr[i]));
        }
        for (int64_t i = i0; i < i0 + blk && i < n_in; i++) {
          exact += (double)wr[i] * xt[i];
          sabs += fabs((double)wr[i] * xt[i]);
          sact += fabs((double)wr[i]) * amax;
          swq += wmax * (fabs((double)xt[i]) + tl.act * amax);
        }
      }
      double allowed = tl.prod * sabs + tl.act * sact + tl.wq * swq + 1e-30;
      double err = fabs((double)y[t * n_out + o] - exact);
      if (err / allowed > worst_ratio)
        worst_ratio = err / allowed;
      if (tl.prod == TOL_BF16X3.prod && err / (TOL_F32_SIMD.prod * sabs + 1e-30) > worst_f32)
        worst_f32 = err / (TOL_F32_SIMD.prod * sabs + 1e-30);
      if (!(err <= allowed) && bad++ < 3)
        fprintf(stderr, "  %s %s n_in=%lld n_out=%lld tok=%lld: y[%lld][%lld]=%.9g exact %.9g "
                        "err %.3g allowed %.3g (%s)\n",
                isa_now, dtype_name(type), (long long)n_in, (long long)n_out, (long long)n_tok,
                (long long)t, (long long)o, y[t * n_out + o], exact, err, allowed, tl.name);
    }
  }
  CHECK(bad == 0, "%s matmul %s %lldx%lld tokens %lld: %d elements out of tolerance '%s'", isa_now,
        dtype_name(type), (long long)n_out, (long long)n_in, (long long)n_tok, bad, tl.name);
  /* Batch invariance: each token computed alone gives the same bits as inside the batch. */
  if (n_tok > 1) {
    int diff = 0;
    for (int64_t t = 0; t < n_tok; t++) {
      kn_matmul(&kw, x + t * n_in, 1, bias ? b : NULL, y1);
      diff += memcmp(y1, y + t * n_out, sizeof(float) * (size_t)n_out) != 0;
    }
    CHECK(diff == 0, "%s matmul %s %lldx%lld: %d of %lld tokens differ when computed alone",
          isa_now, dtype_name(type), (long long)n_out, (long long)n_in, diff, (long long)n_tok);
  }
  /* kn_weight_row is exact. */
  float *row = malloc(sizeof(float) * (size_t)n_in);
  int rbad = 0;
  for (int64_t o = 0; o < n_out; o += 3) {
    kn_weight_row(&kw, o, row);
    rbad += memcmp(row, w.deq + o * n_in, sizeof(float) * (size_t)n_in) != 0;
  }
  CHECK(rbad == 0, "%s kn_weight_row %s: %d rows differ", isa_now, dtype_name(type), rbad);
  free(row);
  /* The fast tier really rounds to bf16 (AVX-512 BF16) or int8 blocks: it must differ from the
   * exact tier somewhere (otherwise the exact path ran and this test would prove nothing). */
  if (prec == KN_PREC_FAST && (kernels_fast_bf16() || tl.wq > 0) &&
      (type == QVL_DTYPE_F16 || type == QVL_DTYPE_BF16) && n_in >= 33 && n_out >= 17) {
    kn_weight ke;
    CHECK(kn_weight_init(&ke, &w.t) == QVL_OK, "kn_weight_init: %s", qvl_last_error());
    float *ye = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    kn_matmul(&ke, x, n_tok, bias ? b : NULL, ye);
    CHECK(memcmp(ye, y, sizeof(float) * (size_t)(n_tok * n_out)) != 0,
          "%s fast matmul %s %lldx%lld equals the exact tier bit for bit", isa_now, dtype_name(type),
          (long long)n_out, (long long)n_in);
    free(ye);
    kn_weight_free(&ke);
  }
  kn_weight_free(&kw);
  free(x);
  free(b);
  free(y);
  free(y1);
  free_weight(&w);
}

static void check_matmul(qvl_dtype type, int64_t n_in, int64_t n_out, int64_t n_tok, bool bias) {
  check_matmul_prec(type, n_in, n_out, n_tok, bias, KN_PREC_EXACT);
}

/* The fast tier on ragged sizes (odd n_in pads a pair; partial panels; every token-chunk width). */
static void test_matmul_fast(void) {
  static const qvl_dtype types[] = {QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_F32, QVL_DTYPE_Q8_0};
  static const int64_t n_in_float[] = {1, 7, 33, 100, 273};
  static const int64_t n_outs[] = {1, 5, 17, 40, 67};
  static const int64_t toks[] = {1, 2, 3, 7, 17, 64, 75};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    bool q = types[ti] == QVL_DTYPE_Q8_0;
    for (size_t a = 0; a < 5; a++)
      for (size_t o = 0; o < sizeof n_outs / sizeof n_outs[0]; o++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
          check_matmul_prec(types[ti], q ? 32 * (int64_t)(a + 1) : n_in_float[a], n_outs[o], toks[k],
                            (a + o + k) % 2 == 1, KN_PREC_FAST);
  }
  /* Where fast means int8 blocks, F16/BF16 rows a multiple of 32 long take that path. */
  if (kernels_fast_int8()) {
    static const int64_t n_in_q[] = {32, 64, 160, 1024};
    for (size_t ti = 0; ti < 2; ti++)
      for (size_t a = 0; a < sizeof n_in_q / sizeof n_in_q[0]; a++)
        for (size_t o = 0; o < sizeof n_outs / sizeof n_outs[0]; o++)
          for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
            check_matmul_prec(types[ti], n_in_q[a], n_outs[o], toks[k], (a + o + k) % 2 == 0, KN_PREC_FAST);
  }
}

/* Q8_0/Q4_0 on AVX-512 run on pairs of 16-row panels x chunks of 6, 4, 2, 1 tokens, with the odd
 * last panel and GEMV on the 1-panel kernels: n_out of 1..5 panels (even and odd pair counts, a
 * partial last panel), token counts that leave every chunk remainder, odd block counts. */
static void test_matmul_pairs(void) {
  static const qvl_dtype types[] = {QVL_DTYPE_Q8_0, QVL_DTYPE_Q4_0};
  static const int64_t n_ins[] = {32, 160, 224};
  static const int64_t n_outs[] = {16, 31, 32, 48, 64, 80};
  static const int64_t toks[] = {2, 5, 6, 11, 13, 70};
  for (size_t ti = 0; ti < 2; ti++)
    for (size_t a = 0; a < sizeof n_ins / sizeof n_ins[0]; a++)
      for (size_t o = 0; o < sizeof n_outs / sizeof n_outs[0]; o++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
          check_matmul(types[ti], n_ins[a], n_outs[o], toks[k], (a + o + k) % 2 == 1);
}

static void test_matmul(void) {
  static const qvl_dtype types[] = {QVL_DTYPE_F32, QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_Q8_0,
                                    QVL_DTYPE_Q4_0, QVL_DTYPE_Q4_K, QVL_DTYPE_Q6_K};
  static const int64_t n_in_float[] = {1, 7, 33, 100, 273};
  static const int64_t n_in_q32[] = {32, 96, 320};
  static const int64_t n_in_k[] = {256, 768};
  static const int64_t n_outs[] = {1, 5, 17, 67};
  static const int64_t toks[] = {1, 2, 3, 7, 17, 64};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    qvl_dtype t = types[ti];
    const int64_t *ins = blk_of(t) == 1 ? n_in_float : blk_of(t) == 32 ? n_in_q32 : n_in_k;
    size_t n_ins = blk_of(t) == 1 ? 5 : blk_of(t) == 32 ? 3 : 2;
    for (size_t a = 0; a < n_ins; a++)
      for (size_t o = 0; o < sizeof n_outs / sizeof n_outs[0]; o++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
          check_matmul(t, ins[a], n_outs[o], toks[k], (a + o + k) % 2 == 0);
  }
}

/* The same matmul with 1 and 3 threads gives the same bits. */
static void test_thread_invariance(const char *isa) {
  static const qvl_dtype types[] = {QVL_DTYPE_F32, QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_Q8_0,
                                    QVL_DTYPE_Q4_0, QVL_DTYPE_Q4_K, QVL_DTYPE_Q6_K};
  for (size_t tp = 0; tp < 2 * sizeof types / sizeof types[0]; tp++) {
    size_t ti = tp % (sizeof types / sizeof types[0]);
    kn_precision prec = tp < sizeof types / sizeof types[0] ? KN_PREC_EXACT : KN_PREC_FAST;
    int64_t n_in = 512, n_out = 203, n_tok = 37;
    test_w w;
    make_weight(&w, types[ti], n_in, n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
    float *y[2];
    for (int64_t i = 0; i < n_tok * n_in; i++)
      x[i] = (float)rnd();
    for (int r = 0; r < 2; r++) {
      kernels_init(isa, r == 0 ? 1 : 3);
      kn_weight kw;
      kn_weight_init_prec(&kw, &w.t, prec);
      y[r] = malloc(sizeof(float) * (size_t)(n_tok * n_out));
      kn_matmul(&kw, x, n_tok, NULL, y[r]);
      kn_weight_free(&kw);
    }
    CHECK(!memcmp(y[0], y[1], sizeof(float) * (size_t)(n_tok * n_out)),
          "%s %s matmul %s: 1 and 3 threads differ", isa, kn_precision_name(prec), dtype_name(types[ti]));
    free(y[0]);
    free(y[1]);
    free(x);
    free_weight(&w);
  }
}

/* ---- attention */
/* Fast tier (AVX-512 BF16, AMX tiles), head_dim 64: the oracle rounds q*scale, k and v to bf16 as
 * the kernels do and then computes in double; what remains is the TOL_ATTN_BF16_* above. A key
 * dropped or misplaced costs ~1/n_kv: caught. */
static double bf(double x) { return bf16_to_f32(f32_to_bf16((float)x)); }
static bool attn_fast_now(int head_dim, kn_precision prec) {
  return prec == KN_PREC_FAST && kernels_fast_bf16() && head_dim == 64;
}

static void check_attention_prec(int n_head, int n_kv_head, int head_dim, int64_t n_q, int64_t n_kv,
                                 int64_t causal_base, kn_precision prec);
static void check_attention(int n_head, int n_kv_head, int head_dim, int64_t n_q, int64_t n_kv,
                            int64_t causal_base) {
  check_attention_prec(n_head, n_kv_head, head_dim, n_q, n_kv, causal_base, KN_PREC_EXACT);
}

static void check_attention_kv(int n_head, int n_kv_head, int head_dim, int64_t n_q, int64_t n_kv,
                               int64_t causal_base, kn_precision prec, bool kv16);
static void check_attention_prec(int n_head, int n_kv_head, int head_dim, int64_t n_q, int64_t n_kv,
                                 int64_t causal_base, kn_precision prec) {
  check_attention_kv(n_head, n_kv_head, head_dim, n_q, n_kv, causal_base, prec, false);
}

/* kv16: K/V stored as IEEE half (kn_attention_f16kv, the F16 KV cache). The oracle sees the values
 * rounded to f16 (that rounding is the cache's, done once when a row is appended), so the f32
 * tolerance applies; and the kernel must give bit for bit what the f32 path gives on those rounded
 * values (it only widens in registers). */
static void check_attention_kv(int n_head, int n_kv_head, int head_dim, int64_t n_q, int64_t n_kv,
                               int64_t causal_base, kn_precision prec, bool kv16) {
  int64_t q_stride = (int64_t)n_head * head_dim + 3, kv_stride = (int64_t)n_kv_head * head_dim + 5;
  int64_t out_stride = (int64_t)n_head * head_dim + 1;
  float *q = malloc(sizeof(float) * (size_t)(n_q * q_stride));
  float *k = malloc(sizeof(float) * (size_t)(n_kv * kv_stride));
  float *v = malloc(sizeof(float) * (size_t)(n_kv * kv_stride));
  float *out = malloc(sizeof(float) * (size_t)(n_q * out_stride));
  double *sc = malloc(sizeof(double) * (size_t)n_kv);
  for (int64_t i = 0; i < n_q * q_stride; i++)
    q[i] = (float)(rnd() * 2);
  for (int64_t i = 0; i < n_kv * kv_stride; i++) {
    k[i] = (float)(rnd() * 2);
    v[i] = (float)rnd();
  }
  for (int64_t i = 0; i < n_q * out_stride; i++)
    out[i] = 12345.0f; /* the padding must stay untouched */
  float scale = 1.0f / sqrtf((float)head_dim);
  bool same_as_f32 = true;
  if (kv16) {
    uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)(n_kv * kv_stride));
    uint16_t *vh = malloc(sizeof(uint16_t) * (size_t)(n_kv * kv_stride));
    float *o32 = malloc(sizeof(float) * (size_t)(n_q * out_stride));
    for (int64_t i = 0; i < n_kv * kv_stride; i++) {
      kh[i] = f32_to_fp16(k[i]), vh[i] = f32_to_fp16(v[i]);
      k[i] = fp16_to_f32(kh[i]), v[i] = fp16_to_f32(vh[i]);
    }
    memcpy(o32, out, sizeof(float) * (size_t)(n_q * out_stride));
    kn_attention_f16kv(q, n_q, q_stride, kh, vh, n_kv, kv_stride, n_head, n_kv_head, head_dim, scale, causal_base,
                       out, out_stride);
    kn_attention(q, n_q, q_stride, k, v, n_kv, kv_stride, n_head, n_kv_head, head_dim, scale, causal_base, o32,
                 out_stride);
    same_as_f32 = !memcmp(o32, out, sizeof(float) * (size_t)(n_q * out_stride));
    free(kh), free(vh), free(o32);
  } else {
    kn_attention_prec(q, n_q, q_stride, k, v, n_kv, kv_stride, n_head, n_kv_head, head_dim, scale,
                      causal_base, out, out_stride, prec);
  }
  const bool fast = attn_fast_now(head_dim, prec);
  int bad = 0, pad_bad = 0;
  int group = n_head / n_kv_head;
  for (int64_t i = 0; i < n_q; i++) {
    int64_t nk = causal_base < 0 ? n_kv : causal_base + i + 1 < n_kv ? causal_base + i + 1 : n_kv;
    for (int h = 0; h < n_head; h++) {
      const float *qh = q + i * q_stride + (int64_t)h * head_dim;
      int kvh = h / group;
      double mx = -INFINITY, sum = 0, vmax = 0, eps_s = 0;
      for (int64_t j = 0; j < nk; j++) {
        double s = 0, sa = 0;
        for (int d = 0; d < head_dim; d++) {
          double kd = k[j * kv_stride + (int64_t)kvh * head_dim + d];
          double p = fast ? bf((float)(qh[d] * scale)) * bf(kd) : (double)qh[d] * kd;
          s += p;
          sa += fabs(p);
        }
        sc[j] = fast ? s : s * scale;
        mx = fmax(mx, sc[j]);
        eps_s = fmax(eps_s, TOL_ATTN_BF16_DOT * sa);
      }
      double rel = fast ? expm1(2 * eps_s) + TOL_ATTN_BF16_P + TOL_ATTN_BF16_SUM : TOL_ATTN_REL;
      for (int64_t j = 0; j < nk; j++) {
        sc[j] = exp(sc[j] - mx);
        sum += sc[j];
      }
      for (int d = 0; d < head_dim; d++) {
        double o = 0;
        for (int64_t j = 0; j < nk; j++) {
          double vv = v[j * kv_stride + (int64_t)kvh * head_dim + d];
          if (fast)
            vv = bf(vv);
          o += sc[j] * vv;
          vmax = fmax(vmax, fabs(vv));
        }
        o /= sum;
        double got = out[i * out_stride + (int64_t)h * head_dim + d];
        if (fast && fabs(got - o) / (rel * vmax + 1e-30) > worst_attn_fast)
          worst_attn_fast = fabs(got - o) / (rel * vmax + 1e-30);
        if (!(fabs(got - o) <= rel * vmax + 1e-30) && bad++ < 3)
          fprintf(stderr, "  %s attention q=%lld h=%d d=%d: %.9g vs %.9g\n", isa_now,
                  (long long)i, h, d, got, o);
      }
    }
    pad_bad += out[i * out_stride + out_stride - 1] != 12345.0f;
  }
  CHECK(bad == 0 && pad_bad == 0 && same_as_f32,
        "%s %s%s attention heads %d/%d dim %d n_q %lld n_kv %lld causal %lld: %d values off, %d "
        "padding writes%s",
        isa_now, kn_precision_name(prec), kv16 ? " f16-KV" : "", n_head, n_kv_head, head_dim, (long long)n_q,
        (long long)n_kv, (long long)causal_base, bad, pad_bad,
        same_as_f32 ? "" : ", differs from the f32 path on the f16-rounded K/V");
  free(q);
  free(k);
  free(v);
  free(out);
  free(sc);
}

/* Fast tier: head_dim 64 on ragged sizes (key blocks of 32 with a partial last one, odd key counts
 * for the key pairs, partial query groups of 4, tiles of 64 rows, GQA, causal), against the double
 * oracle; and it really is a different computation from the exact tier. */
static void test_attention_fast(void) {
  check_attention_prec(4, 1, 64, 17, 17, 0, KN_PREC_FAST);
  check_attention_prec(2, 2, 64, 1, 1, -1, KN_PREC_FAST);
  check_attention_prec(2, 2, 64, 3, 33, -1, KN_PREC_FAST);
  check_attention_prec(3, 3, 64, 70, 95, -1, KN_PREC_FAST);
  check_attention_prec(16, 16, 64, 130, 130, -1, KN_PREC_FAST);
  check_attention_prec(4, 2, 64, 7, 61, 54, KN_PREC_FAST);
  /* more than 64 rows: K/V converted once per call (blocks of 64 keys), with last blocks of 64,
   * 8 (one quarter), 49 (four partial) and 32 keys (two quarters), causal, GQA */
  check_attention_prec(2, 2, 64, 40, 128, -1, KN_PREC_FAST);
  check_attention_prec(4, 2, 64, 50, 200, 150, KN_PREC_FAST);
  check_attention_prec(2, 1, 64, 90, 177, -1, KN_PREC_FAST);
  check_attention_prec(1, 1, 64, 65, 160, -1, KN_PREC_FAST);
  check_attention_prec(4, 2, 16, 33, 33, -1, KN_PREC_FAST); /* not 64: the exact path */
  if (kernels_fast_bf16()) {
    int64_t n = 40, st = 2 * 64;
    float *q = malloc(sizeof(float) * (size_t)(n * st)), *k = malloc(sizeof(float) * (size_t)(n * st));
    float *v = malloc(sizeof(float) * (size_t)(n * st)), *o1 = malloc(sizeof(float) * (size_t)(n * st));
    float *o2 = malloc(sizeof(float) * (size_t)(n * st));
    for (int64_t i = 0; i < n * st; i++) {
      q[i] = (float)rnd();
      k[i] = (float)rnd();
      v[i] = (float)rnd();
    }
    kn_attention_prec(q, n, st, k, v, n, st, 2, 2, 64, 0.125f, -1, o1, st, KN_PREC_EXACT);
    kn_attention_prec(q, n, st, k, v, n, st, 2, 2, 64, 0.125f, -1, o2, st, KN_PREC_FAST);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(n * st)) != 0, "fast attention equals the exact tier");
    free(q), free(k), free(v), free(o1), free(o2);
  }
  /* The K/V converted once per call (many rows) and per tile (few rows) give the same bits: queries
   * 37..45 of a 150-query call equal the same 9 queries asked alone, with 1 and 3 threads. */
  {
    int64_t n = 150, nkv = 203, st = 2 * 64;
    float *q = malloc(sizeof(float) * (size_t)(n * st)), *k = malloc(sizeof(float) * (size_t)(nkv * st));
    float *v = malloc(sizeof(float) * (size_t)(nkv * st)), *o1 = malloc(sizeof(float) * (size_t)(n * st));
    float *o2 = malloc(sizeof(float) * (size_t)(9 * st)), *o3 = malloc(sizeof(float) * (size_t)(n * st));
    for (int64_t i = 0; i < n * st; i++)
      q[i] = (float)(2 * rnd());
    for (int64_t i = 0; i < nkv * st; i++) {
      k[i] = (float)(2 * rnd());
      v[i] = (float)rnd();
    }
    kn_attention_prec(q, n, st, k, v, nkv, st, 2, 2, 64, 0.125f, -1, o1, st, KN_PREC_FAST);
    kn_attention_prec(q + 37 * st, 9, st, k, v, nkv, st, 2, 2, 64, 0.125f, -1, o2, st, KN_PREC_FAST);
    CHECK(!memcmp(o1 + 37 * st, o2, sizeof(float) * (size_t)(9 * st)),
          "%s fast attention: 9 queries alone differ from the same queries in a batch of 150", isa_now);
    kernels_init(isa_now, 3);
    kn_attention_prec(q, n, st, k, v, nkv, st, 2, 2, 64, 0.125f, -1, o3, st, KN_PREC_FAST);
    kernels_init(isa_now, 2);
    CHECK(!memcmp(o1, o3, sizeof(float) * (size_t)(n * st)), "%s fast attention: 2 and 3 threads differ", isa_now);
    free(q), free(k), free(v), free(o1), free(o2), free(o3);
  }
}

/* F16 K/V (the KV cache's default type): decode over long caches with partial key blocks, GQA,
 * causal prefill after a cached prefix, full attention, head_dim 64 / 128 (tile paths) and odd
 * ones; then proof that the F16 values are what is read (the f32 path on the unrounded values
 * differs), and the row conversion kn_f32_to_f16 against f32_to_fp16 bit for bit. */
static void test_attention_f16kv(void) {
  static const struct { int h, kvh, hd; int64_t nq, nkv, causal; } cs[] = {
      {4, 2, 16, 1, 1, 0},      {16, 8, 128, 1, 300, 299}, {16, 8, 128, 1, 4097, 4096},
      {4, 1, 64, 17, 17, 0},    {4, 2, 16, 7, 30, 23},     {3, 3, 16, 64, 64, -1},
      {16, 16, 64, 70, 70, -1}, {5, 1, 32, 3, 9, 6},       {2, 1, 128, 200, 200, 0},
      {6, 3, 72, 10, 129, -1},  {16, 8, 128, 33, 95, 62},  {2, 2, 8, 5, 5, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    check_attention_kv(cs[i].h, cs[i].kvh, cs[i].hd, cs[i].nq, cs[i].nkv, cs[i].causal, KN_PREC_EXACT, true);
  /* the same problem through both paths: f32 on unrounded K/V vs F16 K/V */
  int64_t n = 40, st = 2 * 64;
  float *q = malloc(sizeof(float) * (size_t)(n * st)), *k = malloc(sizeof(float) * (size_t)(n * st));
  float *v = malloc(sizeof(float) * (size_t)(n * st)), *o1 = malloc(sizeof(float) * (size_t)(n * st));
  float *o2 = malloc(sizeof(float) * (size_t)(n * st));
  uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)(n * st)), *vh = malloc(sizeof(uint16_t) * (size_t)(n * st));
  for (int64_t i = 0; i < n * st; i++) {
    q[i] = (float)rnd();
    k[i] = (float)rnd() * 1.001f; /* generic floats: almost none representable in f16 */
    v[i] = (float)rnd() * 1.001f;
    kh[i] = f32_to_fp16(k[i]);
    vh[i] = f32_to_fp16(v[i]);
  }
  kn_attention(q, n, st, k, v, n, st, 2, 2, 64, 0.125f, 0, o1, st);
  kn_attention_f16kv(q, n, st, kh, vh, n, st, 2, 2, 64, 0.125f, 0, o2, st);
  CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(n * st)) != 0, "%s f16-KV attention equals the f32 path on "
        "values f16 cannot hold: it does not read the f16 rows", isa_now);
  /* conversion: every tail length, and values at the edges of f16 (overflow, subnormals, ties, NaN) */
  float x[53];
  uint16_t y[53];
  static const float edge[] = {65504.0f, 65520.0f, 1e9f, -1e9f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-9f,
                               1.00048828125f, 1.00146484375f, 0.0f, -0.0f, INFINITY, -INFINITY};
  int bad = 0;
  for (int len = 0; len <= 53; len++) {
    for (int i = 0; i < len; i++)
      x[i] = i < 14 && len % 2 ? edge[i] : (float)(rnd() * 70000.0);
    if (len == 53)
      x[52] = NAN;
    kn_f32_to_f16(x, y, len);
    for (int i = 0; i < len; i++)
      bad += (y[i] != f32_to_fp16(x[i])) && !(isnan(x[i]) && (y[i] & 0x7c00) == 0x7c00 && (y[i] & 0x3ff));
  }
  CHECK(bad == 0, "%s kn_f32_to_f16: %d values differ from f32_to_fp16", isa_now, bad);
  free(q), free(k), free(v), free(o1), free(o2), free(kh), free(vh);
}

static void test_attention(void) {
  /* decode (1 query over a long cache), prefill (causal), vision (full), GQA, odd heads */
  check_attention(4, 2, 16, 1, 1, 0);
  check_attention(4, 2, 16, 1, 77, 76);
  check_attention(16, 8, 128, 1, 300, 299);
  check_attention(4, 1, 64, 17, 17, 0);
  check_attention(4, 2, 16, 7, 30, 23);  /* prefill after a cached prefix */
  check_attention(3, 3, 16, 64, 64, -1); /* odd head count, non-causal */
  check_attention(2, 2, 16, 33, 33, -1);
  check_attention(16, 16, 64, 70, 70, -1);
  check_attention(5, 1, 32, 3, 9, 6);
  check_attention(2, 1, 128, 200, 200, 0);
  check_attention(6, 3, 72, 10, 129, -1); /* head_dim not a multiple of 16 */
}

/* A causal prefill split into calls of 1, 2, 3, ... queries (each call seeing only the keys cached
 * so far) gives the bits of one call: the engine's chunked prefill, batched decode and prefix cache
 * rely on it, and kernels choose their path by the number of queries in a call. f32 and f16 K/V,
 * both precision tiers. */
static void check_attention_split(int n_head, int n_kv_head, int head_dim, int64_t base, int64_t n_q) {
  int64_t n_kv = base + n_q, qs = (int64_t)n_head * head_dim, ks = (int64_t)n_kv_head * head_dim;
  float *q = malloc(sizeof(float) * (size_t)(n_q * qs)), *k = malloc(sizeof(float) * (size_t)(n_kv * ks));
  float *v = malloc(sizeof(float) * (size_t)(n_kv * ks));
  float *whole = malloc(sizeof(float) * (size_t)(n_q * qs)), *parts = malloc(sizeof(float) * (size_t)(n_q * qs));
  uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)(n_kv * ks)), *vh = malloc(sizeof(uint16_t) * (size_t)(n_kv * ks));
  for (int64_t i = 0; i < n_q * qs; i++)
    q[i] = (float)(rnd() * 2);
  for (int64_t i = 0; i < n_kv * ks; i++) {
    k[i] = (float)(rnd() * 2), v[i] = (float)rnd();
    kh[i] = f32_to_fp16(k[i]), vh[i] = f32_to_fp16(v[i]);
  }
  float scale = 1.0f / sqrtf((float)head_dim);
  for (int kind = 0; kind < 3; kind++) { /* exact f32, fast f32, exact f16 K/V */
    kn_precision prec = kind == 1 ? KN_PREC_FAST : KN_PREC_EXACT;
    for (int pass = 0; pass < 3; pass++) { /* whole; pieces of 1, 2, 3, ...; every query alone (decode) */
      float *out = pass ? parts : whole;
      for (int64_t b = 0, step = 1; b < n_q; b += step, step += pass == 1) {
        int64_t e = pass == 0 ? n_q : b + step < n_q ? b + step : n_q;
        if (pass == 0)
          step = n_q;
        if (kind == 2)
          kn_attention_f16kv(q + b * qs, e - b, qs, kh, vh, base + e, ks, n_head, n_kv_head, head_dim, scale,
                             base + b, out + b * qs, qs);
        else
          kn_attention_prec(q + b * qs, e - b, qs, k, v, base + e, ks, n_head, n_kv_head, head_dim, scale, base + b,
                            out + b * qs, qs, prec);
      }
      if (pass > 0)
        CHECK(!memcmp(whole, parts, sizeof(float) * (size_t)(n_q * qs)),
              "%s %s%s attention heads %d/%d dim %d: %lld queries after %lld keys %s differ from one call",
              isa_now, kn_precision_name(prec), kind == 2 ? " f16-KV" : "", n_head, n_kv_head, head_dim,
              (long long)n_q, (long long)base, pass == 1 ? "in pieces of 1, 2, 3, ..." : "one at a time");
    }
  }
  FREE_EACH(q, k, v, whole, parts, kh, vh);
}

static void test_attention_split(void) {
  check_attention_split(4, 2, 64, 0, 40);
  check_attention_split(4, 2, 128, 150, 30); /* past a 128-key chunk */
  check_attention_split(2, 1, 16, 5, 21);
  check_attention_split(3, 3, 72, 0, 12); /* head_dim not a multiple of 16 */
  check_attention_split(4, 2, 64, 45, 9);   /* decode steps after a prefix: one query is 2 rows */
  check_attention_split(2, 2, 128, 70, 6);  /* no GQA: one query is one row */
  check_attention_split(2, 2, 64, 33, 5);
}

/* ---- norms and element-wise */
static void check_elem(const char *what, const float *got, const double *exact, int64_t n,
                       double rel) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - exact[i]) <= rel * fabs(exact[i]) + TOL_ELEM_ABS) && bad++ < 3)
      fprintf(stderr, "  %s %s [%lld]: %.9g vs %.9g\n", isa_now, what, (long long)i, got[i],
              exact[i]);
  CHECK(bad == 0, "%s %s n=%lld: %d values off", isa_now, what, (long long)n, bad);
}

static void test_elementwise(void) {
  double rel = !strcmp(isa_now, "ref") ? TOL_ELEM_REF_REL : TOL_ELEM_SIMD_REL;
  static const int64_t sizes[] = {1, 7, 16, 33, 64, 129, 1000, 40000};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    int64_t n = sizes[si];
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *u = malloc(sizeof(float) * (size_t)n);
    double *e = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      x[i] = (float)(rnd() * 12);
      u[i] = (float)(rnd() * 3);
    }
    x[0] = n > 1 ? -30.0f : 0.5f;
    memcpy(y, x, sizeof(float) * (size_t)n);
    kn_gelu_tanh(y, n);
    for (int64_t i = 0; i < n; i++) {
      double v = x[i];
      e[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    check_elem("gelu_tanh", y, e, n, rel);
    memcpy(y, x, sizeof(float) * (size_t)n);
    kn_gelu_erf(y, n);
    for (int64_t i = 0; i < n; i++)
      e[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
    check_elem("gelu_erf", y, e, n, rel);
    memcpy(y, x, sizeof(float) * (size_t)n);
    kn_silu_mul(y, u, n);
    for (int64_t i = 0; i < n; i++)
      e[i] = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
    check_elem("silu_mul", y, e, n, rel);
    memcpy(y, x, sizeof(float) * (size_t)n);
    kn_add(y, u, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
      bad += y[i] != x[i] + u[i];
    CHECK(bad == 0, "%s add n=%lld: %d values differ", isa_now, (long long)n, bad);
    free(x);
    free(y);
    free(u);
    free(e);
  }
  /* Norms: ragged rows, with and without weights/bias. */
  static const int64_t widths[] = {1, 16, 17, 64, 100, 1024, 2048};
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    int64_t n = widths[wi], rows = 9;
    float *x = malloc(sizeof(float) * (size_t)(n * rows)), *y = malloc(sizeof(float) * (size_t)(n * rows));
    float *g = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    double *e = malloc(sizeof(double) * (size_t)(n * rows));
    for (int64_t i = 0; i < n * rows; i++)
      x[i] = (float)(rnd() * 5 + 2);
    for (int64_t i = 0; i < n; i++) {
      g[i] = (float)(1 + 0.1 * rnd());
      b[i] = (float)(0.02 * rnd());
    }
    for (int pass = 0; pass < 2; pass++) {
      const float *gw = pass ? g : NULL;
      kn_rmsnorm(x, gw, rows, n, 1e-6f, y);
      for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
          ss += (double)x[r * n + i] * x[r * n + i];
        double inv = 1 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++)
          e[r * n + i] = x[r * n + i] * inv * (gw ? gw[i] : 1.0);
      }
      check_elem(pass ? "rmsnorm(w)" : "rmsnorm", y, e, n * rows, rel);
      const float *bb = pass ? b : NULL;
      kn_layernorm(x, gw, bb, rows, n, 1e-6f, y);
      for (int64_t r = 0; r < rows; r++) {
        double m = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
          m += x[r * n + i];
        m /= n;
        for (int64_t i = 0; i < n; i++)
          var += (x[r * n + i] - m) * (x[r * n + i] - m);
        var /= n;
        double inv = 1 / sqrt(var + 1e-6);
        for (int64_t i = 0; i < n; i++)
          e[r * n + i] = (x[r * n + i] - m) * inv * (gw ? gw[i] : 1.0) + (bb ? bb[i] : 0.0);
      }
      check_elem(pass ? "layernorm(w,b)" : "layernorm", y, e, n * rows, rel);
    }
    free(x);
    free(y);
    free(g);
    free(b);
    free(e);
  }
}

/* ---- parallel_for */
static void count_fn(void *arg, int64_t i) { __atomic_fetch_add(&((int *)arg)[i], 1, __ATOMIC_RELAXED); }

static void test_parallel_for(void) {
  static int hits[1000];
  memset(hits, 0, sizeof hits);
  kn_parallel_for(1000, count_fn, hits);
  int bad = 0;
  for (int i = 0; i < 1000; i++)
    bad += hits[i] != 1;
  CHECK(bad == 0, "%s parallel_for: %d indices not run exactly once", isa_now, bad);
  kn_parallel_for(0, count_fn, hits);
}

/* ---- out of memory: a status, never an abort */
/* The test below asks for terabytes of scratch: under ASan that must come back as NULL, as from
 * malloc, instead of a report (this hook is read by ASan only). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void test_out_of_memory(void) {
  CHECK(kernels_init("ref", 1) == QVL_OK, "ref on one thread: %s", qvl_last_error());
  CHECK(kernels_take_error() == QVL_OK, "no kernel failure recorded yet");
  float q[4] = {1, 2, 3, 4}, k[4] = {1, 0, 0, 0}, v[4] = {5, 6, 7, 8}, out[4] = {0};
  /* head_dim near INT32_MAX: its scratch (head_dim KiB) cannot be allocated; nothing is read
   * before that, so the tiny buffers are never touched. */
  qvl_status s = kn_attention(q, 1, 4, k, v, 1, 4, 1, 1, 0x7ffffff0, 1.0f, -1, out, 4);
  CHECK(s == QVL_ERR_NOMEM, "attention with impossible scratch: %s", qvl_status_text(s));
  CHECK(strstr(qvl_last_error(), "attention scratch") != NULL, "message: %s", qvl_last_error());
  CHECK(kernels_take_error() == QVL_ERR_NOMEM, "the failure is remembered for the forward pass");
  CHECK(kernels_take_error() == QVL_OK, "and cleared once taken");
  /* the kernels still work afterwards */
  s = kn_attention(q, 1, 4, k, v, 1, 4, 1, 1, 4, 1.0f, -1, out, 4);
  CHECK(s == QVL_OK && out[0] == 5 && out[3] == 8 && kernels_take_error() == QVL_OK,
        "attention after the failure: %s, out %g %g", qvl_status_text(s), out[0], out[3]);
}

/* ---- The tile model itself (tile_model.h): the instructions' arithmetic on values worked out by
 * hand, and the palette limits. */
static void tm_cfg(kn_tilecfg *c, int rows_a, int colsb_a, int rows_b, int colsb_b) {
  memset(c, 0, sizeof *c);
  c->palette = 1;
  c->rows[0] = (uint8_t)rows_a, c->colsb[0] = (uint16_t)colsb_b; /* C: M x N */
  c->rows[1] = (uint8_t)rows_a, c->colsb[1] = (uint16_t)colsb_a; /* A: M x K */
  c->rows[2] = (uint8_t)rows_b, c->colsb[2] = (uint16_t)colsb_b; /* B: K x N */
}

static void test_tile_model(void) {
  uint64_t f0 = kn_tm_faults();
  kn_tilecfg c;
  /* TDPBF16PS, 2 x 2 output, K = 2 pairs: c[m][n] = sum_k a[m][2k] b[k][2n] + a[m][2k+1] b[k][2n+1] */
  tm_cfg(&c, 2, 8, 2, 8);
  kn_tm_config(&c);
  uint16_t a[2][4], b[2][4];
  float av[2][4] = {{1, 2, 3, 4}, {-1, 0.5f, 2, -3}}, bv[2][4] = {{1, -1, 2, 0.25f}, {3, 1, -2, 4}};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      a[i][j] = f32_to_bf16(av[i][j]);
      b[i][j] = f32_to_bf16(bv[i][j]);
    }
  float cinit[2][2] = {{10, 20}, {30, 40}}, out[2][2];
  kn_tm_load(0, cinit, 8);
  kn_tm_load(1, a, 8);
  kn_tm_load(2, b, 8);
  kn_tm_dpbf16ps(0, 1, 2);
  kn_tm_store(0, out, 8);
  for (int m = 0; m < 2; m++)
    for (int n = 0; n < 2; n++) {
      float e = cinit[m][n];
      for (int k = 0; k < 2; k++)
        e += av[m][2 * k] * bv[k][2 * n] + av[m][2 * k + 1] * bv[k][2 * n + 1];
      CHECK(out[m][n] == e, "tdpbf16ps c[%d][%d] = %g, expected %g", m, n, out[m][n], e);
    }
  /* bf16 denormal inputs read as zero (DAZ) */
  a[0][0] = 0x0001;
  kn_tm_zero(0);
  kn_tm_load(1, a, 8);
  kn_tm_dpbf16ps(0, 1, 2);
  kn_tm_store(0, out, 8);
  CHECK(out[0][0] == 2.0f * -1.0f + 3.0f * 3.0f + 4.0f * 1.0f, "denormal bf16 input not read as zero: %g", out[0][0]);
  /* TDPBSSD / TDPBUSD: one row, K = 1 group of 4 bytes, N = 1 */
  tm_cfg(&c, 1, 4, 1, 4);
  kn_tm_config(&c);
  int8_t qa[4] = {-128, 127, -3, 5}, qb[4] = {-128, -128, 7, -2};
  int32_t acc = 1000, r;
  kn_tm_load(0, &acc, 4);
  kn_tm_load(1, qa, 4);
  kn_tm_load(2, qb, 4);
  kn_tm_dpbssd(0, 1, 2);
  kn_tm_store(0, &r, 4);
  CHECK(r == 1000 + 16384 - 16256 - 21 - 10, "tdpbssd = %d", r);
  kn_tm_zero(0);
  kn_tm_dpbusd(0, 1, 2);
  kn_tm_store(0, &r, 4);
  CHECK(r == 128 * -128 + 127 * -128 + 253 * 7 + 5 * -2, "tdpbusd (a unsigned) = %d", r);
  CHECK(kn_tm_faults() == f0, "no faults so far");
  /* limits: 17 rows, 68 bytes, K mismatch, M mismatch, no configuration */
  tm_cfg(&c, 17, 64, 16, 64);
  kn_tm_config(&c);
  CHECK(kn_tm_faults() == f0 + 1, "17 rows refused");
  tm_cfg(&c, 16, 68, 16, 64);
  kn_tm_config(&c);
  CHECK(kn_tm_faults() == f0 + 2, "68 bytes refused");
  tm_cfg(&c, 16, 64, 15, 64); /* a.colsb / 4 = 16 != b.rows */
  kn_tm_config(&c);
  kn_tm_dpbf16ps(0, 1, 2);
  CHECK(kn_tm_faults() == f0 + 3, "K mismatch refused");
  c.rows[2] = 16, c.rows[0] = 8; /* c.rows != a.rows */
  kn_tm_config(&c);
  kn_tm_dpbssd(0, 1, 2);
  CHECK(kn_tm_faults() == f0 + 4, "M mismatch refused");
  kn_tm_release();
  kn_tm_zero(0);
  CHECK(kn_tm_faults() == f0 + 5, "tile use after release refused");
}

/* y = W x for one Q8_0/Q4_0 weight of n_tok tokens under two tiers, compared bit for bit; *dots_b
 * gets the tile products tier b ran (the tile model's count). False: a tier is not on this CPU. */
static bool tiers_agree_prec(const char *isa_a, const char *isa_b, qvl_dtype type, int64_t n_tok, kn_precision prec,
                             uint64_t *dots_b);
static bool int8_tiers_agree(const char *isa_a, const char *isa_b, qvl_dtype type, int64_t n_tok, uint64_t *dots_b) {
  return tiers_agree_prec(isa_a, isa_b, type, n_tok, KN_PREC_EXACT, dots_b);
}
/* The same with the weights packed for precision tier prec. */
static bool tiers_agree_prec(const char *isa_a, const char *isa_b, qvl_dtype type, int64_t n_tok, kn_precision prec,
                             uint64_t *dots_b) {
  if (kernels_init(isa_a, 2) != QVL_OK)
    return false;
  int64_t n_in = 320, n_out = 75;
  test_w w;
  make_weight(&w, type, n_in, n_out);
  float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in)), *y1 = malloc(sizeof(float) * (size_t)(n_tok * n_out));
  float *y2 = malloc(sizeof(float) * (size_t)(n_tok * n_out));
  for (int64_t i = 0; i < n_tok * n_in; i++)
    x[i] = (float)rnd();
  kn_weight kw;
  CHECK(kn_weight_init_prec(&kw, &w.t, prec) == QVL_OK, "init");
  kn_matmul(&kw, x, n_tok, NULL, y1);
  kn_weight_free(&kw);
  bool ran = kernels_init(isa_b, 2) == QVL_OK;
  if (ran) {
    CHECK(kn_weight_init_prec(&kw, &w.t, prec) == QVL_OK, "init");
    uint64_t d0 = kn_tm_dot_products();
    kn_matmul(&kw, x, n_tok, NULL, y2);
    if (dots_b)
      *dots_b = kn_tm_dot_products() - d0;
    kn_weight_free(&kw);
    CHECK(!memcmp(y1, y2, sizeof(float) * (size_t)(n_tok * n_out)), "%s %s %s (%lld tokens) differs from %s", isa_b,
          kn_precision_name(prec), dtype_name(type), (long long)n_tok, isa_a);
  }
  free(x), free(y1), free(y2);
  free_weight(&w);
  return ran;
}

/* The AMX int8 kernels end every block with the float step of the AVX-512 VNNI kernel and their
 * integer sums are exact, so through the tile model they must equal avx512 bit for bit. Q8_0 and
 * Q4_0 share the VNNI kernel's packed bytes: a forced amx tier runs them on tiles from
 * AMX_INT8_MIN_TOKENS (16) tokens and on the VNNI kernel itself below (decode never on tiles),
 * which is what keeps a token's result the same alone and in a batch. (tests/kernels/test_tune.c
 * holds the tiles to the same bits at the counts the tuning may give them.) */
static void test_amx_int8_matches_vnni(void) {
  static const qvl_dtype types[] = {QVL_DTYPE_Q8_0, QVL_DTYPE_Q4_0};
  static const int64_t toks[] = {37, 16, 1};
  for (size_t ti = 0; ti < 2; ti++)
    for (size_t k = 0; k < 3; k++) {
      uint64_t dots = 0;
      if (!int8_tiers_agree("avx512", "amxsim", types[ti], toks[k], &dots)) {
        printf("  amxsim vs avx512 Q8_0/Q4_0: skipped (no AVX-512 here)\n");
        return;
      }
      bool tiles = toks[k] >= 16;
      CHECK(tiles ? dots > 0 : dots == 0, "amxsim %s, %lld tokens: %llu tile products, expected %s",
            dtype_name(types[ti]), (long long)toks[k], (unsigned long long)dots, tiles ? "some" : "none");
    }
}

/* Fast attention of one problem under tier isa into out (false: the tier is not on this CPU). */
static bool attention_under(const char *isa, const float *q, int64_t n_q, const float *k, const float *v,
                            int64_t n_kv, int h, int kvh, int64_t causal, float *out) {
  if (kernels_init(isa, 2) != QVL_OK)
    return false;
  kn_attention_prec(q, n_q, h * 64, k, v, n_kv, kvh * 64, h, kvh, 64, 0.125f, causal, out, h * 64, KN_PREC_FAST);
  return true;
}

/* The `amx` build's AVX-512 vector code (lanes512.h, run here by the amxsim512 tier on the tile
 * model) gives the bits of the portable lane model (amxsim): the attention's softmax on ragged,
 * causal and GQA shapes, with scores spread wide enough that whole key blocks raise the running max
 * and others fall below the exp clamp, and queries holding bf16 rounding ties; and the matmuls,
 * whose plain C is compiled with other flags. */
static void test_amxsim512_matches_amxsim(void) {
  static const struct { int h, kvh; int64_t nq, nkv, causal; float spread; } cs[] = {
      {2, 2, 1, 1, -1, 1},  {2, 1, 37, 150, -1, 8}, {4, 2, 50, 200, 150, 30}, {1, 1, 70, 65, 0, 60},
      {3, 3, 16, 64, -1, 2}, {2, 2, 9, 17, 8, 200},
  };
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t nq = cs[c].nq, nkv = cs[c].nkv, qn = nq * cs[c].h * 64, kn = nkv * cs[c].kvh * 64;
    float *q = malloc(sizeof(float) * (size_t)qn), *k = malloc(sizeof(float) * (size_t)kn);
    float *v = malloc(sizeof(float) * (size_t)kn), *o1 = malloc(sizeof(float) * (size_t)qn);
    float *o2 = malloc(sizeof(float) * (size_t)qn);
    for (int64_t i = 0; i < qn; i++) /* every 7th a bf16 tie (to even: down, then up) */
      q[i] = i % 7 == 3 ? (rnd() < 0 ? -1 : 1) * (i % 14 == 3 ? 4.015625f : 4.046875f) : (float)(cs[c].spread * rnd());
    for (int64_t i = 0; i < kn; i++)
      k[i] = (float)(cs[c].spread * rnd()), v[i] = (float)rnd();
    attention_under("amxsim", q, nq, k, v, nkv, cs[c].h, cs[c].kvh, cs[c].causal, o1);
    if (!attention_under("amxsim512", q, nq, k, v, nkv, cs[c].h, cs[c].kvh, cs[c].causal, o2)) {
      printf("  amxsim512 vs amxsim: skipped (no AVX-512 BF16 here)\n");
      free(q), free(k), free(v), free(o1), free(o2);
      return;
    }
    bool finite = true;
    for (int64_t i = 0; i < qn; i++)
      finite = finite && isfinite(o1[i]);
    CHECK(finite, "amxsim attention case %zu: non-finite output", c);
    CHECK(!memcmp(o1, o2, sizeof(float) * (size_t)qn), "amxsim512 attention case %zu differs from amxsim", c);
    free(q), free(k), free(v), free(o1), free(o2);
  }
  static const qvl_dtype types[] = {QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_Q8_0, QVL_DTYPE_Q4_0};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (int p = 0; p < 2; p++)
      tiers_agree_prec("amxsim", "amxsim512", types[t], 37, p ? KN_PREC_FAST : KN_PREC_EXACT, NULL);
}

/* The same for AVX-VNNI against AVX2's vpmaddubsw: exact int32 sums, the same float steps. */
static void test_avx2vnni_matches_avx2(void) {
  if (!int8_tiers_agree("avx2", "avx2vnni", QVL_DTYPE_Q8_0, 37, NULL) ||
      !int8_tiers_agree("avx2", "avx2vnni", QVL_DTYPE_Q4_0, 37, NULL))
    printf("  avx2vnni vs avx2 Q8_0/Q4_0: skipped (no AVX-VNNI here)\n");
}

/* The AMX attention really runs on tiles, with the blocking it documents: per head (one KV head
 * each here, so every tiling gives one pass of n_q <= 64 rows), per group of 16 rows and block of
 * 64 keys, two TDPBF16PS per quarter of 16 keys holding keys (q.k, head_dim 64 = two steps) and
 * four per step of 32 keys (p v, four chunks of 16 dims). The exact tier stays fp32 (no tiles). */
static void test_amx_attention_tiles(void) {
  CHECK(kernels_init("amxsim", 2) == QVL_OK, "amxsim: %s", qvl_last_error());
  static const struct { int64_t n_q, n_kv; } cs[] = {{40, 100}, {16, 64}, {5, 1}, {64, 129}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t n_q = cs[c].n_q, n_kv = cs[c].n_kv, st = 2 * 64;
    float *q = malloc(sizeof(float) * (size_t)(n_q * st)), *k = malloc(sizeof(float) * (size_t)(n_kv * st));
    float *v = malloc(sizeof(float) * (size_t)(n_kv * st)), *o = malloc(sizeof(float) * (size_t)(n_q * st));
    for (int64_t i = 0; i < n_q * st; i++)
      q[i] = (float)rnd();
    for (int64_t i = 0; i < n_kv * st; i++)
      k[i] = (float)rnd(), v[i] = (float)rnd();
    uint64_t want = 0;
    for (int64_t j0 = 0; j0 < n_kv; j0 += 64) {
      int64_t nb = n_kv - j0 < 64 ? n_kv - j0 : 64;
      want += (uint64_t)(2 * ((nb + 15) / 16) + 4 * ((nb + 31) / 32));
    }
    want *= 2 * (uint64_t)((n_q + 15) / 16); /* 2 heads x groups of 16 rows */
    uint64_t d0 = kn_tm_dot_products();
    kn_attention_prec(q, n_q, st, k, v, n_kv, st, 2, 2, 64, 0.125f, -1, o, st, KN_PREC_FAST);
    uint64_t d1 = kn_tm_dot_products();
    kn_attention_prec(q, n_q, st, k, v, n_kv, st, 2, 2, 64, 0.125f, -1, o, st, KN_PREC_EXACT);
    uint64_t d2 = kn_tm_dot_products();
    CHECK(d1 - d0 == want, "amxsim fast attention n_q %lld n_kv %lld: %llu tile products, expected %llu",
          (long long)n_q, (long long)n_kv, (unsigned long long)(d1 - d0), (unsigned long long)want);
    CHECK(d2 == d1, "amxsim exact attention used tiles (%llu products)", (unsigned long long)(d2 - d1));
    free(q), free(k), free(v), free(o);
  }
}

int main(void) {
  test_out_of_memory();
  /* Bad requests are errors, not crashes. */
  CHECK(kernels_init("sse9", 2) == QVL_ERR_INVALID_ARG, "unknown ISA rejected");
  CHECK(strstr(qvl_last_error(), "sse9") != NULL, "message names the ISA: %s", qvl_last_error());
  const char *isas[] = {"ref", "avx2", "avx2vnni", "avx512", "avx512bf16", "amx", "amxsim", "amxsim512"};
  const size_t n_isas = sizeof isas / sizeof isas[0];
  for (size_t ii = 0; ii < n_isas; ii++) {
    if (kernels_init(isas[ii], 2) != QVL_OK) {
      if (!strcmp(isas[ii], "amx"))
        printf("  amx: skipped: no AMX (%s)\n", qvl_last_error());
      else
        printf("  %s: not available on this CPU (%s)\n", isas[ii], qvl_last_error());
      continue;
    }
    isa_now = kernels_isa();
    CHECK(!strcmp(isa_now, isas[ii]), "kernels_isa() = %s, expected %s", isa_now, isas[ii]);
    CHECK(kernels_threads() == 2, "threads = %d", kernels_threads());
    kn_dispatch_row rows[16];
    int nr = kernels_dispatch(rows, 16);
    CHECK(nr >= 8, "%s: %d rows in the dispatch table", isa_now, nr);
    for (int r = 0; r < nr; r++)
      CHECK(rows[r].op && rows[r].kernel && *rows[r].kernel && rows[r].why && *rows[r].why,
            "%s: dispatch row %d incomplete", isa_now, r);
    worst_ratio = worst_f32 = 0;
    test_matmul();
    test_matmul_pairs();
    printf("  %s: matmul worst error = %.3f of the allowed tolerance", isa_now, worst_ratio);
    if (amx_now())
      printf(" (%.3f of TOL_F32_SIMD's)", worst_f32);
    printf("\n");
    worst_ratio = 0;
    test_matmul_fast();
    printf("  %s: fast-tier matmul worst error = %.3f of the allowed tolerance\n", isa_now, worst_ratio);
    test_attention();
    worst_attn_fast = 0;
    test_attention_fast();
    if (kernels_fast_bf16())
      printf("  %s: fast-tier attention worst error = %.3f of the allowed tolerance\n", isa_now, worst_attn_fast);
    test_attention_f16kv();
    test_attention_split();
    test_elementwise();
    test_parallel_for();
    test_thread_invariance(isas[ii]);
    kernels_init(isas[ii], 2);
  }
  CHECK(kn_tm_faults() == 0, "the AMX kernels broke a tile limit of the model %llu times",
        (unsigned long long)kn_tm_faults());
  test_tile_model();
  uint64_t faults = kn_tm_faults(); /* (test_tile_model provokes some on purpose) */
  test_amx_int8_matches_vnni();
  test_amx_attention_tiles();
  test_amxsim512_matches_amxsim();
  test_avx2vnni_matches_avx2();
  CHECK(kn_tm_faults() == faults, "the AMX kernels broke a tile limit of the model");
  /* Invalid weight shapes. */
  tensor bad = {.name = "w", .type = QVL_DTYPE_Q8_0, .n_dims = 2, .ne = {33, 4, 1, 1}};
  static char data[1024];
  bad.data = data;
  bad.nbytes = sizeof data;
  kn_weight kw;
  CHECK(kn_weight_init(&kw, &bad) == QVL_ERR_FORMAT, "ragged Q8_0 row rejected");
  bad.type = (qvl_dtype)6;
  bad.ne[0] = 32;
  CHECK(kn_weight_init(&kw, &bad) == QVL_ERR_UNSUPPORTED, "Q5_0 rejected");
  CHECK(strstr(qvl_last_error(), "Q5_0") != NULL, "message names the type: %s", qvl_last_error());
  bad.type = QVL_DTYPE_F32;
  bad.ne[0] = 1000;
  CHECK(kn_weight_init(&kw, &bad) == QVL_ERR_FORMAT, "too few bytes rejected");
  return TEST_SUMMARY("test_kernels");
}
