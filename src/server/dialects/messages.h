/*
 * Anthropic's Messages API (POST /v1/messages, POST /v1/messages/count_tokens) on top of the chat
 * path (see dialect.h).
 *
 * A request is translated into a chat completion body: `system` (a string or text blocks) becomes
 * a leading system message; each message's content (a string or blocks) becomes chat content:
 * text blocks text parts, image blocks (base64 or url sources) image_url parts, an assistant's
 * tool_use blocks the chat's tool_calls (input printed as the arguments string), a user's
 * tool_result blocks tool messages (before the rest of that user message), thinking blocks of
 * earlier assistant turns are dropped (as the chat templates drop earlier reasoning).
 * `max_tokens` (required) becomes max_tokens, `stop_sequences` stop, `temperature` / `top_p` /
 * `top_k` pass through, `tools` ({name, description, input_schema}) the chat's function tools,
 * `tool_choice` {auto | any | tool+name | none} the chat's auto / required / named function / none
 * (disable_parallel_tool_use: parallel_tool_calls false). `metadata` and the `anthropic-version`
 * header are accepted and change nothing. `thinking` sets a reasoning model's budget: {type:
 * enabled, budget_tokens: N} -> max_reasoning_tokens N (N < max_tokens; below Anthropic's 1024
 * minimum is accepted), disabled -> 0, adaptive or absent -> the server's default; on a model that
 * does not reason "enabled" answers 400 naming `thinking`. Anthropic
 * platform features qvl lacks (server tools, MCP servers, containers, documents, files, a final
 * assistant message as a prefill) answer 400 naming them.
 *
 * The answer is a `message` whose content is a thinking block first when the model reasoned
 * ({type: thinking, thinking, signature: ""}: qvl signs nothing), then a text block (the text before any tool call; left out
 * when the model only called tools) and a tool_use block per call, its input the call's arguments
 * text embedded as raw JSON; stop_reason is max_tokens at the length limit, tool_use when there are
 * calls, stop_sequence (with stop_sequence set to the string) when a stop sequence ended it, else
 * end_turn. usage.output_tokens includes the reasoning tokens; usage.input_tokens counts the prompt tokens not read from the prefix cache,
 * cache_read_input_tokens those that were. With stream=true it is the event sequence message_start,
 * content_block_start, ping, content_block_delta (thinking_delta then one empty signature_delta
 * in the thinking block, text_delta, input_json_delta)..., content_block_stop per block, message_delta (stop_reason, stop_sequence, usage) and
 * message_stop, each as "event: TYPE\ndata: JSON\n\n"; a failure midway ends the stream with an
 * error event. Errors are {"type":"error","error":{"type","message"}} with Anthropic's types and
 * statuses (an overloaded server answers 529 overloaded_error).
 *
 * count_tokens takes the same body without max_tokens and answers {"input_tokens": N}: the prompt's
 * tokens, images included, counted by the engine without generating (compat_request.count_only).
 */
#ifndef QVL_SERVER_DIALECTS_MESSAGES_H
#define QVL_SERVER_DIALECTS_MESSAGES_H

#include "server/dialects/dialect.h"

bool messages_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e);
bool messages_count_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out,
                              api_error *e);

/* Anthropic's error type for an HTTP status ("invalid_request_error", "not_found_error", ...). */
const char *messages_error_type(int http);
/* The HTTP status Anthropic answers for ours (503 busy -> 529 overloaded, else the same). */
int messages_error_http(int http);

extern const compat_format messages_format;

#endif
