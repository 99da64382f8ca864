/* OpenAI's Responses API translated to and from the chat path (see responses.h). */
#include "server/dialects/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/finish.h"
#include "base/timing.h"
#include "engine/model_sampling.h"
#include "server/dialects/responses_store.h"
#include "server/openai/sse.h"
#include "text/unicode.h"

/* ---- the formatter's state ------------------------------------------------------------------- */

typedef struct resp_state {
  char id[RESP_STORE_ID_CAP];      /* resp_<hex> */
  char msg_id[RESP_STORE_ID_CAP];  /* msg_<same hex>: an item_reference to it finds this response */
  char model[128];
  int64_t created;
  cJSON *echo;          /* the request settings a response object repeats (instructions, ...) */
  cJSON *conv;          /* the conversation without instructions, stored with the answer; NULL: store false */
  resp_store *store;
  resp_media *media;    /* the images of the stored conversation it continues (NULL: none) */
  char hex[48];         /* the random part of the ids; function call items are fc_<hex>_<i> */
  int64_t seq;          /* sequence_number of the next stream event */
  bool started;         /* the opening events are out */
  bool msg_open;        /* the message item's opening events are out */
  bool hold_tools;      /* tools may be called: text that may begin a call is held (compat_hold) */
  compat_hold hold;
  buf text;             /* streamed text so far */
  bool reasoning_model; /* reasoning streams as a reasoning item before the message */
  bool rs_open, rs_done; /* the reasoning item's opening / closing events are out */
  buf reasoning;        /* streamed reasoning so far */
  float temperature, top_p; /* what a request without them samples with (the model's defaults) */
  int64_t max_tool_calls; /* at most this many function_call items (-1: no cap) */
} resp_state;

/* The shortest decimal that reads back as f, as a double ("0.7" for 0.7f, not 0.699999988). */
static double float_decimal(float f) {
  char s[32];
  for (int prec = 1; prec < 9; prec++) {
    snprintf(s, sizeof s, "%.*g", prec, (double)f);
    if ((float)strtod(s, NULL) == f)
      return strtod(s, NULL);
  }
  return (double)f;
}

static void state_free(void *p) {
  resp_state *st = p;
  if (!st)
    return;
  cJSON_Delete(st->echo);
  cJSON_Delete(st->conv);
  resp_media_unref(st->media);
  compat_hold_free(&st->hold);
  buf_free(&st->text);
  buf_free(&st->reasoning);
  free(st);
}

/* ---- request translation --------------------------------------------------------------------- */

static bool bad(api_error *e, const char *param, const char *code, const char *msg) {
  api_error_status(e, QVL_ERR_INVALID_ARG, code, param, "%s: %s", param, msg);
  return false;
}

/* root[name] as a whole number in [lo, hi] into *out (left as it is when absent or null); false with
 * e filled (msg) when it is anything else. */
static bool get_whole(const cJSON *root, const char *name, double lo, double hi, const char *msg, int64_t *out,
                      api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  if (!j || cJSON_IsNull(j))
    return true;
  if (!cJSON_IsNumber(j) || j->valuedouble < lo || j->valuedouble > hi || j->valuedouble != (double)(int64_t)j->valuedouble)
    return bad(e, name, "invalid_value", msg);
  *out = (int64_t)j->valuedouble;
  return true;
}

/* An output item of a stored response as a chat message: "msg_<hex>" is its message (the text),
 * "fc_<hex>_<i>" its i-th function call (an assistant message with only that call); NULL when the
 * response is not stored (any more). */
static cJSON *referenced_item(const compat_ctx *ctx, const char *id) {
  const char *hex = NULL, *end = NULL;
  long call = -1;
  if (!strncmp(id, "msg_", 4)) {
    hex = id + 4;
    end = hex + strlen(hex);
  } else if (!strncmp(id, "fc_", 3)) {
    hex = id + 3;
    end = strrchr(hex, '_');
    char *tail = NULL;
    call = end && end[1] >= '0' && end[1] <= '9' ? strtol(end + 1, &tail, 10) : -1;
    if (call < 0 || *tail)
      return NULL;
  }
  if (!ctx->responses || !hex || end == hex || end - hex > 40)
    return NULL;
  char rid[RESP_STORE_ID_CAP];
  snprintf(rid, sizeof rid, "resp_%.*s", (int)(end - hex), hex);
  char *json = resp_store_get(ctx->responses, rid, time_now_s());
  cJSON *conv = json ? cJSON_Parse(json) : NULL;
  free(json);
  cJSON *last = conv ? cJSON_DetachItemFromArray(conv, cJSON_GetArraySize(conv) - 1) : NULL;
  cJSON_Delete(conv);
  if (!last)
    return NULL;
  cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(last, "tool_calls");
  if (call < 0) {
    cJSON_Delete(calls);
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(last, "content")))
      cJSON_ReplaceItemInObjectCaseSensitive(last, "content", cJSON_CreateString(""));
    return last;
  }
  cJSON_Delete(last);
  cJSON *c = cJSON_IsArray(calls) ? cJSON_DetachItemFromArray(calls, (int)call) : NULL;
  cJSON_Delete(calls);
  if (!c)
    return NULL;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON_AddNullToObject(m, "content");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(m, "tool_calls"), c);
  return m;
}

/* Adds m to msgs; an assistant message that only carries tool calls joins the assistant message
 * right before it (a message item and its function_call items are one turn of the model). */
static void add_message(cJSON *msgs, cJSON *m) {
  cJSON *last = msgs->child;
  while (last && last->next)
    last = last->next;
  const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
  bool calls_only = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "content")) &&
                    cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
  if (!calls_only || !cJSON_IsString(role) || strcmp(role->valuestring, "assistant")) {
    cJSON_AddItemToArray(msgs, m);
    return;
  }
  cJSON *to = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
  if (!cJSON_IsArray(to)) {
    cJSON_DeleteItemFromObjectCaseSensitive(last, "tool_calls");
    to = cJSON_AddArrayToObject(last, "tool_calls");
  }
  cJSON *from = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
  while ((c = cJSON_DetachItemFromArray(from, 0)))
    cJSON_AddItemToArray(to, c);
  cJSON_Delete(m);
}

