/* Anthropic's Messages API translated to and from the chat path (see messages.h). */
#include "server/dialects/messages.h"

#include "server/openai/json_print.h"
#include "server/openai/json_raw.h"
#include "server/openai/reasoning_field.h"
#include "server/openai/sse.h"
#include "text/unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the formatter's state ------------------------------------------------------------------- */

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING, BLOCK_TOOL };

typedef struct msgs_state {
  char id[48];          /* msg_<hex> */
  char hex[40];         /* the random part; tool_use ids are toolu_<hex>_<i> */
  char model[128];      /* the model the client named (the served one when it named none) */
  bool count;           /* count_tokens: the answer is {"input_tokens"} */
  char *stops[API_MAX_STOP]; /* stop_sequences as given, for stop_sequence in the answer */
  int n_stops;
  bool hold_tools;      /* tools may be called: text that may begin a call is held (compat_hold) */
  compat_hold hold;
  buf sent;             /* text streamed so far */
  buf thinking;         /* reasoning streamed so far (the thinking block's text) */
  /* streaming */
  bool started;         /* message_start is out */
  bool pinged;
  int next_block;       /* index of the next content block */
  int open;             /* BLOCK_*: the kind of the block open now */
} msgs_state;

static void state_free(void *p) {
  msgs_state *st = p;
  if (!st)
    return;
  for (int i = 0; i < st->n_stops; i++)
    free(st->stops[i]);
  compat_hold_free(&st->hold);
  buf_free(&st->sent);
  buf_free(&st->thinking);
  free(st);
}

/* ---- errors ---------------------------------------------------------------------------------- */

const char *messages_error_type(int http) {
  switch (http) {
  case 400: return "invalid_request_error";
  case 401: return "authentication_error";
  case 403: return "permission_error";
  case 404: return "not_found_error";
  case 413: return "request_too_large";
  case 429: return "rate_limit_error";
  case 503:
  case 529: return "overloaded_error";
  case 408:
  case 504: return "timeout_error";
  default: return http >= 400 && http < 500 ? "invalid_request_error" : "api_error";
  }
}

int messages_error_http(int http) { return http == 503 ? 529 : http; }

static char *error_body(const api_error *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "error");
  cJSON *err = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(err, "type", messages_error_type(e->http));
  cJSON_AddStringToObject(err, "message", e->message);
  return json_print_take(o);
}

static char *error_json(void *state, const api_error *e) {
  (void)state;
  return error_body(e);
}

/* ---- request translation --------------------------------------------------------------------- */

static bool bad(api_error *e, const char *param, const char *msg) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param, "%s: %s", param, msg);
  return false;
}

static bool unsupported(api_error *e, const char *param, const char *what) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param, "%s: %s", param, what);
  return false;
}

static const cJSON *get(const cJSON *o, const char *name) { return cJSON_GetObjectItemCaseSensitive(o, name); }

static bool present(const cJSON *j) { return j && !cJSON_IsNull(j); }

static cJSON *text_part(const char *text) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "type", "text");
  cJSON_AddStringToObject(p, "text", text);
  return p;
}

/* A MIME type of an image: "image/" and a token of at most 40 safe bytes. */
static bool image_media_type(const char *t) {
  if (strncmp(t, "image/", 6) || !t[6] || strlen(t) > 46)
    return false;
  for (const char *p = t + 6; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.'))
      return false;
  return true;
}

/* An image block -> an image_url part (NULL + e). Base64 sources become data: URLs; the decoder
 * checks the bytes themselves, the media type only has to name an image. */
static cJSON *image_part(const cJSON *b, const char *param, api_error *e) {
  const cJSON *src = get(b, "source");
  const cJSON *type = get(src, "type");
  if (!cJSON_IsObject(src) || !cJSON_IsString(type)) {
    bad(e, param, "an image block needs 'source' as an object with a 'type' (base64 or url)");
    return NULL;
  }
  char *url = NULL;
  if (!strcmp(type->valuestring, "base64")) {
    const cJSON *mt = get(src, "media_type"), *data = get(src, "data");
    if (!cJSON_IsString(mt) || !image_media_type(mt->valuestring) || !cJSON_IsString(data) || !data->valuestring[0]) {
      bad(e, param, "a base64 image source needs 'media_type' (image/jpeg, image/png, image/gif or image/webp) and "
                    "'data' as a non-empty base64 string");
      return NULL;
    }
    size_t n = strlen(mt->valuestring) + strlen(data->valuestring) + 16;
    if ((url = malloc(n)))
      snprintf(url, n, "data:%s;base64,%s", mt->valuestring, data->valuestring);
  } else if (!strcmp(type->valuestring, "url")) {
    const cJSON *u = get(src, "url");
    if (!cJSON_IsString(u) || !u->valuestring[0]) {
      bad(e, param, "a url image source needs 'url' as a non-empty string");
      return NULL;
    }
    url = strdup(u->valuestring);
  } else {
    char msg[160];
    snprintf(msg, sizeof msg, "image source type '%.40s' is not supported (base64 or url; there is no files API)",
             type->valuestring);
    unsupported(e, param, msg);
    return NULL;
  }
  if (!url) {
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
    return NULL;
  }
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "type", "image_url");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "image_url"), "url", url);
  free(url);
  return p;
}

