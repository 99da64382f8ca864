/*
 * The prompt layer: from OpenAI-style chat messages to decoder input, in three steps.
 *
 *   plan         (prompt/plan.h) render the chat template, tokenize per message, fetch each media
 *                item once and read its header for its token count. No pixel is decoded.
 *   select       (prompt/history.h) the context policy drops earlier turns by arithmetic on the plan.
 *   materialize  (this file) decode only the kept media, once each, expand their placeholders,
 *                compute the M-RoPE positions and (unless deferred) run the vision tower.
 *
 * prompt_build does all three with nothing dropped. The layer sits above text/, image/ and vision/
 * and below engine/: it sees the model through a prompt_model (the tokenizer, the vision tower and
 * the special ids), which engine/vlm.c fills at load.
 *
 * Thread safety: a plan and a prompt belong to one thread. Materializing without defer_vision and
 * prompt_encode_image run model code, so like every kernels.h user only one thread at a time may
 * call them.
 */
#ifndef QVL_PROMPT_PROMPT_H
#define QVL_PROMPT_PROMPT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/rcbuf.h"
#include "base/stop.h"
#include "base/trace.h"
#include "image/budget.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "prompt/image_source.h"
#include "qvl.h"
#include "text/decoder.h"
#include "text/tokenizer.h"
#include "video/clip.h"
#include "vision/vision.h"

/* What the prompt layer needs of a loaded model. */
typedef struct prompt_model {
  const tokenizer *tok;
  const vision_model *vision; /* NULL: text only */
  int64_t n_embd;             /* decoder rows the vision tower writes */
  int32_t image_pad_id, vision_start_id, vision_end_id;
  int32_t video_pad_id;       /* <|video_pad|>; -1: none (videos are refused) */
  bool thinking;              /* a reasoning model: prompts use the Thinking template (vlm.thinking) */
} prompt_model;

/* An image the caller already holds embeddings for (prompt_opts.known_image). */
typedef struct prompt_known_image {
  uint64_t hash;
  int grid_t, grid_h, grid_w;
  int64_t n_tokens;
} prompt_known_image;

/* A media item a stored conversation already processed, found by its URL "qvl-media:<16 hex
 * digits of bytes_key>" through prompt_opts.resolve_media: its header facts and a reference to its
 * encoded bytes, so that neither a fetch nor a header read happens again. */
typedef struct prompt_media_ref {
  uint64_t bytes_key;
  uint64_t hash;          /* pixel hash when known, else 0 */
  int grid_t, grid_h, grid_w;
  int64_t n_tokens, pixels, resized_pixels;
  int width, height;      /* as displayed (prompt_image.width/height; 0: unknown) */
  rcbuf *bytes;           /* borrowed: the planner takes its own reference */
} prompt_media_ref;

#define PROMPT_MEDIA_SCHEME "qvl-media:"

typedef struct prompt_opts {
  bool add_generation_prompt;
  bool skip_thinking;      /* a thinking model: the generation prompt closes an empty think block
                            * (reasoning budget 0) */
  /* Special-token text ("<|im_start|>system") inside user and tool content: false (the default)
   * tokenizes it as plain text (chat_prompt.plain), so that content cannot forge a turn; true parses
   * it into control tokens as transformers' apply_chat_template + encode does
   * (--content-special-tokens). */
  bool content_special_tokens;
  preprocess_opts pre;     /* min/max pixels for every image of the request */
  image_limits limits;     /* decode caps */
  image_source_opts source;
  int max_images;          /* 0 = no limit */
  bool keep_images;        /* keep resized images and pixel_values (for dumps) */
  bool defer_vision;       /* don't run the vision tower: image rows are left for the caller
                            * (prompt_encode_image or an image-embedding cache); the pixel_values
                            * are kept until then. With defer_rows the rows are not even allocated
                            * (prompt_alloc_rows). */
  bool defer_rows;
  bool keep_sources;       /* every image keeps a reference to its encoded bytes (prompt_image.source),
                            * for a caller that stores the processed conversation */
  trace_fn trace;          /* vision stages (NULL = off) */
  void *trace_user;
  /* Guards for untrusted requests (all optional, zero = off). Every image's header is read and
   * checked before any image is decoded; the text is tokenized with a cap. */
  image_budget *budget;    /* server-wide pixel pool + decode slots, reserved before decoding */
  int64_t max_request_pixels; /* decoded pixels of all the request's images together */
  int64_t max_tokens;      /* ERR_CONTEXT_OVERFLOW as soon as the prompt is known to be longer */
  qvl_stop_fn stop;        /* polled between images and while tokenizing and waiting */
  void *stop_user;
  const cJSON *tools;      /* OpenAI tools array rendered by the chat template (NULL = none); read
                            * while planning only */
  /* With defer_vision: asked with an image's bytes_key before it is decoded; true (with *out
   * filled) when the caller already holds that image's embeddings, so the decode is skipped and
   * the bytes are kept instead (prompt_image_decode_deferred decodes them if the embeddings are
   * gone by the time they are needed). NULL = always decode. */
  bool (*known_image)(void *user, uint64_t bytes_key, prompt_known_image *out);
  void *known_user;
  /* Answers PROMPT_MEDIA_SCHEME URLs (a stored conversation's media); NULL: such URLs are refused
   * like any unknown scheme. Read while planning only. */
  bool (*resolve_media)(void *user, uint64_t bytes_key, prompt_media_ref *out);
  void *resolve_user;
  /* Called once per pixel decode, with the item's index in the request (tests count decodes). */
  void (*on_decode)(void *user, int media_index);
  void *on_decode_user;
  /* Videos (issue 23, prompt/video.h): sampling and sizing of every video of the request
   * (video/sample.h; HF's defaults from prompt_opts_default), the decode caps, and the request's
   * caps: videos, and frames sampled from all its videos together (0 = no limit). A video is
   * planned (frames, tokens, pixels) from its container before any frame is decoded. */
  video_sampling video;
  video_limits video_limits;
  int max_videos;
  int64_t max_video_frames;
} prompt_opts;

