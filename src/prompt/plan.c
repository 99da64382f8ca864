/* Planning a chat prompt: template, tokens per message, media headers (plan.h). */
#include "prompt/plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "base/status.h"
#include "prompt/history.h"
#include "prompt/video.h"
#include "text/chat.h"

void prompt_plan_free(prompt_plan *p) {
  buf_free(&p->text);
  free(p->plain);
  for (int i = 0; i < p->n_spans; i++)
    free(p->spans[i].ids);
  free(p->spans);
  for (int i = 0; i < p->n_media; i++) {
    rcbuf_unref(p->media[i].bytes);
    prompt_video_plan_free(&p->media[i]);
  }
  free(p->media);
  free(p->turn_of);
  memset(p, 0, sizeof *p);
}

/* The key of an encoded file with the preprocessing bounds that shape its vision output. */
static uint64_t bytes_key_of(const rcbuf *bytes, const prompt_opts *o) {
  int64_t meta[2] = {o->pre.min_pixels, o->pre.max_pixels};
  uint64_t k = XXH3_64bits_withSeed(bytes->data, bytes->len, XXH3_64bits(meta, sizeof meta));
  return k ? k : 1; /* 0 means "no key" to the image cache */
}

static qvl_status size_from_header(const prompt_opts *o, prompt_media *md);

/* A stored conversation's media item: its facts come from the store, nothing is fetched again.
 * When this request preprocesses images otherwise (its min/max pixels give another key), only the
 * header is read again from the kept bytes. */
static bool resolve_stored(const char *url, const prompt_opts *o, prompt_media *md, qvl_status *s) {
  size_t n = strlen(PROMPT_MEDIA_SCHEME);
  if (strncasecmp(url, PROMPT_MEDIA_SCHEME, n) != 0)
    return false;
  char *end = NULL;
  uint64_t key = strtoull(url + n, &end, 16);
  prompt_media_ref ref;
  if (!o->resolve_media || !end || *end || end == url + n || !o->resolve_media(o->resolve_user, key, &ref) ||
      !ref.bytes) {
    *s = qvl_errorf(QVL_ERR_INVALID_ARG, "image URL '%.200s': unsupported scheme (use a data: URL)", url);
    return true;
  }
  md->bytes = rcbuf_ref(ref.bytes);
  if (bytes_key_of(ref.bytes, o) != ref.bytes_key) {
    *s = size_from_header(o, md);
    return true;
  }
  md->bytes_key = ref.bytes_key;
  md->hash = ref.hash;
  md->grid_t = ref.grid_t;
  md->grid_h = ref.grid_h;
  md->grid_w = ref.grid_w;
  md->n_tokens = ref.n_tokens;
  md->pixels = ref.pixels;
  md->resized_pixels = ref.resized_pixels;
  md->width = ref.width;
  md->height = ref.height;
  *s = QVL_OK;
  return true;
}

/* Fetches item i's bytes and reads its header: its size and tokens are known before any pixel. */
static qvl_status plan_media(const prompt_model *m, const chat_image *ci, int i, const prompt_opts *o,
                             prompt_media *md) {
  if (ci->video)
    return prompt_video_plan(m, ci, i, o, md);
  md->kind = PROMPT_MEDIA_IMAGE;
  md->index = i;
  md->message_index = ci->message_index;
  md->url = ci->url;
  qvl_status s = QVL_OK;
  if (ci->url && resolve_stored(ci->url, o, md, &s))
    return s == QVL_OK ? QVL_OK : qvl_error_prefix(s, "image %d (messages[%d]): ", i + 1, ci->message_index);
  image_source_opts src = o->source;
  if (!src.stop) {
    src.stop = o->stop;
    src.stop_user = o->stop_user;
  }
  buf bytes = {0};
  s = image_source_read(ci->url, &src, &bytes);
  if (s == QVL_OK && !(md->bytes = rcbuf_take(&bytes)))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  buf_free(&bytes);
  if (s == QVL_OK)
    s = size_from_header(o, md);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "image %d (messages[%d]): ", i + 1, ci->message_index);
  return QVL_OK;
}

/* The item's size from its header: source pixels, the smart_resize grid and its tokens. */
static qvl_status size_from_header(const prompt_opts *o, prompt_media *md) {
  image_info info = {0};
  QVL_TRY(image_probe(md->bytes->data, md->bytes->len, &o->limits, &info));
  bool swap = info.orientation >= 5 && info.orientation <= 8;
  int h = swap ? info.width : info.height, w = swap ? info.height : info.width, rh = 0, rw = 0;
  QVL_TRY(image_smart_resize(h, w, o->pre.min_pixels, o->pre.max_pixels, IMAGE_FACTOR, &rh, &rw));
  md->pixels = (int64_t)info.width * info.height;
  md->width = swap ? info.height : info.width;
  md->height = swap ? info.width : info.height;
  md->resized_pixels = (int64_t)rh * rw;
  md->n_tokens = (int64_t)(rh / IMAGE_FACTOR) * (rw / IMAGE_FACTOR);
  md->grid_t = 1;
  md->grid_h = rh / IMAGE_PATCH_SIZE;
  md->grid_w = rw / IMAGE_PATCH_SIZE;
  md->bytes_key = bytes_key_of(md->bytes, o);
  md->hash = 0;
  return QVL_OK;
}

