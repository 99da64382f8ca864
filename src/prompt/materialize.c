/* Materializing a planned prompt: decode the kept media once, expand, positions, vision (prompt.h). */
#include "prompt/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/status.h"
#include "base/timing.h"
#include "prompt/history.h"
#include "prompt/plan.h"
#include "prompt/video.h"
#include "text/chat.h"
#include "text/mrope.h"

void prompt_opts_default(prompt_opts *o) {
  memset(o, 0, sizeof *o);
  o->add_generation_prompt = true;
  preprocess_opts_default(&o->pre);
  image_limits_default(&o->limits);
  video_sampling_default(&o->video);
  video_limits_default(&o->video_limits);
}

void prompt_free(prompt_built *p) {
  free(p->ids);
  free(p->pos);
  for (int i = 0; i < p->n_images; i++) {
    image_rgb_free(&p->images[i].decoded);
    image_patches_free(&p->images[i].patches);
    rcbuf_unref(p->images[i].encoded);
    rcbuf_unref(p->images[i].source);
    video_clip_free(&p->images[i].clip);
  }
  free(p->images);
  free(p->img_idx);
  free(p->img_embd);
  free(p->deepstack);
  memset(p, 0, sizeof *p);
}

decoder_input prompt_input(const prompt_built *p) {
  decoder_input in = {0};
  in.n_tokens = p->n;
  in.tokens = p->ids;
  in.pos = p->pos;
  in.n_img = p->n_img - p->rows0;
  in.img_idx = p->img_idx ? p->img_idx + p->rows0 : NULL;
  in.img_embd = p->img_embd;
  in.n_deepstack = in.n_img ? p->n_deepstack : 0;
  in.deepstack = p->deepstack;
  return in;
}

/* The content key of the image-embedding cache: decoded pixels + everything that shapes the
 * preprocessing (the effective min/max pixels; the resize itself is deterministic). */
static qvl_status pixel_hash(const image_rgb *rgb, const prompt_opts *o, uint64_t *out) {
  XXH3_state_t *h = XXH3_createState();
  if (!h)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int64_t meta[4] = {rgb->width, rgb->height, o->pre.min_pixels, o->pre.max_pixels};
  XXH3_64bits_reset(h);
  XXH3_64bits_update(h, meta, sizeof meta);
  XXH3_64bits_update(h, rgb->data, (size_t)rgb->width * (size_t)rgb->height * 3);
  *out = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return QVL_OK;
}

/* Whether the item's decode can be skipped: the caller holds its embeddings (known_image), or a
 * stored conversation knows its pixel hash; either way the bytes stay for a late decode. */
static bool known_media(const prompt_media *md, const prompt_opts *o, prompt_known_image *k) {
  if (!o->defer_vision || o->keep_images)
    return false;
  if (md->kind == PROMPT_MEDIA_VIDEO) /* asked by prompt_video_load */
    return o->known_image && o->known_image(o->known_user, md->bytes_key, k);
  if (o->known_image && o->known_image(o->known_user, md->bytes_key, k))
    return true;
  if (md->hash) {
    *k = (prompt_known_image){md->hash, md->grid_t, md->grid_h, md->grid_w, md->n_tokens};
    return true;
  }
  return false;
}

/* Decodes and preprocesses the item (under a decode slot of the budget), or keeps a reference to
 * its bytes when it is known. */
