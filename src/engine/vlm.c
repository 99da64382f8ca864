#include "engine/vlm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/buf.h"
#include "base/status.h"
#include "base/timing.h"
#include "engine/model_sampling.h"
#include "model/verify.h"
#include "model/wtable.h"
#include "text/chat.h"
#include "text/mrope.h"
#include "engine/vlm_video.h"

static int32_t require_token(const tokenizer *t, const char *text, const char *path, qvl_status *s) {
  int32_t id = tokenizer_find(t, text);
  if (id < 0 && *s == QVL_OK)
    *s = qvl_errorf(QVL_ERR_FORMAT, "%s: the vocabulary has no '%s' token (not a Qwen3-VL tokenizer?)", path, text);
  return id;
}

/* Builds the decoder / vision tower from a weight table (taken), re-encoding its matrices first
 * when a dtype is asked for. */
static qvl_status init_text(const decoder_hparams *hp, wtable *t, const qvl_dtype *dt, decoder_model **out) {
  qvl_status s = dt ? wtable_convert(t, *dt, WTABLE_TEXT) : QVL_OK;
  if (s != QVL_OK) {
    wtable_free(t);
    return s;
  }
  tensor_source src = wtable_source(t);
  return decoder_init(hp, &src, out);
}

static qvl_status init_vision(const vision_hparams *hp, wtable *t, const qvl_dtype *dt, vision_model **out) {
  qvl_status s = dt ? wtable_convert(t, *dt, WTABLE_VISION) : QVL_OK;
  if (s != QVL_OK) {
    wtable_free(t);
    return s;
  }
  tensor_source src = wtable_source(t);
  return vision_init(hp, &src, out);
}

/* The text decoder of an open GGUF (g is taken). */
static qvl_status load_text_gguf(gguf *g, const qvl_dtype *dt, decoder_model **out) {
  if (!dt)
    return decoder_load_gguf_file(g, out);
  decoder_hparams hp;
  qvl_status s = decoder_hparams_from_gguf(g, &hp);
  if (s != QVL_OK) {
    gguf_close(g);
    return s;
  }
  wtable *t;
  QVL_TRY(wtable_from_gguf(g, &t));
  return init_text(&hp, t, dt, out);
}

static qvl_status load_vision_gguf(const char *path, const qvl_dtype *dt, vision_model **out) {
  if (!dt)
    return vision_load_gguf(path, out);
  gguf *g;
  QVL_TRY(gguf_open(path, &g));
  vision_hparams hp;
  qvl_status s = vision_hparams_from_gguf(g, &hp);
  if (s != QVL_OK) {
    gguf_close(g);
    return s;
  }
  wtable *t;
  QVL_TRY(wtable_from_gguf(g, &t));
  return init_vision(&hp, t, dt, out);
}

/* A Hugging Face directory: tokenizer.json, then the weight tables under GGUF names. */
static qvl_status load_hf(const char *dir, const qvl_dtype *dt, vlm *m) {
  QVL_TRY(hf_model_open(dir, &m->hf));
  const hf_config *c = hf_model_config(m->hf);
  QVL_TRY(tokenizer_init_hf(hf_model_path(m->hf, "tokenizer.json"), &m->tok));
  wtable *t;
  QVL_TRY(hf_model_text_weights(m->hf, &t));
  QVL_TRY(init_text(&c->text, t, dt, &m->text));
  if (c->has_vision) {
    QVL_TRY(hf_model_vision_weights(m->hf, &t));
    QVL_TRY(init_vision(&c->vision, t, dt, &m->vision));
    QVL_TRY(vision_check_text(m->vision, m->text->hp.n_embd, m->text->hp.n_deepstack));
  }
  /* config.json names the image tokens; a tokenizer that disagrees would place images wrongly. */
  const struct {
    const char *text;
    int32_t id;
  } ids[] = {{"<|image_pad|>", c->image_token_id},
             {"<|vision_start|>", c->vision_start_token_id},
             {"<|vision_end|>", c->vision_end_token_id}};
  for (int i = 0; i < 3; i++) {
    int32_t got = tokenizer_find(m->tok, ids[i].text);
    if (ids[i].id >= 0 && got != ids[i].id)
      return qvl_errorf(QVL_ERR_MISMATCH, "%s: config.json gives %s the id %d, the tokenizer %d", dir,
                        ids[i].text, (int)ids[i].id, (int)got);
  }
  return QVL_OK;
}

