/*
 * A loaded vision-language model (text decoder + tokenizer + optional vision tower) and the path
 * from OpenAI-style chat messages to decoder input: chat template -> images fetched, decoded and
 * preprocessed -> tokens with each <|image_pad|> expanded to the image's token count -> vision tower
 * -> M-RoPE positions. Used by `qvl run`, `qvl dump` and the server.
 *
 * Thread safety: a vlm is immutable after vlm_load; building prompts runs model code (the vision
 * tower), so like every kernels.h user only one thread at a time may call vlm_prompt_build.
 */
#ifndef QVL_ENGINE_VLM_H
#define QVL_ENGINE_VLM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/trace.h"
#include "engine/image_source.h"
#include "image/budget.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "engine/hf_model.h"
#include "qvl.h"
#include "text/decoder.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
#include "video/clip.h"
#include "vision/vision.h"

typedef struct vlm_paths {
  const char *model;  /* text GGUF, or a Hugging Face model directory (then mmproj must be NULL) */
  const char *mmproj; /* mmproj GGUF or NULL (text only) */
} vlm_paths;

/* Load options beyond the paths (a separate struct so that callers initializing vlm_paths
 * positionally keep compiling under -Wextra). */
typedef struct vlm_load_opts {
  const char *hf_dir; /* a Hugging Face model directory instead of the GGUF files (paths NULL) */
  const char *dtype;  /* NULL: weights as stored; else re-encode the matrices at load ("f32", "bf16",
                       * "f16", "q8_0", "q4_0", "q4_k"; norms stay F32; model/wtable.h) */
} vlm_load_opts;

typedef struct vlm {
  decoder_model *text;
  vision_model *vision; /* NULL without an mmproj */
  tokenizer *tok;
  hf_model *hf;         /* the HF directory loaded (settings: hf_model_config), or NULL for GGUF */
  int32_t image_pad_id, vision_start_id, vision_end_id;
  int32_t video_pad_id; /* <|video_pad|>, or -1 when the vocabulary has none (videos refused) */
  int32_t eos_ids[2]; /* <|im_end|>, <|endoftext|> (-1 when absent) */
  int n_eos;
  sampler_params sampling; /* the model's recommended sampling, for requests that do not say
                            * (engine/model_sampling.h) */
} vlm;

/* Loads GGUF files, or an HF directory given as p->model (a directory with a config.json). */
qvl_status vlm_load(const vlm_paths *p, vlm **out);
/* Same with options (o may be NULL). */
qvl_status vlm_load_with(const vlm_paths *p, const vlm_load_opts *o, vlm **out);
void vlm_free(vlm *m);

/* An image the caller already holds embeddings for (vlm_prompt_opts.known_image). */
typedef struct vlm_known_image {
  uint64_t hash;
  int grid_t, grid_h, grid_w;
  int64_t n_tokens;
} vlm_known_image;

typedef struct vlm_prompt_opts {
  bool add_generation_prompt;
  preprocess_opts pre;     /* min/max pixels for every image of the request */
  image_limits limits;     /* decode caps */
  image_source_opts source;
  int max_images;          /* 0 = no limit */
  bool keep_images;        /* keep resized images and pixel_values (for dumps) */
  bool defer_vision;       /* don't run the vision tower: image rows are allocated but left for the
                            * caller (vlm_prompt_encode_image or an image-embedding cache); the
                            * pixel_values are kept until then */
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
                            * during vlm_prompt_build only */
  /* With defer_vision: asked with an image's bytes_key before it is decoded; true (with *out
   * filled) when the caller already holds that image's embeddings, so the decode is skipped and
   * the bytes are kept instead (vlm_image_decode_deferred decodes them if the embeddings are
   * gone by the time they are needed). NULL = always decode. */
  bool (*known_image)(void *user, uint64_t bytes_key, vlm_known_image *out);
  void *known_user;
  /* Videos (issue 23): sampling and sizing of every video of the request (video/sample.h; HF's
   * defaults from vlm_prompt_opts_default), the decode caps, and the request's caps: videos, and
   * sampled frames of all its videos together (0 = no limit). A video is counted (frames, tokens)
   * from its container before any frame is decoded. */
  video_sampling video;
  video_limits video_limits;
  int max_videos;
  int64_t max_video_frames;
} vlm_prompt_opts;


