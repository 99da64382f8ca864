/*
 * A prompt plan: what a chat request will cost before anything expensive happens. The chat template
 * is rendered once; the text is cut where a message begins with <|im_start|> (the tokenizer matches
 * added tokens first, so the pieces tokenize independently: their ids concatenated are the ids of
 * the whole text) and each piece is tokenized; every media item is fetched once and its header read
 * for the tokens it will take. No pixel is decoded.
 *
 * The context policy (prompt/history.h) drops earlier turns by adding up spans; materializing
 * (prompt_materialize) then decodes only the media of the spans kept.
 *
 * Media items have a kind so that other media than images (video frames) can join: each has its
 * source, its header-derived token count and the span that holds it.
 *
 * Thread safety: a plan belongs to one thread.
 */
#ifndef QVL_PROMPT_PLAN_H
#define QVL_PROMPT_PLAN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/rcbuf.h"
#include "prompt/prompt.h"
#include "qvl.h"

typedef enum prompt_media_kind { PROMPT_MEDIA_IMAGE = 0, PROMPT_MEDIA_VIDEO } prompt_media_kind;

typedef struct prompt_media {
  prompt_media_kind kind;
  int index;               /* among the request's media, in prompt order */
  int message_index;       /* the message that holds it */
  int width, height;       /* as displayed (header; EXIF orientation applied) */
  const char *url;         /* into the messages JSON */
  int64_t n_tokens;        /* LLM tokens it takes (from its header) */
  int64_t pixels;          /* source pixels (header) */
  int64_t resized_pixels;  /* after smart_resize */
  int grid_t, grid_h, grid_w;
  rcbuf *bytes;            /* encoded bytes, fetched once; released when its span is dropped */
  uint64_t bytes_key;      /* prompt_image.bytes_key */
  uint64_t hash;           /* pixel hash when a stored conversation knew it (0: unknown) */
  /* a video: its plan (frames, indices, timestamps, grid; no reader, no pixels), the frames it
   * samples and the text tokens its timestamps and group markers add to n_tokens' pads */
  video_clip *clip;
  int frames;
  int64_t text_tokens;
} prompt_media;

typedef struct prompt_span {
  int message_index;       /* the message it starts with; -1: the leading system block; n_messages:
                            * the generation prompt */
  int turn;                /* history turn (prompt/history.h), -1: never dropped */
  size_t off, len;         /* bytes of the rendered text */
  int32_t *ids;            /* [n_ids] text ids, one <|image_pad|> per media item */
  size_t n_ids;
  int media0, n_media;     /* its media items */
  int64_t n_tokens;        /* ids with the media expanded */
} prompt_span;

typedef struct prompt_plan {
  buf text;                /* the rendered template */
  text_span *plain;        /* [n_plain] user and tool content in text (chat_prompt.plain) */
  size_t n_plain;
  prompt_span *spans;      /* [n_spans] in text order */
  int n_spans;
  prompt_media *media;     /* [n_media] in prompt order */
  int n_media;
  int n_messages, n_turns;
  int *turn_of;            /* [n_messages] history_turns */
  int64_t n_tokens;        /* the whole prompt (all spans, media expanded) */
  int64_t media_tokens;
  int64_t pixels;          /* source pixels of all media */
} prompt_plan;

/* Plans messages. o->max_images and o->max_tokens are checked against the whole conversation (a
 * caller that may drop turns clears them and checks the selection). */
qvl_status prompt_plan_build(const prompt_model *m, const cJSON *messages, const prompt_opts *o, prompt_plan *out);
void prompt_plan_free(prompt_plan *p);

/* Tokenizes text[off, off + len) (at most max_ids ids, 0 = no cap) with the plain spans that fall in
 * it kept plain (tokenizer_encode_spans), unless o->content_special_tokens. */
qvl_status prompt_encode_piece(const tokenizer *tok, const buf *text, const text_span *plain, size_t n_plain,
                               size_t off, size_t len, const prompt_opts *o, size_t max_ids, int32_t **ids,
                               size_t *n_ids);

/* Starts the prompt image of a planned media item with what the plan read from its header: keys,
 * indices, sizes, and (o->keep_sources) a reference to its bytes. */
void prompt_image_from_media(const prompt_media *md, const prompt_opts *o, prompt_image *out);

/* Tokens, media and messages of the plan without the first `drop` turns (arithmetic only). */
typedef struct prompt_plan_size {
  int64_t n_tokens;
  int n_media, n_messages;
  int64_t pixels, resized_pixels;
} prompt_plan_size;
prompt_plan_size prompt_plan_size_without(const prompt_plan *p, int drop);

/* The prompt of the plan without the first `drop` turns of `messages` (the array it was planned
 * from): only the kept media are decoded, each once. The kept spans' ids are reused when the
 * template renders the kept messages as those spans (always for the Qwen3-VL templates); otherwise
 * the kept messages are rendered and tokenized again (text only). */
qvl_status prompt_materialize(const prompt_model *m, const prompt_plan *plan, const cJSON *messages, int drop,
                              const prompt_opts *o, prompt_built *out);

#endif