qvl_status vlm_load(const vlm_paths *p, vlm **out) { return vlm_load_with(p, NULL, out); }

qvl_status vlm_load_with(const vlm_paths *p, const vlm_load_opts *o, vlm **out) {
  *out = NULL;
  const char *hf_dir = o && o->hf_dir && *o->hf_dir ? o->hf_dir : NULL;
  if (!hf_dir && p->model && hf_model_is_dir(p->model)) {
    if (p->mmproj && *p->mmproj)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s is a Hugging Face directory (it holds the vision tower too); "
                        "it takes no --mmproj", p->model);
    hf_dir = p->model;
  }
  bool hf = hf_dir != NULL;
  if (!hf && (!p->model || !*p->model))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "no model file given (-m MODEL.gguf)");
  if (hf && hf_dir != p->model && ((p->model && *p->model) || (p->mmproj && *p->mmproj)))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "give either a Hugging Face directory or GGUF files, not both");
  const char *dts = o ? o->dtype : NULL;
  qvl_dtype dtype;
  if (dts && !wtable_parse_dtype(dts, &dtype))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown weight type '%s' (expected f32, bf16, f16, q8_0, q4_0 or q4_k)",
                      dts);
  const qvl_dtype *dt = dts ? &dtype : NULL;
  const char *label = hf ? hf_dir : p->model;
  vlm *m = calloc(1, sizeof *m);
  if (!m)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  gguf *g = NULL;
  qvl_status s = QVL_OK;
  m->sampling = model_sampling_qwen3vl();
  if (hf) {
    s = load_hf(hf_dir, dt, m);
    if (s == QVL_OK)
      model_sampling_from_hf(hf_model_config(m->hf), &m->sampling);
  } else {
    /* A file whose size differs from what a download recorded is damaged: say so instead of failing
     * later with a parse error (or, worse, loading garbage). */
    s = verify_quick(p->model);
    if (s == QVL_OK && p->mmproj && *p->mmproj)
      s = verify_quick(p->mmproj);
    if (s == QVL_OK)
      s = gguf_open(p->model, &g);
    if (s == QVL_OK)
      s = tokenizer_init_gguf(g, &m->tok);
    if (s == QVL_OK)
      s = model_sampling_from_gguf(g, &m->sampling);
    if (s == QVL_OK) {
      s = load_text_gguf(g, dt, &m->text); /* takes ownership of g */
      g = NULL;
    }
    gguf_close(g);
    if (s == QVL_OK && p->mmproj && *p->mmproj) {
      s = load_vision_gguf(p->mmproj, dt, &m->vision);
      if (s == QVL_OK)
        s = vision_check_text(m->vision, m->text->hp.n_embd, m->text->hp.n_deepstack);
      if (s != QVL_OK)
        qvl_error_prefix(s, "%s does not fit %s: ", p->mmproj, p->model);
    }
  }
  if (s == QVL_OK) {
    m->image_pad_id = require_token(m->tok, "<|image_pad|>", label, &s);
    m->vision_start_id = require_token(m->tok, "<|vision_start|>", label, &s);
    m->vision_end_id = require_token(m->tok, "<|vision_end|>", label, &s);
    m->video_pad_id = tokenizer_find(m->tok, "<|video_pad|>");
    int32_t im_end = tokenizer_find(m->tok, "<|im_end|>");
    int32_t eot = tokenizer_find(m->tok, "<|endoftext|>");
    if (im_end >= 0)
      m->eos_ids[m->n_eos++] = im_end;
    if (eot >= 0)
      m->eos_ids[m->n_eos++] = eot;
    if (m->n_eos == 0 && tokenizer_eos_id(m->tok) >= 0)
      m->eos_ids[m->n_eos++] = tokenizer_eos_id(m->tok);
    if (s == QVL_OK && tokenizer_vocab_size(m->tok) > m->text->hp.n_vocab)
      s = qvl_errorf(QVL_ERR_MISMATCH, "%s: tokenizer has %d tokens but the embedding only %lld rows", label,
                     tokenizer_vocab_size(m->tok), (long long)m->text->hp.n_vocab);
  }
  if (s != QVL_OK) {
    vlm_free(m);
    return s;
  }
  *out = m;
  return QVL_OK;
}

