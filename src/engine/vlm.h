/*
 * A loaded vision-language model (text decoder + tokenizer + optional vision tower). The path from
 * chat messages to decoder input is the prompt layer's (prompt/prompt.h); the vlm_prompt_* names
 * below call it with the model's prompt_model. Used by `qvl run`, `qvl dump` and the server.
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
#include "image/budget.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "engine/hf_model.h"
#include "prompt/prompt.h"
#include "qvl.h"
#include "text/decoder.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
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
  const char *precision; /* the tower's tier, "exact" or "fast"; NULL: the process default
                          * (vision_precision) */
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
  bool thinking;           /* a reasoning model: its chat template (GGUF tokenizer.chat_template or
                            * the HF directory's) opens <think> in the generation prompt
                            * (chat_template_is_thinking); prompts use the Thinking template */
  int32_t think_close[8];  /* "\n</think>\n\n" tokenized: what a reasoning budget forces */
  int n_think_close;       /* 0 when the vocabulary cannot say it in 8 tokens */
  prompt_model pm;         /* what the prompt layer needs of it (prompt/prompt.h) */
} vlm;

/* Loads GGUF files, or an HF directory given as p->model (a directory with a config.json). */
qvl_status vlm_load(const vlm_paths *p, vlm **out);
/* Same with options (o may be NULL). */
qvl_status vlm_load_with(const vlm_paths *p, const vlm_load_opts *o, vlm **out);
void vlm_free(vlm *m);

/* The prompt layer (prompt/prompt.h) under the names its callers knew when it lived here. */
typedef prompt_known_image vlm_known_image;
typedef prompt_opts vlm_prompt_opts;
typedef prompt_image vlm_image;
typedef prompt_built vlm_prompt;

void vlm_prompt_opts_default(vlm_prompt_opts *o);
/* prompt_build on the model's prompt_model. */
qvl_status vlm_prompt_build(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, vlm_prompt *out);
qvl_status vlm_prompt_from_text(const vlm *m, const char *text, size_t len, vlm_prompt *out);
qvl_status vlm_prompt_from_ids(const vlm *m, const int32_t *ids, int64_t n, vlm_prompt *out);
void vlm_prompt_free(vlm_prompt *p);
decoder_input vlm_prompt_input(const vlm_prompt *p);

#endif
