/*
 * Structured output as the model wrote it (issue 22): tool-call arguments and json_schema content
 * are never parsed into doubles and printed again (333333333333333333333333 would come back as
 * 3.333333333333333e+23, 0.1000000000000000055511 as 0.1). Every dialect that needs the model's
 * JSON as a value (Ollama's message.tool_calls[].function.arguments, Anthropic's tool_use.input)
 * embeds it with json_raw_value; chat and Responses carry the text itself (json_raw_member).
 *
 * Thread safety: pure functions.
 */
#ifndef QVL_SERVER_OPENAI_JSON_RAW_H
#define QVL_SERVER_OPENAI_JSON_RAW_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* The bytes of the value of member key in the JSON object text[0..len) (a top-level member; the
 * text must be a valid JSON object): *off, *vlen. false when the text is not an object or has no
 * such member. */
bool json_raw_member(const char *text, size_t len, const char *key, size_t *off, size_t *vlen);

/* A cJSON raw item holding text[0..len) when it is one valid JSON value (whitespace at the ends
 * trimmed): numbers, strings and key order exactly as written; whitespace between tokens dropped
 * (it means nothing, and a newline would break NDJSON and SSE framing). object_only: only an
 * object will do. NULL when the text is not such a value (or out of memory). */
cJSON *json_raw_value(const char *text, size_t len, bool object_only);

#endif