void vlm_free(vlm *m) {
  if (!m)
    return;
  decoder_free(m->text);
  vision_free(m->vision);
  tokenizer_free(m->tok);
  hf_model_close(m->hf);
  free(m);
}

void vlm_prompt_opts_default(vlm_prompt_opts *o) {
  memset(o, 0, sizeof *o);
  o->add_generation_prompt = true;
  preprocess_opts_default(&o->pre);
  image_limits_default(&o->limits);
  video_sampling_default(&o->video);
  video_limits_default(&o->video_limits);
}

void vlm_prompt_free(vlm_prompt *p) {
  free(p->ids);
  free(p->pos);
  for (int i = 0; i < p->n_images; i++) {
    image_rgb_free(&p->images[i].decoded);
    image_patches_free(&p->images[i].patches);
    buf_free(&p->images[i].encoded);
    vlm_video_free(&p->images[i]);
  }
  free(p->images);
  free(p->img_idx);
  free(p->img_embd);
  free(p->deepstack);
  memset(p, 0, sizeof *p);
}

decoder_input vlm_prompt_input(const vlm_prompt *p) {
  decoder_input in = {0};
  in.n_tokens = p->n;
  in.tokens = p->ids;
  in.pos = p->pos;
  in.n_img = p->n_img;
  in.img_idx = p->img_idx;
  in.img_embd = p->img_embd;
  in.n_deepstack = p->n_img ? p->n_deepstack : 0;
  in.deepstack = p->deepstack;
  return in;
}

/* Fetches image i's bytes and reads its header: its decoded size is known before any pixel. */
static qvl_status fetch_image(const chat_image *ci, int i, const vlm_prompt_opts *o, buf *bytes, image_info *info) {
  image_source_opts src = o->source;
  if (!src.stop) {
    src.stop = o->stop;
    src.stop_user = o->stop_user;
  }
  qvl_status s = image_source_read(ci->url, &src, bytes);
  if (s == QVL_OK)
    s = image_probe(bytes->data, bytes->len, &o->limits, info);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "image %d (messages[%d]): ", i + 1, ci->message_index);
  return QVL_OK;
}

/* The LLM tokens an image of that header will take (smart_resize on the oriented size). */
static qvl_status image_tokens_of(const chat_image *ci, int i, const image_info *info, const vlm_prompt_opts *o,
                                  int64_t *n, int64_t *resized_px) {
  bool swap = info->orientation >= 5 && info->orientation <= 8;
  int h = swap ? info->width : info->height, w = swap ? info->height : info->width, rh = 0, rw = 0;
  qvl_status s = image_smart_resize(h, w, o->pre.min_pixels, o->pre.max_pixels, IMAGE_FACTOR, &rh, &rw);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "image %d (messages[%d]): ", i + 1, ci->message_index);
  *n = (int64_t)(rh / IMAGE_FACTOR) * (rw / IMAGE_FACTOR);
  *resized_px = (int64_t)rh * rw;
  return QVL_OK;
}

/* The content key of the image-embedding cache: decoded pixels + everything that shapes the
 * preprocessing (the effective min/max pixels; the resize itself is deterministic). */
