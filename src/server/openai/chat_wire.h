/*
 * The OpenAI chat API as JSON: request parsing and validation, response and stream-chunk bodies,
 * error bodies, SSE framing. No I/O and no engine calls here, so all of it is unit-tested.
 *
 * Thread safety: reentrant; no global state.
 */
#ifndef QVL_SERVER_API_H
#define QVL_SERVER_API_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "qvl.h"
#include "server/openai/agents.h"

#define API_MAX_STOP 8       /* stop strings per request (OpenAI allows 4) */
#define API_MAX_JSON_DEPTH 64 /* nesting of the request body */

/* An error as OpenAI reports it: {"error":{"message","type","param","code"}} with an HTTP status. */
typedef struct api_error {
  int http;           /* 400, 401, 404, 405, 413, 500, 503, ... */
  const char *type;   /* "invalid_request_error", "authentication_error", "server_error", ... */
  const char *code;   /* NULL (null in JSON) or e.g. "model_not_found", "context_length_exceeded" */
  char param[64];     /* "" = null */
  char message[1024];
} api_error;

/* An error of a library status: its HTTP status, type and code come from the status list (qvl.h);
 * code (when not NULL) names the error more precisely ("invalid_value", "model_not_found"). */
void api_error_status(api_error *e, qvl_status s, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An HTTP-level error that no library status stands for (401, 405, 408, 429, 501). */
void api_error_set(api_error *e, int http, const char *type, const char *code, const char *param, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));
/* From a library status and message (the message of qvl_last_error() or an engine_result). */
void api_error_from_status(api_error *e, qvl_status s, const char *message);
/* The error body {"error":{...}}, malloc'd. */
char *api_error_json(const api_error *e);
/* Only the inner object {"message","type","param","code"} (job results), malloc'd. */
char *api_error_inner_json(const api_error *e);

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
  api_agent_opts agent;        /* tools / logprobs (api_agents.h) */
  const cJSON *tools;          /* inside root: for the chat template; NULL = none */
  grammar *grammar;            /* constrains the output (owned; NULL = free text); move it to the engine */
} api_chat_request;

/* Parses and validates a /v1/chat/completions body. On failure fills err (400/404) and returns
 * false; on success the request owns the parsed JSON (free with api_chat_request_free). */
bool api_chat_parse(const char *body, size_t len, const api_limits *lim, api_chat_request *out, api_error *err);
void api_chat_request_free(api_chat_request *r);

/* A finished request as the server keeps it (copied out of engine_result, which lives only during
 * the callback). */
typedef struct api_result {
  qvl_status status;
  char error[512];
  engine_finish finish_reason;
  int64_t prompt_tokens, completion_tokens, image_tokens, cached_prompt_tokens;
  int image_cache_hits, image_cache_misses;
  engine_timings t;
  buf text;
  history_report history;
  api_agent_opts agent;        /* set by the caller: how to render tool calls and logprobs */
  api_logprobs lp;
} api_result;

/* Copies r (the text too); false when out of memory. */
bool api_result_copy(api_result *dst, const engine_result *r);
void api_result_free(api_result *r);
/* OpenAI's finish_reason for the engine's: "length" at max_tokens, else "stop" (cancelled and
 * failed requests report their status in the body); NULL while running. */
const char *api_finish_reason(engine_finish f);

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
/* The usage chunk of stream_options.include_usage: choices [] and usage (+ timings). */
char *api_usage_chunk_json(const char *id, int64_t created, const char *model, const api_result *r);

/* Appends "data: <json>\n\n" (one SSE event; JSON never contains a raw newline). */
qvl_status sse_append(buf *out, const char *json);
/* Appends "data: [DONE]\n\n". */
qvl_status sse_append_done(buf *out);

/* "chatcmpl-" + 24 random hex digits (prefix given), for ids. */
void api_random_id(const char *prefix, char *out, size_t cap);

#endif
