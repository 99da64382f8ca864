/*
 * OpenAI's legacy completions (POST /v1/completions) for raw-text callers, on the chat path (see
 * dialect.h): the prompt goes to the model as given, without the chat template.
 *
 * `prompt` is a string, a token-id array, or an array holding one of those (one prompt per request:
 * more answer 400). The sampling fields are the chat endpoint's; `max_tokens` defaults to 16 as at
 * OpenAI. `echo` puts a text prompt before the answer (not a token-id prompt: 400). `suffix`,
 * `logprobs`, `best_of` > 1 and `n` > 1 answer 400. Streaming sends text_completion chunks, the
 * usage chunk with stream_options.include_usage (or --stream-usage: usage on the last chunk), then
 * [DONE].
 */
#ifndef QVL_SERVER_DIALECTS_COMPLETIONS_H
#define QVL_SERVER_DIALECTS_COMPLETIONS_H

#include "server/dialects/dialect.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16
#define COMPLETIONS_MAX_PROMPT_IDS (1 << 20) /* token ids in one prompt (the context caps it further) */

bool completions_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e);

extern const compat_format completions_format;

#endif
