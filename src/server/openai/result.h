/*
 * A finished chat request as the server keeps it: the engine's result copied out of the callback,
 * with how its tool calls and logprobs are to be rendered. Calls agents.c (logprobs) only.
 */
#ifndef QVL_SERVER_OPENAI_RESULT_H
#define QVL_SERVER_OPENAI_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/engine.h"
#include "qvl.h"
#include "server/openai/agents.h"

/* One image of a finished request as processed: what a stored conversation keeps instead of its
 * data URL (ref.bytes is a reference, with engine_request.prompt.keep_sources). */
typedef struct api_media {
  int index;             /* among the request's images, in prompt order */
  prompt_media_ref ref;
} api_media;

/* A finished request as the server keeps it (copied out of engine_result, which lives only during
 * the callback). */
typedef struct api_result {
  qvl_status status;
  char error[512];
  qvl_finish finish_reason;
  int stop_match;              /* engine_result.stop_match */
  int64_t prompt_tokens, completion_tokens, image_tokens, cached_prompt_tokens;
  int image_cache_hits, image_cache_misses;
  engine_timings t;
  buf text;
  buf reasoning;               /* a reasoning model's reasoning ("" otherwise) */
  int64_t reasoning_tokens;    /* of completion_tokens, those inside the think block */
  history_report history;
  api_agent_opts agent;        /* set by the caller: how to render tool calls, logprobs and boxes */
  api_logprobs lp;
  api_media *media;            /* [n_media] the images kept in the prompt */
  int n_media;
  int n_images;
  engine_image *images;        /* [n_images] the prompt's images (engine_result.images; boxes) */
} api_result;

/* Copies r (the text too); false when out of memory. */
bool api_result_copy(api_result *dst, const engine_result *r);
void api_result_free(api_result *r);

#endif