/* Whether an assistant message of msgs made the tool call with this id. */
static bool has_call(const cJSON *msgs, const char *id) {
  for (const cJSON *m = msgs ? msgs->child : NULL; m; m = m->next) {
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    for (const cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c; c = c->next) {
      const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
      if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id))
        return true;
    }
  }
  return false;
}

/* One content part of a message item -> a chat content part (NULL + e on failure). */
static cJSON *translate_part(const cJSON *p, const char *param, api_error *e) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
  if (!cJSON_IsObject(p) || !cJSON_IsString(type)) {
    bad(e, param, "invalid_type", "a content part must be an object with a 'type'");
    return NULL;
  }
  const char *t = type->valuestring;
  if (!strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text") || !strcmp(t, "refusal")) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, !strcmp(t, "refusal") ? "refusal" : "text");
    if (!cJSON_IsString(text)) {
      bad(e, param, "invalid_type", "a text part needs 'text' as a string");
      return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "text");
    cJSON_AddStringToObject(o, "text", text->valuestring);
    return o;
  }
  const char *url = NULL;
  if (!strcmp(t, "input_image")) {
    const cJSON *fid = cJSON_GetObjectItemCaseSensitive(p, "file_id");
    if (fid && !cJSON_IsNull(fid)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param,
                    "%s: 'file_id' (files API) is not supported; send the image as image_url (a data: URL)", param);
      return NULL;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(p, "image_url");
    if (cJSON_IsObject(u)) /* tolerate the chat shape {"url": ...} */
      u = cJSON_GetObjectItemCaseSensitive(u, "url");
    if (!cJSON_IsString(u) || !u->valuestring[0]) {
      bad(e, param, "invalid_type", "an input_image part needs 'image_url' as a data: URL or an http(s) URL string");
      return NULL;
    }
    url = u->valuestring;
  } else if (!strcmp(t, "input_video")) {
    /* the input_image shape with video_url (issue 23): a data: URL or an allow-listed http(s) URL */
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(p, "video_url");
    if (cJSON_IsObject(u))
      u = cJSON_GetObjectItemCaseSensitive(u, "url");
    if (!cJSON_IsString(u) || !u->valuestring[0]) {
      bad(e, param, "invalid_type", "an input_video part needs 'video_url' as a data: URL or an http(s) URL string");
      return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "video_url");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "video_url"), "url", u->valuestring);
    return o;
  } else if (!strcmp(t, "input_file")) {
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(p, "file_data");
    if (!cJSON_IsString(fd) || strncmp(fd->valuestring, "data:image/", 11)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param,
                    "%s: input_file is supported only with 'file_data' holding an image data: URL (no files API, "
                    "no PDFs)",
                    param);
      return NULL;
    }
    url = fd->valuestring;
  } else {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                  "%s: unsupported content part type '%s' (supported: input_text, input_image, input_video, output_text, "
                  "input_file with image data)",
                  param, t);
    return NULL;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "image_url");
  cJSON *iu = cJSON_AddObjectToObject(o, "image_url");
  cJSON_AddStringToObject(iu, "url", url);
  return o;
}

/* The content of a function_call_output: its output string, or a list of input_text / input_image
 * parts (the tool message's content). NULL + e when malformed. */
static cJSON *tool_output(const cJSON *output, const char *param, api_error *e) {
  if (cJSON_IsString(output))
    return cJSON_CreateString(output->valuestring);
  if (!cJSON_IsArray(output)) {
    bad(e, param, "invalid_type", "a function_call_output needs 'output' as a string or an array of content parts");
    return NULL;
  }
  cJSON *parts = cJSON_CreateArray();
  int pi = 0;
  for (const cJSON *p = output->child; p; p = p->next, pi++) {
    char pp[96];
    snprintf(pp, sizeof pp, "%s.output[%d]", param, pi);
    cJSON *cp = translate_part(p, pp, e);
    if (!cp) {
      cJSON_Delete(parts);
      return NULL;
    }
    cJSON_AddItemToArray(parts, cp);
  }
  return parts;
}

/* Appends the chat messages of one input item to msgs; prior: the stored turns before them. */
static bool translate_item(const cJSON *it, int i, const compat_ctx *ctx, const cJSON *prior, cJSON *msgs,
                           api_error *e) {
  char param[64];
  snprintf(param, sizeof param, "input[%d]", i);
  if (!cJSON_IsObject(it))
    return bad(e, param, "invalid_type", "an input item must be an object");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
  const char *t = cJSON_IsString(type) ? type->valuestring : "message";
  if (!strcmp(t, "item_reference")) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    cJSON *m = cJSON_IsString(id) ? referenced_item(ctx, id->valuestring) : NULL;
    if (!m) {
      api_error_status(e, QVL_ERR_NOT_FOUND, "not_found", param,
                       "%s: item '%s' not found (this server keeps only the output messages and function calls of "
                       "stored responses, for %.0f s)",
                    param, cJSON_IsString(id) ? id->valuestring : "?", RESPONSES_STORE_TTL_S);
      return false;
    }
    add_message(msgs, m);
    return true;
  }
  /* An earlier answer's reasoning item, sent back as clients replay output items: with a reasoning
   * model accepted and left out, as the Thinking template leaves earlier turns' reasoning out of the
   * prompt (a model that does not reason made none: refused below). */
  if (!strcmp(t, "reasoning") && ctx->reasoning_model)
    return true;
  if (!strcmp(t, "function_call")) { /* an earlier tool call of the model */
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id"),
                *name = cJSON_GetObjectItemCaseSensitive(it, "name"),
                *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
    if (!cJSON_IsString(cid) || !cid->valuestring[0] || !cJSON_IsString(name) || !name->valuestring[0] ||
        !cJSON_IsString(args))
      return bad(e, param, "invalid_type",
                 "a function_call item needs 'call_id' and 'name' as non-empty strings and 'arguments' as a string");
    cJSON *parsed = cJSON_Parse(args->valuestring);
    bool is_object = cJSON_IsObject(parsed);
    cJSON_Delete(parsed);
    if (!is_object)
      return bad(e, param, "invalid_value", "'arguments' of a function_call must be a JSON object as a string");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddNullToObject(m, "content");
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "id", cid->valuestring);
    cJSON_AddStringToObject(tc, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(tc, "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddStringToObject(f, "arguments", args->valuestring);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(m, "tool_calls"), tc);
    add_message(msgs, m);
    return true;
  }
  if (!strcmp(t, "function_call_output")) {
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
    if (!cJSON_IsString(cid) || !cid->valuestring[0])
      return bad(e, param, "invalid_type", "a function_call_output item needs 'call_id' as a non-empty string");
    if (!has_call(prior, cid->valuestring) && !has_call(msgs, cid->valuestring)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                    "%s: no function call with call_id '%s' before this output (send the function_call item, an "
                    "item_reference to it, or previous_response_id of the response that made it)",
                    param, cid->valuestring);
      return false;
    }
    cJSON *content = tool_output(cJSON_GetObjectItemCaseSensitive(it, "output"), param, e);
    if (!content)
      return false;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", cid->valuestring);
    cJSON_AddItemToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
    return true;
  }
  if (strcmp(t, "message")) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param,
                  "%s: input items of type '%s' are not supported (supported: message, item_reference, function_call, "
                  "function_call_output; reasoning with a reasoning model)",
                  param, t);
    return false;
  }
  const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
  if (!cJSON_IsString(role))
    return bad(e, param, "invalid_type", "a message needs 'role' as a string");
  const char *r = role->valuestring;
  if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
    return bad(e, param, "invalid_value", "'role' must be user, system, developer or assistant");
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
  cJSON *m = cJSON_CreateObject();
  cJSON_AddItemToArray(msgs, m);
  cJSON_AddStringToObject(m, "role", !strcmp(r, "developer") ? "system" : r);
  if (cJSON_IsString(content)) {
    cJSON_AddStringToObject(m, "content", content->valuestring);
    return true;
  }
  if (!cJSON_IsArray(content))
    return bad(e, param, "invalid_type", "'content' must be a string or an array of content parts");
  cJSON *parts = cJSON_AddArrayToObject(m, "content");
  int pi = 0;
  for (const cJSON *p = content->child; p; p = p->next, pi++) {
    char pp[64];
    snprintf(pp, sizeof pp, "input[%d].content[%d]", i, pi);
    cJSON *cp = translate_part(p, pp, e);
    if (!cp)
      return false;
    cJSON_AddItemToArray(parts, cp);
  }
  return true;
}

