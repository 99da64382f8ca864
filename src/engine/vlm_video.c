#include "engine/vlm_video.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/status.h"

/* Bytes + every setting that shapes the vision input (a different sampling is another input). */
static uint64_t video_key(const buf *bytes, const video_sampling *s) {
  struct {
    char tag[8];
    double fps;
    int64_t num_frames, min_frames, max_frames, min_pixels, max_pixels;
  } meta;
  memset(&meta, 0, sizeof meta);
  memcpy(meta.tag, "video", 5);
  meta.fps = s->fps;
  meta.num_frames = s->num_frames;
  meta.min_frames = s->min_frames;
  meta.max_frames = s->max_frames;
  meta.min_pixels = s->min_pixels;
  meta.max_pixels = s->max_pixels;
  uint64_t k = XXH3_64bits_withSeed(bytes->data, bytes->len, XXH3_64bits(&meta, sizeof meta));
  return k ? k : 1;
}

static video_limits limits_of(const vlm_prompt_opts *o) {
  video_limits l = o->video_limits;
  if (!l.max_bytes) {
    video_limits d;
    video_limits_default(&d);
    l.max_bytes = d.max_bytes;
  }
  return l;
}

qvl_status vlm_video_plan(const vlm *m, const chat_image *cv, int i, const vlm_prompt_opts *o, buf *bytes,
                          vlm_image *out) {
  memset(out, 0, sizeof *out);
  out->is_video = true;
  qvl_status s = QVL_OK;
  if (m->video_pad_id < 0)
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "this model's vocabulary has no <|video_pad|> token");
  if (s == QVL_OK && !cv->url)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "no video URL (expected video_url.url or video)");
  video_limits lim = limits_of(o);
  if (s == QVL_OK) {
    image_source_opts src = o->source;
    src.max_bytes = lim.max_bytes;
    if (!src.stop) {
      src.stop = o->stop;
      src.stop_user = o->stop_user;
    }
    s = image_source_read(cv->url, &src, bytes);
  }
  if (s == QVL_OK)
    s = video_clip_open(bytes->data, bytes->len, &lim, &o->video, o->stop, o->stop_user, &out->clip);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "video %d (messages[%d]): ", i + 1, cv->message_index);
  out->grid_t = out->clip.grid_t;
  out->grid_h = out->clip.grid_h;
  out->grid_w = out->clip.grid_w;
  out->n_tokens = out->clip.n_tokens;
  out->bytes_key = out->hash = video_key(bytes, &o->video);
  return QVL_OK;
}

qvl_status vlm_video_load(const vlm_prompt_opts *o, buf *bytes, vlm_image *im, int i, int message_index) {
  vlm_known_image k;
  if (o->defer_vision && !o->keep_images && o->known_image && o->known_image(o->known_user, im->bytes_key, &k) &&
      k.grid_t == im->grid_t && k.grid_h == im->grid_h && k.grid_w == im->grid_w && k.n_tokens == im->n_tokens) {
    /* the embeddings are cached: nothing to decode; the bytes stay for the rare eviction */
    video_reader_close(im->clip.reader);
    im->clip.reader = NULL;
    im->encoded = *bytes;
    memset(bytes, 0, sizeof *bytes);
    return QVL_OK;
  }
  qvl_status s = o->budget ? image_budget_slot_take(o->budget, o->stop, o->stop_user) : QVL_OK;
  if (s == QVL_OK) {
    s = video_clip_decode(&im->clip, o->keep_images);
    if (o->budget)
      image_budget_slot_give(o->budget);
  }
  if (s != QVL_OK)
    return qvl_error_prefix(s, "video %d (messages[%d]): ", i + 1, message_index);
  im->patches.pixel_values = im->clip.pixel_values; /* the tower and the engine read it there */
  im->patches.n_patches = (int)im->clip.n_patches;
  im->patches.grid_t = im->grid_t;
  im->patches.grid_h = im->grid_h;
  im->patches.grid_w = im->grid_w;
  im->patches.n_tokens = (int)im->n_tokens;
  im->clip.pixel_values = NULL;
  if (!o->keep_images)
    video_clip_drop_frames(&im->clip);
  return QVL_OK;
}

qvl_status vlm_video_decode_deferred(const vlm_prompt_opts *o, vlm_image *im, int i) {
  if (!im->encoded.data)
    return qvl_errorf(QVL_ERR_INTERNAL, "video %d: neither pixels nor encoded bytes are left", i + 1);
  video_limits lim = limits_of(o);
  video_clip c;
  qvl_status s = video_clip_open(im->encoded.data, im->encoded.len, &lim, &o->video, o->stop, o->stop_user, &c);
  if (s == QVL_OK && (c.grid_t != im->grid_t || c.grid_h != im->grid_h || c.grid_w != im->grid_w))
    s = qvl_errorf(QVL_ERR_INTERNAL, "video %d decodes to another grid than its key announced", i + 1);
  if (s == QVL_OK)
    s = video_clip_decode(&c, false);
  if (s != QVL_OK) {
    video_clip_free(&c);
    return qvl_error_prefix(s, "video %d: ", i + 1);
  }
  im->patches.pixel_values = c.pixel_values;
  im->patches.n_patches = (int)c.n_patches;
  c.pixel_values = NULL;
  video_clip_free(&c);
  buf_free(&im->encoded);
  return QVL_OK;
}

int64_t vlm_video_extra_tokens_bound(const vlm_image *im) {
  /* "<12345.6 seconds>" is at most ~20 tokens, plus <|vision_start|> and <|vision_end|> */
  return (int64_t)im->grid_t * 24;
}

qvl_status vlm_video_tokens(const vlm *m, const vlm_image *im, int32_t *out, int64_t cap, int64_t *n) {
  int64_t per = (int64_t)im->grid_h * im->grid_w / (IMAGE_MERGE_SIZE * IMAGE_MERGE_SIZE), k = 0;
  for (int g = 0; g < im->grid_t; g++) {
    char text[64];
    int len = video_timestamp_text(im->clip.timestamps[g], text, sizeof text);
    if (len < 0)
      return qvl_errorf(QVL_ERR_INTERNAL, "timestamp %g does not fit", im->clip.timestamps[g]);
    int32_t *ids = NULL;
    size_t nt = 0;
    QVL_TRY(tokenizer_encode(m->tok, text, (size_t)len, &ids, &nt));
    if (out && k + (int64_t)nt + per + 2 > cap) {
      free(ids);
      return qvl_errorf(QVL_ERR_INTERNAL, "video tokens overflow their buffer");
    }
    for (size_t j = 0; j < nt; j++, k++)
      if (out)
        out[k] = ids[j];
    free(ids);
    if (out)
      out[k] = m->vision_start_id;
    k++;
    for (int64_t j = 0; j < per; j++, k++)
      if (out)
        out[k] = m->video_pad_id;
    if (out)
      out[k] = m->vision_end_id;
    k++;
  }
  *n = k;
  return QVL_OK;
}

void vlm_video_free(vlm_image *im) { video_clip_free(&im->clip); }
