/* Tools, response_format and logprobs on chat completions (see agents.h). */
#include "server/openai/agents.h"

#include "server/openai/boxes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/free_each.h"
#include "base/status.h"
#include "server/openai/api_error.h"
#include "server/openai/json_field.h"
#include "base/finish.h"
#include "server/openai/json_raw.h"
#include "server/openai/result.h"
#include "server/openai/sse.h"
#include "text/chat.h"
#include "text/json_schema.h"
#include "text/unicode.h"

static const cJSON *field(const cJSON *o, const char *name) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);
  return j && !cJSON_IsNull(j) ? j : NULL;
}

static bool fail(api_error *e, const char *param, const char *code, const char *msg) {
  api_error_status(e, QVL_ERR_INVALID_ARG, code, param, "%s", msg);
  return false;
}

static bool schema_error(api_error *e, const char *param) {
  return fail(e, param, qvl_last_error()[0] && strstr(qvl_last_error(), "not supported") ? "unsupported_schema"
                                                                                           : "invalid_schema",
              qvl_last_error());
}

/* OpenAI's function names: ^[a-zA-Z0-9_-]{1,64}$. A NUL inside a JSON string arrives as U+FFFD
 * (api_json_nul_escapes), so "get\u0000x" fails here instead of passing as "get". */
static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_' || s[i] == '-'))
      return false;
  return true;
}

static bool check_tools(const cJSON *tools, api_error *e) {
  if (!cJSON_IsArray(tools))
    return fail(e, "tools", "invalid_type", "'tools' must be an array");
  if (cJSON_GetArraySize(tools) > API_MAX_TOOLS) {
    char m[80];
    snprintf(m, sizeof m, "'tools' has %d entries; at most %d", cJSON_GetArraySize(tools), API_MAX_TOOLS);
    return fail(e, "tools", "invalid_value", m);
  }
  int i = 0;
  for (const cJSON *t = tools->child; t; t = t->next, i++) {
    char m[200];
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *params = field(fn, "parameters");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function")) {
      snprintf(m, sizeof m, "tools[%d]: only {\"type\": \"function\", \"function\": {...}} tools are supported", i);
      return fail(e, "tools", "invalid_value", m);
    }
    if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name_ok(name->valuestring)) {
      snprintf(m, sizeof m, "tools[%d].function needs a 'name' of 1..64 letters, digits, '_' or '-'", i);
      return fail(e, "tools", "invalid_value", m);
    }
    if (params && !cJSON_IsObject(params)) {
      snprintf(m, sizeof m, "tools[%d].function.parameters must be a JSON schema object", i);
      return fail(e, "tools", "invalid_type", m);
    }
  }
  return true;
}

/* functions [{name, description, parameters}] -> tools [{type: function, function: {...}}]. */
static cJSON *tools_from_functions(const cJSON *fns) {
  cJSON *arr = cJSON_CreateArray();
  for (const cJSON *f = fns->child; arr && f; f = f->next) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "function");
    cJSON_AddItemToObject(t, "function", cJSON_Duplicate(f, true));
    cJSON_AddItemToArray(arr, t);
  }
  return arr;
}