/* Responses `tools` / `tool_choice` -> the chat's (function tools only). */
static bool translate_tools(const cJSON *root, cJSON *chat, api_error *e) {
  const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
  if (tools && !cJSON_IsNull(tools)) {
    if (!cJSON_IsArray(tools))
      return bad(e, "tools", "invalid_type", "'tools' must be an array");
    cJSON *out = cJSON_CreateArray();
    cJSON_AddItemToObject(chat, "tools", out);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
      const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
      char param[32];
      snprintf(param, sizeof param, "tools[%d]", i);
      if (!cJSON_IsString(type))
        return bad(e, param, "invalid_type", "a tool needs 'type' as a string");
      if (strcmp(type->valuestring, "function")) {
        api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param,
                      "%s: built-in tool '%s' is not supported (only function tools)", param, type->valuestring);
        return false;
      }
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
      if (!cJSON_IsString(name)) {
        snprintf(param, sizeof param, "tools[%d].name", i);
        api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", param,
                      "%s: a function tool needs 'name' (Responses tools are flat: {\"type\": \"function\", "
                      "\"name\", \"parameters\"}, not the chat's nested \"function\" object)",
                      param);
        return false;
      }
      if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
        snprintf(param, sizeof param, "tools[%d].parameters", i);
        return bad(e, param, "invalid_type", "'parameters' must be a JSON schema object");
      }
      cJSON_AddItemToArray(out, compat_function_tool(t, "parameters", true));
    }
    if (!out->child) /* [] means no tools */
      cJSON_DeleteItemFromObjectCaseSensitive(chat, "tools");
  }
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
  if (cJSON_IsString(tc)) {
    compat_copy_field(chat, "tool_choice", root, "tool_choice");
  } else if (cJSON_IsObject(tc)) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type"), *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "tool_choice",
                    "'tool_choice' must be auto, none, required or {\"type\":\"function\",\"name\":...}");
      return false;
    }
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
  }
  return true;
}

/* `text.format` -> the chat's response_format. */
static bool translate_text(const cJSON *root, cJSON *chat, api_error *e) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
  if (!text || cJSON_IsNull(text))
    return true;
  if (!cJSON_IsObject(text))
    return bad(e, "text", "invalid_type", "'text' must be an object");
  const cJSON *verb = cJSON_GetObjectItemCaseSensitive(text, "verbosity");
  if (verb && !cJSON_IsNull(verb)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "text.verbosity",
                  "'text.verbosity' is not supported");
    return false;
  }
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(text, "format");
  if (!f || cJSON_IsNull(f))
    return true;
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
  if (!cJSON_IsObject(f) || !cJSON_IsString(type))
    return bad(e, "text.format", "invalid_type", "'text.format' must be an object with a 'type'");
  if (!strcmp(type->valuestring, "text"))
    return true;
  /* Responses keeps flat what the chat nests: a chat-shaped format would be accepted and silently
   * not enforced, so every key must be one this shape has */
  static const char *const keys[] = {"type", "name", "description", "schema", "strict"};
  for (const cJSON *k = f->child; k; k = k->next) {
    bool known = false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
      known |= !strcmp(k->string, keys[i]);
    if (!known) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "text.format",
                       "'text.format' has an unsupported key '%s': the Responses API takes the schema flat, "
                       "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}, \"strict\": ...}, not the chat's "
                       "nested {\"type\": \"json_schema\", \"json_schema\": {...}}",
                       k->string);
      return false;
    }
  }
  cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
  cJSON_AddStringToObject(rf, "type", type->valuestring);
  if (!strcmp(type->valuestring, "json_schema")) { /* the chat nests what Responses keeps flat */
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    compat_copy_field(js, "name", f, "name");
    compat_copy_field(js, "description", f, "description");
    compat_copy_field(js, "schema", f, "schema");
    compat_copy_field(js, "strict", f, "strict");
  }
  return true;
}

/* Fields of OpenAI's platform qvl does not have: 400 naming them (false/[]/{} are harmless). */
static const char *const refused[][2] = {
    {"background", "responses run in the foreground only"},
    {"conversation", "use previous_response_id"},
    {"prompt", "no stored prompt templates"},
    {"prompt_cache_options", "the prefix cache is automatic"},
    {"prompt_cache_retention", "the prefix cache is automatic"},
};