static qvl_status load_image(const prompt_media *md, const prompt_opts *o, prompt_image *out) {
  if (md->kind == PROMPT_MEDIA_VIDEO)
    return prompt_video_load(md, o, out);
  prompt_image_from_media(md, o, out);
  prompt_known_image k;
  if (known_media(md, o, &k)) {
    out->hash = k.hash;
    out->grid_t = k.grid_t;
    out->grid_h = k.grid_h;
    out->grid_w = k.grid_w;
    out->n_tokens = k.n_tokens;
    out->encoded = rcbuf_ref(md->bytes);
    return QVL_OK;
  }
  image_rgb rgb = {0};
  qvl_status s = o->budget ? image_budget_slot_take(o->budget, o->stop, o->stop_user) : QVL_OK;
  if (s != QVL_OK)
    return s;
  if (o->on_decode)
    o->on_decode(o->on_decode_user, md->index);
  s = image_decode(md->bytes->data, md->bytes->len, &o->limits, &rgb, NULL);
  if (s == QVL_OK)
    s = image_preprocess(&rgb, &o->pre, &out->patches);
  if (o->budget)
    image_budget_slot_give(o->budget);
  if (s == QVL_OK)
    s = pixel_hash(&rgb, o, &out->hash);
  if (s == QVL_OK && o->keep_images)
    out->decoded = rgb;
  else
    image_rgb_free(&rgb);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "image %d (messages[%d]): ", md->index + 1, md->message_index);
  out->grid_t = out->patches.grid_t;
  out->grid_h = out->patches.grid_h;
  out->grid_w = out->patches.grid_w;
  out->n_tokens = out->patches.n_tokens;
  return QVL_OK;
}

/* The kept media of plan (spans of turns >= drop), in prompt order. */
static int kept_media(const prompt_plan *plan, int drop, const prompt_media **out) {
  int n = 0;
  for (int k = 0; k < plan->n_spans; k++) {
    const prompt_span *sp = &plan->spans[k];
    if (sp->turn >= 0 && sp->turn < drop)
      continue;
    for (int j = 0; j < sp->n_media; j++)
      out[n++] = &plan->media[sp->media0 + j];
  }
  return n;
}

/* The text ids of the kept spans; when the template renders the kept messages otherwise than as
 * those spans, the kept messages' own rendering, tokenized. */
static qvl_status kept_ids(const prompt_model *m, const prompt_plan *plan, const cJSON *messages, int drop,
                           int n_media, const prompt_opts *o, int32_t **ids, size_t *n_ids) {
  size_t n = 0, bytes = 0;
  for (int k = 0; k < plan->n_spans; k++)
    if (!(plan->spans[k].turn >= 0 && plan->spans[k].turn < drop)) {
      n += plan->spans[k].n_ids;
      bytes += plan->spans[k].len;
    }
  bool same = true;
  chat_prompt cp = {0};
  if (drop > 0) {
    cJSON *kept = history_without_turns(messages, plan->turn_of, drop, NULL);
    if (!kept)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    chat_render_opts ro = {.tools = o->tools, .add_generation_prompt = o->add_generation_prompt,
                           .thinking = m->thinking, .skip_thinking = o->skip_thinking};
    qvl_status s = chat_render_with(kept, &ro, &cp);
    cJSON_Delete(kept);
    QVL_TRY(s);
    same = cp.text.len == bytes;
    for (int k = 0, at = 0; same && k < plan->n_spans; k++) {
      const prompt_span *sp = &plan->spans[k];
      if (sp->turn >= 0 && sp->turn < drop)
        continue;
      same = !memcmp(cp.text.data + at, plan->text.data + sp->off, sp->len);
      at += (int)sp->len;
    }
  }
  qvl_status s = QVL_OK;
  if (!same) {
    if (cp.n_images != n_media)
      s = qvl_errorf(QVL_ERR_INTERNAL, "history: the kept messages render %d images, the plan kept %d", cp.n_images,
                     n_media);
    if (s == QVL_OK)
      s = prompt_encode_piece(m->tok, &cp.text, cp.plain, cp.n_plain, 0, cp.text.len, o, 0, ids, n_ids);
    chat_prompt_free(&cp);
    return s;
  }
  chat_prompt_free(&cp);
  int32_t *e = malloc(sizeof *e * (n ? n : 1));
  if (!e)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for a prompt of %zu tokens", n);
  size_t at = 0;
  for (int k = 0; k < plan->n_spans; k++) {
    const prompt_span *sp = &plan->spans[k];
    if (sp->turn >= 0 && sp->turn < drop)
      continue;
    memcpy(e + at, sp->ids, sizeof *e * sp->n_ids);
    at += sp->n_ids;
  }
  *ids = e;
  *n_ids = n;
  return QVL_OK;
}