typedef struct vlm_image {
  image_rgb decoded;       /* the decoded image (kept only with keep_images) */
  image_patches patches;   /* resized image + pixel_values (freed unless keep_images) */
  int grid_t, grid_h, grid_w;
  int64_t n_tokens;
  int64_t row0;            /* its first row in img_embd / each DeepStack level */
  uint64_t hash;           /* XXH3-64 of the decoded RGB pixels, their size and min/max pixels: two
                            * images with equal hashes give the same vision output */
  uint64_t bytes_key;      /* XXH3-64 of the encoded bytes and min/max pixels (never 0): the same
                            * file again, known before decoding it */
  buf encoded;             /* the encoded bytes, kept only when known_image skipped the decode */
  /* A video (is_video): one media item of grid_t temporal groups; patches.pixel_values holds its
   * pixel_values_videos, hash = bytes_key = XXH3-64 of its bytes and sampling settings. clip has the
   * plan (frame indices, timestamps, grid) and, with keep_images, the resized frames and every
   * decoded frame (clip.all_rgb). */
  bool is_video;
  video_clip clip;
} vlm_image;

typedef struct vlm_prompt {
  int32_t *ids;           /* [n] expanded prompt ids */
  int64_t n;
  int32_t *pos;           /* [3][n] M-RoPE positions */
  int64_t rope_delta;
  int n_images;           /* media items: images and videos */
  int n_videos;           /* how many of them are videos */
  vlm_image *images;      /* [n_images] images and videos in prompt order */
  int64_t n_img;          /* image and video pad tokens in the prompt */
  int64_t *img_idx;       /* [n_img] their indices (rows of images[i] start at images[i].row0) */
  float *img_embd;        /* [n_img][n_embd] */
  int64_t n_deepstack;
  float *deepstack;       /* [n_deepstack][n_img][n_embd] */
  double vision_ms;       /* time spent in the vision tower */
  double preprocess_ms;   /* decode + resize + patchify */
} vlm_prompt;

void vlm_prompt_opts_default(vlm_prompt_opts *o);
/* Renders, tokenizes and encodes. Errors name the message or image at fault. */
qvl_status vlm_prompt_build(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, vlm_prompt *out);
/* A prompt from raw text (no template, no images). */
qvl_status vlm_prompt_from_text(const vlm *m, const char *text, size_t len, vlm_prompt *out);
/* A prompt from token ids (no template, no images): ids outside the vocabulary or <|image_pad|>
 * give QVL_ERR_INVALID_ARG. */
qvl_status vlm_prompt_from_ids(const vlm *m, const int32_t *ids, int64_t n, vlm_prompt *out);
void vlm_prompt_free(vlm_prompt *p);
/* Runs the vision tower on image i of a prompt built with defer_vision, filling its rows of
 * img_embd and deepstack (adds to p->vision_ms; frees its pixel_values unless keep_images). Only
 * one thread may run model code at a time. */
qvl_status vlm_prompt_encode_image(const vlm *m, vlm_prompt *p, int i, const vlm_prompt_opts *o);
/* Decodes and preprocesses image i of p from its kept encoded bytes (a decode that known_image
 * skipped, now needed after all); checks that it is the image that was announced. */
qvl_status vlm_image_decode_deferred(const vlm_prompt_opts *o, vlm_image *im, int i);
/* The vision tower writes image i's DeepStack levels per image ([n_deepstack][its tokens][n_embd]);
 * this copies them to their rows of p->deepstack, whose levels run over all images of the prompt. */
void vlm_prompt_put_deepstack(const vlm *m, vlm_prompt *p, int i, const float *levels);
/* The decoder input for the whole prompt. */
decoder_input vlm_prompt_input(const vlm_prompt *p);

#endif