/* Fields passed to the chat body as they are (sampling, qvl extensions). */
static const char *const passed[] = {"temperature", "top_p",  "top_k", "min_p", "presence_penalty", "frequency_penalty",
                                     "repetition_penalty", "seed", "stop", "min_pixels", "max_pixels", "logit_bias",
                                     "parallel_tool_calls", "history", "video", "mm_processor_kwargs",
                                     "media_io_kwargs", "max_reasoning_tokens", "boxes"};

/* `include` (only the output text's logprobs exist here) and `top_logprobs` -> the chat's logprobs. */
static bool translate_logprobs(const cJSON *root, cJSON *chat, api_error *e) {
  bool want = false;
  const cJSON *inc = cJSON_GetObjectItemCaseSensitive(root, "include");
  if (inc && !cJSON_IsNull(inc)) {
    if (!cJSON_IsArray(inc))
      return bad(e, "include", "invalid_type", "'include' must be an array of strings");
    for (const cJSON *x = inc->child; x; x = x->next) {
      if (!cJSON_IsString(x) || strcmp(x->valuestring, "message.output_text.logprobs")) {
        api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "include",
                      "'include' value '%s' is not supported (only \"message.output_text.logprobs\")",
                      cJSON_IsString(x) ? x->valuestring : "?");
        return false;
      }
      want = true;
    }
  }
  const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
  if (top && !cJSON_IsNull(top)) {
    if (!cJSON_IsNumber(top) || top->valuedouble != (double)(int)top->valuedouble || top->valuedouble < 0 ||
        top->valuedouble > ENGINE_MAX_TOP_LOGPROBS) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "top_logprobs",
                       "top_logprobs: 'top_logprobs' must be an integer in [0, %d]", ENGINE_MAX_TOP_LOGPROBS);
      return false;
    }
    want |= top->valuedouble > 0;
    if (want)
      compat_copy_field(chat, "top_logprobs", root, "top_logprobs");
  }
  if (want)
    cJSON_AddBoolToObject(chat, "logprobs", true);
  return true;
}

bool responses_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e) {
  resp_state *st = compat_request_start(out, &responses_format, sizeof *st, e);
  if (!st)
    return false;
  char hex[48];
  api_random_id("", hex, sizeof hex);
  snprintf(st->id, sizeof st->id, "resp_%s", hex);
  snprintf(st->msg_id, sizeof st->msg_id, "msg_%s", hex);
  snprintf(st->hex, sizeof st->hex, "%s", hex);
  snprintf(out->id, sizeof out->id, "resp_%.40s", hex);
  snprintf(st->model, sizeof st->model, "%s", ctx->model_id ? ctx->model_id : "qvl");
  st->created = ctx->created;
  const sampler_params def = ctx->sampling ? *ctx->sampling : model_sampling_qwen3vl();
  st->temperature = def.temperature;
  st->top_p = def.top_p;

  cJSON *root = compat_parse_body(body, len, e);
  if (!root)
    return false;
  cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_CreateArray(), *conv = cJSON_CreateArray();
  bool ok = false;
  if (!compat_refuse_fields(root, refused, sizeof refused / sizeof refused[0], e))
    goto done;
  /* reasoning.effort -> the chat's reasoning_effort (a model that does not reason refuses it) */
  const cJSON *rsn = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
  if (!ctx->reasoning_model &&
      !compat_refuse_field(root, "reasoning", true, "the model has no reasoning (its chat template opens no think block)", e))
    goto done;
  if (ctx->reasoning_model && rsn && !cJSON_IsNull(rsn)) {
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(rsn, "effort");
    if (!cJSON_IsObject(rsn)) {
      bad(e, "reasoning", "invalid_type", "'reasoning' must be an object");
      goto done;
    }
    if (effort && !cJSON_IsNull(effort))
      cJSON_AddItemToObject(chat, "reasoning_effort", cJSON_Duplicate(effort, true));
  }
  st->reasoning_model = ctx->reasoning_model;
  const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation");
  if (trunc && !cJSON_IsNull(trunc) && !(cJSON_IsString(trunc) && !strcmp(trunc->valuestring, "disabled"))) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "truncation",
                  "only truncation \"disabled\" is supported (a prompt over the context answers 400; the qvl "
                  "field `history: \"trim\"` drops the oldest turns instead)");
    goto done;
  }

  compat_copy_field(chat, "model", root, "model");
  bool stream = false, store = true; /* OpenAI's default for store is true */
  if (!api_get_bool(root, "stream", NULL, &stream, e) || !api_get_bool(root, "store", NULL, &store, e))
    goto done;
  cJSON_AddBoolToObject(chat, "stream", stream);
  bool storing = store && ctx->responses;

  const cJSON *instr = cJSON_GetObjectItemCaseSensitive(root, "instructions");
  if (instr && !cJSON_IsNull(instr) && !cJSON_IsString(instr)) {
    bad(e, "instructions", "invalid_type", "'instructions' must be a string");
    goto done;
  }
  if (cJSON_IsString(instr) && instr->valuestring[0]) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", instr->valuestring);
    cJSON_AddItemToArray(msgs, m);
  }

  const cJSON *prev = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id");
  if (prev && !cJSON_IsNull(prev)) {
    if (!cJSON_IsString(prev)) {
      bad(e, "previous_response_id", "invalid_type", "'previous_response_id' must be a string");
      goto done;
    }
    char *json = ctx->responses ? resp_store_get_media(ctx->responses, prev->valuestring, time_now_s(), &st->media)
                                : NULL;
    cJSON *old = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!cJSON_IsArray(old)) {
      cJSON_Delete(old);
      api_error_status(e, QVL_ERR_NOT_FOUND, "previous_response_not_found", "previous_response_id",
                    "Previous response with id '%s' not found (responses are kept in memory for %.0f s, at most %d, "
                    "and only with store=true)",
                    prev->valuestring, RESPONSES_STORE_TTL_S, RESPONSES_STORE_ENTRIES);
      goto done;
    }
    cJSON_Delete(conv);
    conv = old;
  }

  const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
  cJSON *turn = cJSON_CreateArray(); /* this request's input as chat messages */
  if (cJSON_IsString(input)) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", input->valuestring);
    cJSON_AddItemToArray(turn, m);
  } else if (cJSON_IsArray(input)) {
    int i = 0;
    for (const cJSON *it = input->child; it; it = it->next, i++)
      if (!translate_item(it, i, ctx, conv, turn, e)) {
        cJSON_Delete(turn);
        goto done;
      }
  } else if (!input || cJSON_IsNull(input)) {
    cJSON_Delete(turn);
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "input", "'input' is required");
    goto done;
  } else {
    cJSON_Delete(turn);
    bad(e, "input", "invalid_type", "'input' must be a string or an array of input items");
    goto done;
  }
  cJSON *m;
  while ((m = cJSON_DetachItemFromArray(turn, 0)))
    cJSON_AddItemToArray(conv, m);
  cJSON_Delete(turn);
  for (const cJSON *c = conv->child; c; c = c->next)
    cJSON_AddItemToArray(msgs, cJSON_Duplicate(c, true));
  cJSON_AddItemToObject(chat, "messages", msgs);
  msgs = NULL;

  int64_t max_output_tokens = 0; /* stays 0 when absent */
  if (!get_whole(root, "max_output_tokens", 1, 1e15, "'max_output_tokens' must be an integer >= 1", &max_output_tokens, e))
    goto done;
  if (max_output_tokens)
    compat_copy_field(chat, "max_tokens", root, "max_output_tokens");
  for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
    compat_copy_field(chat, passed[i], root, passed[i]);
  if (!translate_tools(root, chat, e) || !translate_text(root, chat, e) || !translate_logprobs(root, chat, e))
    goto done;
  /* max_tool_calls: 0 means no calls (tool_choice none), 1 one call (parallel_tool_calls false), N
   * the first N of the model's calls (answer_choice) */
  st->max_tool_calls = -1; /* stays -1 when absent */
  if (!get_whole(root, "max_tool_calls", 0, 1e9, "'max_tool_calls' must be an integer >= 0", &st->max_tool_calls, e))
    goto done;
  if (st->max_tool_calls == 0 && cJSON_GetObjectItemCaseSensitive(chat, "tools")) {
    cJSON_DeleteItemFromObjectCaseSensitive(chat, "tool_choice");
    cJSON_AddStringToObject(chat, "tool_choice", "none");
  } else if (st->max_tool_calls == 1) {
    cJSON_DeleteItemFromObjectCaseSensitive(chat, "parallel_tool_calls");
    cJSON_AddBoolToObject(chat, "parallel_tool_calls", false);
  }
  st->hold_tools = compat_tools_callable(chat);

  /* what the response object repeats of the request */
  st->echo = cJSON_CreateObject();
  static const char *const echoed[] = {"instructions", "max_output_tokens", "max_tool_calls", "previous_response_id", "temperature",
                                       "top_p", "metadata", "user", "tool_choice", "tools", "text", "parallel_tool_calls",
                                       "top_logprobs", "reasoning"};
  for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++)
    compat_copy_field(st->echo, echoed[i], root, echoed[i]);
  cJSON_AddBoolToObject(st->echo, "store", storing);
  if (storing) {
    st->conv = conv;
    st->store = ctx->responses;
    conv = NULL;
    out->keep_media = true;
  }
  if (st->media) {
    out->resolve_media = resp_media_resolve;
    out->resolve_user = st->media;
  }
  ok = true;
