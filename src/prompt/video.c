#include "prompt/video.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/status.h"

/* Bytes + every setting that shapes the vision input (another sampling is another input). */
static uint64_t video_key(const rcbuf *bytes, const video_sampling *s) {
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
  return k ? k : 1; /* 0 means "no key" to the embedding cache */
}

static video_limits limits_of(const prompt_opts *o) {
  video_limits l = o->video_limits;
  if (!l.max_bytes) {
    video_limits d;
    video_limits_default(&d);
    l.max_bytes = d.max_bytes;
  }
  return l;
}

qvl_status prompt_video_tokens(const prompt_model *m, const video_clip *c, int32_t *out, int64_t cap, int64_t *n) {
  int64_t per = (int64_t)c->grid_h * c->grid_w / (IMAGE_MERGE_SIZE * IMAGE_MERGE_SIZE), k = 0;
  for (int g = 0; g < c->grid_t; g++) {
    char text[64];
    int len = video_timestamp_text(c->timestamps[g], text, sizeof text);
    if (len < 0)
      return qvl_errorf(QVL_ERR_INTERNAL, "timestamp %g does not fit", c->timestamps[g]);
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

qvl_status prompt_video_plan(const prompt_model *m, const chat_image *ci, int i, const prompt_opts *o,
                             prompt_media *md) {
  md->kind = PROMPT_MEDIA_VIDEO;
  md->index = i;
  md->message_index = ci->message_index;
  md->url = ci->url;
  qvl_status s = QVL_OK;
  if (m->video_pad_id < 0)
    s = qvl_errorf(QVL_ERR_UNSUPPORTED, "this model's vocabulary has no <|video_pad|> token");
  if (s == QVL_OK && !ci->url)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "no video URL (expected video_url.url or video)");
  video_limits lim = limits_of(o);
  buf bytes = {0};
  if (s == QVL_OK) {
    image_source_opts src = o->source;
    src.max_bytes = lim.max_bytes;
    if (!src.stop) {
      src.stop = o->stop;
      src.stop_user = o->stop_user;
    }
    s = image_source_read(ci->url, &src, &bytes);
  }
  if (s == QVL_OK && !(md->clip = calloc(1, sizeof *md->clip)))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK)
    s = video_clip_open(bytes.data, bytes.len, &lim, &o->video, o->stop, o->stop_user, md->clip);
  if (s == QVL_OK) {
    /* the plan keeps the facts, not the demuxer: materializing reads the bytes again */
    video_reader_close(md->clip->reader);
    md->clip->reader = NULL;
    if (!(md->bytes = rcbuf_take(&bytes)))
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  buf_free(&bytes);
  if (s == QVL_OK)
    s = prompt_video_tokens(m, md->clip, NULL, 0, &md->text_tokens);
  if (s != QVL_OK) {
    prompt_video_plan_free(md);
    return qvl_error_prefix(s, "video %d (messages[%d]): ", i + 1, ci->message_index);
  }
  const video_clip *c = md->clip;
  md->n_tokens = c->n_tokens;
  md->text_tokens -= c->n_tokens;
  md->frames = c->n;
  md->grid_t = c->grid_t;
  md->grid_h = c->grid_h;
  md->grid_w = c->grid_w;
  /* the decode converts one source frame at a time and keeps the sampled frames resized */
  md->pixels = (int64_t)c->info.width * c->info.height;
  md->width = c->info.width;
  md->height = c->info.height;
  md->resized_pixels = (int64_t)c->n * c->width * c->height;
  md->bytes_key = video_key(md->bytes, &o->video); /* also its content key (prompt_image.hash) */
  return QVL_OK;
}

void prompt_video_plan_free(prompt_media *md) {
  if (md->clip)
    video_clip_free(md->clip);
  free(md->clip);
  md->clip = NULL;
}

/* The plan's facts (indices, timestamps, sizes, grid) without reader or pixels. */
static qvl_status copy_plan(const video_clip *src, video_clip *dst) {
  *dst = (video_clip){.info = src->info, .n = src->n, .height = src->height, .width = src->width,
                      .grid_t = src->grid_t, .grid_h = src->grid_h, .grid_w = src->grid_w,
                      .n_patches = src->n_patches, .n_tokens = src->n_tokens};
  dst->indices = malloc(sizeof *dst->indices * (size_t)src->n);
  dst->timestamps = malloc(sizeof *dst->timestamps * (size_t)src->grid_t);
  if (!dst->indices || !dst->timestamps) {
    video_clip_free(dst);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  memcpy(dst->indices, src->indices, sizeof *dst->indices * (size_t)src->n);
  memcpy(dst->timestamps, src->timestamps, sizeof *dst->timestamps * (size_t)src->grid_t);
  return QVL_OK;
}

/* Opens the bytes again and decodes; the grid must be the planned one. */
static qvl_status decode(const rcbuf *bytes, const prompt_opts *o, bool keep_all, const video_clip *plan,
                         video_clip *out) {
  video_limits lim = limits_of(o);
  qvl_status s = video_clip_open(bytes->data, bytes->len, &lim, &o->video, o->stop, o->stop_user, out);
  if (s == QVL_OK && (out->grid_t != plan->grid_t || out->grid_h != plan->grid_h || out->grid_w != plan->grid_w))
    s = qvl_errorf(QVL_ERR_INTERNAL, "the video reads to another grid than its plan");
  if (s == QVL_OK)
    s = video_clip_decode(out, keep_all);
  if (s != QVL_OK)
    video_clip_free(out);
  return s;
}

/* Moves the clip's pixel values to where the tower and the engine read them. */
static void take_pixels(prompt_image *im) {
  im->patches.pixel_values = im->clip.pixel_values;
  im->patches.n_patches = (int)im->clip.n_patches;
  im->patches.grid_t = im->grid_t;
  im->patches.grid_h = im->grid_h;
  im->patches.grid_w = im->grid_w;
  im->patches.n_tokens = (int)im->n_tokens;
  im->clip.pixel_values = NULL;
}

qvl_status prompt_video_load(const prompt_media *md, const prompt_opts *o, prompt_image *out) {
  prompt_image_from_media(md, o, out);
  out->is_video = true;
  out->hash = md->bytes_key;
  out->grid_t = md->grid_t;
  out->grid_h = md->grid_h;
  out->grid_w = md->grid_w;
  out->n_tokens = md->n_tokens;
  prompt_known_image k;
  if (o->defer_vision && !o->keep_images && o->known_image && o->known_image(o->known_user, md->bytes_key, &k) &&
      k.grid_t == md->grid_t && k.grid_h == md->grid_h && k.grid_w == md->grid_w && k.n_tokens == md->n_tokens) {
    /* the embeddings are cached: nothing to decode; the bytes stay for the rare eviction */
    out->encoded = rcbuf_ref(md->bytes);
    return copy_plan(md->clip, &out->clip);
  }
  qvl_status s = o->budget ? image_budget_slot_take(o->budget, o->stop, o->stop_user) : QVL_OK;
  if (s == QVL_OK) {
    if (o->on_decode)
      o->on_decode(o->on_decode_user, md->index);
    s = decode(md->bytes, o, o->keep_images, md->clip, &out->clip);
    if (o->budget)
      image_budget_slot_give(o->budget);
  }
  if (s != QVL_OK)
    return qvl_error_prefix(s, "video %d (messages[%d]): ", md->index + 1, md->message_index);
  take_pixels(out);
  if (!o->keep_images)
    video_clip_drop_frames(&out->clip);
  return QVL_OK;
}

qvl_status prompt_video_decode_deferred(const prompt_opts *o, prompt_image *im, int i) {
  if (!im->encoded)
    return qvl_errorf(QVL_ERR_INTERNAL, "video %d: neither pixels nor encoded bytes are left", i + 1);
  if (o->on_decode)
    o->on_decode(o->on_decode_user, im->media_index);
  video_clip c;
  qvl_status s = decode(im->encoded, o, false, &im->clip, &c);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "video %d: ", i + 1);
  video_clip_free(&im->clip);
  im->clip = c;
  take_pixels(im);
  video_clip_drop_frames(&im->clip);
  rcbuf_unref(im->encoded);
  im->encoded = NULL;
  return QVL_OK;
}