/* Cuts the text where a message begins with <|im_start|>: each piece starts with an added token,
 * so tokenizing the pieces one by one gives the ids of the whole text. */
static qvl_status cut_spans(const chat_prompt *cp, const int *turn_of, prompt_plan *p) {
  static const char im_start[] = "<|im_start|>";
  int cap = cp->n_msgs + 2;
  p->spans = calloc((size_t)cap, sizeof *p->spans);
  if (!p->spans)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  size_t start = 0;
  int owner = -1;
  for (int i = 0; i <= cp->n_msgs; i++) {
    size_t at = cp->msg_off[i];
    bool opens = i == cp->n_msgs || !strncmp(p->text.data + at, im_start, sizeof im_start - 1);
    if (!opens)
      continue;
    if (at > start)
      p->spans[p->n_spans++] = (prompt_span){.message_index = owner, .off = start, .len = at - start};
    start = at;
    owner = i;
  }
  if (p->text.len > start)
    p->spans[p->n_spans++] = (prompt_span){.message_index = owner, .off = start, .len = p->text.len - start};
  for (int k = 0; k < p->n_spans; k++) {
    prompt_span *sp = &p->spans[k];
    /* the leading system block and later system messages are never dropped; the generation
     * prompt goes with the current turn */
    sp->turn = sp->message_index < 0 ? -1 : sp->message_index >= cp->n_msgs ? p->n_turns - 1
                                                                          : turn_of[sp->message_index];
  }
  /* Media go with the last span that starts at or before their message. */
  int k = 0;
  for (int i = 0; i < p->n_media; i++) {
    while (k + 1 < p->n_spans && p->spans[k + 1].message_index <= p->media[i].message_index)
      k++;
    if (p->spans[k].n_media == 0)
      p->spans[k].media0 = i;
    p->spans[k].n_media++;
  }
  return QVL_OK;
}

qvl_status prompt_encode_piece(const tokenizer *tok, const buf *text, const text_span *plain, size_t n_plain,
                               size_t off, size_t len, const prompt_opts *o, size_t max_ids, int32_t **ids,
                               size_t *n_ids) {
  if (o->content_special_tokens)
    n_plain = 0;
  /* the plain spans that meet [off, off + len), clipped to it and shifted to the piece */
  size_t n = 0;
  for (size_t i = 0; i < n_plain; i++)
    n += plain[i].end > off && plain[i].begin < off + len;
  text_span *mine = n ? malloc(n * sizeof *mine) : NULL;
  if (n && !mine)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n_plain; i++) {
    if (!(plain[i].end > off && plain[i].begin < off + len))
      continue;
    size_t b = plain[i].begin > off ? plain[i].begin : off, e = plain[i].end < off + len ? plain[i].end : off + len;
    mine[k++] = (text_span){b - off, e - off};
  }
  qvl_status s = tokenizer_encode_spans(tok, text->data + off, len, mine, k, max_ids, o->stop, o->stop_user, ids, n_ids);
  free(mine);
  return s;
}

static qvl_status tokenize_spans(const prompt_model *m, const prompt_opts *o, size_t cap, prompt_plan *p) {
  size_t used = 0;
  int64_t pads = 0;
  for (int k = 0; k < p->n_spans; k++) {
    prompt_span *sp = &p->spans[k];
    size_t left = cap ? cap - used : 0;
    if (cap && left == 0)
      return QVL_ERR_CONTEXT_OVERFLOW;
    QVL_TRY(prompt_encode_piece(m->tok, &p->text, p->plain, p->n_plain, sp->off, sp->len, o, left, &sp->ids,
                                &sp->n_ids));
    used += sp->n_ids;
    int64_t n_pad = 0;
    for (size_t j = 0; j < sp->n_ids; j++)
      n_pad += sp->ids[j] == m->image_pad_id || (m->video_pad_id >= 0 && sp->ids[j] == m->video_pad_id);
    pads += n_pad;
    sp->n_tokens = (int64_t)sp->n_ids - (n_pad < sp->n_media ? n_pad : sp->n_media);
    for (int j = 0; j < sp->n_media; j++)
      sp->n_tokens += p->media[sp->media0 + j].n_tokens + p->media[sp->media0 + j].text_tokens;
    p->n_tokens += sp->n_tokens;
  }
  if (pads > p->n_media)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "the prompt text contains more <|image_pad|> tokens than there are images (%d)", p->n_media);
  if (pads != p->n_media)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt has %lld image placeholders for %d images", (long long)pads,
                      p->n_media);
  return QVL_OK;
}