done:
  cJSON_Delete(msgs);
  cJSON_Delete(conv);
  return compat_finish(root, chat, ok, out, e);
}

/* ---- the response object --------------------------------------------------------------------- */

static void add_or_default(cJSON *o, const cJSON *echo, const char *name, cJSON *dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(echo, name);
  if (j) {
    cJSON_AddItemToObject(o, name, cJSON_Duplicate(j, true));
    cJSON_Delete(dflt);
  } else {
    cJSON_AddItemToObject(o, name, dflt);
  }
}

/* The logprobs of the output text: the chat's entries ({token, logprob, bytes, top_logprobs}, the
 * shape of OpenAI's output_text.logprobs); with tool calls only those of the tokens that spell the
 * text before them. [] when the request did not ask. */
static cJSON *text_logprobs(const cJSON *choice) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *lp = compat_choice_logprobs(choice);
  bool all = !compat_choice_tool_calls(choice);
  size_t budget = strlen(compat_choice_content(choice)), used = 0;
  for (const cJSON *t = lp ? lp->child : NULL; t; t = t->next) {
    size_t n = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "bytes"));
    if (!all && used + n > budget)
      break;
    used += n;
    cJSON_AddItemToArray(out, cJSON_Duplicate(t, true));
  }
  return out;
}

/* An output_text part; takes logprobs (NULL: []). */
static cJSON *text_part(const char *text, cJSON *logprobs) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "type", "output_text");
  cJSON_AddStringToObject(p, "text", text);
  cJSON_AddArrayToObject(p, "annotations");
  cJSON_AddItemToObject(p, "logprobs", logprobs ? logprobs : cJSON_CreateArray());
  return p;
}

/* The message item; with a part (text and logprobs, taken) or, while in progress, without. */
static cJSON *message_item(const resp_state *st, const char *status, const char *text, cJSON *logprobs,
                           bool with_part) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "id", st->msg_id);
  cJSON_AddStringToObject(m, "type", "message");
  cJSON_AddStringToObject(m, "status", status);
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON *content = cJSON_AddArrayToObject(m, "content");
  if (with_part)
    cJSON_AddItemToArray(content, text_part(text, logprobs));
  else
    cJSON_Delete(logprobs);
  return m;
}

/* The i-th function call of the answer (call: the chat's {id, type, function: {name, arguments}})
 * as a function_call item; the arguments are left empty while it is in progress. */
static void call_item_id(const resp_state *st, int i, char *out, size_t cap) {
  snprintf(out, cap, "fc_%.40s_%d", st->hex, i);
}

static cJSON *call_item(const resp_state *st, int i, const cJSON *call, const char *status) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
  const cJSON *cid = cJSON_GetObjectItemCaseSensitive(call, "id"), *name = cJSON_GetObjectItemCaseSensitive(f, "name"),
              *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
  char id[RESP_STORE_ID_CAP];
  call_item_id(st, i, id, sizeof id);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "type", "function_call");
  cJSON_AddStringToObject(o, "status", status);
  bool done = !strcmp(status, "completed");
  cJSON_AddStringToObject(o, "arguments", done && cJSON_IsString(args) ? args->valuestring : "");
  cJSON_AddStringToObject(o, "call_id", cJSON_IsString(cid) ? cid->valuestring : "");
  cJSON_AddStringToObject(o, "name", cJSON_IsString(name) ? name->valuestring : "");
  return o;
}

