/*
 * JSON schema -> grammar (grammar.h), for response_format json_schema and tool-call arguments.
 *
 * The subset (what OpenAI's strict mode accepts, and a little more):
 *   type (a name or a list of names): object, array, string, number, integer, boolean, null;
 *   properties, required, additionalProperties (false; true or absent: only the listed properties
 *   are produced, which any reader of the schema accepts; an object without properties and without
 *   additionalProperties: false is any object); items, minItems, maxItems; minLength, maxLength
 *   (characters: code points, an escape is one;
 *   one above U+FFFF counts as two for maxLength, as JavaScript's UTF-16 length does); enum, const (matched
 *   byte for byte in their JSON form); anyOf; nullable (OpenAPI); $defs / definitions + $ref
 *   ("#", "#/$defs/Name", "#/definitions/Name", any JSON pointer into the same document;
 *   recursion allowed); the annotations description, title, $schema, $id, $comment, examples,
 *   default, deprecated, readOnly, writeOnly are ignored.
 * Anything else (pattern, format, minimum, oneOf, allOf, ...) is QVL_ERR_UNSUPPORTED naming the
 * keyword and where it is: output is never silently less constrained than the schema says; so are
 * keywords next to $ref other than nullable and the annotations.
 *
 * Bounded work (grammar_finalize): QVL_ERR_UNSUPPORTED naming the $ref or anyOf and its place for
 * a reference that leads back to itself before any value starts (left recursion: {"anyOf":
 * [{"$ref":"#"}, ...]}), a schema with no finite value ({"$ref":"#"}, a -> b -> a, a required
 * property holding the schema itself), one whose every value nests deeper than GRAMMAR_MAX_DEPTH,
 * and an anyOf that flattens to more than GRAMMAR_MAX_FLAT alternatives.
 *
 * Thread safety: pure functions.
 */
#ifndef QVL_TEXT_JSON_SCHEMA_H
#define QVL_TEXT_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "text/grammar.h"

/* Any JSON object (response_format json_object). */
qvl_status json_schema_any_object(grammar **out);
/* The language of one schema. */
qvl_status json_schema_compile(const cJSON *schema, grammar **out);
/* Qwen3's tool-call output for the given tools (OpenAI "tools" array of {type:"function",
 * function:{name, parameters}}): "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>",
 * repeated after "\n" when parallel; only the tool named only_name when it is not NULL. */
qvl_status json_schema_tool_calls(const cJSON *tools, const char *only_name, bool parallel, grammar **out);

#endif