bool api_agents_parse(cJSON *root, api_agent_opts *o, const cJSON **tools_out, grammar **g, api_error *e) {
  memset(o, 0, sizeof *o);
  *tools_out = NULL;
  *g = NULL;
  if (!api_get_bool(root, "logprobs", NULL, &o->logprobs, e))
    return false;
  const cJSON *tlp = field(root, "top_logprobs");
  if (tlp) {
    if (!cJSON_IsNumber(tlp) || tlp->valuedouble != floor(tlp->valuedouble) || tlp->valuedouble < 0 ||
        tlp->valuedouble > ENGINE_MAX_TOP_LOGPROBS) { /* the engine's rule (engine_request.h), in wire terms */
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "top_logprobs",
                       "'top_logprobs' must be an integer in [0, %d]", ENGINE_MAX_TOP_LOGPROBS);
      return false;
    }
    if (!o->logprobs && tlp->valuedouble > 0)
      return fail(e, "top_logprobs", "invalid_value", "'top_logprobs' requires 'logprobs': true");
    o->top_logprobs = (int)tlp->valuedouble;
  }

  /* Tools, or the legacy functions mapped onto them. */
  const cJSON *tools = field(root, "tools");
  const cJSON *choice = field(root, "tool_choice");
  const char *choice_param = "tool_choice";
  const cJSON *fns = field(root, "functions");
  if (fns) {
    if (tools)
      return fail(e, "functions", "invalid_value", "give 'tools' or the legacy 'functions', not both");
    if (!cJSON_IsArray(fns))
      return fail(e, "functions", "invalid_type", "'functions' must be an array");
    cJSON *conv = tools_from_functions(fns);
    if (!conv)
      return fail(e, "functions", "invalid_value", "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tools");
    cJSON_AddItemToObject(root, "tools", conv);
    tools = conv;
    const cJSON *fc = field(root, "function_call");
    if (fc && !choice) {
      choice = fc;
      choice_param = "function_call";
    }
  }
  if (tools && !check_tools(tools, e))
    return false;
  bool have_tools = tools && cJSON_GetArraySize(tools) > 0;
  const char *mode = have_tools ? "auto" : "none";
  const char *named = NULL;
  if (choice) {
    if (cJSON_IsString(choice)) {
      mode = choice->valuestring;
      if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required"))
        return fail(e, choice_param, "invalid_value", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (cJSON_IsObject(choice)) {
      const cJSON *fn = field(choice, "function");
      const cJSON *nm = fn ? field(fn, "name") : field(choice, "name"); /* function_call: {"name"} */
      if (!cJSON_IsString(nm) || !name_ok(nm->valuestring))
        return fail(e, choice_param, "invalid_value",
                    "a named tool_choice needs function.name of 1..64 letters, digits, '_' or '-'");
      mode = "named";
      named = nm->valuestring;
    } else {
      return fail(e, choice_param, "invalid_type", "'tool_choice' must be a string or an object");
    }
    if (strcmp(mode, "none") && !have_tools)
      return fail(e, choice_param, "invalid_value", "'tool_choice' asks for a tool call but 'tools' is empty");
  }
  bool parallel = true;
  if (!api_get_bool(root, "parallel_tool_calls", NULL, &parallel, e))
    return false;
  if (have_tools)
    *tools_out = tools;
  o->parse_tools = have_tools && strcmp(mode, "none");

  const cJSON *rf = field(root, "response_format");
  const char *rf_type = "text";
  if (rf) {
    const cJSON *t = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    if (!cJSON_IsString(t))
      return fail(e, "response_format", "invalid_type", "'response_format' must be {\"type\": \"text\" | "
                                                        "\"json_object\" | \"json_schema\", ...}");
    rf_type = t->valuestring;
    if (strcmp(rf_type, "text") && strcmp(rf_type, "json_object") && strcmp(rf_type, "json_schema"))
      return fail(e, "response_format", "invalid_value",
                  "response_format type must be \"text\", \"json_object\" or \"json_schema\"");
  }
  bool forced = !strcmp(mode, "required") || named;
  if (forced && strcmp(rf_type, "text"))
    return fail(e, "response_format", "invalid_value",
                "a JSON response_format cannot be combined with a required or named tool_choice");
  qvl_status s = QVL_OK;
  if (forced) {
    s = json_schema_tool_calls(tools, named, parallel && !named, g);
    if (s != QVL_OK)
      return s == QVL_ERR_INVALID_ARG && named ? fail(e, choice_param, "invalid_value", qvl_last_error())
                                               : schema_error(e, "tools");
  } else if (!strcmp(rf_type, "json_object")) {
    if ((s = json_schema_any_object(g)) != QVL_OK)
      return fail(e, "response_format", "server_error", qvl_last_error());
  } else if (!strcmp(rf_type, "json_schema")) {
    const cJSON *js = field(rf, "json_schema");
    if (!cJSON_IsObject(js))
      return fail(e, "response_format.json_schema", "invalid_type",
                  "response_format json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
    const cJSON *sch = field(js, "schema");
    s = sch ? json_schema_compile(sch, g) : json_schema_any_object(g);
    if (s != QVL_OK)
      return schema_error(e, "response_format.json_schema.schema");
  }
  return true;
}

/* ---- results ----------------------------------------------------------------------------- */

bool api_logprobs_copy(api_logprobs *d, const engine_result *r) {
  memset(d, 0, sizeof *d);
  if (!r->logprobs || !r->lp_off)
    return true;
  int64_t n = r->completion_tokens;
  size_t k = (size_t)(r->n_top > 0 ? r->n_top : 1), no = (size_t)n * (size_t)(1 + r->n_top) + 1;
  d->n = n;
  d->n_top = r->n_top;
  d->lp = malloc(sizeof *d->lp * (size_t)(n ? n : 1));
  d->top_ids = malloc(sizeof *d->top_ids * (size_t)(n ? n : 1) * k);
  d->top_lp = malloc(sizeof *d->top_lp * (size_t)(n ? n : 1) * k);
  d->off = malloc(sizeof *d->off * no);
  if (!d->lp || !d->top_ids || !d->top_lp || !d->off ||
      buf_append(&d->text, r->lp_text, r->lp_off[no - 1]) != QVL_OK) {
    api_logprobs_free(d);
    return false;
  }
  memcpy(d->lp, r->logprobs, sizeof *d->lp * (size_t)n);
  if (r->n_top > 0) {
    memcpy(d->top_ids, r->top_ids, sizeof *d->top_ids * (size_t)n * k);
    memcpy(d->top_lp, r->top_logprobs, sizeof *d->top_lp * (size_t)n * k);
  }
  memcpy(d->off, r->lp_off, sizeof *d->off * no);
  return true;
}

void api_logprobs_free(api_logprobs *l) {
  if (!l)
    return;
  FREE_EACH(l->lp, l->top_ids, l->top_lp, l->off);
  buf_free(&l->text);
  memset(l, 0, sizeof *l);
}

/* Bytes as a valid UTF-8 C string: each ill-formed sequence and NUL becomes U+FFFD (as the
 * content; the logprobs' "bytes" keep the exact bytes). */
static void utf8_fix(const unsigned char *b, size_t n, buf *out) {
  utf8_append_lossy_nonul(out, (const char *)b, n);
  buf_append(out, "", 1);
}

static cJSON *string_fixed(const char *s, size_t n) {
  buf v = {0};
  utf8_fix((const unsigned char *)s, n, &v);
  cJSON *j = cJSON_CreateString(v.data ? v.data : "");
  buf_free(&v);
  return j;
}

static cJSON *token_entry(const api_logprobs *l, int64_t i, int j, float lp) {
  size_t per = (size_t)(1 + l->n_top), k = (size_t)i * per + (size_t)j;
  const char *b = l->text.data + l->off[k];
  size_t n = l->off[k + 1] - l->off[k];
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "token", string_fixed(b, n));
  /* -inf cannot be written in JSON: OpenAI's floor for impossible tokens is -9999. */
  cJSON_AddNumberToObject(o, "logprob", isfinite(lp) ? (double)lp : -9999.0);
  cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
  for (size_t x = 0; x < n; x++)
    cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[x]));
  return o;
}

