/*
 * A reasoning model's budget from a chat request: the qvl extension max_reasoning_tokens, OpenAI's
 * reasoning_effort, and chat_template_kwargs.enable_thinking (vLLM's and llama-server's switch).
 * The first of them present decides; without any, the server's --reasoning-budget. For a model
 * that does not reason (its chat template opens no think block) max_reasoning_tokens and
 * reasoning_effort are refused with a 400 naming them; enable_thinking is harmless and ignored.
 *
 *   reasoning_effort   none / minimal: 0 (no thinking)   low: 512   medium: 2048   high: 8192
 *   max_reasoning_tokens  -1 (unbounded), 0 (no thinking) or N (the engine closes the block after N)
 *
 * Thread safety: reentrant.
 */
#ifndef QVL_SERVER_OPENAI_REASONING_FIELD_H
#define QVL_SERVER_OPENAI_REASONING_FIELD_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/openai/api_error.h"

#define API_REASONING_LOW 512
#define API_REASONING_MEDIUM 2048
#define API_REASONING_HIGH 8192
#define API_REASONING_MAX (1 << 24) /* max_reasoning_tokens upper bound */

/* *budget: the request's (reasoning_model) or the default; false with e filled on a bad value or a
 * reasoning field sent to a model that does not reason. */
bool api_reasoning_parse(const cJSON *root, bool reasoning_model, int64_t default_budget, int64_t *budget,
                         api_error *e);

#endif
