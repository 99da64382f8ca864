#include "video/thumbs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "image/preprocess.h"

void video_thumb_size(int width, int height, int max_width, int max_height, int *out_w, int *out_h) {
  double scale = fmin(1.0, fmin((double)max_width / width, (double)max_height / height));
  *out_w = (int)fmax(1.0, round(width * scale));
  *out_h = (int)fmax(1.0, round(height * scale));
}

static qvl_status keep_thumb(void *user, int k, int64_t index, const image_rgb *rgb) {
  (void)index;
  video_thumbs *t = user;
  size_t fb = (size_t)t->width * t->height * 3;
  image_rgb small = {0};
  QVL_TRY(image_resize_bicubic(rgb, t->width, t->height, &small));
  memcpy(t->rgb + (size_t)k * fb, small.data, fb);
  image_rgb_free(&small);
  return QVL_OK;
}

qvl_status video_clip_thumbnails(video_clip *c, int max_width, int max_height, video_thumbs *out) {
  memset(out, 0, sizeof *out);
  if (!c->reader)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the clip is not open (decoded already?)");
  if (max_width < 1 || max_height < 1)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "a thumbnail needs at least 1x1 pixels");
  out->n = c->n;
  video_thumb_size(c->info.width, c->info.height, max_width, max_height, &out->width, &out->height);
  qvl_status s = QVL_OK;
  if (!(out->rgb = malloc((size_t)out->width * out->height * 3 * (size_t)(c->n > 0 ? c->n : 1))))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory for %d thumbnails", c->n);
  if (s == QVL_OK)
    s = video_reader_read(c->reader, c->indices, c->n, keep_thumb, out);
  video_reader_close(c->reader);
  c->reader = NULL;
  if (s != QVL_OK)
    video_thumbs_free(out);
  return s;
}

void video_thumbs_free(video_thumbs *t) {
  if (!t)
    return;
  free(t->rgb);
  memset(t, 0, sizeof *t);
}