/* A text block's text (NULL + e when it has none). */
static const char *block_text(const cJSON *b, const char *param, api_error *e) {
  const cJSON *t = get(b, "text");
  if (!cJSON_IsString(t)) {
    bad(e, param, "a text block needs 'text' as a string");
    return NULL;
  }
  return t->valuestring;
}

/* Whether an assistant message of msgs made the tool call with this id. */
static bool has_call(const cJSON *msgs, const char *id) {
  for (const cJSON *m = msgs->child; m; m = m->next) {
    const cJSON *calls = get(m, "tool_calls");
    for (const cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c; c = c->next) {
      const cJSON *cid = get(c, "id");
      if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id))
        return true;
    }
  }
  return false;
}

/* A tool_result block -> a tool message (NULL + e). Its content is a string or text / image
 * blocks; is_error puts "Error: " before it, as the model would otherwise not know. */
static cJSON *tool_result(const cJSON *b, const cJSON *msgs, const char *param, api_error *e) {
  const cJSON *tid = get(b, "tool_use_id"), *content = get(b, "content"), *is_error = get(b, "is_error");
  if (!cJSON_IsString(tid) || !tid->valuestring[0]) {
    bad(e, param, "a tool_result block needs 'tool_use_id' as a non-empty string");
    return NULL;
  }
  if (!has_call(msgs, tid->valuestring)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                     "%s: unexpected tool_use_id '%.80s': no tool_use block with this id in an earlier assistant "
                     "message",
                     param, tid->valuestring);
    return NULL;
  }
  if (present(is_error) && !cJSON_IsBool(is_error)) {
    bad(e, param, "'is_error' must be a boolean");
    return NULL;
  }
  bool err = cJSON_IsTrue(is_error);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "tool");
  cJSON_AddStringToObject(m, "tool_call_id", tid->valuestring);
  if (!present(content) || cJSON_IsString(content)) {
    const char *s = cJSON_IsString(content) ? content->valuestring : "";
    if (!err) {
      cJSON_AddStringToObject(m, "content", s);
      return m;
    }
    cJSON *parts = cJSON_AddArrayToObject(m, "content");
    cJSON_AddItemToArray(parts, text_part("Error: "));
    cJSON_AddItemToArray(parts, text_part(s));
    return m;
  }
  if (!cJSON_IsArray(content)) {
    cJSON_Delete(m);
    bad(e, param, "a tool_result's 'content' must be a string or an array of text and image blocks");
    return NULL;
  }
  cJSON *parts = cJSON_AddArrayToObject(m, "content");
  if (err)
    cJSON_AddItemToArray(parts, text_part("Error: "));
  int i = 0;
  for (const cJSON *c = content->child; c; c = c->next, i++) {
    char pp[96];
    snprintf(pp, sizeof pp, "%.60s.content[%d]", param, i);
    const cJSON *type = get(c, "type");
    cJSON *part = NULL;
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "text")) {
      const char *t = block_text(c, pp, e);
      part = t ? text_part(t) : NULL;
    } else if (cJSON_IsString(type) && !strcmp(type->valuestring, "image")) {
      part = image_part(c, pp, e);
    } else {
      bad(e, pp, "a tool_result's content blocks must be text or image blocks");
    }
    if (!part) {
      cJSON_Delete(m);
      return NULL;
    }
    cJSON_AddItemToArray(parts, part);
  }
  return m;
}

/* A tool_use block of an assistant message -> one of the chat's tool_calls (NULL + e). */
static cJSON *tool_use(const cJSON *b, const char *param, api_error *e) {
  const cJSON *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
  if (!cJSON_IsString(id) || !id->valuestring[0] || !cJSON_IsString(name) || !name->valuestring[0] ||
      !cJSON_IsObject(input)) {
    bad(e, param, "a tool_use block needs 'id' and 'name' as non-empty strings and 'input' as an object");
    return NULL;
  }
  char *args = cJSON_PrintUnformatted(input);
  if (!args) {
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
    return NULL;
  }
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "id", id->valuestring);
  cJSON_AddStringToObject(c, "type", "function");
  cJSON *f = cJSON_AddObjectToObject(c, "function");
  cJSON_AddStringToObject(f, "name", name->valuestring);
  cJSON_AddStringToObject(f, "arguments", args);
  free(args);
  return c;
}

