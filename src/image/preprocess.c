/*
 * smart_resize, Pillow-exact bicubic resize, normalisation and patch flattening (spec section 3).
 *
 * The resize follows Pillow 9.4's Resample.c arithmetic rule for rule (not its code): the taps
 * of each output index are computed once per axis in double with Pillow's expression forms
 * (center = (o + 0.5) * scale, argument (x - center + 0.5) * (1 / filterscale), the kernel
 * polynomials as Pillow writes them, sequential normalisation), rounded to 22-bit fixed point,
 * and applied with int32 accumulation, so every uint8 result equals Pillow's.
 */
#include "image/preprocess.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define RESIZE_PRECISION_BITS 22 /* 32 - 8 - 2, as Pillow: 8-bit pixels, 2 bits of headroom */

void preprocess_opts_default(preprocess_opts *o) {
  o->min_pixels = IMAGE_CPU_DEFAULT_MIN_PIXELS;
  o->max_pixels = IMAGE_CPU_DEFAULT_MAX_PIXELS;
}

/* Python's repr() of a float: the shortest decimal that reads back to the same double, with ".0"
 * on integral values (HF's error message prints the ratio this way). */
static void py_float_repr(double v, char *out, size_t n) {
  if (v == floor(v) && fabs(v) < 1e16) {
    snprintf(out, n, "%.1f", v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, n, "%.*g", prec, v);
    if (strtod(out, NULL) == v)
      return;
  }
}

qvl_status image_smart_resize(int height, int width, int64_t min_pixels, int64_t max_pixels,
                              int factor, int *out_height, int *out_width) {
  *out_height = *out_width = 0;
  if (height <= 0 || width <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "smart_resize: image of %dx%d pixels (WxH) has no area",
                      width, height);
  if (factor <= 0 || min_pixels < 0 || max_pixels <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "smart_resize: factor %d, min_pixels %lld, max_pixels %lld: factor and "
                      "max_pixels must be positive, min_pixels not negative",
                      factor, (long long)min_pixels, (long long)max_pixels);
  if (min_pixels > max_pixels)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "min_pixels (%lld) is larger than max_pixels (%lld)",
                      (long long)min_pixels, (long long)max_pixels);
  int lo = height < width ? height : width, hi = height < width ? width : height;
  double ratio = (double)hi / (double)lo; /* Python's int / int: correctly rounded, as here */
  if (ratio > IMAGE_MAX_ASPECT) {
    char r[40];
    py_float_repr(ratio, r, sizeof r);
    return qvl_errorf(QVL_ERR_INVALID_ARG, "absolute aspect ratio must be smaller than %d, got %s",
                      IMAGE_MAX_ASPECT, r);
  }
  /* Python round() is round-half-to-even; nearbyint does that in the default rounding mode. The
   * products are compared in int64, exact like Python's ints. */
  double f = factor;
  int64_t h_bar = (int64_t)nearbyint(height / f) * factor;
  int64_t w_bar = (int64_t)nearbyint(width / f) * factor;
  double hw = (double)height * (double)width; /* exact below 2^53, so hw / max equals Python int / int */
  if (h_bar * w_bar > max_pixels) {
    double beta = sqrt(hw / (double)max_pixels);
    h_bar = (int64_t)floor(height / beta / f) * factor;
    w_bar = (int64_t)floor(width / beta / f) * factor;
    if (h_bar < factor)
      h_bar = factor;
    if (w_bar < factor)
      w_bar = factor;
  } else if (h_bar * w_bar < min_pixels) {
    double beta = sqrt((double)min_pixels / hw);
    h_bar = (int64_t)ceil(height * beta / f) * factor;
    w_bar = (int64_t)ceil(width * beta / f) * factor;
  }
  if (h_bar < factor || w_bar < factor)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "smart_resize: %dx%d (WxH) with min_pixels %lld gives an empty %lldx%lld "
                      "image; min_pixels must be at least 1",
                      width, height, (long long)min_pixels, (long long)w_bar, (long long)h_bar);
  if (h_bar > (1 << 30) || w_bar > (1 << 30))
    return qvl_errorf(QVL_ERR_TOO_LARGE, "smart_resize: %dx%d (WxH) would be resized to %lldx%lld",
                      width, height, (long long)w_bar, (long long)h_bar);
  *out_height = (int)h_bar;
  *out_width = (int)w_bar;
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Bicubic resize */