/* Replaces the k-th image_pad id by images[k].n_tokens copies. */
static qvl_status expand_pads(const prompt_model *m, const int32_t *ids, size_t n, const prompt_built *p, int32_t **out,
                              int64_t *n_out) {
  int64_t total = 0, pads = 0;
  for (size_t i = 0; i < n; i++) {
    bool vpad = m->video_pad_id >= 0 && ids[i] == m->video_pad_id;
    if (ids[i] == m->image_pad_id || vpad) {
      if (pads >= p->n_images)
        return qvl_errorf(QVL_ERR_INVALID_ARG,
                          "the prompt text contains more <|image_pad|> / <|video_pad|> tokens than there are images "
                          "and videos (%d)",
                          p->n_images);
      const prompt_image *im = &p->images[pads++];
      if (im->is_video != vpad)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt's placeholders do not match its images and videos");
      int64_t nt = im->n_tokens;
      if (vpad)
        QVL_TRY(prompt_video_tokens(m, &im->clip, NULL, 0, &nt));
      total += nt;
    } else {
      total++;
    }
  }
  if (pads != p->n_images)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt has %lld image placeholders for %d images",
                      (long long)pads, p->n_images);
  int32_t *e = malloc(sizeof *e * (size_t)(total ? total : 1));
  if (!e)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for a prompt of %lld tokens", (long long)total);
  int64_t k = 0, img = 0;
  for (size_t i = 0; i < n; i++) {
    if (m->video_pad_id >= 0 && ids[i] == m->video_pad_id) {
      int64_t nt = 0;
      qvl_status s = prompt_video_tokens(m, &p->images[img++].clip, e + k, total - k, &nt);
      if (s != QVL_OK) {
        free(e);
        return s;
      }
      k += nt;
    } else if (ids[i] == m->image_pad_id) {
      for (int64_t j = 0; j < p->images[img].n_tokens; j++)
        e[k++] = m->image_pad_id;
      img++;
    } else {
      e[k++] = ids[i];
    }
  }
  *out = e;
  *n_out = total;
  return QVL_OK;
}

/* The image token indices and every image's first row. */
static qvl_status index_images(const prompt_model *m, prompt_built *p) {
  p->n_deepstack = m->vision->n_deepstack;
  p->img_idx = malloc(sizeof *p->img_idx * (size_t)(p->n_img ? p->n_img : 1));
  if (!p->img_idx)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for %lld image tokens", (long long)p->n_img);
  int64_t k = 0;
  for (int64_t i = 0; i < p->n; i++)
    if (p->ids[i] == m->image_pad_id || (m->video_pad_id >= 0 && p->ids[i] == m->video_pad_id))
      p->img_idx[k++] = i;
  int64_t row0 = 0;
  for (int i = 0; i < p->n_images; i++) {
    p->images[i].row0 = row0;
    row0 += p->images[i].n_tokens;
  }
  return QVL_OK;
}

int64_t prompt_rows_bytes(const prompt_model *m, const prompt_built *p, int first) {
  if (first >= p->n_images || !m->vision)
    return 0;
  int64_t rows = p->n_img - p->images[first].row0;
  return rows * m->n_embd * (int64_t)sizeof(float) * (1 + m->vision->n_deepstack);
}