/* Block types of Anthropic's platform that have no counterpart here. */
static bool refuse_block(const char *t, const char *param, api_error *e) {
  char msg[200];
  if (!strcmp(t, "document") || !strcmp(t, "search_result") || !strcmp(t, "container_upload"))
    snprintf(msg, sizeof msg, "'%s' blocks are not supported (text, image, tool_use and tool_result are)", t);
  else if (strstr(t, "server_tool") || strstr(t, "mcp_") || strstr(t, "_tool_result"))
    snprintf(msg, sizeof msg, "'%s' blocks are not supported: qvl has no server tools", t);
  else
    snprintf(msg, sizeof msg, "unknown content block type '%.40s' (supported: text, image, tool_use, tool_result, "
                              "thinking)", t);
  return unsupported(e, param, msg);
}

/* A user message -> its tool messages (one per tool_result block, in order), then a user message
 * with the other blocks (when there are any). */
static bool user_message(const cJSON *content, const char *param, cJSON *msgs, api_error *e) {
  if (cJSON_IsString(content)) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", content->valuestring);
    cJSON_AddItemToArray(msgs, m);
    return true;
  }
  cJSON *parts = cJSON_CreateArray();
  int i = 0;
  for (const cJSON *b = content->child; b; b = b->next, i++) {
    char pp[96];
    snprintf(pp, sizeof pp, "%.60s.content[%d]", param, i);
    const cJSON *type = get(b, "type");
    if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
      cJSON_Delete(parts);
      return bad(e, pp, "a content block must be an object with a 'type'");
    }
    const char *t = type->valuestring;
    cJSON *part = NULL;
    if (!strcmp(t, "text")) {
      const char *s = block_text(b, pp, e);
      part = s ? text_part(s) : NULL;
    } else if (!strcmp(t, "image")) {
      part = image_part(b, pp, e);
    } else if (!strcmp(t, "tool_result")) {
      cJSON *tm = tool_result(b, msgs, pp, e);
      if (tm) {
        cJSON_AddItemToArray(msgs, tm);
        continue;
      }
    } else if (!strcmp(t, "tool_use") || !strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
      char msg[96];
      snprintf(msg, sizeof msg, "'%s' blocks belong in assistant messages", t);
      bad(e, pp, msg);
    } else {
      refuse_block(t, pp, e);
    }
    if (!part) {
      cJSON_Delete(parts);
      return false;
    }
    cJSON_AddItemToArray(parts, part);
  }
  if (!parts->child) {
    cJSON_Delete(parts);
    return true;
  }
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddItemToObject(m, "content", parts);
  cJSON_AddItemToArray(msgs, m);
  return true;
}

/* An assistant message -> one chat assistant message: its text blocks joined as the content, its
 * tool_use blocks as tool_calls; thinking blocks are dropped. */
static bool assistant_message(const cJSON *content, const char *param, cJSON *msgs, api_error *e) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "assistant");
  if (cJSON_IsString(content)) {
    cJSON_AddStringToObject(m, "content", content->valuestring);
    cJSON_AddItemToArray(msgs, m);
    return true;
  }
  buf text = {0};
  cJSON *calls = cJSON_CreateArray();
  int i = 0;
  bool ok = true;
  for (const cJSON *b = content->child; b && ok; b = b->next, i++) {
    char pp[96];
    snprintf(pp, sizeof pp, "%.60s.content[%d]", param, i);
    const cJSON *type = get(b, "type");
    if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
      ok = bad(e, pp, "a content block must be an object with a 'type'");
      break;
    }
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) {
      const char *s = block_text(b, pp, e);
      ok = s && buf_append_str(&text, s) == QVL_OK;
    } else if (!strcmp(t, "tool_use")) {
      cJSON *c = tool_use(b, pp, e);
      ok = c != NULL;
      if (c)
        cJSON_AddItemToArray(calls, c);
    } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
      /* earlier reasoning is not part of the prompt */
    } else if (!strcmp(t, "image") || !strcmp(t, "tool_result")) {
      char msg[96];
      snprintf(msg, sizeof msg, "'%s' blocks belong in user messages", t);
      ok = bad(e, pp, msg);
    } else {
      ok = refuse_block(t, pp, e);
    }
  }
  if (ok && calls->child && !text.len)
    cJSON_AddNullToObject(m, "content");
  else if (ok)
    cJSON_AddItemToObject(m, "content", api_text_json(text.data ? text.data : "", text.len));
  if (ok && calls->child)
    cJSON_AddItemToObject(m, "tool_calls", calls);
  else
    cJSON_Delete(calls);
  buf_free(&text);
  if (!ok) {
    cJSON_Delete(m);
    return false;
  }
  cJSON_AddItemToArray(msgs, m);
  return true;
}