/* Cubic convolution kernel, a = -0.5, in Pillow's evaluation order (so the doubles match). */
static double bicubic_kernel(double x) {
  const double a = -0.5;
  if (x < 0.0)
    x = -x;
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

/* Taps of one axis: output o reads input first[o] .. first[o] + count[o] - 1 with weights
 * w[o * ksize + j] (22-bit fixed point). */
typedef struct resize_taps {
  int ksize;
  int *first; /* [n_out] */
  int *count; /* [n_out] */
  int32_t *w; /* [n_out][ksize] */
} resize_taps;

static void taps_free(resize_taps *t) {
  free(t->first);
  free(t->count);
  free(t->w);
  memset(t, 0, sizeof *t);
}

static qvl_status taps_init(resize_taps *t, int n_in, int n_out) {
  memset(t, 0, sizeof *t);
  double scale = (double)n_in / n_out;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 2.0 * filterscale;
  double ss = 1.0 / filterscale;
  t->ksize = (int)ceil(support) * 2 + 1;
  t->first = malloc(sizeof(int) * (size_t)n_out);
  t->count = malloc(sizeof(int) * (size_t)n_out);
  t->w = malloc(sizeof(int32_t) * (size_t)n_out * (size_t)t->ksize);
  double *k = malloc(sizeof(double) * (size_t)t->ksize);
  if (!t->first || !t->count || !t->w || !k) {
    free(k);
    taps_free(t);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for resize taps (%d -> %d)", n_in, n_out);
  }
  for (int o = 0; o < n_out; o++) {
    double center = (o + 0.5) * scale;
    int xmin = (int)(center - support + 0.5); /* C truncation, as Pillow */
    if (xmin < 0)
      xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > n_in)
      xmax = n_in;
    int n = xmax - xmin;
    if (n > t->ksize)
      n = t->ksize; /* cannot happen; keeps the writes inside the row */
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
      k[j] = bicubic_kernel((j + xmin - center + 0.5) * ss);
      sum += k[j];
    }
    int32_t *w = t->w + (size_t)o * t->ksize;
    for (int j = 0; j < n; j++) {
      double v = sum != 0.0 ? k[j] / sum : k[j];
      double fx = v * (1 << RESIZE_PRECISION_BITS);
      w[j] = (int32_t)(v < 0 ? -0.5 + fx : 0.5 + fx);
    }
    for (int j = n < 0 ? 0 : n; j < t->ksize; j++)
      w[j] = 0;
    t->first[o] = xmin;
    t->count[o] = n < 0 ? 0 : n;
  }
  free(k);
  return QVL_OK;
}

static inline uint8_t clip_fixed(int32_t ss) {
  ss >>= RESIZE_PRECISION_BITS; /* arithmetic shift, as Pillow */
  return ss < 0 ? 0 : ss > 255 ? 255 : (uint8_t)ss;
}

/* acc[i] += in[i] * w over a row. The fixed 16-wide inner loop lets gcc -O2 (whose cheap
 * vectoriser wants a known trip count) and clang vectorise it. Integer sums are exact, so the
 * order of the taps does not change the result. */
static void accumulate_row(int32_t *restrict acc, const uint8_t *restrict in, int32_t w, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; k++)
      acc[i + k] += in[i + k] * w;
  for (; i < n; i++)
    acc[i] += in[i] * w;
}

/* Applies the taps along the slow axis: out row o = sum_j w[o][j] * in row (first[o] + j), rows
 * of n values; acc holds n int32. Used for both passes: the horizontal pass runs on transposed
 * strips so that its inner loop is contiguous too. */