static cJSON *logprobs_content(const api_logprobs *l) {
  cJSON *arr = cJSON_CreateArray();
  for (int64_t i = 0; i < l->n; i++) {
    cJSON *t = token_entry(l, i, 0, l->lp[i]);
    cJSON *tops = cJSON_AddArrayToObject(t, "top_logprobs");
    for (int j = 0; j < l->n_top; j++) {
      int64_t at = i * l->n_top + j;
      if (l->top_ids[at] < 0)
        break;
      cJSON *alt = token_entry(l, i, j + 1, l->top_lp[at]);
      cJSON_AddItemToArray(tops, alt);
    }
    cJSON_AddItemToArray(arr, t);
  }
  return arr;
}

static cJSON *logprobs_object(const api_logprobs *l) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "content", logprobs_content(l));
  cJSON_AddNullToObject(o, "refusal");
  return o;
}

/* ---- tool calls in the output ------------------------------------------------------------- */

#define TOOL_OPEN "<tool_call>"
#define TOOL_CLOSE "</tool_call>"

typedef struct parsed_call {
  char *name;
  char *arguments; /* JSON text */
} parsed_call;

static void random_hex(char *out, size_t n) {
  unsigned char r[16];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
    memset(r, 0x5a, sizeof r);
  static const char hx[] = "0123456789abcdef";
  size_t i = 0;
  for (; i + 1 < n && i < 2 * sizeof r; i++)
    out[i] = hx[(r[i / 2] >> (i % 2 ? 0 : 4)) & 15];
  out[i] = 0;
}