typedef struct prompt_image {
  image_rgb decoded;       /* the decoded image (kept only with keep_images) */
  image_patches patches;   /* resized image + pixel_values (freed unless keep_images) */
  int grid_t, grid_h, grid_w;
  int64_t n_tokens;
  int64_t row0;            /* its first row in img_embd / each DeepStack level */
  uint64_t hash;           /* XXH3-64 of the decoded RGB pixels, their size and min/max pixels: two
                            * images with equal hashes give the same vision output */
  uint64_t bytes_key;      /* XXH3-64 of the encoded bytes and min/max pixels (never 0): the same
                            * file again, known before decoding it */
  rcbuf *encoded;          /* the encoded bytes, kept only when known_image skipped the decode */
  int media_index;         /* its index among the request's media (before any was dropped) */
  int message_index;       /* the message that holds it */
  int width, height;       /* the source as displayed (EXIF orientation applied; a video's frame
                            * size): what the model's relative coordinates refer to */
  int64_t pixels, resized_pixels; /* from its header */
  rcbuf *source;           /* its encoded bytes, with keep_sources (else NULL) */
  /* A video (is_video): one media item of grid_t temporal groups; patches.pixel_values holds its
   * pixel_values_videos and hash = bytes_key (its bytes and sampling settings). clip holds the plan
   * (frame indices, timestamps, grid) and, with keep_images, the resized frames and every decoded
   * frame (clip.all_rgb). */
  bool is_video;
  video_clip clip;
} prompt_image;

typedef struct prompt_built {
  int32_t *ids;           /* [n] expanded prompt ids */
  int64_t n;
  int32_t *pos;           /* [3][n] M-RoPE positions */
  int64_t rope_delta;
  int n_images;           /* media items: images and videos */
  int n_videos;           /* how many of them are videos */
  prompt_image *images;   /* [n_images] in prompt order */
  int64_t n_img;          /* image and video pad tokens in the prompt */
  int64_t *img_idx;       /* [n_img] their indices */
  /* Image rows from row rows0 on (rows before it are never read: a restored prefix covers them). */
  int64_t rows0;
  float *img_embd;        /* [n_img - rows0][n_embd] */
  int64_t n_deepstack;
  float *deepstack;       /* [n_deepstack][n_img - rows0][n_embd] */
  double vision_ms;       /* time spent in the vision tower */
  double preprocess_ms;   /* decode + resize + patchify */
} prompt_built;

void prompt_opts_default(prompt_opts *o);
/* Plan + materialize with nothing dropped. Errors name the message or image at fault. */
qvl_status prompt_build(const prompt_model *m, const cJSON *messages, const prompt_opts *o, prompt_built *out);
/* A prompt from raw text (no template, no images). */
qvl_status prompt_from_text(const prompt_model *m, const char *text, size_t len, prompt_built *out);
/* A prompt from token ids (no template, no images): ids outside the vocabulary or <|image_pad|>
 * give QVL_ERR_INVALID_ARG. */
qvl_status prompt_from_ids(const prompt_model *m, const int32_t *ids, int64_t n, prompt_built *out);
void prompt_free(prompt_built *p);
/* Bytes the image rows of images first.. take (img_embd + DeepStack levels). */
int64_t prompt_rows_bytes(const prompt_model *m, const prompt_built *p, int first);
/* Allocates the image rows of images first.. (the earlier ones are never read); p->rows0 is the
 * row of image first. For prompts materialized with defer_rows. */
qvl_status prompt_alloc_rows(const prompt_model *m, prompt_built *p, int first);
/* Runs the vision tower on image i of a prompt materialized with defer_vision, filling its rows of
 * img_embd and deepstack (adds to p->vision_ms; frees its pixel_values unless keep_images). */
qvl_status prompt_encode_image(const prompt_model *m, prompt_built *p, int i, const prompt_opts *o);
/* Decodes and preprocesses image i of p from its kept encoded bytes (a decode that known_image
 * skipped, now needed after all); checks that it is the image that was announced. */
qvl_status prompt_image_decode_deferred(const prompt_opts *o, prompt_image *im, int i);
/* The vision tower writes image i's DeepStack levels per image ([n_deepstack][its tokens][n_embd]);
 * this copies them to their rows of p->deepstack, whose levels run over all images of the prompt. */
void prompt_put_deepstack(const prompt_model *m, prompt_built *p, int i, const float *levels);
/* Image i's merger rows ([its tokens][n_embd]) in p->img_embd, and its first DeepStack row. */
float *prompt_image_rows(const prompt_model *m, prompt_built *p, int i);
float *prompt_image_deepstack(const prompt_model *m, prompt_built *p, int i);
/* The decoder input for the whole prompt. */
decoder_input prompt_input(const prompt_built *p);

#endif
