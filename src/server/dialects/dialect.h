/*
 * The other APIs qvl speaks besides OpenAI's chat completions — OpenAI's Responses API
 * (responses.c), legacy completions (completions.c) and Ollama's API (ollama.c) — all
 * served by ONE generation path.
 *
 * Each endpoint is a translator plus a formatter. The translator turns the endpoint's request body
 * into a chat completion body (the very JSON /v1/chat/completions takes), so every chat field, check
 * and limit applies unchanged: a chat feature (tools, response_format, logprobs, ...) reaches another
 * API by adding the field's mapping to its translator, nothing else. The server parses that body with
 * api_chat_parse, submits it like a chat request and hands the text pieces and the result to the
 * formatter, which writes them in the endpoint's own shape (JSON, SSE events, NDJSON lines).
 *
 *     compat_request cr;
 *     if (!responses_translate(body, len, &ctx, &cr, &err))   -> reply err in cr.fmt's shape
 *     api_chat_parse(cr.chat_body, cr.chat_len, ...)          -> the chat path, then
 *     cr.fmt->stream_text(cr.state, &out, piece, n) ... cr.fmt->stream_end(cr.state, &out, &result)
 *     or cr.fmt->result_json(cr.state, &result)
 *     compat_request_free(&cr);
 *
 * No I/O and no engine calls here, so translators and formatters are unit-tested on their own.
 * Thread safety: a compat_request belongs to one connection; the formatter functions of one request
 * are never called concurrently.
 */
#ifndef QVL_SERVER_DIALECTS_DIALECT_H
#define QVL_SERVER_DIALECTS_DIALECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "server/openai/chat_wire.h"

typedef struct resp_store resp_store;

/* What a translator may consult. */
typedef struct compat_ctx {
  const char *model_id;   /* the served model's id (GET /v1/models) */
  int64_t created;        /* unix seconds of this request */
  int64_t started;        /* unix seconds the server started (model listings) */
  resp_store *responses;  /* stored responses for previous_response_id (NULL: none) */
  bool stream_usage;      /* --stream-usage */
  const sampler_params *sampling; /* the model's default sampling (NULL: Qwen3-VL's), for echoes */
  bool reasoning_model;   /* the model reasons (its chat template opens a think block) */
} compat_ctx;

/* How a result is written in an endpoint's shape. The state is the translator's. */
typedef struct compat_format {
  const char *stream_content_type; /* "text/event-stream", "application/x-ndjson" */
  /* The finished answer of a non-streamed request with r->status == QVL_OK (malloc'd JSON). */
  char *(*result_json)(void *state, const api_result *r);
  /* An error body in this API's shape (malloc'd JSON); e->http is the status. */
  char *(*error_json)(void *state, const api_error *e);
  /* The HTTP status this API answers for an error of ours (NULL: e->http as it is). */
  int (*error_http)(int http);
  /* Streaming: appends what one piece of generated text becomes (the first call may also write
   * the stream's opening events). */
  void (*stream_text)(void *state, buf *out, const char *text, size_t len);
  /* Streaming: a piece of a reasoning model's reasoning (all of it comes before the first text);
   * NULL: the API has no place for reasoning and it is not streamed. */
  void (*stream_reasoning)(void *state, buf *out, const char *text, size_t len);
  /* Streaming: appends the end of the stream: the finish and usage, or the error of a request that
   * failed after it started (r->status != QVL_OK). */
  void (*stream_end)(void *state, buf *out, const api_result *r);
  void (*free_state)(void *state);
} compat_format;

typedef struct compat_request {
  char *chat_body;        /* a /v1/chat/completions body (malloc'd) */
  size_t chat_len;
  /* Legacy completions: the prompt as given, no chat template (exactly one of text or ids). */
  char *raw_text;         /* malloc'd, NUL-terminated; NULL when absent */
  size_t raw_len;
  int32_t *raw_ids;       /* [n_raw_ids] malloc'd */
  int64_t n_raw_ids;
  bool raw;               /* the prompt is raw_text / raw_ids; the chat body carries only settings */
  bool count_only;        /* count the prompt's tokens, generate nothing (engine_request.count_only) */
  char *reply_body;       /* set: answer this JSON with reply_status instead of generating (malloc'd) */
  int reply_status;
  char id[48];            /* the answer's id (resp_..., cmpl-...), also the request's id in the log */
  /* A stored conversation's images (prompt_opts.resolve_media; user is owned by state), and whether
   * the answer keeps its images' encoded bytes to store them (prompt_opts.keep_sources). */
  bool (*resolve_media)(void *user, uint64_t bytes_key, prompt_media_ref *out);
  void *resolve_user;
  bool keep_media;
  const compat_format *fmt; /* always set by a translator, also when it fails */
  void *state;            /* the formatter's; freed by compat_request_free */
} compat_request;