/* Finds the tool calls in text: each <tool_call> JSON {"name", "arguments"} </tool_call>. Returns
 * how many (up to cap); *content_len: bytes before the first call. Calls whose JSON does not parse
 * are kept as text (the caller then sees no call). */
static int parse_calls(const char *text, size_t len, parsed_call *calls, int cap, size_t *content_len) {
  const char *end = text + len;
  const char *p = memmem(text, len, TOOL_OPEN, strlen(TOOL_OPEN));
  *content_len = p ? (size_t)(p - text) : len;
  int n = 0;
  while (p && n < cap) {
    const char *body = p + strlen(TOOL_OPEN);
    const char *q = memmem(body, (size_t)(end - body), TOOL_CLOSE, strlen(TOOL_CLOSE));
    const char *stop = q ? q : end;
    cJSON *j = cJSON_ParseWithLength(body, (size_t)(stop - body));
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (cJSON_IsString(nm)) {
      calls[n].name = strdup(nm->valuestring);
      if (cJSON_IsString(args)) {
        calls[n].arguments = strdup(args->valuestring);
      } else if (args) {
        /* The model's own bytes (never a reprint of parsed numbers: issue 22), ends trimmed. */
        size_t off, vlen;
        if (json_raw_member(body, (size_t)(stop - body), "arguments", &off, &vlen))
          calls[n].arguments = strndup(body + off, vlen);
        else
          calls[n].arguments = strdup("{}");
      } else {
        calls[n].arguments = strdup("{}");
      }
      n++;
    }
    cJSON_Delete(j);
    if (!q)
      break;
    p = memmem(q, (size_t)(end - q), TOOL_OPEN, strlen(TOOL_OPEN));
  }
  if (n == 0)
    *content_len = len;
  return n;
}

static void free_calls(parsed_call *c, int n) {
  for (int i = 0; i < n; i++) {
    free(c[i].name);
    free(c[i].arguments);
  }
}

/* Content without the whitespace the template leaves before a call. */
static size_t trim_end(const char *s, size_t n) {
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
    n--;
  return n;
}

void api_agents_decorate(cJSON *choice, const api_result *r) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, "message");
  if (r->agent.parse_tools && m) {
    parsed_call calls[API_MAX_TOOLS];
    size_t clen;
    int n = parse_calls(r->text.data ? r->text.data : "", r->text.len, calls, API_MAX_TOOLS, &clen);
    if (n > 0) {
      clen = trim_end(r->text.data, clen);
      cJSON_ReplaceItemInObjectCaseSensitive(m, "content", clen ? string_fixed(r->text.data, clen) : cJSON_CreateNull());
      cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
      for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        char id[40] = "call_";
        random_hex(id + 5, 25);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", calls[i].name ? calls[i].name : "");
        cJSON_AddStringToObject(f, "arguments", calls[i].arguments ? calls[i].arguments : "{}");
        cJSON_AddItemToArray(tc, c);
      }
      if (r->finish_reason == QVL_FINISH_EOS || r->finish_reason == QVL_FINISH_STOP_STRING ||
          r->finish_reason == QVL_FINISH_NONE)
        cJSON_ReplaceItemInObjectCaseSensitive(choice, "finish_reason", cJSON_CreateString("tool_calls"));
      free_calls(calls, n);
    }
  }
  if (r->agent.logprobs && r->lp.off)
    cJSON_ReplaceItemInObjectCaseSensitive(choice, "logprobs", logprobs_object(&r->lp));
  if (r->agent.boxes && m)
    cJSON_AddItemToObject(m, "boxes", boxes_from_text(r->text.data, r->text.len, r->images, r->n_images));
}

const char *api_agents_finish_reason(const api_result *r) {
  const char *fr = finish_openai(r->finish_reason);
  if (r->agent.parse_tools && (!fr || !strcmp(fr, "stop"))) {
    parsed_call calls[API_MAX_TOOLS];
    size_t clen;
    int n = parse_calls(r->text.data ? r->text.data : "", r->text.len, calls, API_MAX_TOOLS, &clen);
    free_calls(calls, n);
    if (n > 0)
      return "tool_calls";
  }
  return fr;
}