static bool translate_messages(const cJSON *root, cJSON *msgs, api_error *e) {
  const cJSON *list = get(root, "messages");
  if (!present(list)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "messages", "messages: Field required");
    return false;
  }
  if (!cJSON_IsArray(list) || !list->child)
    return bad(e, "messages", "'messages' must be a non-empty array of {role, content}");
  int i = 0;
  for (const cJSON *m = list->child; m; m = m->next, i++) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d]", i);
    const cJSON *role = get(m, "role"), *content = get(m, "content");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role))
      return bad(e, param, "a message must be an object with 'role' (user or assistant) and 'content'");
    if (!cJSON_IsString(content) && !cJSON_IsArray(content))
      return bad(e, param, "'content' must be a string or an array of content blocks");
    bool user = !strcmp(role->valuestring, "user");
    if (!user && strcmp(role->valuestring, "assistant"))
      return bad(e, param, "'role' must be user or assistant (the system prompt goes in the top-level 'system')");
    if (!user && !m->next)
      return unsupported(e, param,
                         "a final assistant message (a prefill the answer continues) is not supported: end with a "
                         "user message");
    if (!(user ? user_message(content, param, msgs, e) : assistant_message(content, param, msgs, e)))
      return false;
  }
  return true;
}

/* `system`: a string or text blocks -> a leading system message (the blocks joined by newlines). */
static bool translate_system(const cJSON *root, cJSON *msgs, api_error *e) {
  const cJSON *sys = get(root, "system");
  if (!present(sys))
    return true;
  buf text = {0};
  if (cJSON_IsString(sys)) {
    buf_append_str(&text, sys->valuestring);
  } else if (cJSON_IsArray(sys)) {
    int i = 0;
    for (const cJSON *b = sys->child; b; b = b->next, i++) {
      const cJSON *type = get(b, "type"), *t = get(b, "text");
      if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
        buf_free(&text);
        char param[40];
        snprintf(param, sizeof param, "system[%d]", i);
        return bad(e, param, "system blocks must be text blocks {\"type\": \"text\", \"text\": ...}");
      }
      if (i)
        buf_append_str(&text, "\n");
      buf_append_str(&text, t->valuestring);
    }
  } else {
    return bad(e, "system", "'system' must be a string or an array of text blocks");
  }
  if (text.len) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddItemToObject(m, "content", api_text_json(text.data, text.len));
    cJSON_AddItemToArray(msgs, m);
  }
  buf_free(&text);
  return true;
}