qvl_status prompt_alloc_rows(const prompt_model *m, prompt_built *p, int first) {
  free(p->img_embd);
  free(p->deepstack);
  p->img_embd = p->deepstack = NULL;
  p->rows0 = first < p->n_images ? p->images[first].row0 : p->n_img;
  size_t rows = (size_t)(p->n_img - p->rows0), d = (size_t)m->n_embd;
  if (rows == 0)
    return QVL_OK;
  p->img_embd = malloc(sizeof *p->img_embd * rows * d);
  p->deepstack = malloc(sizeof *p->deepstack * rows * d * (size_t)(p->n_deepstack ? p->n_deepstack : 1));
  if (!p->img_embd || !p->deepstack)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for %zu image rows", rows);
  return QVL_OK;
}

float *prompt_image_rows(const prompt_model *m, prompt_built *p, int i) {
  return p->img_embd + (p->images[i].row0 - p->rows0) * m->n_embd;
}

float *prompt_image_deepstack(const prompt_model *m, prompt_built *p, int i) {
  return p->deepstack + (p->images[i].row0 - p->rows0) * m->n_embd;
}

qvl_status prompt_image_decode_deferred(const prompt_opts *o, prompt_image *im, int i) {
  if (im->patches.pixel_values)
    return QVL_OK;
  if (im->is_video)
    return prompt_video_decode_deferred(o, im, i);
  if (!im->encoded)
    return qvl_errorf(QVL_ERR_INTERNAL, "image %d: neither pixels nor encoded bytes are left", i + 1);
  if (o->on_decode)
    o->on_decode(o->on_decode_user, im->media_index);
  image_rgb rgb = {0};
  uint64_t hash = 0;
  qvl_status s = image_decode(im->encoded->data, im->encoded->len, &o->limits, &rgb, NULL);
  if (s == QVL_OK)
    s = image_preprocess(&rgb, &o->pre, &im->patches);
  if (s == QVL_OK)
    s = pixel_hash(&rgb, o, &hash);
  image_rgb_free(&rgb);
  if (s == QVL_OK && (hash != im->hash || im->patches.grid_t != im->grid_t || im->patches.grid_h != im->grid_h ||
                      im->patches.grid_w != im->grid_w || im->patches.n_tokens != im->n_tokens))
    s = qvl_errorf(QVL_ERR_INTERNAL, "image %d decodes to another image than its key announced", i + 1);
  if (s != QVL_OK) {
    image_patches_free(&im->patches);
    return qvl_error_prefix(s, "image %d: ", i + 1);
  }
  rcbuf_unref(im->encoded);
  im->encoded = NULL;
  return QVL_OK;
}

void prompt_put_deepstack(const prompt_model *m, prompt_built *p, int i, const float *levels) {
  int64_t d = m->n_embd, nt = p->images[i].n_tokens, row = p->images[i].row0 - p->rows0, stride = p->n_img - p->rows0;
  for (int64_t l = 0; l < p->n_deepstack; l++)
    memcpy(p->deepstack + (l * stride + row) * d, levels + l * nt * d, sizeof(float) * (size_t)(nt * d));
}

/* The tower's trace of a video call goes out under the fixtures' video names (video_vision_*). */
typedef struct video_trace {
  trace_fn fn;
  void *user;
} video_trace;

static void video_trace_fn(void *user, const char *name, const float *data, int64_t rows, int64_t cols) {
  video_trace *vt = user;
  char vname[96];
  snprintf(vname, sizeof vname, "video_%s", name);
  vt->fn(vt->user, vname, data, rows, cols);
}