/* The Responses API's words for a finish: "incomplete" (reason max_output_tokens) at the length
 * limit, else "completed" (failures have their own status, "failed"). */
static bool cut_short(const api_result *r) {
  const char *status = r ? finish_responses(r->finish_reason) : NULL;
  return status && !strcmp(status, "incomplete");
}

/* status: "in_progress", "completed", "incomplete", "failed". r: NULL while in progress. */
/* The output items of a finished answer: the message with the text (left out when the model only
 * called tools), then a function_call item per call. */
static cJSON *reasoning_part(const char *text, size_t len) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "type", "reasoning_text");
  cJSON_AddItemToObject(p, "text", api_text_json(text, len));
  return p;
}

static void reasoning_item_id(const resp_state *st, char *out, size_t cap) { snprintf(out, cap, "rs_%.40s", st->hex); }

/* The reasoning item: the model's reasoning as one reasoning_text part (no summary is made). */
static cJSON *reasoning_item(const resp_state *st, const char *status, const char *text, size_t len, bool with_part) {
  char id[RESP_STORE_ID_CAP];
  reasoning_item_id(st, id, sizeof id);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "type", "reasoning");
  cJSON_AddArrayToObject(o, "summary");
  cJSON *content = cJSON_AddArrayToObject(o, "content");
  if (with_part)
    cJSON_AddItemToArray(content, reasoning_part(text, len));
  cJSON_AddStringToObject(o, "status", status);
  return o;
}

static void add_output(cJSON *output, const resp_state *st, const cJSON *choice, bool cut, const api_result *r) {
  if (r->reasoning.len)
    cJSON_AddItemToArray(output, reasoning_item(st, "completed", r->reasoning.data, r->reasoning.len, true));
  const cJSON *calls = compat_choice_tool_calls(choice);
  const char *text = compat_choice_content(choice);
  if (!calls || text[0])
    cJSON_AddItemToArray(output, message_item(st, cut ? "incomplete" : "completed", text, text_logprobs(choice), true));
  int i = 0;
  for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next, i++)
    cJSON_AddItemToArray(output, call_item(st, i, c, "completed"));
}

/* The chat's view of the answer (compat_chat_choice) with at most max_tool_calls calls. */
static cJSON *answer_choice(const resp_state *st, const api_result *r) {
  cJSON *choice = compat_chat_choice(r);
  cJSON *calls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "message"), "tool_calls");
  while (st->max_tool_calls >= 0 && cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > st->max_tool_calls)
    cJSON_DeleteItemFromArray(calls, cJSON_GetArraySize(calls) - 1);
  if (cJSON_IsArray(calls) && !calls->child) /* none left: content as the chat says it without calls */
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "message"), "tool_calls");
  return choice;
}

/* choice: the chat's view of the answer (answer_choice); NULL while in progress or failed. */
static cJSON *response_object(const resp_state *st, const char *status, const api_result *r, const api_error *err,
                              const cJSON *choice) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", st->id);
  cJSON_AddStringToObject(o, "object", "response");
  cJSON_AddNumberToObject(o, "created_at", (double)st->created);
  cJSON_AddStringToObject(o, "status", status);
  if (err) {
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", err->code ? err->code : "server_error");
    cJSON_AddStringToObject(e, "message", err->message);
  } else {
    cJSON_AddNullToObject(o, "error");
  }
  if (cut_short(r) && !err)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
  else
    cJSON_AddNullToObject(o, "incomplete_details");
  const cJSON *echo = st->echo;
  add_or_default(o, echo, "instructions", cJSON_CreateNull());
  add_or_default(o, echo, "max_output_tokens", cJSON_CreateNull());
  add_or_default(o, echo, "max_tool_calls", cJSON_CreateNull());
  cJSON_AddStringToObject(o, "model", st->model);
  cJSON *output = cJSON_AddArrayToObject(o, "output");
  if (r && !err && choice)
    add_output(output, st, choice, cut_short(r), r);
  const cJSON *boxes = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "message"), "boxes");
  if (r && !err && boxes) /* qvl's extension (boxes.h) */
    cJSON_AddItemToObject(o, "boxes", cJSON_Duplicate(boxes, true));
  add_or_default(o, echo, "parallel_tool_calls", cJSON_CreateTrue());
  add_or_default(o, echo, "previous_response_id", cJSON_CreateNull());
  const cJSON *asked = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(echo, "reasoning"), "effort");
  cJSON *reasoning = cJSON_AddObjectToObject(o, "reasoning");
  cJSON_AddItemToObject(reasoning, "effort", cJSON_IsString(asked) ? cJSON_CreateString(asked->valuestring) : cJSON_CreateNull());
  cJSON_AddNullToObject(reasoning, "summary");
  add_or_default(o, echo, "store", cJSON_CreateFalse());
  add_or_default(o, echo, "temperature", cJSON_CreateNumber(float_decimal(st->temperature)));
  cJSON *text = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(text, "format"), "type", "text");
  add_or_default(o, echo, "text", text);
  add_or_default(o, echo, "tool_choice", cJSON_CreateString("auto"));
  add_or_default(o, echo, "tools", cJSON_CreateArray());
  add_or_default(o, echo, "top_p", cJSON_CreateNumber(float_decimal(st->top_p)));
  cJSON_AddStringToObject(o, "truncation", "disabled");
  if (r && !err) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", (double)r->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                            (double)r->cached_prompt_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", (double)r->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            (double)r->reasoning_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(r->prompt_tokens + r->completion_tokens));
  } else {
    cJSON_AddNullToObject(o, "usage");
  }
  add_or_default(o, echo, "user", cJSON_CreateNull());
  add_or_default(o, echo, "metadata", cJSON_CreateObject());
  return o;
}

/* The image URL strings of conv in prompt order (the chat template's: user and tool messages,
 * their parts in order); at most cap, returns how many. */