/* `tools` / `tool_choice` -> the chat's. */
static bool translate_tools(const cJSON *root, cJSON *chat, api_error *e) {
  const cJSON *tools = get(root, "tools");
  if (present(tools)) {
    if (!cJSON_IsArray(tools))
      return bad(e, "tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
      char param[48];
      snprintf(param, sizeof param, "tools[%d]", i);
      const cJSON *type = get(t, "type"), *name = get(t, "name"), *schema = get(t, "input_schema");
      if (!cJSON_IsObject(t))
        return bad(e, param, "a tool must be an object");
      if (present(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom"))) {
        char msg[160];
        snprintf(msg, sizeof msg, "server tool '%.40s' is not supported (only client tools {name, description, "
                                  "input_schema})",
                 cJSON_IsString(type) ? type->valuestring : "?");
        return unsupported(e, param, msg);
      }
      if (!cJSON_IsString(name) || !name->valuestring[0])
        return bad(e, param, "a tool needs 'name' as a non-empty string");
      if (!cJSON_IsObject(schema))
        return bad(e, param, "a tool needs 'input_schema' as a JSON schema object");
      cJSON_AddItemToArray(out, compat_function_tool(t, "input_schema", false));
    }
    if (!out->child) /* [] means no tools */
      cJSON_DeleteItemFromObjectCaseSensitive(chat, "tools");
  }
  const cJSON *tc = get(root, "tool_choice");
  if (!present(tc))
    return true;
  const cJSON *type = get(tc, "type"), *name = get(tc, "name"), *dp = get(tc, "disable_parallel_tool_use");
  if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
    return bad(e, "tool_choice", "'tool_choice' must be an object {\"type\": auto, any, tool or none}");
  if (present(dp) && !cJSON_IsBool(dp))
    return bad(e, "tool_choice.disable_parallel_tool_use", "must be a boolean");
  const char *t = type->valuestring;
  if (!strcmp(t, "auto") || !strcmp(t, "any") || !strcmp(t, "none")) {
    cJSON_AddStringToObject(chat, "tool_choice", !strcmp(t, "any") ? "required" : t);
  } else if (!strcmp(t, "tool")) {
    if (!cJSON_IsString(name) || !name->valuestring[0])
      return bad(e, "tool_choice.name", "tool_choice type 'tool' needs 'name'");
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
  } else {
    return bad(e, "tool_choice.type", "must be auto, any, tool or none");
  }
  if (cJSON_IsTrue(dp))
    cJSON_AddBoolToObject(chat, "parallel_tool_calls", false);
  return true;
}

/* `thinking`: {type: enabled, budget_tokens: N} -> the chat's max_reasoning_tokens N (Anthropic asks
 * N >= 1024; smaller budgets are accepted, a small model's reasoning is short), {type: disabled} ->
 * 0 (the template's empty think block), {type: adaptive} or absent -> the server's default budget.
 * A model that does not reason refuses "enabled" (as the other dialects refuse reasoning fields);
 * disabled and adaptive are what it does anyway. max_tokens < 0: not given (count_tokens). */
static bool check_thinking(const cJSON *root, const compat_ctx *ctx, int64_t max_tokens, cJSON *chat, api_error *e) {
  const cJSON *th = get(root, "thinking");
  if (!present(th))
    return true;
  const cJSON *type = get(th, "type");
  if (!cJSON_IsObject(th) || !cJSON_IsString(type))
    return bad(e, "thinking", "'thinking' must be an object {\"type\": enabled, disabled or adaptive}");
  if (!strcmp(type->valuestring, "enabled")) {
    const cJSON *b = get(th, "budget_tokens");
    if (!cJSON_IsNumber(b) || b->valuedouble != floor(b->valuedouble) || b->valuedouble < 1 ||
        (max_tokens >= 0 && b->valuedouble >= (double)max_tokens) || b->valuedouble > 1e15)
      return bad(e, "thinking.budget_tokens", "must be an integer >= 1 and less than max_tokens");
    if (!ctx->reasoning_model) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "thinking",
                       "thinking: 'enabled' is not supported: the model has no reasoning (its chat template opens "
                       "no think block)");
      return false;
    }
    double n = b->valuedouble < API_REASONING_MAX ? b->valuedouble : API_REASONING_MAX;
    cJSON_AddNumberToObject(chat, "max_reasoning_tokens", n);
    return true;
  }
  if (!strcmp(type->valuestring, "disabled")) {
    if (ctx->reasoning_model)
      cJSON_AddNumberToObject(chat, "max_reasoning_tokens", 0);
    return true;
  }
  if (strcmp(type->valuestring, "adaptive"))
    return bad(e, "thinking.type", "must be enabled, disabled or adaptive");
  return true;
}

/* Fields of Anthropic's platform that qvl does not have: 400 naming them ([]/{}/false harmless). */
static const char *const refused[][2] = {
    {"mcp_servers", "qvl connects to no MCP servers; send the tools as client tools"},
    {"container", "qvl has no code-execution containers"},
    {"context_management", "the context policy is qvl's own (context_policy)"},
};

