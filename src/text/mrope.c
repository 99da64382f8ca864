#include "text/mrope.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/status.h"

qvl_status mrope_init(mrope *m, int head_dim, float theta, const int sections[4]) {
  memset(m, 0, sizeof *m);
  if (head_dim < 2 || head_dim > 2 * MROPE_MAX_HALF || head_dim % 2 != 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "M-RoPE: head_dim %d must be even and in 2..%d", head_dim,
                      2 * MROPE_MAX_HALF);
  if (!(theta > 0.0f) || !isfinite(theta))
    return qvl_errorf(QVL_ERR_FORMAT, "M-RoPE: rope theta %g must be positive and finite", (double)theta);
  for (int i = 0; i < 4; i++) {
    if (sections[i] < 0 || sections[i] > head_dim)
      return qvl_errorf(QVL_ERR_FORMAT, "M-RoPE: section %d is %d, expected 0..%d", i, sections[i],
                        head_dim);
    m->sections[i] = sections[i];
  }
  m->head_dim = head_dim;
  m->theta = theta;
  int half = head_dim / 2;
  for (int j = 0; j < half; j++) {
    /* HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32. */
    float e = (float)(2 * j) / (float)head_dim;
    m->inv_freq[j] = 1.0f / powf(theta, e);
    uint8_t axis = 0;
    if (j % 3 == 1 && j < 3 * sections[1])
      axis = 1;
    else if (j % 3 == 2 && j < 3 * sections[2])
      axis = 2;
    m->axis[j] = axis;
  }
  return QVL_OK;
}

void mrope_tables(const mrope *m, const int32_t *pos, int64_t pos_stride, int64_t n, float *cos,
                  float *sin) {
  int hd = m->head_dim, half = hd / 2;
  for (int64_t i = 0; i < n; i++) {
    float *c = cos + i * hd, *s = sin + i * hd;
    for (int j = 0; j < half; j++) {
      /* float32 product, then float32 cos/sin of it, as HF builds its tables. */
      float angle = (float)pos[m->axis[j] * pos_stride + i] * m->inv_freq[j];
      c[j] = c[j + half] = cosf(angle);
      s[j] = s[j + half] = sinf(angle);
    }
  }
}

void mrope_apply(const mrope *m, float *x, int64_t n, int n_heads, int64_t row_stride,
                 const float *cos, const float *sin) {
  int hd = m->head_dim, half = hd / 2;
  for (int64_t i = 0; i < n; i++) {
    const float *c = cos + i * hd, *s = sin + i * hd;
    for (int h = 0; h < n_heads; h++) {
      float *v = x + i * row_stride + (int64_t)h * hd;
      for (int j = 0; j < half; j++) {
        float a = v[j], b = v[j + half];
        /* HF: q * cos + rotate_half(q) * sin with rotate_half(q) = cat(-q[half:], q[:half]). */
        float lo = a * c[j] + (-b) * s[j];
        float hi = b * c[j + half] + a * s[j + half];
        v[j] = lo;
        v[j + half] = hi;
      }
    }
  }
}

qvl_status mrope_positions(const int32_t *ids, int64_t n, int32_t image_pad_id,
                           int32_t vision_start_id, const mrope_image *images, int n_images,
                           int merge, int32_t *pos, int64_t *rope_delta) {
  return mrope_positions_mm(ids, n, image_pad_id, -1, vision_start_id, images, n_images, merge, pos, rope_delta);
}

static bool is_pad(int32_t id, int32_t image_pad_id, int32_t video_pad_id) {
  return id == image_pad_id || (video_pad_id >= 0 && id == video_pad_id);
}