static int image_urls(cJSON *conv, cJSON **urls, int cap) {
  int n = 0;
  for (cJSON *m = conv->child; m; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "tool")) ||
        !cJSON_IsArray(content))
      continue;
    for (cJSON *p = content->child; p; p = p->next) {
      cJSON *iu = cJSON_GetObjectItemCaseSensitive(p, "image_url");
      cJSON *url = cJSON_IsObject(iu) ? cJSON_GetObjectItemCaseSensitive(iu, "url") : NULL;
      if (cJSON_IsString(url)) {
        if (n < cap)
          urls[n] = url;
        n++;
      }
    }
  }
  return n;
}

/* The processed form of the conversation's images: each image the prompt held (r->media, by its
 * index in the request) or that the continued conversation's table knew becomes a
 * "qvl-media:<key>" URL in st->conv, with its facts and bytes in the returned table. Images neither
 * knows (dropped by the context policy before they were ever processed) keep their URL. */
static resp_media *processed_media(resp_state *st, const api_result *r) {
  int n = image_urls(st->conv, NULL, 0);
  if (n == 0)
    return NULL;
  cJSON **urls = calloc((size_t)n, sizeof *urls);
  resp_media *t = urls ? resp_media_new(n) : NULL;
  if (!t) {
    free(urls);
    return NULL;
  }
  image_urls(st->conv, urls, n);
  int used = 0;
  for (int k = 0; k < n; k++) {
    prompt_media_ref ref = {0};
    bool have = false;
    for (int i = 0; !have && i < r->n_media; i++)
      if (r->media[i].index == k && r->media[i].ref.bytes) {
        ref = r->media[i].ref;
        have = true;
      }
    const char *u = urls[k]->valuestring;
    size_t pn = strlen(PROMPT_MEDIA_SCHEME);
    if (!have && st->media && !strncmp(u, PROMPT_MEDIA_SCHEME, pn))
      have = resp_media_resolve(st->media, strtoull(u + pn, NULL, 16), &ref);
    if (!have)
      continue;
    char nu[48];
    snprintf(nu, sizeof nu, PROMPT_MEDIA_SCHEME "%016llx", (unsigned long long)ref.bytes_key);
    cJSON_SetValuestring(urls[k], nu);
    bool dup = false;
    for (int j = 0; !dup && j < used; j++)
      dup = resp_media_item(t, j)->bytes_key == ref.bytes_key;
    if (!dup) {
      *resp_media_item(t, used) = ref;
      resp_media_item(t, used++)->bytes = rcbuf_ref(ref.bytes);
    }
  }
  free(urls);
  return t;
}

/* Keeps the conversation with this answer (its text and tool calls as the chat's assistant message)
 * for a later previous_response_id. */
static void remember(resp_state *st, const api_result *r, const cJSON *choice) {
  if (!st->conv || !st->store || r->status != QVL_OK)
    return;
  const cJSON *calls = compat_choice_tool_calls(choice);
  const char *text = compat_choice_content(choice);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "assistant");
  if (calls && !text[0])
    cJSON_AddNullToObject(m, "content");
  else
    cJSON_AddStringToObject(m, "content", text);
  if (calls)
    cJSON_AddItemToObject(m, "tool_calls", cJSON_Duplicate(calls, true));
  cJSON_AddItemToArray(st->conv, m);
  resp_media *media = processed_media(st, r);
  char *json = cJSON_PrintUnformatted(st->conv);
  if (json)
    resp_store_put_media(st->store, st->id, json, media, time_now_s()); /* too large: simply not kept */
  else
    resp_media_unref(media);
  free(json);
  cJSON_Delete(st->conv);
  st->conv = NULL;
}

static char *result_json(void *state, const api_result *r) {
  resp_state *st = state;
  cJSON *choice = answer_choice(st, r);
  remember(st, r, choice);
  cJSON *o = response_object(st, cut_short(r) ? "incomplete" : "completed", r, NULL, choice);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  cJSON_Delete(choice);
  return s;
}

static char *error_json(void *state, const api_error *e) {
  (void)state;
  return api_error_json(e);
}

/* ---- streaming ------------------------------------------------------------------------------- */

/* Appends "event: TYPE\ndata: {...,"type":TYPE,"sequence_number":N}\n\n"; takes o. */
static void emit(resp_state *st, buf *out, const char *type, cJSON *o) {
  cJSON_AddStringToObject(o, "type", type);
  cJSON_AddNumberToObject(o, "sequence_number", (double)st->seq++);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s)
    return;
  sse_append_event(out, type, s);
  free(s);
}

/* The message's output index: after the reasoning item when there is one. */
static int msg_index(const resp_state *st) { return st->rs_open ? 1 : 0; }

static cJSON *indexed(const resp_state *st, bool with_content) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "item_id", st->msg_id);
  cJSON_AddNumberToObject(o, "output_index", msg_index(st));
  if (with_content)
    cJSON_AddNumberToObject(o, "content_index", 0);
  return o;
}

/* The message item's opening events (once). */
static void open_message(resp_state *st, buf *out) {
  if (st->msg_open)
    return;
  st->msg_open = true;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "output_index", msg_index(st));
  cJSON_AddItemToObject(o, "item", message_item(st, "in_progress", NULL, NULL, false));
  emit(st, out, "response.output_item.added", o);
  o = indexed(st, true);
  cJSON_AddItemToObject(o, "part", text_part("", NULL));
  emit(st, out, "response.content_part.added", o);
}

static void stream_open(resp_state *st, buf *out) {
  if (st->started)
    return;
  st->started = true;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "response", response_object(st, "in_progress", NULL, NULL, NULL));
  emit(st, out, "response.created", o);
  o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "response", response_object(st, "in_progress", NULL, NULL, NULL));
  emit(st, out, "response.in_progress", o);
  /* with tools the message opens with its first text: a call may come first; a reasoning model's
   * reasoning item comes first */
  if (!st->hold_tools && !st->reasoning_model)
    open_message(st, out);
}

static cJSON *rs_indexed(const resp_state *st) {
  char id[RESP_STORE_ID_CAP];
  reasoning_item_id(st, id, sizeof id);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "item_id", id);
  cJSON_AddNumberToObject(o, "output_index", 0);
  cJSON_AddNumberToObject(o, "content_index", 0);
  return o;
}

