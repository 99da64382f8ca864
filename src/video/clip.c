#include "video/clip.h"

#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"
#include "image/preprocess.h"

float video_normalize_u8(uint8_t v) { return ((float)v - 127.5f) / 127.5f; }

void video_patchify(const uint8_t *frames, int n, int height, int width, float *out) {
  const int P = IMAGE_PATCH_SIZE, M = IMAGE_MERGE_SIZE, T = VIDEO_TEMPORAL_PATCH;
  float lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = video_normalize_u8((uint8_t)v);
  int gh = height / P, gw = width / P, gt = video_n_groups(n);
  size_t stride = (size_t)width * 3, frame = stride * (size_t)height;
  float *dst = out;
  for (int g = 0; g < gt; g++)
    for (int bh = 0; bh < gh / M; bh++)
      for (int bw = 0; bw < gw / M; bw++)
        for (int mh = 0; mh < M; mh++)
          for (int mw = 0; mw < M; mw++, dst += IMAGE_PATCH_DIM) {
            size_t off = (size_t)((bh * M + mh) * P) * stride + (size_t)((bw * M + mw) * P) * 3;
            for (int c = 0; c < 3; c++)
              for (int t = 0; t < T; t++) {
                int f = g * T + t;
                if (f >= n)
                  f = n - 1; /* temporal padding: the last frame again */
                const uint8_t *base = frames + (size_t)f * frame + off + c;
                float *d = dst + ((size_t)c * T + t) * P * P;
                for (int py = 0; py < P; py++)
                  for (int x = 0; x < P; x++)
                    d[py * P + x] = lut[base[(size_t)py * stride + 3 * (size_t)x]];
              }
          }
}

void video_clip_drop_frames(video_clip *c) {
  free(c->resized);
  c->resized = NULL;
}

void video_clip_free(video_clip *c) {
  if (!c)
    return;
  video_reader_close(c->reader);
  FREE_EACH(c->indices, c->timestamps, c->resized, c->pixel_values, c->all_rgb);
  memset(c, 0, sizeof *c);
}

qvl_status video_clip_open(const void *data, size_t size, const video_limits *lim, const video_sampling *smp,
                           qvl_stop_fn stop, void *stop_user, video_clip *out) {
  memset(out, 0, sizeof *out);
  video_sampling def;
  video_sampling_default(&def);
  if (!smp)
    smp = &def;
  qvl_status s = video_reader_open(data, size, lim, stop, stop_user, &out->reader);
  if (s != QVL_OK)
    return s;
  out->info = *video_reader_info(out->reader);
  int n = 0;
  s = video_sample_count(out->info.total_frames, out->info.fps, smp, &n);
  if (s == QVL_OK) {
    out->indices = malloc(sizeof *out->indices * (size_t)(n > 0 ? n : 1));
    out->timestamps = malloc(sizeof *out->timestamps * (size_t)(video_n_groups(n) > 0 ? video_n_groups(n) : 1));
    if (!out->indices || !out->timestamps)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  if (s == QVL_OK)
    s = video_sample_indices(out->info.total_frames, out->info.fps, smp, out->indices, n, &out->n);
  if (s == QVL_OK) /* a clip whose sampled frames would cost too much decoding is refused now */
    s = video_reader_plan(out->reader, out->indices, out->n, NULL);
  if (s == QVL_OK)
    s = video_smart_resize(out->n, out->info.height, out->info.width, smp->min_pixels, smp->max_pixels,
                           &out->height, &out->width);
  if (s != QVL_OK) {
    video_clip_free(out);
    return s;
  }
  video_timestamps(out->indices, out->n, out->info.fps, out->timestamps);
  out->grid_t = video_n_groups(out->n);
  out->grid_h = out->height / IMAGE_PATCH_SIZE;
  out->grid_w = out->width / IMAGE_PATCH_SIZE;
  out->n_patches = (int64_t)out->grid_t * out->grid_h * out->grid_w;
  out->n_tokens = out->n_patches / (IMAGE_MERGE_SIZE * IMAGE_MERGE_SIZE);
  return QVL_OK;
}

typedef struct resize_ctx {
  video_clip *c;
} resize_ctx;

static qvl_status keep_resized(void *user, int k, int64_t index, const image_rgb *rgb) {
  (void)index;
  video_clip *c = user;
  size_t fb = (size_t)c->width * c->height * 3;
  if (rgb->width == c->width && rgb->height == c->height) {
    memcpy(c->resized + (size_t)k * fb, rgb->data, fb);
    return QVL_OK;
  }
  image_rgb small = {0};
  QVL_TRY(image_resize_bicubic(rgb, c->width, c->height, &small));
  memcpy(c->resized + (size_t)k * fb, small.data, fb);
  image_rgb_free(&small);
  return QVL_OK;
}

static qvl_status keep_all(void *user, int k, int64_t index, const image_rgb *rgb) {
  (void)index;
  video_clip *c = user;
  size_t fb = (size_t)rgb->width * rgb->height * 3;
  memcpy(c->all_rgb + (size_t)k * fb, rgb->data, fb);
  return QVL_OK;
}

qvl_status video_clip_decode(video_clip *c, bool want_all) {
  if (!c->reader)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the clip is not open (decoded already?)");
  size_t fb = (size_t)c->width * c->height * 3;
  qvl_status s = QVL_OK;
  c->resized = malloc(fb * (size_t)c->n);
  c->pixel_values = malloc(sizeof(float) * IMAGE_PATCH_DIM * (size_t)c->n_patches);
  if (!c->resized || !c->pixel_values)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory for %d frames of %dx%d", c->n, c->width, c->height);
  if (s == QVL_OK)
    s = video_reader_read(c->reader, c->indices, c->n, keep_resized, c);
  if (s == QVL_OK && want_all) {
    int64_t total = c->info.total_frames;
    size_t ab = (size_t)c->info.width * c->info.height * 3;
    int64_t *all = malloc(sizeof *all * (size_t)total);
    c->all_rgb = malloc(ab * (size_t)total);
    if (!all || !c->all_rgb)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory for every frame of the clip");
    for (int64_t i = 0; s == QVL_OK && i < total; i++)
      all[i] = i;
    if (s == QVL_OK && total > INT32_MAX)
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "too many frames");
    if (s == QVL_OK)
      s = video_reader_read(c->reader, all, (int)total, keep_all, c);
    free(all);
  }
  video_reader_close(c->reader);
  c->reader = NULL;
  if (s != QVL_OK)
    return s;
  video_patchify(c->resized, c->n, c->height, c->width, c->pixel_values);
  return QVL_OK;
}
