/*
 * The agent and structured-output fields of /v1/chat/completions: tools, tool_choice,
 * parallel_tool_calls, the legacy functions / function_call, response_format (text, json_object,
 * json_schema), logprobs and top_logprobs — parsing into a grammar for the engine, and the
 * response side: <tool_call> output parsed into message.tool_calls, logprobs objects, and the
 * stream chunks for both. See docs/API.md.
 *
 * Thread safety: reentrant; no global state.
 */
#ifndef QVL_SERVER_OPENAI_AGENTS_H
#define QVL_SERVER_OPENAI_AGENTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "text/grammar.h"

typedef struct api_error api_error;
typedef struct api_result api_result;
typedef struct engine_result engine_result;

#define API_MAX_TOOLS 64

typedef struct api_agent_opts {
  bool logprobs;
  int top_logprobs;   /* 0..20 */
  bool parse_tools;   /* tools given and tool_choice not "none": <tool_call> output becomes tool_calls */
  bool boxes;         /* "boxes": the answer's bbox_2d / point_2d in pixels as message.boxes (boxes.h) */
} api_agent_opts;

/* What the engine reports for logprobs, copied out of engine_result. */
typedef struct api_logprobs {
  int64_t n;          /* tokens */
  int n_top;
  float *lp;          /* [n] */
  int32_t *top_ids;   /* [n][n_top] */
  float *top_lp;      /* [n][n_top] */
  buf text;           /* token bytes, see engine_result.lp_text */
  uint32_t *off;      /* [n * (1 + n_top) + 1] */
} api_logprobs;

/* Parses the fields above from the request body root (which may gain a "tools" array converted
 * from "functions"). Fills o, *tools (inside root; NULL when none) and *g (a grammar to constrain
 * the output, NULL for free text; the caller owns it). False with e filled (400) on a bad field or
 * an unsupported schema keyword. */
bool api_agents_parse(cJSON *root, api_agent_opts *o, const cJSON **tools, grammar **g, api_error *e);

/* Copies the logprobs of r (nothing when it has none); false when out of memory. */
bool api_logprobs_copy(api_logprobs *d, const engine_result *r);
void api_logprobs_free(api_logprobs *l);

/* Fills the choice (message content / tool_calls, finish_reason, logprobs, boxes) of a finished
 * chat.completion built by api_completion_object. */
void api_agents_decorate(cJSON *choice, const api_result *r);

/* Streaming with tools: how many bytes of text can go out as content now. Text from the first
 * "<tool_call>" on is held (*tool_seen set); so is a tail that may be the start of one. */
size_t api_tool_text_safe(const char *text, size_t len, bool *tool_seen);

/* The chunks a stream sends after the content, before the finish chunk: the tool calls (index,
 * id, type, name, then the arguments in fragments) and the logprobs. Appends SSE events to out. */
void api_agents_stream_tail(buf *out, const char *id, int64_t created, const char *model, const api_result *r);
/* finish_reason for r: "tool_calls" when the output held tool calls, else as finish_openai. */
const char *api_agents_finish_reason(const api_result *r);

#endif