/* Fields passed to the chat body as they are (sampling, qvl extensions). */
static const char *const passed[] = {"temperature", "top_p", "top_k", "min_p", "seed", "min_pixels", "max_pixels",
                                     "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "boxes"};

static msgs_state *new_state(const compat_ctx *ctx, compat_request *out, api_error *e) {
  msgs_state *st = compat_request_start(out, &messages_format, sizeof *st, e);
  if (!st)
    return NULL;
  api_random_id("", st->hex, sizeof st->hex);
  snprintf(st->id, sizeof st->id, "msg_%s", st->hex);
  snprintf(out->id, sizeof out->id, "%s", st->id);
  snprintf(st->model, sizeof st->model, "%s", ctx->model_id ? ctx->model_id : "qvl");
  return st;
}

static bool translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e,
                      bool count) {
  msgs_state *st = new_state(ctx, out, e);
  if (!st)
    return false;
  st->count = count;
  out->count_only = count;
  cJSON *root = compat_parse_body(body, len, e);
  if (!root)
    return false;
  cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(chat, "messages");
  bool ok = false;
  if (!compat_refuse_fields(root, refused, sizeof refused / sizeof refused[0], e))
    goto done;
  const cJSON *model = get(root, "model");
  if (!present(model) && !count) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "model", "model: Field required");
    goto done;
  }
  compat_copy_field(chat, "model", root, "model");
  if (cJSON_IsString(model))
    snprintf(st->model, sizeof st->model, "%s", model->valuestring);

  int64_t max_tokens = 1; /* count_tokens generates nothing; the engine counts and stops */
  const cJSON *mt = get(root, "max_tokens");
  if (!count || present(mt)) {
    if (!present(mt)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "max_tokens",
                       "max_tokens: Field required");
      goto done;
    }
    if (!cJSON_IsNumber(mt) || mt->valuedouble != floor(mt->valuedouble) || mt->valuedouble < 1 ||
        mt->valuedouble > 1e15) {
      bad(e, "max_tokens", "must be an integer >= 1");
      goto done;
    }
    max_tokens = (int64_t)mt->valuedouble;
  }
  cJSON_AddNumberToObject(chat, "max_tokens", count ? 1 : (double)max_tokens);
  if (!check_thinking(root, ctx, count && !present(mt) ? -1 : max_tokens, chat, e))
    goto done;

  const cJSON *stream = get(root, "stream");
  if (present(stream) && !cJSON_IsBool(stream)) {
    bad(e, "stream", "'stream' must be a boolean");
    goto done;
  }
  cJSON_AddBoolToObject(chat, "stream", !count && cJSON_IsTrue(stream));

  const cJSON *meta = get(root, "metadata");
  if (present(meta) && !cJSON_IsObject(meta)) {
    bad(e, "metadata", "'metadata' must be an object");
    goto done;
  }
  const cJSON *stops = get(root, "stop_sequences");
  if (present(stops)) {
    if (!cJSON_IsArray(stops)) {
      bad(e, "stop_sequences", "'stop_sequences' must be an array of strings");
      goto done;
    }
    if (cJSON_GetArraySize(stops) > API_MAX_STOP) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "stop_sequences",
                       "stop_sequences: %d strings; at most %d", cJSON_GetArraySize(stops), API_MAX_STOP);
      goto done;
    }
    for (const cJSON *s = stops->child; s; s = s->next) {
      if (!cJSON_IsString(s) || !s->valuestring[0]) {
        bad(e, "stop_sequences", "each stop sequence must be a non-empty string");
        goto done;
      }
      if (!(st->stops[st->n_stops] = strdup(s->valuestring))) {
        api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
        goto done;
      }
      st->n_stops++;
    }
    if (stops->child)
      compat_copy_field(chat, "stop", root, "stop_sequences");
  }
  for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
    compat_copy_field(chat, passed[i], root, passed[i]);
  if (!translate_system(root, msgs, e) || !translate_messages(root, msgs, e) || !translate_tools(root, chat, e))
    goto done;
  st->hold_tools = compat_tools_callable(chat);
  ok = true;
done:
  return compat_finish(root, chat, ok, out, e);
}

bool messages_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e) {
  return translate(body, len, ctx, out, e, false);
}

bool messages_count_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out,
                              api_error *e) {
  return translate(body, len, ctx, out, e, true);
}

/* ---- the message object ---------------------------------------------------------------------- */

/* The arguments text of a call as the tool_use input: the model's JSON as written, embedded raw
 * (json_raw.h: no number goes through a double; whitespace between tokens dropped), or {} when it
 * is not an object (the chat path only makes calls whose arguments parse). */
static cJSON *tool_input(const char *args) {
  cJSON *raw = json_raw_value(args, strlen(args), true);
  return raw ? raw : cJSON_CreateObject();
}

static void tool_use_id(const msgs_state *st, int i, char *out, size_t cap) {
  snprintf(out, cap, "toolu_%.32s_%d", st->hex, i);
}

/* A call of the chat's choice ({id, type, function: {name, arguments}}) as a tool_use block; input
 * {} while streaming (the input then follows as input_json_delta events). */
static cJSON *tool_block(const msgs_state *st, int i, const cJSON *call, bool with_input) {
  const cJSON *f = get(call, "function"), *name = get(f, "name"), *args = get(f, "arguments");
  char id[64];
  tool_use_id(st, i, id, sizeof id);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "tool_use");
  cJSON_AddStringToObject(b, "id", id);
  cJSON_AddStringToObject(b, "name", cJSON_IsString(name) ? name->valuestring : "");
  cJSON_AddItemToObject(b, "input", with_input && cJSON_IsString(args) ? tool_input(args->valuestring)
                                                                       : cJSON_CreateObject());
  return b;
}

/* The reasoning as a thinking block. qvl signs nothing: the signature is always "" (a client that
 * sends the block back has it dropped from the prompt, signed or not). */
static cJSON *thinking_block(const char *text, size_t len) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "thinking");
  cJSON_AddItemToObject(b, "thinking", api_text_json(text, len));
  cJSON_AddStringToObject(b, "signature", "");
  return b;
}

static cJSON *text_block(const char *text, size_t len) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "text");
  cJSON_AddItemToObject(b, "text", api_text_json(text, len));
  return b;
}

/* stop_reason and (for stop_sequence) the sequence. */
static const char *why_stopped(const msgs_state *st, const api_result *r, const cJSON *choice, const char **seq) {
  *seq = NULL;
  if (r->finish_reason == QVL_FINISH_LENGTH)
    return "max_tokens";
  if (compat_choice_tool_calls(choice))
    return "tool_use";
  if (r->stop_match > 0 && r->stop_match <= st->n_stops) {
    *seq = st->stops[r->stop_match - 1];
    return "stop_sequence";
  }
  return "end_turn";
}

