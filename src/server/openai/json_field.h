/*
 * Checks of request JSON shared by every dialect (chat, Responses, completions, Ollama), below the
 * parsers that use them so that none of them calls another for these. Thread safety: pure functions.
 */
#ifndef QVL_SERVER_OPENAI_JSON_FIELD_H
#define QVL_SERVER_OPENAI_JSON_FIELD_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/openai/api_error.h"

/* The one type check of boolean fields, shared by every dialect (chat, Responses, completions,
 * Ollama): obj.name absent or null leaves *out as it was (the caller's default); true/false set it;
 * anything else ("yes", 1, "true") is a 400 invalid_type "'param' must be a boolean, got a string"
 * (param: the name as the client wrote it, e.g. "stream_options.include_usage"; NULL: name). */
/* "null", "a boolean", "a number", ...: what a field was, for error messages. */
const char *json_type_name(const cJSON *j);

bool api_get_bool(const cJSON *obj, const char *name, const char *param, bool *out, api_error *e);

/* JSON text with every \u0000 escape rewritten as \ufffd (same length), so that cJSON's
 * NUL-terminated strings cannot be cut short silently (a tool name "get\u0000x" would become "get");
 * content keeps a visible U+FFFD where the NUL was, as the output side does. NULL when the body has
 * no such escape (use it as it is), else a malloc'd copy of len bytes + NUL; *nomem on no memory. */
char *api_json_nul_escapes(const char *body, size_t len, bool *nomem);

#endif