qvl_status prompt_encode_image(const prompt_model *m, prompt_built *p, int i, const prompt_opts *o) {
  if (i < 0 || i >= p->n_images || !p->img_embd || p->images[i].row0 < p->rows0 || !p->images[i].patches.pixel_values)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image %d: nothing to encode (already encoded or not deferred)", i + 1);
  int64_t d = m->n_embd;
  prompt_image *im = &p->images[i];
  int64_t nt = im->n_tokens;
  double t0 = time_now_s();
  float *ds_tmp = malloc(sizeof *ds_tmp * (size_t)(nt * d * (p->n_deepstack ? p->n_deepstack : 1)));
  if (!ds_tmp)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for image %d's DeepStack features", i + 1);
  video_trace vt = {o->trace, o->trace_user};
  bool vtr = im->is_video && o->trace;
  qvl_status s = vision_encode(m->vision, im->patches.pixel_values, im->grid_t, im->grid_h, im->grid_w,
                               prompt_image_rows(m, p, i), ds_tmp, vtr ? video_trace_fn : o->trace,
                               vtr ? (void *)&vt : o->trace_user);
  if (s != QVL_OK) {
    free(ds_tmp);
    return qvl_error_prefix(s, "%s %d: ", im->is_video ? "video" : "image", i + 1);
  }
  prompt_put_deepstack(m, p, i, ds_tmp);
  free(ds_tmp);
  if (!o->keep_images) {
    free(im->patches.pixel_values);
    im->patches.pixel_values = NULL;
  }
  p->vision_ms += (time_now_s() - t0) * 1e3;
  return QVL_OK;
}

/* Decodes the kept media: the pixels of those that need a decode are reserved first. */
static qvl_status load_media(const prompt_media *const *keep, int n, const prompt_opts *o, prompt_built *p) {
  int64_t cost = 0;
  for (int i = 0; i < n; i++) {
    prompt_known_image k;
    if (!known_media(keep[i], o, &k))
      cost += keep[i]->pixels + IMAGE_BUDGET_RESIZE_FACTOR * keep[i]->resized_pixels;
  }
  /* a known item is asked again below: the answer may have changed (it is advisory), and then it
   * is decoded outside the reservation, as before the plan existed */
  qvl_status s = QVL_OK;
  bool reserved = false;
  if (o->budget && cost > 0) {
    s = image_budget_reserve(o->budget, cost, o->stop, o->stop_user);
    reserved = s == QVL_OK;
  }
  double t0 = time_now_s();
  for (int i = 0; s == QVL_OK && i < n; i++) {
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = load_image(keep[i], o, &p->images[i]);
    p->n_images = i + 1;
  }
  p->preprocess_ms = (time_now_s() - t0) * 1e3;
  if (reserved)
    image_budget_release(o->budget, cost);
  return s;
}

static qvl_status materialize(const prompt_model *m, const prompt_plan *plan, const cJSON *messages, int drop,
                              const prompt_opts *o, prompt_built *p) {
  const prompt_media **keep = plan->n_media ? calloc((size_t)plan->n_media, sizeof *keep) : NULL;
  if (plan->n_media && !keep)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int n = kept_media(plan, drop, keep);
  int32_t *ids = NULL;
  size_t n_ids = 0;
  qvl_status s = kept_ids(m, plan, messages, drop, n, o, &ids, &n_ids);
  if (s == QVL_OK && n > 0 && !(p->images = calloc((size_t)n, sizeof *p->images)))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK)
    s = load_media(keep, n, o, p);
  free(keep);
  if (s == QVL_OK)
    s = expand_pads(m, ids, n_ids, p, &p->ids, &p->n);
  free(ids);
  if (s != QVL_OK)
    return s;
  /* one M-RoPE grid per pad run: an image's, or one (1, h, w) per temporal group of a video */
  int64_t n_runs = 0;
  for (int i = 0; i < p->n_images; i++) {
    p->n_img += p->images[i].n_tokens;
    p->n_videos += p->images[i].is_video;
    n_runs += p->images[i].is_video ? p->images[i].grid_t : 1;
  }
  p->pos = malloc(sizeof *p->pos * 3 * (size_t)(p->n ? p->n : 1));
  mrope_image *grids = calloc((size_t)(n_runs ? n_runs : 1), sizeof *grids);
  if (!p->pos || !grids) {
    free(grids);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  int64_t r = 0;
  for (int i = 0; i < p->n_images; i++) {
    const prompt_image *im = &p->images[i];
    if (im->is_video)
      for (int g = 0; g < im->grid_t; g++)
        grids[r++] = (mrope_image){1, im->grid_h, im->grid_w};
    else
      grids[r++] = (mrope_image){im->grid_t, im->grid_h, im->grid_w};
  }
  s = mrope_positions_mm(p->ids, p->n, m->image_pad_id, m->video_pad_id, m->vision_start_id, grids, (int)n_runs,
                         IMAGE_MERGE_SIZE, p->pos, &p->rope_delta);
  free(grids);
  if (s != QVL_OK || p->n_images == 0)
    return s;
  QVL_TRY(index_images(m, p));
  if (o->defer_rows)
    return QVL_OK;
  QVL_TRY(prompt_alloc_rows(m, p, 0));
  if (o->defer_vision)
    return QVL_OK;
  for (int i = 0; i < p->n_images; i++)
    QVL_TRY(prompt_encode_image(m, p, i, o));
  return QVL_OK;
}