qvl_status mrope_positions_mm(const int32_t *ids, int64_t n, int32_t image_pad_id, int32_t video_pad_id,
                              int32_t vision_start_id, const mrope_image *images, int n_images, int merge,
                              int32_t *pos, int64_t *rope_delta) {
  if (n < 0 || merge <= 0 || n_images < 0 || (n_images > 0 && !images))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "M-RoPE positions: invalid arguments (n %lld, merge %d, images %d)",
                      (long long)n, merge, n_images);
  if (n > INT32_MAX / 2)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "M-RoPE positions: %lld tokens is too many", (long long)n);
  int32_t *pt = pos, *ph = pos + n, *pw = pos + 2 * n;
  /* HF counts an image per <|vision_start|> directly followed by <|image_pad|> (and a video
   * group per one followed by <|video_pad|>). */
  int64_t found = 0;
  for (int64_t i = 0; i + 1 < n; i++)
    if (ids[i] == vision_start_id && is_pad(ids[i + 1], image_pad_id, video_pad_id))
      found++;
  if (found != n_images)
    return qvl_errorf(QVL_ERR_MISMATCH,
                      "M-RoPE positions: the prompt holds %lld images (<|vision_start|><|image_pad|>) "
                      "but %d image grids were given",
                      (long long)found, n_images);
  int64_t st = 0;    /* next token index to assign */
  int64_t next = 0;  /* max position so far + 1 */
  for (int im = 0; im < n_images; im++) {
    const mrope_image *g = &images[im];
    if (g->t <= 0 || g->h <= 0 || g->w <= 0 || g->h % merge != 0 || g->w % merge != 0)
      return qvl_errorf(QVL_ERR_MISMATCH,
                        "M-RoPE positions: image %d grid (t %d, h %d, w %d) must be positive with h and w "
                        "divisible by the merge size %d",
                        im, g->t, g->h, g->w, merge);
    int64_t ed = st;
    while (ed < n && !is_pad(ids[ed], image_pad_id, video_pad_id))
      ed++;
    int32_t pad = ed < n ? ids[ed] : image_pad_id; /* the run is of this one kind */
    int64_t gh = g->h / merge, gw = g->w / merge;
    /* Grids larger than the prompt cannot fit; checking first keeps the product from overflowing. */
    if (g->t > n || gh * gw > n || (int64_t)g->t * gh * gw > n)
      return qvl_errorf(QVL_ERR_MISMATCH,
                        "M-RoPE positions: image %d grid (t %d, h %d, w %d) needs more tokens than the "
                        "prompt's %lld", im, g->t, g->h, g->w, (long long)n);
    int64_t n_tok = (int64_t)g->t * gh * gw;
    int64_t run = 0;
    while (ed + run < n && run < n_tok && ids[ed + run] == pad)
      run++;
    if (run != n_tok)
      return qvl_errorf(QVL_ERR_MISMATCH,
                        "M-RoPE positions: image %d needs %lld <|image_pad|> tokens for its grid "
                        "(t %d, h %d, w %d, merge %d) but the prompt has %lld at index %lld",
                        im, (long long)n_tok, g->t, g->h, g->w, merge, (long long)run, (long long)ed);
    int64_t text_len = ed - st;
    for (int64_t i = 0; i < text_len; i++)
      pt[st + i] = ph[st + i] = pw[st + i] = (int32_t)(next + i);
    int64_t base = next + text_len;
    int64_t max_pos = text_len > 0 ? base - 1 : next - 1;
    int64_t k = ed;
    for (int64_t ti = 0; ti < g->t; ti++)
      for (int64_t r = 0; r < gh; r++)
        for (int64_t c = 0; c < gw; c++, k++) {
          pt[k] = (int32_t)(base + ti);
          ph[k] = (int32_t)(base + r);
          pw[k] = (int32_t)(base + c);
        }
    int64_t span = g->t;
    if (gh > span)
      span = gh;
    if (gw > span)
      span = gw;
    if (base + span - 1 > max_pos)
      max_pos = base + span - 1;
    next = max_pos + 1;
    st = ed + n_tok;
  }
  for (int64_t i = st; i < n; i++)
    pt[i] = ph[i] = pw[i] = (int32_t)(next + (i - st));
  int64_t maxp = n > st ? next + (n - st) - 1 : next - 1;
  if (n == 0)
    maxp = -1;
  *rope_delta = maxp + 1 - n;
  return QVL_OK;
}