static qvl_status pixel_hash(const image_rgb *rgb, const vlm_prompt_opts *o, uint64_t *out) {
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

/* The key of an encoded file with the preprocessing bounds that shape its vision output. */
static uint64_t bytes_key_of(const buf *bytes, const vlm_prompt_opts *o) {
  int64_t meta[2] = {o->pre.min_pixels, o->pre.max_pixels};
  uint64_t k = XXH3_64bits_withSeed(bytes->data, bytes->len, XXH3_64bits(meta, sizeof meta));
  return k ? k : 1; /* 0 means "no key" to the image cache */
}

/* Decodes and preprocesses image i from its bytes (under a decode slot of the budget), or, when
 * the caller already holds that file's embeddings (known_image), keeps the bytes instead. */
static qvl_status load_image(const chat_image *ci, int i, buf *bytes, const vlm_prompt_opts *o, vlm_image *out) {
  out->bytes_key = bytes_key_of(bytes, o);
  vlm_known_image k;
  if (o->defer_vision && !o->keep_images && o->known_image && o->known_image(o->known_user, out->bytes_key, &k)) {
    out->hash = k.hash;
    out->grid_t = k.grid_t;
    out->grid_h = k.grid_h;
    out->grid_w = k.grid_w;
    out->n_tokens = k.n_tokens;
    out->encoded = *bytes;
    memset(bytes, 0, sizeof *bytes);
    return QVL_OK;
  }
  image_rgb rgb = {0};
  qvl_status s = o->budget ? image_budget_slot_take(o->budget, o->stop, o->stop_user) : QVL_OK;
  if (s != QVL_OK)
    return s;
  s = image_decode(bytes->data, bytes->len, &o->limits, &rgb, NULL);
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
    return qvl_error_prefix(s, "image %d (messages[%d]): ", i + 1, ci->message_index);
  out->grid_t = out->patches.grid_t;
  out->grid_h = out->patches.grid_h;
  out->grid_w = out->patches.grid_w;
  out->n_tokens = out->patches.n_tokens;
  return QVL_OK;
}

/* Every image: bytes + header first, then the request's checks (pixels, context), then the text
 * (tokenized with a cap), and only then, with the pixels reserved, the decodes. */
static qvl_status load_images_and_text(const vlm *m, const chat_prompt *cp, const vlm_prompt_opts *o, vlm_prompt *p,
                                       vlm_image *vids, int32_t **ids, size_t *n_ids) {
  int n = cp->n_images > 0 ? cp->n_images : 0, nv = cp->n_videos > 0 ? cp->n_videos : 0;
  buf *bytes = n + nv > 0 ? calloc((size_t)n + (size_t)nv, sizeof *bytes) : NULL;
  if (n + nv > 0 && !bytes)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  qvl_status s = QVL_OK;
  int64_t pixels = 0, img_tokens = 0, resized = 0, frames = 0, extra = 0;
  for (int i = 0; s == QVL_OK && i < n; i++) {
    image_info info = {0};
    int64_t nt = 0, rpx = 0;
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = fetch_image(&cp->images[i], i, o, &bytes[i], &info);
    if (s == QVL_OK)
      s = image_tokens_of(&cp->images[i], i, &info, o, &nt, &rpx);
    pixels += (int64_t)info.width * info.height;
    img_tokens += nt;
    resized += rpx;
  }
  /* videos: fetched and planned from their containers (frames, grid, tokens), nothing decoded */
  for (int i = 0; s == QVL_OK && i < nv; i++) {
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = vlm_video_plan(m, &cp->videos[i], i, o, &bytes[n + i], &vids[i]);
    if (s != QVL_OK)
      break;
    const video_clip *c = &vids[i].clip;
    frames += c->n;
    img_tokens += vids[i].n_tokens;
    extra += vlm_video_extra_tokens_bound(&vids[i]);
    /* one source frame converted at a time, the sampled frames kept at their resized size */
    pixels += (int64_t)c->info.width * c->info.height;
    resized += (int64_t)c->n * c->width * c->height;
  }
  if (s == QVL_OK && o->max_video_frames > 0 && frames > o->max_video_frames)
    s = qvl_errorf(QVL_ERR_TOO_LARGE,
                   "the request's %d videos sample %lld frames in all; this server accepts at most %lld "
                   "(--video-max-frames; lower fps or num_frames)",
                   nv, (long long)frames, (long long)o->max_video_frames);
  if (s == QVL_OK && o->max_request_pixels > 0 && pixels > o->max_request_pixels)
    s = qvl_errorf(QVL_ERR_TOO_LARGE,
                   "the request's %d images have %lld pixels in all; this server accepts at most %lld per request "
                   "(max_request_pixels)",
                   n, (long long)pixels, (long long)o->max_request_pixels);
  if (s == QVL_OK && o->max_tokens > 0 && img_tokens > o->max_tokens)
    s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "the images alone take %lld tokens; at most %lld fit",
                   (long long)img_tokens, (long long)o->max_tokens);
  if (s == QVL_OK) {
    /* the text holds one <|image_pad|> per image, counted in img_tokens */
    /* (and one <|video_pad|> per video, expanded with its timestamps) */
    size_t cap = o->max_tokens > 0 ? (size_t)(o->max_tokens - img_tokens + n + nv) : 0;
    s = tokenizer_encode_capped(m->tok, cp->text.data, cp->text.len, 0, cap, o->stop, o->stop_user, ids, n_ids);
    if (s == QVL_ERR_CONTEXT_OVERFLOW)
      s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "the prompt has more than %lld tokens (images included)",
                     (long long)o->max_tokens);
    (void)extra;
  }
  bool reserved = false;
  /* the decode costs up to ~7 B per source pixel, the resize ~30 B per resized pixel (budget.h) */
  int64_t cost = pixels + IMAGE_BUDGET_RESIZE_FACTOR * resized;
  if (s == QVL_OK && o->budget && pixels > 0) {
    s = image_budget_reserve(o->budget, cost, o->stop, o->stop_user);
    reserved = s == QVL_OK;
  }
  double t0 = time_now_s();
  for (int i = 0; s == QVL_OK && i < n; i++) {
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = load_image(&cp->images[i], i, &bytes[i], o, &p->images[i]);
    p->n_images = i + 1;
    buf_free(&bytes[i]);
  }
  for (int i = 0; s == QVL_OK && i < nv; i++) {
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = vlm_video_load(o, &bytes[n + i], &vids[i], i, cp->videos[i].message_index);
    buf_free(&bytes[n + i]);
  }
  p->preprocess_ms = (time_now_s() - t0) * 1e3;
  if (reserved)
    image_budget_release(o->budget, cost);
  for (int i = 0; i < n + nv; i++)
    buf_free(&bytes[i]);
  free(bytes);
  return s;
}

