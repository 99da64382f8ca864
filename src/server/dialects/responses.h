/*
 * OpenAI's Responses API (POST /v1/responses) on top of the chat path (see dialect.h).
 *
 * A request is translated into a chat completion body: `input` (a string, or a list of message
 * items with input_text / input_image / output_text parts, item_reference, function_call and
 * function_call_output items) becomes `messages`, `instructions` a leading system message,
 * `max_output_tokens` max_tokens, the sampling fields pass through, function `tools` /
 * `tool_choice` / `parallel_tool_calls`, `text.format` and `include` / `top_logprobs` become the
 * chat's `tools` / `tool_choice` / `parallel_tool_calls` / `response_format` / `logprobs`;
 * function_call and function_call_output items become assistant tool_calls and tool messages.
 * `previous_response_id` prepends the stored conversation (resp_store.h), the answer's calls
 * included. Features of OpenAI's platform that qvl does not have — built-in tools, background mode,
 * conversations, files API ids, reasoning settings — answer 400 naming them.
 *
 * The answer is a `response` object whose output is the message (the text before any tool call;
 * left out when there is none) and a function_call item per call, tool calls and logprobs taken from
 * the chat's own rendering (compat_chat_choice). With stream=true it is the event sequence
 * response.created, response.in_progress, then for the message response.output_item.added,
 * response.content_part.added, response.output_text.delta..., response.output_text.done,
 * response.content_part.done, response.output_item.done, then per call response.output_item.added,
 * response.function_call_arguments.delta..., response.function_call_arguments.done,
 * response.output_item.done, and response.completed (response.incomplete when max_output_tokens cut
 * it short; error + response.failed when it fails midway), each as "event: TYPE\ndata: JSON\n\n".
 */
#ifndef QVL_SERVER_DIALECTS_RESPONSES_H
#define QVL_SERVER_DIALECTS_RESPONSES_H

#include "server/dialects/dialect.h"

/* Stored conversations: at most this many, this many bytes, this long. */
#define RESPONSES_STORE_ENTRIES 1024
#define RESPONSES_STORE_BYTES ((size_t)256 << 20)
#define RESPONSES_STORE_TTL_S 3600.0

bool responses_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e);

extern const compat_format responses_format;

#endif