/* A translator: fills out (owned by the caller, free with compat_request_free, also on failure) or
 * fills e (a 400/404 in the endpoint's terms) and returns false. */
typedef bool (*compat_translate_fn)(const char *body, size_t len, const compat_ctx *ctx, compat_request *out,
                                    api_error *e);

void compat_request_free(compat_request *r);

/* ---- helpers shared by the translators (dialect.c) ---- */

/* Starts a translation: clears out, sets its formatter and gives it a zeroed state of state_size
 * bytes (freed with out). NULL (e set) when out of memory. */
void *compat_request_start(compat_request *out, const compat_format *fmt, size_t state_size, api_error *e);

/* Parses a request body as a JSON object (cJSON, caller frees) with the chat endpoint's rules:
 * not empty, no trailing data, depth <= API_MAX_JSON_DEPTH. */
cJSON *compat_parse_body(const char *body, size_t len, api_error *e);
/* Copies root[name] into chat[chat_name] when present and not null. */
void compat_copy_field(cJSON *chat, const char *chat_name, const cJSON *root, const char *name);
/* 400 unsupported_parameter naming the field when root[name] is present, not null, and not one of
 * the harmless values (false, "", [], {} when allow_empty). */
bool compat_refuse_field(const cJSON *root, const char *name, bool allow_empty, const char *why, api_error *e);
/* compat_refuse_field (allow_empty) for each {name, why} of a list. */
bool compat_refuse_fields(const cJSON *root, const char *const (*fields)[2], size_t n, api_error *e);
/* A chat completions function tool {type: function, function: {name, description, parameters}}
 * from a dialect's tool t, whose schema is t[schema_key]; with_strict also copies t.strict. */
cJSON *compat_function_tool(const cJSON *t, const char *schema_key, bool with_strict);
/* Whether the model may call a tool under the chat body: it lists tools and tool_choice is not
 * "none" (the chat path's parse_tools); the answer's text that may begin a call is then held. */
bool compat_tools_callable(const cJSON *chat);
/* The final chat.completion.chunk (json, taken) with the usage and timings of r added, for streams
 * whose client did not ask with stream_options.include_usage (--stream-usage; docs/API.md). */
char *compat_chunk_add_usage(char *json, const char *id, int64_t created, const char *model, const api_result *r);
/* Ends a translation that parsed root into chat: when ok, prints chat into out->chat_body (unless
 * the translator answered itself, out->reply_body); frees root and chat either way. Whether the
 * translation succeeded (false with e filled when printing runs out of memory). */
bool compat_finish(cJSON *root, cJSON *chat, bool ok, compat_request *out, api_error *e);

/* ---- tool calls and logprobs of an answer, as the chat path makes them ---- */

/* The chat.completion's choices[0] for r (api_completion_object): message.content (the text before
 * the first tool call; null when there is none), message.tool_calls (ids, names, arguments as JSON
 * strings), logprobs and finish_reason. The other APIs build their tool calls and logprobs from it,
 * so they are the chat's own. Caller frees; NULL when out of memory. */
cJSON *compat_chat_choice(const api_result *r);
/* The choice's content ("" when null) and its tool calls (NULL when none). */
const char *compat_choice_content(const cJSON *choice);
const cJSON *compat_choice_tool_calls(const cJSON *choice);
/* The choice's logprobs.content array (NULL when the request did not ask for logprobs). */
const cJSON *compat_choice_logprobs(const cJSON *choice);

/* Streaming with tools: what a formatter may send at once. Text from "<tool_call>" on is held (it
 * becomes tool calls at the end), and so are a tail that may begin one and the whitespace before it
 * (the chat's content leaves that out), so the pieces sent are always a prefix of the final content. */
typedef struct compat_hold {
  buf held;         /* text not yet released */
  size_t released;  /* bytes at the start of held handed out by the last push */
  bool tool_seen;
} compat_hold;
/* Adds text; *ready / *n_ready: what may go out now (inside h, valid until the next call). */
void compat_hold_push(compat_hold *h, const char *text, size_t len, const char **ready, size_t *n_ready);
void compat_hold_free(compat_hold *h);
/* What of the final content has not been sent yet: content after the prefix sent ("" when sent is
 * not a prefix of it). */
const char *compat_unsent(const char *content, const buf *sent);

#endif