/* Puts the images (p->images[0..n_images)) and the videos in the order of their pads in ids. */
static qvl_status order_media(const vlm *m, const int32_t *ids, size_t n_ids, vlm_prompt *p, vlm_image *vids,
                              int nv) {
  int ni = p->n_images, total = ni + nv;
  if (nv == 0)
    return QVL_OK;
  vlm_image *all = calloc((size_t)total, sizeof *all);
  if (!all)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int a = 0, b = 0, k = 0;
  for (size_t i = 0; i < n_ids && k < total; i++) {
    if (ids[i] == m->image_pad_id && a < ni)
      all[k++] = p->images[a++];
    else if (ids[i] == m->video_pad_id && b < nv)
      all[k++] = vids[b++];
  }
  if (a != ni || b != nv) {
    free(all);
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt has %d image and %d video placeholders for %d images and %d videos",
                      a, b, ni, nv);
  }
  memset(vids, 0, sizeof *vids * (size_t)nv); /* moved */
  free(p->images);
  p->images = all;
  p->n_images = total;
  p->n_videos = nv;
  return QVL_OK;
}

/* Replaces the k-th image_pad id by images[k].n_tokens copies. */
static qvl_status expand_pads(const vlm *m, const int32_t *ids, size_t n, const vlm_prompt *p, int32_t **out,
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
      const vlm_image *im = &p->images[pads++];
      if (im->is_video != vpad)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt's placeholders do not match its images and videos");
      int64_t nt = im->n_tokens;
      if (vpad)
        QVL_TRY(vlm_video_tokens(m, im, NULL, 0, &nt));
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
      qvl_status s = vlm_video_tokens(m, &p->images[img++], e + k, total - k, &nt);
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

/* Allocates the image rows and their token indices; fills row0 of every image. */
static qvl_status alloc_image_rows(const vlm *m, vlm_prompt *p) {
  int64_t d = m->text->hp.n_embd;
  p->n_deepstack = m->vision->n_deepstack;
  size_t rows = (size_t)p->n_img;
  p->img_idx = malloc(sizeof *p->img_idx * rows);
  p->img_embd = malloc(sizeof *p->img_embd * rows * (size_t)d);
  p->deepstack = malloc(sizeof *p->deepstack * rows * (size_t)d * (size_t)(p->n_deepstack ? p->n_deepstack : 1));
  if (!p->img_idx || !p->img_embd || !p->deepstack)
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

qvl_status vlm_image_decode_deferred(const vlm_prompt_opts *o, vlm_image *im, int i) {
  if (im->patches.pixel_values)
    return QVL_OK;
  if (im->is_video)
    return vlm_video_decode_deferred(o, im, i);
  if (!im->encoded.data)
    return qvl_errorf(QVL_ERR_INTERNAL, "image %d: neither pixels nor encoded bytes are left", i + 1);
  image_rgb rgb = {0};
  uint64_t hash = 0;
  qvl_status s = image_decode(im->encoded.data, im->encoded.len, &o->limits, &rgb, NULL);
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
  buf_free(&im->encoded);
  return QVL_OK;
}

void vlm_prompt_put_deepstack(const vlm *m, vlm_prompt *p, int i, const float *levels) {
  int64_t d = m->text->hp.n_embd, nt = p->images[i].n_tokens, row0 = p->images[i].row0;
  for (int64_t l = 0; l < p->n_deepstack; l++)
    memcpy(p->deepstack + (l * p->n_img + row0) * d, levels + l * nt * d, sizeof(float) * (size_t)(nt * d));
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

qvl_status vlm_prompt_encode_image(const vlm *m, vlm_prompt *p, int i, const vlm_prompt_opts *o) {
  if (i < 0 || i >= p->n_images || !p->img_embd || !p->images[i].patches.pixel_values)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image %d: nothing to encode (already encoded or not deferred)", i + 1);
  int64_t d = m->text->hp.n_embd;
  vlm_image *im = &p->images[i];
  int64_t nt = im->n_tokens, row0 = im->row0;
  double t0 = time_now_s();
  float *ds_tmp = malloc(sizeof *ds_tmp * (size_t)(nt * d * (p->n_deepstack ? p->n_deepstack : 1)));
  if (!ds_tmp)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for image %d's DeepStack features", i + 1);
  video_trace vt = {o->trace, o->trace_user};
  bool vtr = im->is_video && o->trace;
  qvl_status s = vision_encode(m->vision, im->patches.pixel_values, im->grid_t, im->grid_h, im->grid_w,
                               p->img_embd + row0 * d, ds_tmp, vtr ? video_trace_fn : o->trace,
                               vtr ? (void *)&vt : o->trace_user);
  if (s != QVL_OK) {
    free(ds_tmp);
    return qvl_error_prefix(s, "%s %d: ", im->is_video ? "video" : "image", i + 1);
  }
  vlm_prompt_put_deepstack(m, p, i, ds_tmp);
  free(ds_tmp);
  if (!o->keep_images) {
    free(im->patches.pixel_values);
    im->patches.pixel_values = NULL;
  }
  p->vision_ms += (time_now_s() - t0) * 1e3;
  return QVL_OK;
}

static qvl_status encode_images(const vlm *m, const vlm_prompt_opts *o, vlm_prompt *p) {
  QVL_TRY(alloc_image_rows(m, p));
  if (o->defer_vision)
    return QVL_OK;
  for (int i = 0; i < p->n_images; i++)
    QVL_TRY(vlm_prompt_encode_image(m, p, i, o));
  return QVL_OK;
}

static qvl_status build(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, vlm_prompt *p) {
  chat_prompt cp;
  QVL_TRY(chat_render(messages, o->tools, o->add_generation_prompt, &cp));
  qvl_status s = QVL_OK;
  if (cp.n_images > 0 && !m->vision)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "the request has %d image(s) but no vision projector is loaded (--mmproj)",
                   cp.n_images);
  if (s == QVL_OK && cp.n_videos > 0 && !m->vision)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "the request has %d video(s) but no vision projector is loaded (--mmproj)",
                   cp.n_videos);
  if (s == QVL_OK && o->max_videos > 0 && cp.n_videos > o->max_videos)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the request has %d videos; the limit is %d", cp.n_videos, o->max_videos);
  if (s == QVL_OK && o->max_images > 0 && cp.n_images > o->max_images)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the request has %d images; the limit is %d", cp.n_images, o->max_images);
  if (s == QVL_OK && cp.n_images > 0) {
    p->images = calloc((size_t)cp.n_images, sizeof *p->images);
    if (!p->images)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  int32_t *ids = NULL;
  size_t n_ids = 0;
  int nv = cp.n_videos;
  vlm_image *vids = nv ? calloc((size_t)nv, sizeof *vids) : NULL;
  if (s == QVL_OK && nv && !vids)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK)
    s = load_images_and_text(m, &cp, o, p, vids, &ids, &n_ids);
  if (s == QVL_OK)
    s = order_media(m, ids, n_ids, p, vids, nv);
  if (s == QVL_OK)
    s = expand_pads(m, ids, n_ids, p, &p->ids, &p->n);
  for (int i = 0; vids && i < nv; i++) {
    image_patches_free(&vids[i].patches);
    buf_free(&vids[i].encoded);
    vlm_video_free(&vids[i]);
  }
  free(vids);
  free(ids);
  chat_prompt_free(&cp);
  if (s != QVL_OK)
    return s;
  for (int i = 0; i < p->n_images; i++)
    p->n_img += p->images[i].n_tokens;
  p->pos = malloc(sizeof *p->pos * 3 * (size_t)(p->n ? p->n : 1));
  if (!p->pos)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  /* one grid per pad run: an image's, or one (1, h, w) per temporal group of a video */
  int64_t n_runs = 0;
  for (int i = 0; i < p->n_images; i++)
    n_runs += p->images[i].is_video ? p->images[i].grid_t : 1;
  mrope_image *grids = calloc((size_t)(n_runs ? n_runs : 1), sizeof *grids);
  if (!grids)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int64_t r = 0;
  for (int i = 0; i < p->n_images; i++) {
    const vlm_image *im = &p->images[i];
    if (im->is_video)
      for (int g = 0; g < im->grid_t; g++)
        grids[r++] = (mrope_image){1, im->grid_h, im->grid_w};
    else
      grids[r++] = (mrope_image){im->grid_t, im->grid_h, im->grid_w};
  }
  s = mrope_positions_mm(p->ids, p->n, m->image_pad_id, m->video_pad_id, m->vision_start_id, grids, (int)n_runs,
                         IMAGE_MERGE_SIZE, p->pos, &p->rope_delta);
  free(grids);
  if (s == QVL_OK && p->n_images > 0)
    s = encode_images(m, o, p);
  return s;
}

qvl_status vlm_prompt_build(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, vlm_prompt *out) {
  memset(out, 0, sizeof *out);
  qvl_status s = build(m, messages, o, out);
  if (s != QVL_OK)
    vlm_prompt_free(out);
  return s;
}

qvl_status vlm_prompt_from_ids(const vlm *m, const int32_t *ids, int64_t n, vlm_prompt *out) {
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
  out->pos = malloc(sizeof *out->pos * 3 * (size_t)(n ? n : 1));
  qvl_status s = QVL_OK;
  if (!out->ids || !out->pos)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK) {
    memcpy(out->ids, ids, sizeof *ids * (size_t)n);
    out->n = n;
    s = mrope_positions(out->ids, out->n, m->image_pad_id, m->vision_start_id, NULL, 0, IMAGE_MERGE_SIZE, out->pos,
                        &out->rope_delta);
  }
  if (s != QVL_OK)
    vlm_prompt_free(out);
  return s;
}

qvl_status vlm_prompt_from_text(const vlm *m, const char *text, size_t len, vlm_prompt *out) {
  memset(out, 0, sizeof *out);
  size_t n = 0;
  qvl_status s = tokenizer_encode(m->tok, text, len, &out->ids, &n);
  out->n = (int64_t)n;
  for (size_t i = 0; s == QVL_OK && i < n; i++)
    if (out->ids[i] == m->image_pad_id || (m->video_pad_id >= 0 && out->ids[i] == m->video_pad_id))
      s = qvl_errorf(QVL_ERR_INVALID_ARG, "a raw prompt cannot contain <|image_pad|> or <|video_pad|> (no image "
                     "or video is attached)");
  if (s == QVL_OK) {
    out->pos = malloc(sizeof *out->pos * 3 * (n ? n : 1));
    if (!out->pos)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    else
      s = mrope_positions(out->ids, out->n, m->image_pad_id, m->vision_start_id, NULL, 0, IMAGE_MERGE_SIZE,
                          out->pos, &out->rope_delta);
  }
  if (s != QVL_OK)
    vlm_prompt_free(out);
  return s;
}
