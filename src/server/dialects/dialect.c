/* Helpers shared by the translators of the other APIs (see dialect.h). */
#include "server/dialects/dialect.h"

#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "server/openai/agents.h"

void compat_request_free(compat_request *r) {
  if (!r)
    return;
  FREE_EACH(r->chat_body, r->raw_text, r->raw_ids, r->reply_body);
  if (r->fmt && r->fmt->free_state && r->state)
    r->fmt->free_state(r->state);
  memset(r, 0, sizeof *r);
}

static int depth_of(const cJSON *j, int depth) {
  int worst = depth;
  for (const cJSON *c = j->child; c && worst <= API_MAX_JSON_DEPTH; c = c->next) {
    int d = depth_of(c, depth + 1);
    if (d > worst)
      worst = d;
  }
  return worst;
}

cJSON *compat_parse_body(const char *body, size_t len, api_error *e) {
  if (!len) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body is empty");
    return NULL;
  }
  const char *end = NULL;
  bool nomem = false;
  char *nul_free = api_json_nul_escapes(body, len, &nomem); /* see chat_wire.h: no silent cuts */
  if (nomem) {
    api_error_status(e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
    return NULL;
  }
  cJSON *root = cJSON_ParseWithLengthOpts(nul_free ? nul_free : body, len, &end, false);
  if (nul_free && end)
    end = body + (end - nul_free);
  free(nul_free);
  if (!root) {
    size_t at = end && end >= body ? (size_t)(end - body) : 0;
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL,
                  "the request body is not valid JSON (error near byte %zu)", at > len ? len : at);
    return NULL;
  }
  for (size_t i = (size_t)(end - body); i < len; i++)
    if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n') {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL,
                    "the request body has extra data after the JSON value (byte %zu)", i);
      cJSON_Delete(root);
      return NULL;
    }
  if (!cJSON_IsObject(root)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body must be a JSON object");
    cJSON_Delete(root);
    return NULL;
  }
  if (depth_of(root, 0) > API_MAX_JSON_DEPTH) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body nests deeper than %d levels",
                  API_MAX_JSON_DEPTH);
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

void *compat_request_start(compat_request *out, const compat_format *fmt, size_t state_size, api_error *e) {
  memset(out, 0, sizeof *out);
  out->fmt = fmt;
  if (!(out->state = calloc(1, state_size)))
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
  return out->state;
}

void compat_copy_field(cJSON *chat, const char *chat_name, const cJSON *root, const char *name) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  if (!j || cJSON_IsNull(j))
    return;
  cJSON_DeleteItemFromObjectCaseSensitive(chat, chat_name);
  cJSON_AddItemToObject(chat, chat_name, cJSON_Duplicate(j, true));
}

bool compat_refuse_field(const cJSON *root, const char *name, bool allow_empty, const char *why, api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  if (!j || cJSON_IsNull(j))
    return true;
  if (allow_empty && (cJSON_IsFalse(j) || (cJSON_IsString(j) && !j->valuestring[0]) ||
                      ((cJSON_IsArray(j) || cJSON_IsObject(j)) && !j->child)))
    return true;
  api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", name, "'%s' is not supported%s%s", name,
                why && *why ? ": " : "", why ? why : "");
  return false;
}

bool compat_refuse_fields(const cJSON *root, const char *const (*fields)[2], size_t n, api_error *e) {
  for (size_t i = 0; i < n; i++)
    if (!compat_refuse_field(root, fields[i][0], true, fields[i][1], e))
      return false;
  return true;
}

cJSON *compat_function_tool(const cJSON *t, const char *schema_key, bool with_strict) {
  cJSON *ct = cJSON_CreateObject();
  cJSON_AddStringToObject(ct, "type", "function");
  cJSON *f = cJSON_AddObjectToObject(ct, "function");
  compat_copy_field(f, "name", t, "name");
  compat_copy_field(f, "description", t, "description");
  compat_copy_field(f, "parameters", t, schema_key);
  if (with_strict)
    compat_copy_field(f, "strict", t, "strict");
  return ct;
}

