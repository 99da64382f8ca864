/*
 * The OpenAI chat API as JSON: request parsing and validation, response and stream-chunk bodies,
 * error bodies, SSE framing. No I/O and no engine calls here, so all of it is unit-tested.
 *
 * Thread safety: reentrant; no global state.
 */
#ifndef QVL_SERVER_OPENAI_CHAT_WIRE_H
#define QVL_SERVER_OPENAI_CHAT_WIRE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "qvl.h"
#include "server/openai/agents.h"
#include "server/openai/json_field.h"
#include "server/openai/api_error.h"
#include "base/finish.h"
#include "server/openai/result.h"
#include "server/openai/sse.h"

#define API_MAX_STOP 8       /* stop strings per request (OpenAI allows 4) */
#define API_MAX_JSON_DEPTH 64 /* nesting of the request body */

/* What a request may ask for; server settings. */
typedef struct api_limits {
  int64_t max_tokens;          /* cap and default of max_tokens */
  int max_images;              /* images per request */
  int64_t max_pixels;          /* cap on the request's max_pixels */
  int64_t default_max_pixels;  /* resize target when the request gives none */
  int64_t default_min_pixels;  /* lower resize bound when the request gives none */
  const char *const *model_ids; /* names accepted in "model" */
  int n_model_ids;
  const sampler_params *sampling; /* what absent sampling fields take: the model's recommendation
                                   * (vlm.sampling); NULL: Qwen3-VL's (model_sampling_qwen3vl) */
  const char *vision_precision; /* the tower's loaded tier; NULL: no tower (any valid tier accepted) */
  int max_videos;              /* videos per request (0: not checked here) */
  int64_t video_max_frames;    /* sampled frames a request may ask for (0: HF's 768) */
  int64_t video_max_pixels;    /* cap on a request's video max_pixels (0: HF's 786432) */
  bool reasoning_model;        /* the model reasons: reasoning fields are honoured (else refused) */
  int64_t reasoning_budget;    /* the server's default budget (--reasoning-budget; -1 unbounded) */
  bool boxes;                  /* "boxes" when the request does not say (--boxes) */
} api_limits;

typedef struct api_chat_request {
  cJSON *root;                 /* the parsed body (owned) */
  const cJSON *messages;       /* inside root */
  const char *model;           /* inside root; NULL when absent */
  bool stream, include_usage;
  gen_params gen;              /* gen.stop points at stops */
  const char *stops[API_MAX_STOP]; /* inside root */
  int64_t min_pixels, max_pixels;
  int n_images;
  int n_videos;
  video_sampling video;        /* sampling of every video (server/openai/video_wire.h) */
  api_agent_opts agent;        /* tools / logprobs (agents.h) */
  const cJSON *tools;          /* inside root: for the chat template; NULL = none */
  grammar *grammar;            /* constrains the output (owned; NULL = free text); move it to the engine */
} api_chat_request;

/* Parses and validates a /v1/chat/completions body. On failure fills err (400/404) and returns
 * false; on success the request owns the parsed JSON (free with api_chat_request_free). */
bool api_chat_parse(const char *body, size_t len, const api_limits *lim, api_chat_request *out, api_error *err);

void api_chat_request_free(api_chat_request *r);

/* A JSON string of generated text: each ill-formed UTF-8 sequence (and NUL) becomes U+FFFD. */
cJSON *api_text_json(const char *s, size_t n);
/* The chat.completion object (malloc'd). */
char *api_completion_json(const char *id, int64_t created, const char *model, const api_result *r);
/* The chat.completion object as cJSON (for job results). */
cJSON *api_completion_object(const char *id, int64_t created, const char *model, const api_result *r);
/* One chat.completion.chunk: with role (first chunk) and/or content, or the final one with a
 * finish_reason and an empty delta. */
char *api_chunk_json(const char *id, int64_t created, const char *model, bool role, const char *content,
                     size_t content_len, const char *finish_reason);
/* A chunk whose delta carries reasoning_content (llama-server's and vLLM's field), with role on the
 * first chunk. */
char *api_reasoning_chunk_json(const char *id, int64_t created, const char *model, bool role, const char *text,
                               size_t len);
/* The usage chunk of stream_options.include_usage: choices [] and usage (+ timings). */
char *api_usage_chunk_json(const char *id, int64_t created, const char *model, const api_result *r);

/* "chatcmpl-" + 24 random hex digits (prefix given), for ids. */
void api_random_id(const char *prefix, char *out, size_t cap);

#endif