static void stream_reasoning(void *state, buf *out, const char *text, size_t len) {
  resp_state *st = state;
  stream_open(st, out);
  if (!len || st->rs_done)
    return;
  if (!st->rs_open) {
    st->rs_open = true;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddItemToObject(o, "item", reasoning_item(st, "in_progress", NULL, 0, false));
    emit(st, out, "response.output_item.added", o);
    o = rs_indexed(st);
    cJSON_AddItemToObject(o, "part", reasoning_part("", 0));
    emit(st, out, "response.content_part.added", o);
  }
  buf_append(&st->reasoning, text, len);
  cJSON *o = rs_indexed(st);
  cJSON_AddItemToObject(o, "delta", api_text_json(text, len));
  emit(st, out, "response.reasoning_text.delta", o);
}

/* The reasoning item's closing events, once, before the message (r: the result when known). */
static void close_reasoning(resp_state *st, buf *out, const api_result *r) {
  if (!st->rs_open || st->rs_done)
    return;
  st->rs_done = true;
  const char *t = r ? r->reasoning.data : st->reasoning.data;
  size_t n = r ? r->reasoning.len : st->reasoning.len;
  cJSON *o = rs_indexed(st);
  cJSON_AddItemToObject(o, "text", api_text_json(t, n));
  emit(st, out, "response.reasoning_text.done", o);
  o = rs_indexed(st);
  cJSON_AddItemToObject(o, "part", reasoning_part(t, n));
  emit(st, out, "response.content_part.done", o);
  o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "output_index", 0);
  cJSON_AddItemToObject(o, "item", reasoning_item(st, "completed", t, n, true));
  emit(st, out, "response.output_item.done", o);
}

static void text_delta(resp_state *st, buf *out, const char *text, size_t len) {
  if (!len)
    return;
  close_reasoning(st, out, NULL);
  open_message(st, out);
  buf_append(&st->text, text, len);
  cJSON *o = indexed(st, true);
  cJSON_AddItemToObject(o, "delta", api_text_json(text, len));
  cJSON_AddArrayToObject(o, "logprobs"); /* known only at the end: the .done events carry them */
  emit(st, out, "response.output_text.delta", o);
}

static void stream_text(void *state, buf *out, const char *text, size_t len) {
  resp_state *st = state;
  stream_open(st, out);
  if (!st->hold_tools) {
    text_delta(st, out, text, len);
    return;
  }
  const char *ready;
  size_t n;
  compat_hold_push(&st->hold, text, len, &ready, &n);
  text_delta(st, out, ready, n);
}

#define ARG_DELTA 32 /* argument bytes per response.function_call_arguments.delta */

/* The events of the i-th function call, at output_index at. */
static void stream_call(resp_state *st, buf *out, int i, int at, const cJSON *call) {
  char id[RESP_STORE_ID_CAP];
  call_item_id(st, i, id, sizeof id);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "output_index", at);
  cJSON_AddItemToObject(o, "item", call_item(st, i, call, "in_progress"));
  emit(st, out, "response.output_item.added", o);
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments"), *name = cJSON_GetObjectItemCaseSensitive(f, "name");
  const char *a = cJSON_IsString(args) ? args->valuestring : "";
  size_t al = strlen(a);
  for (size_t pos = 0; pos < al;) { /* fragments cut on UTF-8 character boundaries */
    size_t take = utf8_piece_len(a + pos, al - pos, ARG_DELTA);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", at);
    cJSON_AddItemToObject(o, "delta", api_text_json(a + pos, take));
    emit(st, out, "response.function_call_arguments.delta", o);
    pos += take;
  }
  o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "item_id", id);
  cJSON_AddNumberToObject(o, "output_index", at);
  cJSON_AddStringToObject(o, "name", cJSON_IsString(name) ? name->valuestring : "");
  cJSON_AddStringToObject(o, "arguments", a);
  emit(st, out, "response.function_call_arguments.done", o);
  o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "output_index", at);
  cJSON_AddItemToObject(o, "item", call_item(st, i, call, "completed"));
  emit(st, out, "response.output_item.done", o);
}

static void stream_end(void *state, buf *out, const api_result *r) {
  resp_state *st = state;
  stream_open(st, out);
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "code", e.code ? e.code : "server_error");
    cJSON_AddStringToObject(o, "message", e.message);
    cJSON_AddNullToObject(o, "param");
    emit(st, out, "error", o);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_object(st, "failed", r, &e, NULL));
    emit(st, out, "response.failed", o);
    return;
  }
  bool cut = cut_short(r);
  cJSON *choice = answer_choice(st, r);
  const cJSON *calls = compat_choice_tool_calls(choice);
  const char *text = compat_choice_content(choice);
  const char *rest = compat_unsent(text, &st->text); /* what the hold kept back */
  if (r->reasoning.len && !st->rs_open) /* (reasoning not streamed piece by piece) */
    stream_reasoning(st, out, r->reasoning.data, r->reasoning.len);
  close_reasoning(st, out, r);
  text_delta(st, out, rest, strlen(rest));
  if (!calls)
    open_message(st, out); /* an answer without calls always has its message, empty or not */
  int at = msg_index(st);
  if (st->msg_open) {
    cJSON *lp = text_logprobs(choice);
    cJSON *o = indexed(st, true);
    cJSON_AddStringToObject(o, "text", text);
    cJSON_AddItemToObject(o, "logprobs", cJSON_Duplicate(lp, true));
    emit(st, out, "response.output_text.done", o);
    o = indexed(st, true);
    cJSON_AddItemToObject(o, "part", text_part(text, cJSON_Duplicate(lp, true)));
    emit(st, out, "response.content_part.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", msg_index(st));
    cJSON_AddItemToObject(o, "item", message_item(st, cut ? "incomplete" : "completed", text, lp, true));
    emit(st, out, "response.output_item.done", o);
    at = msg_index(st) + 1;
  }
  int i = 0;
  for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next, i++)
    stream_call(st, out, i, at + i, c);
  remember(st, r, choice);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "response", response_object(st, cut ? "incomplete" : "completed", r, NULL, choice));
  emit(st, out, cut ? "response.incomplete" : "response.completed", o);
  cJSON_Delete(choice);
}

const compat_format responses_format = {
    .stream_content_type = "text/event-stream",
    .result_json = result_json,
    .error_json = error_json,
    .stream_text = stream_text,
    .stream_reasoning = stream_reasoning,
    .stream_end = stream_end,
    .free_state = state_free,
};