static void resize_rows(const uint8_t *in, uint8_t *out, size_t n, const resize_taps *t, int n_out,
                        int32_t *acc) {
  const int32_t half = 1 << (RESIZE_PRECISION_BITS - 1);
  for (int o = 0; o < n_out; o++) {
    const int32_t *w = t->w + (size_t)o * t->ksize;
    for (size_t i = 0; i < n; i++)
      acc[i] = half;
    for (int j = 0; j < t->count[o]; j++)
      accumulate_row(acc, in + (size_t)(t->first[o] + j) * n, w[j], n);
    uint8_t *d = out + (size_t)o * n;
    for (size_t i = 0; i < n; i++)
      d[i] = clip_fixed(acc[i]);
  }
}

static qvl_status resize_vertical(const image_rgb *src, image_rgb *dst, const resize_taps *t) {
  size_t n = (size_t)src->width * 3;
  int32_t *acc = malloc(sizeof(int32_t) * n);
  if (!acc)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for a resize row of %zu values", n);
  resize_rows(src->data, dst->data, n, t, dst->height, acc);
  free(acc);
  return QVL_OK;
}

/* Horizontal pass over strips of STRIP rows: each strip is transposed to [width][STRIP][3] (small
 * enough to stay in cache), filtered like the vertical pass, and transposed back. */
static qvl_status resize_horizontal(const image_rgb *src, image_rgb *dst, const resize_taps *t) {
  enum { STRIP = 16 };
  int w = src->width, ow = dst->width;
  uint8_t *tin = malloc((size_t)w * STRIP * 3);
  uint8_t *tout = malloc((size_t)ow * STRIP * 3);
  int32_t *acc = malloc(sizeof(int32_t) * STRIP * 3);
  if (!tin || !tout || !acc) {
    free(tin);
    free(tout);
    free(acc);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the horizontal resize of a %dx%d image",
                      src->width, src->height);
  }
  for (int y0 = 0; y0 < src->height; y0 += STRIP) {
    int rows = src->height - y0 < STRIP ? src->height - y0 : STRIP;
    size_t n = (size_t)rows * 3;
    for (int r = 0; r < rows; r++) {
      const uint8_t *s = src->data + (size_t)(y0 + r) * w * 3;
      uint8_t *d = tin + (size_t)r * 3;
      for (int x = 0; x < w; x++, s += 3, d += n) {
        d[0] = s[0];
        d[1] = s[1];
        d[2] = s[2];
      }
    }
    resize_rows(tin, tout, n, t, ow, acc);
    for (int r = 0; r < rows; r++) {
      const uint8_t *s = tout + (size_t)r * 3;
      uint8_t *d = dst->data + (size_t)(y0 + r) * ow * 3;
      for (int x = 0; x < ow; x++, s += n, d += 3) {
        d[0] = s[0];
        d[1] = s[1];
        d[2] = s[2];
      }
    }
  }
  free(tin);
  free(tout);
  free(acc);
  return QVL_OK;
}