size_t api_tool_text_safe(const char *text, size_t len, bool *tool_seen) {
  const size_t ol = strlen(TOOL_OPEN);
  const char *p = memmem(text, len, TOOL_OPEN, ol);
  if (p) {
    *tool_seen = true;
    return (size_t)(p - text);
  }
  /* Hold a tail that could be the start of "<tool_call>". */
  for (size_t k = ol - 1; k > 0; k--)
    if (len >= k && !memcmp(text + len - k, TOOL_OPEN, k))
      return len - k;
  return len;
}

static cJSON *chunk_base(const char *id, int64_t created, const char *model, cJSON **choice) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "object", "chat.completion.chunk");
  cJSON_AddNumberToObject(o, "created", (double)created);
  cJSON_AddStringToObject(o, "model", model);
  cJSON_AddStringToObject(o, "system_fingerprint", "qvl-" QVL_VERSION);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  *choice = cJSON_CreateObject();
  cJSON_AddNumberToObject(*choice, "index", 0);
  cJSON_AddItemToArray(choices, *choice);
  return o;
}

static void emit_chunk(buf *out, cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  if (s)
    sse_append(out, s);
  free(s);
  cJSON_Delete(o);
}

#define ARG_FRAGMENT 32 /* argument bytes per streamed delta */

void api_agents_stream_tail(buf *out, const char *id, int64_t created, const char *model, const api_result *r) {
  if (r->agent.parse_tools) {
    parsed_call calls[API_MAX_TOOLS];
    size_t clen;
    int n = parse_calls(r->text.data ? r->text.data : "", r->text.len, calls, API_MAX_TOOLS, &clen);
    for (int i = 0; i < n; i++) {
      cJSON *choice, *o = chunk_base(id, created, model, &choice);
      cJSON *d = cJSON_AddObjectToObject(choice, "delta");
      cJSON *tcs = cJSON_AddArrayToObject(d, "tool_calls");
      cJSON *tc = cJSON_CreateObject();
      cJSON_AddNumberToObject(tc, "index", i);
      char cid[40] = "call_";
      random_hex(cid + 5, 25);
      cJSON_AddStringToObject(tc, "id", cid);
      cJSON_AddStringToObject(tc, "type", "function");
      cJSON *f = cJSON_AddObjectToObject(tc, "function");
      cJSON_AddStringToObject(f, "name", calls[i].name);
      cJSON_AddStringToObject(f, "arguments", "");
      cJSON_AddItemToArray(tcs, tc);
      cJSON_AddNullToObject(choice, "logprobs");
      cJSON_AddNullToObject(choice, "finish_reason");
      emit_chunk(out, o);
      /* The arguments in fragments, cut on UTF-8 character boundaries. */
      const char *a = calls[i].arguments;
      size_t al = strlen(a), at = 0;
      while (at < al) {
        size_t take = utf8_piece_len(a + at, al - at, ARG_FRAGMENT);
        char frag[ARG_FRAGMENT + 8];
        memcpy(frag, a + at, take);
        frag[take] = 0;
        at += take;
        o = chunk_base(id, created, model, &choice);
        d = cJSON_AddObjectToObject(choice, "delta");
        tcs = cJSON_AddArrayToObject(d, "tool_calls");
        tc = cJSON_CreateObject();
        cJSON_AddNumberToObject(tc, "index", i);
        f = cJSON_AddObjectToObject(tc, "function");
        cJSON_AddStringToObject(f, "arguments", frag);
        cJSON_AddItemToArray(tcs, tc);
        cJSON_AddNullToObject(choice, "logprobs");
        cJSON_AddNullToObject(choice, "finish_reason");
        emit_chunk(out, o);
      }
    }
    free_calls(calls, n);
  }
  if (r->agent.logprobs && r->lp.off) {
    cJSON *choice, *o = chunk_base(id, created, model, &choice);
    cJSON_AddObjectToObject(choice, "delta");
    cJSON_AddItemToObject(choice, "logprobs", logprobs_object(&r->lp));
    cJSON_AddNullToObject(choice, "finish_reason");
    emit_chunk(out, o);
  }
  if (r->agent.boxes) { /* known at the end: one chunk with delta.boxes */
    cJSON *choice, *o = chunk_base(id, created, model, &choice);
    cJSON *d = cJSON_AddObjectToObject(choice, "delta");
    cJSON_AddItemToObject(d, "boxes", boxes_from_text(r->text.data, r->text.len, r->images, r->n_images));
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddNullToObject(choice, "finish_reason");
    emit_chunk(out, o);
  }
}