static cJSON *usage(const api_result *r) {
  cJSON *u = cJSON_CreateObject();
  int64_t cached = r ? r->cached_prompt_tokens : 0;
  cJSON_AddNumberToObject(u, "input_tokens", r ? (double)(r->prompt_tokens - cached) : 0);
  cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
  cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)cached);
  cJSON_AddNumberToObject(u, "output_tokens", r ? (double)r->completion_tokens : 0);
  return u;
}

/* The message; r and choice NULL: the empty one of message_start. */
static cJSON *message_object(const msgs_state *st, const api_result *r, const cJSON *choice) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", st->id);
  cJSON_AddStringToObject(o, "type", "message");
  cJSON_AddStringToObject(o, "role", "assistant");
  cJSON_AddStringToObject(o, "model", st->model);
  cJSON *content = cJSON_AddArrayToObject(o, "content");
  if (r && choice) {
    const cJSON *calls = compat_choice_tool_calls(choice);
    const char *text = compat_choice_content(choice);
    if (r->reasoning.len) /* the reasoning comes first, as Anthropic's thinking block does */
      cJSON_AddItemToArray(content, thinking_block(r->reasoning.data, r->reasoning.len));
    if (!calls || text[0])
      cJSON_AddItemToArray(content, text_block(text, strlen(text)));
    int i = 0;
    for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next, i++)
      cJSON_AddItemToArray(content, tool_block(st, i, c, true));
    const char *seq;
    cJSON_AddStringToObject(o, "stop_reason", why_stopped(st, r, choice, &seq));
    if (seq)
      cJSON_AddStringToObject(o, "stop_sequence", seq);
    else
      cJSON_AddNullToObject(o, "stop_sequence");
  } else {
    cJSON_AddNullToObject(o, "stop_reason");
    cJSON_AddNullToObject(o, "stop_sequence");
  }
  cJSON_AddItemToObject(o, "usage", usage(r));
  const cJSON *boxes = get(get(choice, "message"), "boxes");
  if (boxes) /* qvl's extension (boxes.h) */
    cJSON_AddItemToObject(o, "boxes", cJSON_Duplicate(boxes, true));
  return o;
}

static char *result_json(void *state, const api_result *r) {
  msgs_state *st = state;
  if (st->count) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", (double)r->prompt_tokens);
    return json_print_take(o);
  }
  cJSON *choice = compat_chat_choice(r);
  char *s = json_print_take(message_object(st, r, choice));
  cJSON_Delete(choice);
  return s;
}

/* ---- streaming ------------------------------------------------------------------------------- */

/* Appends "event: TYPE\ndata: {"type":TYPE,...}\n\n"; takes o (its fields follow the type). */
static void emit(buf *out, const char *type, cJSON *o) {
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", type);
  cJSON *f;
  while (o && (f = o->child)) {
    cJSON_DetachItemViaPointer(o, f);
    cJSON_AddItemToObject(ev, f->string, f); /* the key is copied, f keeps its own */
  }
  cJSON_Delete(o);
  char *s = json_print_take(ev);
  if (!s)
    return;
  sse_append_event(out, type, s);
  free(s);
}

static void stream_open(msgs_state *st, buf *out) {
  if (st->started)
    return;
  st->started = true;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "message", message_object(st, NULL, NULL));
  emit(out, "message_start", o);
}

static void block_stop(msgs_state *st, buf *out) {
  if (st->open == BLOCK_NONE)
    return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", st->next_block++);
  emit(out, "content_block_stop", o);
  st->open = BLOCK_NONE;
}

/* Opens a block (closing the open one); takes the content_block. The first block is followed by a
 * ping, as Anthropic sends one. */
static void block_start(msgs_state *st, buf *out, int kind, cJSON *content_block) {
  block_stop(st, out);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", st->next_block);
  cJSON_AddItemToObject(o, "content_block", content_block);
  emit(out, "content_block_start", o);
  st->open = kind;
  if (!st->pinged) {
    st->pinged = true;
    emit(out, "ping", NULL);
  }
}

/* A content_block_delta of the open block; takes delta. */
static void block_delta(msgs_state *st, buf *out, cJSON *delta) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", st->next_block);
  cJSON_AddItemToObject(o, "delta", delta);
  emit(out, "content_block_delta", o);
}

/* Ends the thinking block when it is open: its signature_delta ("", see thinking_block), then
 * content_block_stop. */
static void thinking_stop(msgs_state *st, buf *out) {
  if (st->open != BLOCK_THINKING)
    return;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "type", "signature_delta");
  cJSON_AddStringToObject(d, "signature", "");
  block_delta(st, out, d);
  block_stop(st, out);
}

