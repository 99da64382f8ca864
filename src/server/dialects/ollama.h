/*
 * Ollama's API on qvl's port (/api/...), on the chat path (see compat.h), for tools and UIs that
 * speak only Ollama.
 *
 * POST /api/chat: `messages` with `images` (base64 strings) become chat messages with image parts;
 * POST /api/generate: `prompt` (+ `system`, `images`), or with raw=true the prompt as given without
 * the chat template; an empty prompt only "loads the model" (answered at once, done_reason "load").
 * `options` map to the sampling fields (temperature, top_p, top_k, min_p, seed, num_predict, stop,
 * repeat_penalty, presence_penalty, frequency_penalty); runtime options (num_ctx, num_thread,
 * num_gpu, ...) are accepted and have no effect; sampling options qvl lacks (mirostat, typical_p,
 * tfs_z, repeat_last_n, ...) answer 400 unless they hold their neutral value. `format` ("json" or a
 * JSON schema) is passed on as the chat's response_format. /api/chat's `tools` (and qvl's
 * `tool_choice` extension) become the chat's; messages' Ollama `tool_calls` ({function: {name,
 * arguments: {...}}}) become the chat's assistant tool_calls, role "tool" messages pass; the
 * answer's calls are message.tool_calls ({id, function: {index, name, arguments: {...}}}), streamed
 * in a line of their own before the done line. Answers stream as NDJSON by default (one JSON object
 * per line, the last with done=true and the counts and durations), or one object with stream=false. `keep_alive` is accepted (the model stays loaded).
 * GET /api/tags, /api/ps, /api/version and POST /api/show describe the one loaded model; pull,
 * push, create, copy, delete, embed and blobs answer 501 with a message. Errors are {"error": "..."}.
 */
#ifndef QVL_SERVER_DIALECTS_OLLAMA_H
#define QVL_SERVER_DIALECTS_OLLAMA_H

#include "server/dialects/dialect.h"

/* The Ollama API version whose shapes these endpoints follow (GET /api/version). */
#define OLLAMA_API_VERSION "0.12.0"
#define OLLAMA_MAX_IMAGES_PER_MESSAGE 64

bool ollama_chat_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e);
bool ollama_generate_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out,
                               api_error *e);
/* Every other /api/ path: the JSON answer (malloc'd) and its status; *allow is set for a 405. */
char *ollama_info(const char *path, const char *method, const char *body, size_t len, const compat_ctx *ctx,
                  int *status, const char **allow);

/* The formatter (also gives /api/ errors their shape). */
extern const compat_format ollama_format;

#endif