qvl_status image_resize_bicubic(const image_rgb *src, int out_width, int out_height, image_rgb *dst) {
  memset(dst, 0, sizeof *dst);
  if (!src->data || src->width <= 0 || src->height <= 0 || out_width <= 0 || out_height <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "resize %dx%d -> %dx%d: sizes must be positive",
                      src->width, src->height, out_width, out_height);
  image_rgb cur = *src; /* borrowed until a pass allocates */
  image_rgb tmp = {0};
  qvl_status s = QVL_OK;
  if (out_width != src->width) {
    resize_taps t;
    QVL_TRY(taps_init(&t, src->width, out_width));
    s = image_rgb_alloc(&tmp, out_width, src->height);
    if (s == QVL_OK)
      s = resize_horizontal(src, &tmp, &t);
    taps_free(&t);
    if (s != QVL_OK) {
      image_rgb_free(&tmp);
      return s;
    }
    cur = tmp;
  }
  if (out_height != src->height) {
    resize_taps t;
    s = taps_init(&t, src->height, out_height);
    if (s == QVL_OK) {
      s = image_rgb_alloc(dst, out_width, out_height);
      if (s == QVL_OK)
        s = resize_vertical(&cur, dst, &t);
      taps_free(&t);
    }
    image_rgb_free(&tmp);
    if (s != QVL_OK)
      image_rgb_free(dst);
    return s;
  }
  if (tmp.data) {
    *dst = tmp;
    return QVL_OK;
  }
  QVL_TRY(image_rgb_alloc(dst, src->width, src->height));
  memcpy(dst->data, src->data, (size_t)src->width * src->height * 3);
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Normalise and patchify */

float image_normalize_u8(uint8_t v) {
  float x = (float)((double)v * (1.0 / 255.0)); /* HF rescale: float64 multiply, cast */
  return (x - 0.5f) / 0.5f;                     /* HF normalize in float32 */
}

qvl_status image_patchify(const image_rgb *img, float *out) {
  const int P = IMAGE_PATCH_SIZE, M = IMAGE_MERGE_SIZE, T = IMAGE_TEMPORAL_PATCH;
  if (img->width <= 0 || img->height <= 0 || img->width % IMAGE_FACTOR || img->height % IMAGE_FACTOR)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "patchify: %dx%d (WxH) is not a multiple of %d on both sides",
                      img->width, img->height, IMAGE_FACTOR);
  float lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = image_normalize_u8((uint8_t)v);
  int gh = img->height / P, gw = img->width / P;
  size_t stride = (size_t)img->width * 3;
  float *dst = out;
  for (int bh = 0; bh < gh / M; bh++)
    for (int bw = 0; bw < gw / M; bw++)
      for (int mh = 0; mh < M; mh++)
        for (int mw = 0; mw < M; mw++, dst += IMAGE_PATCH_DIM) {
          /* one patch: pixel rows (bh*M + mh)*P.., cols (bw*M + mw)*P.. ; layout (c, t, py, px) */
          const uint8_t *base = img->data + (size_t)((bh * M + mh) * P) * stride +
                                (size_t)((bw * M + mw) * P) * 3;
          for (int c = 0; c < 3; c++)
            for (int py = 0; py < P; py++) {
              const uint8_t *px = base + (size_t)py * stride + c;
              float *d0 = dst + (size_t)c * T * P * P + (size_t)py * P;
              for (int x = 0; x < P; x++)
                d0[x] = lut[px[3 * x]];
              for (int t = 1; t < T; t++)
                memcpy(d0 + (size_t)t * P * P, d0, sizeof(float) * P);
            }
        }
  return QVL_OK;
}

void image_patches_free(image_patches *p) {
  if (!p)
    return;
  image_rgb_free(&p->resized);
  free(p->pixel_values);
  memset(p, 0, sizeof *p);
}

qvl_status image_preprocess(const image_rgb *img, const preprocess_opts *o, image_patches *out) {
  memset(out, 0, sizeof *out);
  preprocess_opts def;
  preprocess_opts_default(&def);
  if (o) { /* zero fields keep the defaults, like image_limits */
    if (o->min_pixels > 0)
      def.min_pixels = o->min_pixels;
    if (o->max_pixels > 0)
      def.max_pixels = o->max_pixels;
    /* a cap below the default minimum lowers the minimum instead of failing */
    if (o->min_pixels <= 0 && def.min_pixels > def.max_pixels)
      def.min_pixels = def.max_pixels;
  }
  o = &def;
  if (!img || !img->data)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "preprocess: no image");
  int rh, rw;
  QVL_TRY(image_smart_resize(img->height, img->width, o->min_pixels, o->max_pixels, IMAGE_FACTOR,
                             &rh, &rw));
  QVL_TRY(image_resize_bicubic(img, rw, rh, &out->resized));
  out->grid_t = 1;
  out->grid_h = rh / IMAGE_PATCH_SIZE;
  out->grid_w = rw / IMAGE_PATCH_SIZE;
  size_t n = (size_t)out->grid_h * out->grid_w;
  out->pixel_values = malloc(n * IMAGE_PATCH_DIM * sizeof(float));
  if (!out->pixel_values) {
    image_patches_free(out);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for %zu image patches", n);
  }
  qvl_status s = image_patchify(&out->resized, out->pixel_values);
  if (s != QVL_OK) {
    image_patches_free(out);
    return s;
  }
  out->n_patches = (int)n;
  out->n_tokens = (int)(n / (IMAGE_MERGE_SIZE * IMAGE_MERGE_SIZE));
  return QVL_OK;
}