qvl_status prompt_materialize(const prompt_model *m, const prompt_plan *plan, const cJSON *messages, int drop,
                              const prompt_opts *o, prompt_built *out) {
  memset(out, 0, sizeof *out);
  qvl_status s = materialize(m, plan, messages, drop, o, out);
  if (s != QVL_OK)
    prompt_free(out);
  return s;
}

qvl_status prompt_build(const prompt_model *m, const cJSON *messages, const prompt_opts *o, prompt_built *out) {
  memset(out, 0, sizeof *out);
  prompt_plan plan;
  QVL_TRY(prompt_plan_build(m, messages, o, &plan));
  qvl_status s = prompt_materialize(m, &plan, messages, 0, o, out);
  prompt_plan_free(&plan);
  return s;
}

static qvl_status raw_positions(const prompt_model *m, prompt_built *out) {
  out->pos = malloc(sizeof *out->pos * 3 * (size_t)(out->n ? out->n : 1));
  if (!out->pos)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  return mrope_positions(out->ids, out->n, m->image_pad_id, m->vision_start_id, NULL, 0, IMAGE_MERGE_SIZE, out->pos,
                         &out->rope_delta);
}

qvl_status prompt_from_ids(const prompt_model *m, const int32_t *ids, int64_t n, prompt_built *out) {
  memset(out, 0, sizeof *out);
  int32_t vocab = tokenizer_vocab_size(m->tok);
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= vocab)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "token id %d at %lld is outside the vocabulary (0..%d)", ids[i],
                        (long long)i, vocab - 1);
    if (ids[i] == m->image_pad_id || (m->video_pad_id >= 0 && ids[i] == m->video_pad_id))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "a raw prompt cannot contain <|image_pad|> or <|video_pad|> (no image "
                        "or video is attached)");
  }
  out->ids = malloc(sizeof *out->ids * (size_t)(n ? n : 1));
  qvl_status s = QVL_OK;
  if (!out->ids)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK) {
    memcpy(out->ids, ids, sizeof *ids * (size_t)n);
    out->n = n;
    s = raw_positions(m, out);
  }
  if (s != QVL_OK)
    prompt_free(out);
  return s;
}

qvl_status prompt_from_text(const prompt_model *m, const char *text, size_t len, prompt_built *out) {
  memset(out, 0, sizeof *out);
  size_t n = 0;
  qvl_status s = tokenizer_encode(m->tok, text, len, &out->ids, &n);
  out->n = (int64_t)n;
  for (size_t i = 0; s == QVL_OK && i < n; i++)
    if (out->ids[i] == m->image_pad_id || (m->video_pad_id >= 0 && out->ids[i] == m->video_pad_id))
      s = qvl_errorf(QVL_ERR_INVALID_ARG, "a raw prompt cannot contain <|image_pad|> or <|video_pad|> (no image "
                     "or video is attached)");
  if (s == QVL_OK)
    s = raw_positions(m, out);
  if (s != QVL_OK)
    prompt_free(out);
  return s;
}
