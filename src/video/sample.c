#include "video/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

void video_sampling_default(video_sampling *s) {
  *s = (video_sampling){.fps = VIDEO_HF_FPS,
                        .num_frames = 0,
                        .min_frames = VIDEO_HF_MIN_FRAMES,
                        .max_frames = VIDEO_HF_MAX_FRAMES,
                        .min_pixels = VIDEO_HF_MIN_PIXELS,
                        .max_pixels = VIDEO_HF_MAX_PIXELS};
}

qvl_status video_sample_count(int64_t total, double video_fps, const video_sampling *s, int *n_out) {
  if (total < 1)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the video has no frames");
  if (s->fps > 0 && s->num_frames > 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "`num_frames` and `fps` are mutually exclusive arguments, please use only one!");
  if (s->num_frames < 0 || !(s->fps >= 0) || !isfinite(s->fps))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the sampling asks for fps %g and num_frames %d", s->fps, s->num_frames);
  int64_t n;
  if (s->num_frames > 0) {
    /* HF indexes with the given count; more indices than frames would repeat frames, which the
     * processor accepts but only wastes tokens: refused with a message instead */
    if (s->num_frames > total)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "num_frames %d is more than the video's %lld frames", s->num_frames,
                        (long long)total);
    n = s->num_frames;
  } else if (s->fps > 0) {
    double vf = video_fps > 0 && isfinite(video_fps) ? video_fps : VIDEO_FALLBACK_FPS;
    double want = (double)total / vf * s->fps; /* Python: int(total / video_fps * fps) */
    n = want >= 9e18 ? INT64_MAX : (int64_t)want;
    if (n < s->min_frames)
      n = s->min_frames;
    if (s->max_frames > 0 && n > s->max_frames)
      n = s->max_frames;
    if (n > total)
      n = total;
  } else {
    /* neither: every frame within [min_frames, max_frames] (HF's num_frames = None branch) */
    n = total;
    if (n < s->min_frames)
      n = s->min_frames;
    if (s->max_frames > 0 && n > s->max_frames)
      n = s->max_frames;
  }
  if (n > INT32_MAX / 2)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "the sampling asks for %lld frames", (long long)n);
  *n_out = (int)n;
  return QVL_OK;
}

qvl_status video_sample_indices(int64_t total, double video_fps, const video_sampling *s, int64_t *idx, int cap,
                                int *n_out) {
  int n;
  QVL_TRY(video_sample_count(total, video_fps, s, &n));
  if (n > cap)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "%d frames would be sampled; at most %d are allowed", n, cap);
  if (n == 1) {
    idx[0] = 0; /* numpy linspace with one point is its start */
  } else {
    /* numpy linspace: i * step + start, step = (stop - start) / (n - 1) in double, last = stop;
     * then round half to even (rint in the default rounding mode) */
    double step = (double)(total - 1) / (double)(n - 1);
    for (int i = 0; i < n - 1; i++)
      idx[i] = (int64_t)rint((double)i * step);
    idx[n - 1] = total - 1;
  }
  *n_out = n;
  return QVL_OK;
}

/* Python's round() of a double to an integer: half to even. */
static double round_even(double x) { return rint(x); }

qvl_status video_smart_resize(int n, int height, int width, int64_t min_pixels, int64_t max_pixels, int *out_h,
                              int *out_w) {
  const int factor = VIDEO_FACTOR, tf = VIDEO_TEMPORAL_PATCH;
  if (n < tf)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "t:%d must be larger than temporal_factor:%d", n, tf);
  if (height < 1 || width < 1 || min_pixels < 1 || max_pixels < 1)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "video smart_resize of %dx%d (WxH) with pixels %lld..%lld", width, height,
                      (long long)min_pixels, (long long)max_pixels);
  if (min_pixels > max_pixels)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "video min_pixels %lld is above max_pixels %lld", (long long)min_pixels,
                      (long long)max_pixels);
  double h = height, w = width;
  if (height < factor || width < factor) {
    double scale = fmax((double)factor / h, (double)factor / w);
    h = floor(h * scale); /* Python int() of a positive float */
    w = floor(w * scale);
  }
  double ratio = fmax(h, w) / fmin(h, w);
  if (ratio > 200) {
    /* Python's repr of a ratio > 200: the fewest decimals (at least one) that read back */
    char r[64];
    for (int d = 1; d <= 17; d++) {
      snprintf(r, sizeof r, "%.*f", d, ratio);
      if (strtod(r, NULL) == ratio)
        break;
    }
    return qvl_errorf(QVL_ERR_INVALID_ARG, "absolute aspect ratio must be smaller than 200, got %s", r);
  }
  double h_bar = round_even(h / factor) * factor, w_bar = round_even(w / factor) * factor;
  double t_bar = round_even((double)n / tf) * tf;
  if (t_bar * h_bar * w_bar > (double)max_pixels) {
    double beta = sqrt(((double)n * h * w) / (double)max_pixels);
    h_bar = fmax(factor, floor(h / beta / factor) * factor);
    w_bar = fmax(factor, floor(w / beta / factor) * factor);
  } else if (t_bar * h_bar * w_bar < (double)min_pixels) {
    double beta = sqrt((double)min_pixels / ((double)n * h * w));
    h_bar = ceil(h * beta / factor) * factor;
    w_bar = ceil(w * beta / factor) * factor;
  }
  if (h_bar > 1e6 || w_bar > 1e6)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "video frames would be resized to %.0fx%.0f (WxH)", w_bar, h_bar);
  *out_h = (int)h_bar;
  *out_w = (int)w_bar;
  return QVL_OK;
}

void video_timestamps(const int64_t *idx, int n, double video_fps, double *ts) {
  double vf = video_fps > 0 && isfinite(video_fps) ? video_fps : VIDEO_FALLBACK_FPS;
  int g = video_n_groups(n);
  for (int i = 0; i < g; i++) {
    int a = i * VIDEO_TEMPORAL_PATCH, b = a + VIDEO_TEMPORAL_PATCH - 1;
    if (b >= n)
      b = n - 1; /* the padded list repeats the last index */
    ts[i] = ((double)idx[a] / vf + (double)idx[b] / vf) / 2;
  }
}

int video_timestamp_text(double t, char *out, int cap) {
  int len = snprintf(out, (size_t)cap, "<%.1f seconds>", t);
  return len < 0 || len >= cap ? -1 : len;
}