bool compat_tools_callable(const cJSON *chat) {
  const cJSON *tools = cJSON_GetObjectItemCaseSensitive(chat, "tools");
  const cJSON *choice = cJSON_GetObjectItemCaseSensitive(chat, "tool_choice");
  return cJSON_IsArray(tools) && tools->child && !(cJSON_IsString(choice) && !strcmp(choice->valuestring, "none"));
}

bool compat_finish(cJSON *root, cJSON *chat, bool ok, compat_request *out, api_error *e) {
  if (ok && !out->reply_body) {
    out->chat_body = cJSON_PrintUnformatted(chat);
    if (out->chat_body) {
      out->chat_len = strlen(out->chat_body);
    } else {
      api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory translating the request");
      ok = false;
    }
  }
  cJSON_Delete(root);
  cJSON_Delete(chat);
  return ok;
}

char *compat_chunk_add_usage(char *json, const char *id, int64_t created, const char *model, const api_result *r) {
  cJSON *chunk = cJSON_Parse(json);
  char *u = api_usage_chunk_json(id, created, model, r);
  cJSON *uc = u ? cJSON_Parse(u) : NULL;
  free(u);
  cJSON *usage = uc ? cJSON_DetachItemFromObjectCaseSensitive(uc, "usage") : NULL;
  cJSON *timings = uc ? cJSON_DetachItemFromObjectCaseSensitive(uc, "timings") : NULL;
  cJSON_Delete(uc);
  char *out = NULL;
  if (chunk && usage) {
    cJSON_AddItemToObject(chunk, "usage", usage);
    usage = NULL;
    if (timings) {
      cJSON_AddItemToObject(chunk, "timings", timings);
      timings = NULL;
    }
    out = cJSON_PrintUnformatted(chunk);
  }
  cJSON_Delete(chunk);
  cJSON_Delete(usage);
  cJSON_Delete(timings);
  if (!out) /* out of memory: the chunk as it was */
    return json;
  free(json);
  return out;
}

cJSON *compat_chat_choice(const api_result *r) {
  cJSON *o = api_completion_object("", 0, "", r);
  cJSON *choice = o ? cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0) : NULL;
  cJSON_Delete(o);
  return choice;
}

const char *compat_choice_content(const cJSON *choice) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "message"), "content");
  return cJSON_IsString(c) ? c->valuestring : "";
}

const cJSON *compat_choice_tool_calls(const cJSON *choice) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "message"), "tool_calls");
  return cJSON_IsArray(tc) && tc->child ? tc : NULL;
}

const cJSON *compat_choice_logprobs(const cJSON *choice) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "logprobs"), "content");
  return cJSON_IsArray(c) ? c : NULL;
}

void compat_hold_push(compat_hold *h, const char *text, size_t len, const char **ready, size_t *n_ready) {
  if (h->released) {
    memmove(h->held.data, h->held.data + h->released, h->held.len - h->released);
    h->held.len -= h->released;
    h->released = 0;
  }
  *ready = "";
  *n_ready = 0;
  if (h->tool_seen || buf_append(&h->held, text, len) != QVL_OK)
    return; /* out of memory: the rest comes with the final content */
  size_t safe = api_tool_text_safe(h->held.data, h->held.len, &h->tool_seen);
  while (safe > 0 && h->held.data[safe - 1] && strchr(" \t\r\n", h->held.data[safe - 1]))
    safe--;
  h->released = safe;
  *ready = h->held.data;
  *n_ready = safe;
}

void compat_hold_free(compat_hold *h) {
  buf_free(&h->held);
  memset(h, 0, sizeof *h);
}

const char *compat_unsent(const char *content, const buf *sent) {
  size_t n = strlen(content);
  if (sent->len > n || (sent->len && memcmp(content, sent->data, sent->len)))
    return "";
  return content + sent->len;
}