static qvl_status plan(const prompt_model *m, const cJSON *messages, const prompt_opts *o, prompt_plan *p) {
  chat_prompt cp;
  chat_render_opts ro = {.tools = o->tools, .add_generation_prompt = o->add_generation_prompt,
                         .thinking = m->thinking, .skip_thinking = o->skip_thinking};
  QVL_TRY(chat_render_with(messages, &ro, &cp));
  p->text = cp.text;
  memset(&cp.text, 0, sizeof cp.text);
  p->plain = cp.plain;
  p->n_plain = cp.n_plain;
  cp.plain = NULL;
  cp.n_plain = cp.cap_plain = 0;
  qvl_status s = QVL_OK;
  int n = cp.n_images, nv = 0;
  for (int i = 0; i < n; i++)
    nv += cp.images[i].video;
  if (n - nv > 0 && !m->vision)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "the request has %d image(s) but no vision projector is loaded (--mmproj)",
                   n - nv);
  if (s == QVL_OK && nv > 0 && !m->vision)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "the request has %d video(s) but no vision projector is loaded (--mmproj)", nv);
  if (s == QVL_OK && o->max_images > 0 && n - nv > o->max_images)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the request has %d images; the limit is %d", n - nv, o->max_images);
  if (s == QVL_OK && o->max_videos > 0 && nv > o->max_videos)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the request has %d videos; the limit is %d", nv, o->max_videos);
  p->n_messages = cp.n_msgs;
  if (s == QVL_OK && !(p->turn_of = calloc((size_t)(cp.n_msgs ? cp.n_msgs : 1), sizeof *p->turn_of)))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (s == QVL_OK)
    p->n_turns = history_turns(messages, p->turn_of);
  int64_t frames = 0;
  if (s == QVL_OK && n > 0 && !(p->media = calloc((size_t)n, sizeof *p->media)))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  for (int i = 0; s == QVL_OK && i < n; i++) {
    s = qvl_stop_poll(o->stop, o->stop_user);
    if (s == QVL_OK)
      s = plan_media(m, &cp.images[i], i, o, &p->media[i]);
    p->n_media = i + 1;
    p->pixels += p->media[i].pixels;
    p->media_tokens += p->media[i].n_tokens + p->media[i].text_tokens;
    frames += p->media[i].frames;
  }
  if (s == QVL_OK && o->max_video_frames > 0 && frames > o->max_video_frames)
    s = qvl_errorf(QVL_ERR_TOO_LARGE,
                   "the request's %d videos sample %lld frames in all; this server accepts at most %lld "
                   "(--video-max-frames; lower fps or num_frames)",
                   nv, (long long)frames, (long long)o->max_video_frames);
  if (s == QVL_OK && o->max_request_pixels > 0 && p->pixels > o->max_request_pixels)
    s = qvl_errorf(QVL_ERR_TOO_LARGE,
                   "the request's %d images have %lld pixels in all; this server accepts at most %lld per request "
                   "(max_request_pixels)",
                   n, (long long)p->pixels, (long long)o->max_request_pixels);
  if (s == QVL_OK && o->max_tokens > 0 && p->media_tokens > o->max_tokens)
    s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "the images alone take %lld tokens; at most %lld fit",
                   (long long)p->media_tokens, (long long)o->max_tokens);
  if (s == QVL_OK)
    s = cut_spans(&cp, p->turn_of, p);
  if (s == QVL_OK) {
    /* the text holds one <|image_pad|> per image, counted in media_tokens */
    size_t cap = o->max_tokens > 0 ? (size_t)(o->max_tokens - p->media_tokens + n) : 0;
    s = tokenize_spans(m, o, cap, p);
    if (s == QVL_ERR_CONTEXT_OVERFLOW)
      s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "the prompt has more than %lld tokens (images included)",
                     (long long)o->max_tokens);
  }
  chat_prompt_free(&cp);
  return s;
}

qvl_status prompt_plan_build(const prompt_model *m, const cJSON *messages, const prompt_opts *o, prompt_plan *out) {
  memset(out, 0, sizeof *out);
  qvl_status s = plan(m, messages, o, out);
  if (s != QVL_OK)
    prompt_plan_free(out);
  return s;
}

void prompt_image_from_media(const prompt_media *md, const prompt_opts *o, prompt_image *out) {
  out->bytes_key = md->bytes_key;
  out->media_index = md->index;
  out->message_index = md->message_index;
  out->width = md->width;
  out->height = md->height;
  out->pixels = md->pixels;
  out->resized_pixels = md->resized_pixels;
  if (o->keep_sources)
    out->source = rcbuf_ref(md->bytes);
}

prompt_plan_size prompt_plan_size_without(const prompt_plan *p, int drop) {
  prompt_plan_size z = {0};
  for (int k = 0; k < p->n_spans; k++) {
    const prompt_span *sp = &p->spans[k];
    if (sp->turn >= 0 && sp->turn < drop)
      continue;
    z.n_tokens += sp->n_tokens;
    z.n_media += sp->n_media;
    for (int j = 0; j < sp->n_media; j++) {
      z.pixels += p->media[sp->media0 + j].pixels;
      z.resized_pixels += p->media[sp->media0 + j].resized_pixels;
    }
  }
  for (int i = 0; i < p->n_messages; i++)
    z.n_messages += !(p->turn_of[i] >= 0 && p->turn_of[i] < drop);
  return z;
}