/* Appends text to the text or thinking block (opening it first): kept in sent or thinking, sent as
 * a text_delta or thinking_delta. */
static void block_append(msgs_state *st, buf *out, int kind, const char *text, size_t len) {
  bool thinking = kind == BLOCK_THINKING;
  if (st->open != kind)
    block_start(st, out, kind, thinking ? thinking_block("", 0) : text_block("", 0));
  buf_append(thinking ? &st->thinking : &st->sent, text, len);
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "type", thinking ? "thinking_delta" : "text_delta");
  cJSON_AddItemToObject(d, thinking ? "thinking" : "text", api_text_json(text, len));
  block_delta(st, out, d);
}

/* A piece of reasoning: the thinking block (opened by the first piece, always block 0, as all the
 * reasoning comes before the answer) gets a thinking_delta. */
static void stream_reasoning(void *state, buf *out, const char *text, size_t len) {
  msgs_state *st = state;
  stream_open(st, out);
  if (!len || (st->open != BLOCK_THINKING && st->next_block > 0))
    return; /* (never: reasoning after the answer began) */
  block_append(st, out, BLOCK_THINKING, text, len);
}

static void text_delta(msgs_state *st, buf *out, const char *text, size_t len) {
  if (!len)
    return;
  thinking_stop(st, out);
  block_append(st, out, BLOCK_TEXT, text, len);
}

static void stream_text(void *state, buf *out, const char *text, size_t len) {
  msgs_state *st = state;
  stream_open(st, out);
  if (st->hold_tools)
    compat_hold_push(&st->hold, text, len, &text, &len);
  text_delta(st, out, text, len);
}

#define ARG_DELTA 32 /* argument bytes per input_json_delta */

static void stream_call(msgs_state *st, buf *out, int i, const cJSON *call) {
  block_start(st, out, BLOCK_TOOL, tool_block(st, i, call, false));
  const cJSON *args = get(get(call, "function"), "arguments");
  cJSON *input = tool_input(cJSON_IsString(args) ? args->valuestring : "{}"); /* what the message's input is */
  const char *a = cJSON_IsRaw(input) ? input->valuestring : "{}";
  size_t al = strlen(a);
  for (size_t pos = 0; pos < al;) { /* fragments cut on UTF-8 character boundaries */
    size_t take = utf8_piece_len(a + pos, al - pos, ARG_DELTA);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", "input_json_delta");
    cJSON_AddItemToObject(d, "partial_json", api_text_json(a + pos, take));
    block_delta(st, out, d);
    pos += take;
  }
  cJSON_Delete(input);
  block_stop(st, out);
}

static void stream_end(void *state, buf *out, const api_result *r) {
  msgs_state *st = state;
  stream_open(st, out);
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    cJSON *o = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "type", messages_error_type(e.http));
    cJSON_AddStringToObject(err, "message", e.message);
    emit(out, "error", o);
    return;
  }
  if (r->reasoning.len) { /* reasoning not streamed piece by piece (yet): the rest of it */
    const char *more = compat_unsent(r->reasoning.data, &st->thinking);
    stream_reasoning(st, out, more, strlen(more));
  }
  thinking_stop(st, out);
  cJSON *choice = compat_chat_choice(r);
  const cJSON *calls = compat_choice_tool_calls(choice);
  const char *text = compat_choice_content(choice);
  const char *rest = compat_unsent(text, &st->sent); /* what the hold kept back */
  text_delta(st, out, rest, strlen(rest));
  if (!calls && !st->sent.len) /* an answer without calls always has its text block, empty or not */
    block_start(st, out, BLOCK_TEXT, text_block("", 0));
  block_stop(st, out);
  int i = 0;
  for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next, i++)
    stream_call(st, out, i, c);
  const char *seq;
  const char *why = why_stopped(st, r, choice, &seq);
  cJSON *o = cJSON_CreateObject();
  cJSON *d = cJSON_AddObjectToObject(o, "delta");
  cJSON_AddStringToObject(d, "stop_reason", why);
  if (seq)
    cJSON_AddStringToObject(d, "stop_sequence", seq);
  else
    cJSON_AddNullToObject(d, "stop_sequence");
  cJSON_AddItemToObject(o, "usage", usage(r));
  const cJSON *boxes = get(get(choice, "message"), "boxes");
  if (boxes)
    cJSON_AddItemToObject(o, "boxes", cJSON_Duplicate(boxes, true));
  emit(out, "message_delta", o);
  emit(out, "message_stop", NULL);
  cJSON_Delete(choice);
}

const compat_format messages_format = {
    .stream_content_type = "text/event-stream",
    .result_json = result_json,
    .error_json = error_json,
    .error_http = messages_error_http,
    .stream_text = stream_text,
    .stream_reasoning = stream_reasoning,
    .stream_end = stream_end,
    .free_state = state_free,
};
