/*
 * Scalar reference of every kernel: the oracle the SIMD variants are tested against, and the
 * variant the strict float32 golden tolerance is defined for. Weights are dequantized exactly
 * (dtype_dequantize_row) and sums are accumulated in double, so the only rounding is the final
 * conversion to float. Clarity over speed.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static qvl_status ref_weight_pack(kn_weight *w) {
  (void)w;
  return QVL_OK;
}

static void ref_weight_row(const kn_weight *w, int64_t r, float *out) {
  dtype_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes, out, w->n_in);
}

static void ref_mm_tile(const kn_mm *m, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                        int thread) {
  const kn_weight *w = m->w;
  int64_t n_in = w->n_in, n_out = w->n_out;
  float *row = kn_scratch(thread, (size_t)n_in * sizeof(float));
  assert(row);
  for (int64_t r = r0; r < r1; r++) {
    ref_weight_row(w, r, row);
    for (int64_t t = t0; t < t1; t++) {
      const float *x = m->x + t * n_in;
      double acc = 0.0;
      for (int64_t i = 0; i < n_in; i++)
        acc += (double)row[i] * (double)x[i];
      if (m->bias)
        acc += (double)m->bias[r];
      m->y[t * n_out + r] = (float)acc;
    }
  }
}

const kn_mm_kernel kn_mm_ref = {
    .act_row_bytes = NULL,
    .act_quantize = NULL,
    .tile = ref_mm_tile,
    .row_align = 1,
};

static const kn_mm_kernel *ref_mm_select(const kn_weight *w, int64_t n_tokens) {
  (void)w;
  (void)n_tokens;
  return &kn_mm_ref;
}

static void ref_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps,
                        float *y) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
      ss += (double)xr[i] * xr[i];
    double inv = 1.0 / sqrt(ss / (double)n + (double)eps);
    for (int64_t i = 0; i < n; i++)
      yr[i] = (float)((double)xr[i] * inv * (w ? (double)w[i] : 1.0));
  }
}

static void ref_layernorm(const float *x, const float *w, const float *b, int64_t n_rows, int64_t n,
                          float eps, float *y) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
      sum += xr[i];
    double mean = sum / (double)n;
    double var = 0.0;
    for (int64_t i = 0; i < n; i++) {
      double d = (double)xr[i] - mean;
      var += d * d;
    }
    var /= (double)n;
    double inv = 1.0 / sqrt(var + (double)eps);
    for (int64_t i = 0; i < n; i++) {
      double v = ((double)xr[i] - mean) * inv;
      if (w)
        v *= (double)w[i];
      if (b)
        v += (double)b[i];
      yr[i] = (float)v;
    }
  }
}

/* PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static void ref_gelu_tanh(float *x, int64_t n) {
  const double k_beta = 0.79788456080286535587989211986876; /* sqrt(2/pi) */
  const double k_kappa = 0.044715;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    double inner = k_beta * (v + k_kappa * v * v * v);
    x[i] = (float)(0.5 * v * (1.0 + tanh(inner)));
  }
}

static void ref_gelu_erf(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    x[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
  }
}

static void ref_silu_mul(float *gate, const float *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double g = gate[i];
    gate[i] = (float)(g / (1.0 + exp(-g)) * (double)up[i]);
  }
}

static void ref_add(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] += x[i];
}

static const float *widen(const uint16_t *h, float *f, int n) {
  for (int d = 0; d < n; d++)
    f[d] = fp16_to_f32(h[d]);
  return f;
}

static void ref_to_f16(const float *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = f32_to_fp16(x[i]);
}

/* Online softmax (one pass over the keys, running max and sum), so no score matrix exists.
 * F16 keys/values are widened row by row (exactly; the arithmetic is the f32 path's). */
static void ref_attention(const kn_attn *a, int h, int64_t q0, int64_t q1, int thread) {
  int hd = a->head_dim;
  int group = a->n_head / a->n_kv_head;
  int kvh = h / group;
  double *acc = kn_scratch(thread, (size_t)hd * (sizeof(double) + 2 * sizeof(float)));
  assert(acc);
  float *kf = (float *)(acc + hd), *vf = kf + hd; /* one F16 key / value row, widened */
  for (int64_t i = q0; i < q1; i++) {
    const float *q = a->q + i * a->q_stride + (int64_t)h * hd;
    int64_t n_keys = kn_attn_keys(a, i);
    double m = -INFINITY, l = 0.0;
    for (int d = 0; d < hd; d++)
      acc[d] = 0.0;
    for (int64_t j = 0; j < n_keys; j++) {
      int64_t off = j * a->kv_stride + (int64_t)kvh * hd;
      const float *k = a->k16 ? widen(a->k16 + off, kf, hd) : a->k + off;
      const float *v = a->v16 ? widen(a->v16 + off, vf, hd) : a->v + off;
      double s = 0.0;
      for (int d = 0; d < hd; d++)
        s += (double)q[d] * k[d];
      s *= (double)a->scale;
      if (s > m) {
        double c = exp(m - s); /* 0 on the first key (m = -inf) */
        l *= c;
        for (int d = 0; d < hd; d++)
          acc[d] *= c;
        m = s;
      }
      double p = exp(s - m);
      l += p;
      for (int d = 0; d < hd; d++)
        acc[d] += p * v[d];
    }
    float *o = a->out + i * a->out_stride + (int64_t)h * hd;
    for (int d = 0; d < hd; d++)
      o[d] = l > 0.0 ? (float)(acc[d] / l) : 0.0f;
  }
}

const kn_ops kn_ops_ref = {
    .name = "ref",
    .choice = {
        [KN_OP_MM_FLOAT] = {"ref", "scalar: weights dequantized exactly, double accumulation (the oracle)"},
        [KN_OP_MM_FAST] = {"ref", "scalar: no fast path, as exact"},
        [KN_OP_MM_Q8_0] = {"ref", "scalar, exact dequantization"},
        [KN_OP_MM_Q4_0] = {"ref", "scalar, exact dequantization"},
        [KN_OP_MM_KQUANT] = {"ref", "scalar, exact dequantization"},
        [KN_OP_ATTN] = {"ref", "scalar online softmax"},
        [KN_OP_ATTN_FAST] = {"ref", "scalar: no fast path, as exact"},
        [KN_OP_ROWS] = {"ref", "scalar, double where it matters"},
    },
    .weight_pack = ref_weight_pack,
    .mm_select = ref_mm_select,
    .weight_row = ref_weight_row,
    .rmsnorm = ref_rmsnorm,
    .layernorm = ref_layernorm,
    .gelu_tanh = ref_gelu_tanh,
    .gelu_erf = ref_gelu_erf,
    .silu_mul = ref_silu_mul,
    .add = ref_add,
    .to_f16 = ref_to_f16,
    .attention = ref_attention,
};
