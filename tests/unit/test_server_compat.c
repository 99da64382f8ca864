/* The other APIs' translators and formatters (Responses, legacy completions, Ollama), the response
 * store, the chat extras (file parts, logit_bias, unhonoured fields) and logit_bias in the sampler.
 * Every translated body is also run through api_chat_parse: what a translator writes must be a valid
 * chat request. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/chat_wire.h"
#include "server/dialects/completions.h"
#include "server/openai/client_fields.h"
#include "server/dialects/ollama.h"
#include "server/dialects/responses.h"
#include "server/dialects/dialect.h"
#include "server/dialects/responses_store.h"
#include "base/timing.h"
#include "test.h"
#include "wire_test.h"
#include "text/sampler.h"

static api_limits limits(void) { return wire_test_limits(4); }

static compat_ctx ctx_with(resp_store *st) {
  compat_ctx c;
  memset(&c, 0, sizeof c);
  c.model_id = "e2e-Q8_0.gguf";
  c.created = 1764540000;
  c.started = 1764500000;
  c.responses = st;
  c.stream_usage = true;
  return c;
}

static cJSON *translate(compat_translate_fn fn, const char *body, const compat_ctx *c, compat_request *cr) {
  api_limits l = limits();
  return translate_checked(fn, body, c, &l, cr);
}

static void expect_refused(compat_translate_fn fn, const char *body, const compat_ctx *c, int http, const char *param,
                           const char *msg_part) {
  compat_request cr;
  api_error e;
  bool ok = fn(body, strlen(body), c, &cr, &e);
  CHECK(!ok, "accepted: %s", body);
  CHECK(cr.fmt != NULL, "%s: no formatter for the error", body);
  if (!ok) {
    check_refusal(body, &e, http, param, msg_part);
  }
  compat_request_free(&cr);
}

static const char *str_at(const cJSON *j, const char *path) {
  /* "messages.1.content.0.type": object keys and array indices */
  char path_copy[256];
  snprintf(path_copy, sizeof path_copy, "%s", path);
  const cJSON *cur = j;
  for (char *tok = strtok(path_copy, "."); tok && cur; tok = strtok(NULL, "."))
    cur = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(cur, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(cur, tok);
  return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

static double num_at(const cJSON *j, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool eq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static api_result result_of(const char *text, qvl_finish finish) {
  api_result r;
  memset(&r, 0, sizeof r);
  r.status = QVL_OK;
  r.finish_reason = finish;
  r.prompt_tokens = 11;
  r.completion_tokens = 3;
  r.cached_prompt_tokens = 4;
  buf_append_str(&r.text, text);
  return r;
}

/* ---- Responses ------------------------------------------------------------------------------- */

static void test_responses_translate(void) {
  compat_ctx c = ctx_with(NULL);
  compat_request cr;
  cJSON *chat = translate(responses_translate,
                          "{\"model\":\"qvl\",\"input\":\"hello\",\"instructions\":\"be brief\",\"max_output_tokens\":7,"
                          "\"temperature\":0,\"top_p\":0.5,\"seed\":3,\"metadata\":{\"a\":\"b\"},\"store\":false,"
                          "\"text\":{\"format\":{\"type\":\"text\"}},\"parallel_tool_calls\":true,\"tools\":[]}",
                          &c, &cr);
  CHECK(chat && eq(str_at(chat, "messages.0.role"), "system") && eq(str_at(chat, "messages.0.content"), "be brief") &&
            eq(str_at(chat, "messages.1.role"), "user") && eq(str_at(chat, "messages.1.content"), "hello"),
        "instructions + string input -> system + user");
  CHECK(chat && num_at(chat, "max_tokens") == 7 && num_at(chat, "temperature") == 0 && num_at(chat, "seed") == 3,
        "max_output_tokens -> max_tokens; sampling passes");
  CHECK(chat && !cJSON_GetObjectItem(chat, "tools") && !cJSON_GetObjectItem(chat, "response_format"),
        "tools [] and text format 'text' add nothing");
  cJSON_Delete(chat);
  compat_request_free(&cr);

  chat = translate(responses_translate,
                   "{\"input\":[{\"role\":\"developer\",\"content\":\"sys\"},"
                   "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"what?\"},"
                   "{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,AAAA\",\"detail\":\"auto\"},"
                   "{\"type\":\"input_file\",\"file_data\":\"data:image/jpeg;base64,BBBB\",\"filename\":\"x.jpg\"}]},"
                   "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"earlier\"}]},"
                   "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
                   "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"42\"}],\"stream\":true}",
                   &c, &cr);
  CHECK(chat && eq(str_at(chat, "messages.0.role"), "system"), "developer -> system");
  CHECK(chat && eq(str_at(chat, "messages.1.content.0.type"), "text") &&
            eq(str_at(chat, "messages.1.content.1.image_url.url"), "data:image/png;base64,AAAA") &&
            eq(str_at(chat, "messages.1.content.2.image_url.url"), "data:image/jpeg;base64,BBBB"),
        "input_text / input_image / input_file with image data -> chat parts");
  CHECK(chat && eq(str_at(chat, "messages.2.content.0.text"), "earlier"), "output_text in an assistant turn");
  /* the function_call after the assistant's message item joins it: one turn of the model, rendered
   * as the model wrote it (text, then the <tool_call>) */
  CHECK(chat && eq(str_at(chat, "messages.2.tool_calls.0.function.name"), "f") &&
            eq(str_at(chat, "messages.2.tool_calls.0.id"), "c1") && eq(str_at(chat, "messages.3.role"), "tool") &&
            eq(str_at(chat, "messages.3.tool_call_id"), "c1") && cJSON_GetArraySize(cJSON_GetObjectItem(chat, "messages")) == 4,
        "function_call / function_call_output -> tool_calls (joined to the assistant turn) / tool message: %s",
        cr.chat_body);
  CHECK(chat && cJSON_IsTrue(cJSON_GetObjectItem(chat, "stream")), "stream passes");
  cJSON_Delete(chat);
  compat_request_free(&cr);

  /* mapped for the chat features being added: tools, tool_choice, text.format */
  api_error e;
  const char *tools = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\",\"parameters\":{\"type\":"
                      "\"object\"}}],\"tool_choice\":{\"type\":\"function\",\"name\":\"get\"},"
                      "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":{\"type\":\"object\"},"
                      "\"strict\":true}}}";
  bool ok = responses_translate(tools, strlen(tools), &c, &cr, &e);
  cJSON *j = ok ? cJSON_Parse(cr.chat_body) : NULL;
  CHECK(j && eq(str_at(j, "tools.0.type"), "function") && eq(str_at(j, "tools.0.function.name"), "get") &&
            eq(str_at(j, "tools.0.function.parameters.type"), "object") &&
            eq(str_at(j, "tool_choice.function.name"), "get"),
        "function tools and tool_choice -> the chat's shape");
  CHECK(j && eq(str_at(j, "response_format.type"), "json_schema") &&
            eq(str_at(j, "response_format.json_schema.name"), "s") &&
            eq(str_at(j, "response_format.json_schema.schema.type"), "object"),
        "text.format json_schema -> response_format (nested)");
  cJSON_Delete(j);
  compat_request_free(&cr);

  expect_refused(responses_translate, "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", &c, 400, "tools[0]",
                 "web_search");
  expect_refused(responses_translate, "{\"input\":\"x\",\"background\":true}", &c, 400, "background", "background");
  expect_refused(responses_translate, "{\"input\":\"x\",\"conversation\":\"conv_1\"}", &c, 400, "conversation", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\"}}", &c, 400, "reasoning", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"include\":[\"file_search_call.results\"]}", &c, 400, "include",
                 NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"truncation\":\"auto\"}", &c, 400, "truncation", NULL);
  expect_refused(responses_translate, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
                 &c, 400, "input[0].content[0]", "files API");
  expect_refused(responses_translate, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_data\":\"data:application/pdf;base64,AA\"}]}]}",
                 &c, 400, "input[0].content[0]", "input_file");
  expect_refused(responses_translate, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", &c, 400,
                 "input[0].content[0]", "input_audio");
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"reasoning\",\"id\":\"r\"}]}", &c, 400, "input[0]", "reasoning");
  expect_refused(responses_translate, "{\"input\":[{\"role\":\"bot\",\"content\":\"x\"}]}", &c, 400, "input[0]", "role");
  expect_refused(responses_translate, "{\"model\":\"qvl\"}", &c, 400, "input", "required");
  expect_refused(responses_translate, "{\"input\":5}", &c, 400, "input", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"max_output_tokens\":0}", &c, 400, "max_output_tokens", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}", &c, 400, "text.verbosity", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"previous_response_id\":\"resp_x\"}", &c, 404,
                 "previous_response_id", "not found");
  expect_refused(responses_translate, "[1]", &c, 400, NULL, "JSON object");
  expect_refused(responses_translate, "{\"input\":\"x\"} x", &c, 400, NULL, "extra data");
}

/* Runs a request through the formatter as the server does (optionally streamed); returns the body. */
static char *run_format(const compat_request *cr, bool stream, const char *const *pieces, const api_result *r) {
  if (!stream)
    return cr->fmt->result_json(cr->state, r);
  buf out = {0};
  for (int i = 0; pieces[i]; i++)
    cr->fmt->stream_text(cr->state, &out, pieces[i], strlen(pieces[i]));
  cr->fmt->stream_end(cr->state, &out, r);
  return out.data; /* taken */
}

/* A response repeats the sampling it ran with: the model's defaults when the request gave none. */
static void test_responses_sampling_echo(void) {
  compat_ctx c = ctx_with(NULL);
  sampler_params model = sampler_default_params();
  model.temperature = 0.3f;
  model.top_p = 0.55f;
  for (int i = 0; i < 2; i++) {
    c.sampling = i ? &model : NULL;
    compat_request cr;
    api_error e;
    const char *body = "{\"input\":\"hi\"}";
    CHECK(responses_translate(body, strlen(body), &c, &cr, &e), "translate: %s", e.message);
    api_result r = result_of("x", QVL_FINISH_EOS);
    char *json = run_format(&cr, false, NULL, &r);
    const char *want_t = i ? "\"temperature\":0.3," : "\"temperature\":0.7,";
    const char *want_p = i ? "\"top_p\":0.55," : "\"top_p\":0.8,";
    CHECK(json && strstr(json, want_t) && strstr(json, want_p), "%s defaults echoed as %s %s: %s",
          i ? "the model's" : "Qwen3-VL's", want_t, want_p, json ? json : "(null)");
    free(json);
    api_result_free(&r);
    compat_request_free(&cr);
  }
}

static void test_responses_format_and_store(void) {
  resp_store *st = NULL;
  CHECK(resp_store_init(8, 1 << 20, 3600, &st) == QVL_OK, "store");
  compat_ctx c = ctx_with(st);
  compat_request cr;
  api_error e;
  const char *body = "{\"input\":\"first\",\"instructions\":\"sys\",\"max_output_tokens\":3,\"metadata\":{\"k\":\"v\"}}";
  CHECK(responses_translate(body, strlen(body), &c, &cr, &e), "translate");
  api_result r = result_of("one two", QVL_FINISH_LENGTH);
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && eq(str_at(o, "object"), "response") && !strncmp(str_at(o, "id"), "resp_", 5) &&
            eq(str_at(o, "status"), "incomplete") && eq(str_at(o, "incomplete_details.reason"), "max_output_tokens"),
        "a response cut by max_output_tokens is incomplete: %s", json);
  CHECK(o && eq(str_at(o, "output.0.type"), "message") && eq(str_at(o, "output.0.role"), "assistant") &&
            eq(str_at(o, "output.0.content.0.type"), "output_text") && eq(str_at(o, "output.0.content.0.text"), "one two"),
        "output message");
  const cJSON *u = o ? cJSON_GetObjectItem(o, "usage") : NULL;
  CHECK(u && num_at(u, "input_tokens") == 11 && num_at(u, "output_tokens") == 3 && num_at(u, "total_tokens") == 14 &&
            num_at(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens") == 4,
        "usage in Responses terms");
  CHECK(o && eq(str_at(o, "instructions"), "sys") && eq(str_at(o, "metadata.k"), "v") &&
            cJSON_IsTrue(cJSON_GetObjectItem(o, "store")),
        "request settings echoed");
  char id[64];
  snprintf(id, sizeof id, "%s", o ? str_at(o, "id") : "");
  char msg_id[64];
  snprintf(msg_id, sizeof msg_id, "%s", o ? str_at(o, "output.0.id") : "");
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  /* continuing: the stored turns come first, the new instructions replace the old */
  char next[256];
  snprintf(next, sizeof next, "{\"input\":\"second\",\"previous_response_id\":\"%s\",\"instructions\":\"new\"}", id);
  cJSON *chat = translate(responses_translate, next, &c, &cr);
  CHECK(chat && cJSON_GetArraySize(cJSON_GetObjectItem(chat, "messages")) == 4 &&
            eq(str_at(chat, "messages.0.content"), "new") && eq(str_at(chat, "messages.1.content"), "first") &&
            eq(str_at(chat, "messages.2.role"), "assistant") && eq(str_at(chat, "messages.2.content"), "one two") &&
            eq(str_at(chat, "messages.3.content"), "second"),
        "previous_response_id prepends the stored conversation: %s", cr.chat_body);
  cJSON_Delete(chat);

  /* streamed: the event sequence, numbered, and the stored answer */
  const char *pieces[] = {"thr", "ee", NULL};
  r = result_of("three", QVL_FINISH_EOS);
  char *sse = run_format(&cr, true, pieces, &r);
  const char *order[] = {"response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                         "response.output_text.done", "response.content_part.done", "response.output_item.done",
                         "response.completed"};
  const char *p = sse;
  bool in_order = sse != NULL;
  for (size_t i = 0; i < sizeof order / sizeof order[0] && in_order; i++) {
    char ev[80];
    snprintf(ev, sizeof ev, "event: %s\ndata: ", order[i]);
    const char *q = p ? strstr(p, ev) : NULL;
    in_order = q != NULL;
    p = q ? q + strlen(ev) : NULL;
  }
  CHECK(in_order, "stream events in order: %s", sse ? sse : "(null)");
  CHECK(sse && strstr(sse, "\"sequence_number\":9") && !strstr(sse, "\"sequence_number\":10"), "sequence numbers 0..9");
  CHECK(sse && strstr(sse, "\"delta\":\"thr\"") && strstr(sse, "\"text\":\"three\""), "deltas and the done text");
  char rid[64];
  const char *idp = sse ? strstr(sse, "\"id\":\"resp_") : NULL;
  snprintf(rid, sizeof rid, "%.29s", idp ? idp + 6 : "");
  free(sse);
  api_result_free(&r);
  compat_request_free(&cr);
  char *kept = resp_store_get(st, rid, time_now_s());
  cJSON *conv = kept ? cJSON_Parse(kept) : NULL;
  CHECK(conv && cJSON_GetArraySize(conv) == 4 && eq(str_at(conv, "3.content"), "three") &&
            eq(str_at(conv, "0.content"), "first"),
        "the streamed answer is stored after the earlier turns, instructions left out: %s", kept ? kept : "(none)");
  cJSON_Delete(conv);
  free(kept);
  int n = 0;
  size_t bytes = 0;
  resp_store_usage(st, &n, &bytes);
  CHECK(n == 2 && bytes > 0, "both turns stored (%d)", n);

  /* item_reference to the first answer's message */
  char ref[256];
  snprintf(ref, sizeof ref, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"%s\"},{\"role\":\"user\",\"content\":\"more\"}]}",
           msg_id);
  chat = translate(responses_translate, ref, &c, &cr);
  CHECK(chat && eq(str_at(chat, "messages.0.role"), "assistant") && eq(str_at(chat, "messages.0.content"), "one two"),
        "item_reference resolves to the stored output message: %s", cr.chat_body);
  cJSON_Delete(chat);
  compat_request_free(&cr);
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_nope\"}]}", &c, 404,
                 "input[0]", "not found");

  /* a failure after the stream started */
  body = "{\"input\":\"x\",\"stream\":true}";
  CHECK(responses_translate(body, strlen(body), &c, &cr, &e), "translate");
  r = result_of("", QVL_FINISH_ERROR);
  r.status = QVL_ERR_TIMEOUT;
  snprintf(r.error, sizeof r.error, "took too long");
  const char *one[] = {"a", NULL};
  sse = run_format(&cr, true, one, &r);
  CHECK(sse && strstr(sse, "event: error\n") && strstr(sse, "event: response.failed\n") && strstr(sse, "took too long") &&
            !strstr(sse, "response.completed"),
        "error + response.failed: %s", sse ? sse : "");
  free(sse);
  api_result_free(&r);
  compat_request_free(&cr);
  resp_store_free(st);
}

/* ---- tool calls and logprobs on the Responses API ---------------------------------------------- */

#define CALL_TEXT "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

/* A result as the engine leaves it for a request with tools (parse_tools on). */
static api_result tool_result(const char *text) {
  api_result r = result_of(text, QVL_FINISH_EOS);
  r.agent.parse_tools = true;
  return r;
}

/* Logprobs of two tokens "Hi" and "!" with one alternative each (as api_logprobs_copy leaves them). */
static void add_logprobs(api_result *r) {
  api_logprobs *l = &r->lp;
  l->n = 2;
  l->n_top = 1;
  l->lp = malloc(2 * sizeof *l->lp);
  l->top_ids = malloc(2 * sizeof *l->top_ids);
  l->top_lp = malloc(2 * sizeof *l->top_lp);
  l->off = malloc(5 * sizeof *l->off);
  l->lp[0] = -0.5f;
  l->lp[1] = -0.25f;
  l->top_ids[0] = 7;
  l->top_ids[1] = 8;
  l->top_lp[0] = -0.5f;
  l->top_lp[1] = -0.25f;
  buf_append_str(&l->text, "HiHi!!"); /* token 0, its alternative, token 1, its alternative */
  const uint32_t off[5] = {0, 2, 4, 5, 6};
  memcpy(l->off, off, sizeof off);
  r->agent.logprobs = true;
  r->agent.top_logprobs = 1;
}

/* The data objects of an SSE body, in order (a cJSON array). */
static cJSON *sse_events(const char *sse) {
  cJSON *arr = cJSON_CreateArray();
  for (const char *p = sse; p && (p = strstr(p, "data: ")); p += 6) {
    const char *end = strstr(p, "\n\n");
    cJSON *j = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
    if (j)
      cJSON_AddItemToArray(arr, j);
  }
  return arr;
}

static void test_responses_tools(void) {
  resp_store *st = NULL;
  CHECK(resp_store_init(8, 1 << 20, 3600, &st) == QVL_OK, "store");
  compat_ctx c = ctx_with(st);
  compat_request cr;
  const char *tools = "{\"input\":\"weather?\",\"tools\":[{\"type\":\"function\",\"name\":\"get\",\"description\":\"d\","
                      "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                      "\"required\":[\"city\"],\"additionalProperties\":false},\"strict\":true}],"
                      "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
                      "\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":2}";
  cJSON *chat = translate(responses_translate, tools, &c, &cr);
  CHECK(chat && eq(str_at(chat, "tools.0.function.name"), "get") && eq(str_at(chat, "tool_choice"), "required") &&
            cJSON_IsFalse(cJSON_GetObjectItem(chat, "parallel_tool_calls")) &&
            cJSON_IsTrue(cJSON_GetObjectItem(chat, "logprobs")) && num_at(chat, "top_logprobs") == 2,
        "tools, tool_choice, parallel_tool_calls, include logprobs, top_logprobs -> the chat's: %s",
        cr.chat_body ? cr.chat_body : "");
  cJSON_Delete(chat);

  /* not streamed: the text before the call is the message, the call a function_call item */
  api_result r = tool_result("Let me check.\n" CALL_TEXT);
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && eq(str_at(o, "status"), "completed") && cJSON_GetArraySize(cJSON_GetObjectItem(o, "output")) == 2 &&
            eq(str_at(o, "output.0.type"), "message") && eq(str_at(o, "output.0.content.0.text"), "Let me check."),
        "text before the call -> the message: %s", json);
  CHECK(o && eq(str_at(o, "output.1.type"), "function_call") && eq(str_at(o, "output.1.name"), "get") &&
            eq(str_at(o, "output.1.arguments"), "{\"city\": \"Paris\"}") && eq(str_at(o, "output.1.status"), "completed") &&
            str_at(o, "output.1.call_id") && !strncmp(str_at(o, "output.1.call_id"), "call_", 5) &&
            str_at(o, "output.1.id") && !strncmp(str_at(o, "output.1.id"), "fc_", 3),
        "the call -> a function_call item (id fc_, call_id call_, name, arguments): %s", json);
  char rid[64], call_id[64], fc_id[64], msg_id[64];
  snprintf(rid, sizeof rid, "%s", o && str_at(o, "id") ? str_at(o, "id") : "");
  snprintf(call_id, sizeof call_id, "%s", o && str_at(o, "output.1.call_id") ? str_at(o, "output.1.call_id") : "");
  snprintf(fc_id, sizeof fc_id, "%s", o && str_at(o, "output.1.id") ? str_at(o, "output.1.id") : "");
  snprintf(msg_id, sizeof msg_id, "%s", o && str_at(o, "output.0.id") ? str_at(o, "output.0.id") : "");
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  /* the stored turn holds the call: the tool result continues it */
  char next[512];
  snprintf(next, sizeof next,
           "{\"previous_response_id\":\"%s\",\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"%s\","
           "\"output\":\"{\\\"temp\\\":21}\"}],\"tools\":[{\"type\":\"function\",\"name\":\"get\"}]}",
           rid, call_id);
  chat = translate(responses_translate, next, &c, &cr);
  CHECK(chat && eq(str_at(chat, "messages.1.role"), "assistant") && eq(str_at(chat, "messages.1.content"), "Let me check.") &&
            eq(str_at(chat, "messages.1.tool_calls.0.id"), call_id) &&
            eq(str_at(chat, "messages.1.tool_calls.0.function.arguments"), "{\"city\": \"Paris\"}") &&
            eq(str_at(chat, "messages.2.role"), "tool") && eq(str_at(chat, "messages.2.tool_call_id"), call_id) &&
            eq(str_at(chat, "messages.2.content"), "{\"temp\":21}"),
        "previous_response_id + function_call_output -> assistant tool_calls + tool message: %s",
        cr.chat_body ? cr.chat_body : "");
  cJSON_Delete(chat);
  compat_request_free(&cr);
  /* item references to the message and the call rebuild the same assistant turn */
  snprintf(next, sizeof next,
           "{\"input\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"type\":\"item_reference\",\"id\":\"%s\"},"
           "{\"type\":\"item_reference\",\"id\":\"%s\"},{\"type\":\"function_call_output\",\"call_id\":\"%s\","
           "\"output\":[{\"type\":\"input_text\",\"text\":\"21\"}]}]}",
           msg_id, fc_id, call_id);
  chat = translate(responses_translate, next, &c, &cr);
  CHECK(chat && cJSON_GetArraySize(cJSON_GetObjectItem(chat, "messages")) == 3 &&
            eq(str_at(chat, "messages.1.content"), "Let me check.") && eq(str_at(chat, "messages.1.tool_calls.0.id"), call_id) &&
            eq(str_at(chat, "messages.2.content.0.text"), "21"),
        "item_reference msg_ + fc_ -> one assistant turn; output parts -> tool content: %s", cr.chat_body ? cr.chat_body : "");
  cJSON_Delete(chat);
  compat_request_free(&cr);

  /* streamed: text until the call as deltas, then the function_call item's events */
  CHECK(responses_translate(tools, strlen(tools), &c, &cr, &(api_error){0}), "translate");
  r = tool_result("Let me check.\n" CALL_TEXT);
  const char *pieces[] = {"Let me", " check.\n", "<tool_", "call>\n{\"name\": \"get\", \"arguments\": {\"city\": ",
                          "\"Paris\"}}\n</tool_call>", NULL};
  char *sse = run_format(&cr, true, pieces, &r);
  cJSON *ev = sse ? sse_events(sse) : NULL;
  const char *order[] = {"response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                         "response.output_text.done", "response.content_part.done", "response.output_item.done",
                         "response.output_item.added", "response.function_call_arguments.delta",
                         "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  bool seq_ok = ev && cJSON_GetArraySize(ev) == (int)(sizeof order / sizeof order[0]);
  buf deltas = {0}, args = {0};
  int k = 0;
  for (const cJSON *x = ev ? ev->child : NULL; x && seq_ok; x = x->next, k++) {
    seq_ok = eq(str_at(x, "type"), order[k]) && num_at(x, "sequence_number") == k;
    if (eq(str_at(x, "type"), "response.output_text.delta"))
      buf_append_str(&deltas, str_at(x, "delta"));
    if (eq(str_at(x, "type"), "response.function_call_arguments.delta")) {
      buf_append_str(&args, str_at(x, "delta"));
      seq_ok = seq_ok && num_at(x, "output_index") == 1 && eq(str_at(x, "item_id"), str_at(cJSON_GetArrayItem(ev, 9), "item.id"));
    }
  }
  CHECK(seq_ok, "stream events of a message and a call, in order: %s", sse ? sse : "");
  buf_append(&deltas, "", 1);
  buf_append(&args, "", 1);
  CHECK(eq(deltas.data, "Let me check.") && eq(str_at(cJSON_GetArrayItem(ev, 6), "text"), "Let me check."),
        "deltas hold back the call and the whitespace before it: '%s'", deltas.data);
  const cJSON *added = cJSON_GetArrayItem(ev, 9), *fin = cJSON_GetArrayItem(ev, 13);
  CHECK(eq(str_at(added, "item.type"), "function_call") && eq(str_at(added, "item.status"), "in_progress") &&
            eq(str_at(added, "item.arguments"), "") && eq(str_at(added, "item.name"), "get") &&
            num_at(added, "output_index") == 1,
        "output_item.added: the function_call in progress");
  CHECK(eq(args.data, "{\"city\": \"Paris\"}") &&
            eq(str_at(cJSON_GetArrayItem(ev, 11), "arguments"), args.data) &&
            eq(str_at(cJSON_GetArrayItem(ev, 12), "item.arguments"), args.data) &&
            eq(str_at(cJSON_GetArrayItem(ev, 12), "item.status"), "completed"),
        "argument deltas add up to the arguments of .done and the finished item: '%s'", args.data);
  CHECK(eq(str_at(fin, "response.output.1.type"), "function_call") &&
            eq(str_at(fin, "response.output.1.call_id"), str_at(added, "item.call_id")) &&
            eq(str_at(fin, "response.output.0.content.0.text"), "Let me check."),
        "response.completed carries the message and the call");
  buf_free(&deltas);
  buf_free(&args);
  cJSON_Delete(ev);
  free(sse);
  api_result_free(&r);
  compat_request_free(&cr);

  /* only a call (a forced tool_choice): no message item at all */
  CHECK(responses_translate(tools, strlen(tools), &c, &cr, &(api_error){0}), "translate");
  r = tool_result(CALL_TEXT);
  const char *one[] = {CALL_TEXT, NULL};
  sse = run_format(&cr, true, one, &r);
  ev = sse ? sse_events(sse) : NULL;
  CHECK(ev && cJSON_GetArraySize(ev) == 7 && eq(str_at(cJSON_GetArrayItem(ev, 2), "item.type"), "function_call") &&
            num_at(cJSON_GetArrayItem(ev, 2), "output_index") == 0 &&
            cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 6), "response"), "output")) == 1,
        "a call alone: its item at output_index 0, no message: %s", sse ? sse : "");
  cJSON_Delete(ev);
  free(sse);
  json = run_format(&cr, false, NULL, &r);
  o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && cJSON_GetArraySize(cJSON_GetObjectItem(o, "output")) == 1 && eq(str_at(o, "output.0.type"), "function_call"),
        "not streamed: the call alone: %s", json);
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  /* logprobs: the chat's entries in output_text.logprobs, also in the streamed .done events */
  const char *lpb = "{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":1}";
  CHECK(responses_translate(lpb, strlen(lpb), &c, &cr, &(api_error){0}), "translate");
  r = result_of("Hi!", QVL_FINISH_EOS);
  add_logprobs(&r);
  json = run_format(&cr, false, NULL, &r);
  o = json ? cJSON_Parse(json) : NULL;
  const cJSON *lp = o ? cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "output"), 0), "content"), 0), "logprobs") : NULL;
  CHECK(cJSON_GetArraySize(lp) == 2 && eq(str_at(lp, "0.token"), "Hi") && num_at(cJSON_GetArrayItem(lp, 0), "logprob") == -0.5 &&
            cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(lp, 0), "bytes")) == 2 &&
            eq(str_at(lp, "1.top_logprobs.0.token"), "!") && num_at(cJSON_GetArrayItem(lp, 1), "logprob") == -0.25,
        "output_text.logprobs: token, logprob, bytes, top_logprobs: %s", json);
  cJSON_Delete(o);
  free(json);
  const char *hi[] = {"Hi", "!", NULL};
  sse = run_format(&cr, true, hi, &r);
  ev = sse ? sse_events(sse) : NULL;
  const cJSON *done = NULL;
  for (const cJSON *x = ev ? ev->child : NULL; x; x = x->next)
    if (eq(str_at(x, "type"), "response.output_text.done"))
      done = x;
  CHECK(done && cJSON_GetArraySize(cJSON_GetObjectItem(done, "logprobs")) == 2 && eq(str_at(done, "logprobs.1.token"), "!"),
        "streamed: output_text.done carries the logprobs: %s", sse ? sse : "");
  cJSON_Delete(ev);
  free(sse);
  api_result_free(&r);
  compat_request_free(&cr);
  r = result_of("Hi!", QVL_FINISH_EOS);
  add_logprobs(&r);
  r.agent.logprobs = false; /* not asked: [] as before */
  CHECK(responses_translate("{\"input\":\"x\"}", 13, &c, &cr, &(api_error){0}), "translate");
  json = run_format(&cr, false, NULL, &r);
  CHECK(json && strstr(json, "\"logprobs\":[]"), "no logprobs unless asked: %s", json);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  /* malformed tool input: 400 naming it */
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"call_x\",\"output\":\"1\"}]}",
                 &c, 400, "input[0]", "call_x");
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"function_call_output\",\"output\":\"1\"}]}", &c, 400, "input[0]",
                 "call_id");
  expect_refused(responses_translate,
                 "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{nope\"}]}", &c, 400,
                 "input[0]", "JSON object");
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"arguments\":\"{}\"}]}", &c,
                 400, "input[0]", "name");
  expect_refused(responses_translate,
                 "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
                 "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":5}]}",
                 &c, 400, "input[1]", "output");
  expect_refused(responses_translate, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &c,
                 400, "tools[0].name", "flat");
  expect_refused(responses_translate, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":3}]}", &c,
                 400, "tools[0].parameters", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"tool_choice\":{\"type\":\"web_search\"}}", &c, 400, "tool_choice", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"include\":\"message.output_text.logprobs\"}", &c, 400, "include", NULL);
  expect_refused(responses_translate, "{\"input\":\"x\",\"top_logprobs\":21}", &c, 400, "top_logprobs", NULL);
  expect_refused(responses_translate, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"fc_nope_0\"}]}", &c, 404, "input[0]",
                 "not found");
  resp_store_free(st);
}

/* ---- tool calls on the Ollama API ---------------------------------------------------------------- */

static void test_ollama_tools(void) {
  compat_ctx c = ctx_with(NULL);
  compat_request cr;
  const char *body =
      "{\"model\":\"qvl\",\"stream\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\","
      "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],\"tool_choice\":\"required\","
      "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}}]},"
      "{\"role\":\"tool\",\"content\":\"21C\",\"tool_name\":\"get\"}]}";
  cJSON *chat = translate(ollama_chat_translate, body, &c, &cr);
  const cJSON *args = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(chat, "messages"), 1), "tool_calls"), 0), "function"), "arguments") : NULL;
  CHECK(chat && eq(str_at(chat, "tools.0.function.name"), "get") && eq(str_at(chat, "tool_choice"), "required") &&
            eq(str_at(chat, "messages.1.tool_calls.0.function.name"), "get") && eq(str_at(chat, "messages.1.tool_calls.0.type"), "function") &&
            str_at(chat, "messages.1.tool_calls.0.id") && cJSON_IsObject(args) && eq(str_at(args, "city"), "Paris") &&
            eq(str_at(chat, "messages.2.role"), "tool") && eq(str_at(chat, "messages.2.content"), "21C"),
        "tools, tool_calls (arguments an object), tool messages -> the chat's: %s", cr.chat_body ? cr.chat_body : "");
  cJSON_Delete(chat);
  api_result r = tool_result("Sure.\n" CALL_TEXT);
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  const cJSON *oa = o ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "message"), "tool_calls"), 0), "function"), "arguments") : NULL;
  CHECK(o && eq(str_at(o, "message.content"), "Sure.") && eq(str_at(o, "message.tool_calls.0.function.name"), "get") &&
            cJSON_IsObject(oa) && eq(str_at(oa, "city"), "Paris") &&
            num_at(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "message"), "tool_calls"), 0), "function"), "index") == 0 &&
            eq(str_at(o, "done_reason"), "stop") && cJSON_IsTrue(cJSON_GetObjectItem(o, "done")),
        "answer: message.tool_calls with the arguments as an object, done_reason stop: %s", json);
  cJSON_Delete(o);
  free(json);
  const char *pieces[] = {"Sure.", "\n<tool_", "call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", NULL};
  char *nd = run_format(&cr, true, pieces, &r);
  int lines = 0, with_calls = 0;
  bool leak = nd && strstr(nd, "tool_call>");
  buf content = {0};
  for (char *p = nd, *q; p && (q = strchr(p, '\n')); p = q + 1, lines++) {
    cJSON *l = cJSON_ParseWithLength(p, (size_t)(q - p));
    if (str_at(l, "message.content"))
      buf_append_str(&content, str_at(l, "message.content"));
    if (cJSON_GetObjectItem(cJSON_GetObjectItem(l, "message"), "tool_calls")) {
      with_calls++;
      CHECK(cJSON_IsFalse(cJSON_GetObjectItem(l, "done")) && eq(str_at(l, "message.tool_calls.0.function.arguments.city"), "Paris"),
            "the calls' line: done false, arguments an object");
    }
    cJSON_Delete(l);
  }
  buf_append(&content, "", 1);
  CHECK(nd && !leak && with_calls == 1 && eq(content.data, "Sure.") && strstr(nd, "\"done\":true,\"done_reason\":\"stop\""),
        "NDJSON: the text, a line with the calls, the done line (%d lines): %s", lines, nd ? nd : "");
  buf_free(&content);
  free(nd);
  api_result_free(&r);
  compat_request_free(&cr);
  /* tools without a call in the output: plain text stays content, no tool_calls */
  CHECK(ollama_chat_translate(body, strlen(body), &c, &cr, &(api_error){0}), "translate");
  r = tool_result("no call here");
  json = run_format(&cr, false, NULL, &r);
  CHECK(json && strstr(json, "\"content\":\"no call here\"") && !strstr(json, "tool_calls"), "no call: plain content: %s", json);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  const char *u = "{\"role\":\"user\",\"content\":\"x\"}";
  char bad_body[512];
#define OLLAMA_REFUSED(msg, part)                                                                              \
  snprintf(bad_body, sizeof bad_body, "{\"model\":\"qvl\",\"messages\":[%s,%s]}", u, msg);                    \
  expect_refused(ollama_chat_translate, bad_body, &c, 400, "messages[1]", part)
  OLLAMA_REFUSED("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":{\"function\":{}}}", "array");
  OLLAMA_REFUSED("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"arguments\":{}}}]}", "name");
  OLLAMA_REFUSED("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"name\":\"f\"}]}", "function");
  OLLAMA_REFUSED("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}",
                 "JSON object");
  OLLAMA_REFUSED("{\"role\":\"user\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}", "assistant");
  OLLAMA_REFUSED("{\"role\":\"tool\",\"content\":\"1\",\"tool_name\":5}", "tool_name");
  OLLAMA_REFUSED("{\"role\":\"tool\",\"content\":\"1\",\"tool_call_id\":[]}", "tool_call_id");
#undef OLLAMA_REFUSED
  cJSON *empty = translate(ollama_chat_translate,
                           "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", &c, &cr);
  CHECK(empty && !cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(empty, "messages"), 0), "tool_calls"),
        "tool_calls [] on a user message: no calls");
  cJSON_Delete(empty);
  compat_request_free(&cr);
  expect_refused(ollama_generate_translate,
                 "{\"model\":\"qvl\",\"prompt\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &c,
                 400, "tools", "/api/chat");
}

static void test_resp_store(void) {
  resp_store *st = NULL;
  CHECK(resp_store_init(2, 100, 10, &st) == QVL_OK, "init");
  CHECK(resp_store_put(st, "a", "[1]", 0) == QVL_OK && resp_store_put(st, "b", "[2]", 1) == QVL_OK, "put");
  char *x = resp_store_get(st, "a", 2); /* a is now the most recent */
  CHECK(x && !strcmp(x, "[1]"), "get a");
  free(x);
  CHECK(resp_store_put(st, "c", "[3]", 3) == QVL_OK, "put c");
  x = resp_store_get(st, "b", 3);
  CHECK(!x, "b (least recently used) evicted by the entry cap");
  free(x);
  x = resp_store_get(st, "a", 3);
  CHECK(x != NULL, "a kept");
  free(x);
  x = resp_store_get(st, "a", 20);
  CHECK(!x, "a expired after the ttl");
  free(x);
  char big[120];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK(resp_store_put(st, "d", big, 21) == QVL_ERR_TOO_LARGE, "an entry over the byte cap is refused");
  char mid[60];
  memset(mid, 'y', sizeof mid - 1);
  mid[sizeof mid - 1] = '\0';
  CHECK(resp_store_put(st, "e", mid, 22) == QVL_OK && resp_store_put(st, "f", mid, 23) == QVL_OK, "two halves");
  int n = 0;
  size_t bytes = 0;
  resp_store_usage(st, &n, &bytes);
  CHECK(n == 1 && bytes <= 100, "the byte cap evicts (%d entries, %zu bytes)", n, bytes);
  CHECK(resp_store_put(st, "f", "[9]", 24) == QVL_OK, "replace");
  x = resp_store_get(st, "f", 24);
  CHECK(x && !strcmp(x, "[9]"), "replaced value");
  free(x);
  resp_store_free(st);
}

/* ---- legacy completions ---------------------------------------------------------------------- */

static void test_completions(void) {
  compat_ctx c = ctx_with(NULL);
  compat_request cr;
  cJSON *chat = translate(completions_translate, "{\"model\":\"qvl\",\"prompt\":\"Once\",\"temperature\":0,\"echo\":true}",
                          &c, &cr);
  CHECK(cr.raw && eq(cr.raw_text, "Once") && cr.raw_len == 4 && !cr.raw_ids, "a string prompt is raw text");
  CHECK(chat && num_at(chat, "max_tokens") == COMPLETIONS_DEFAULT_MAX_TOKENS, "max_tokens defaults to 16");
  cJSON_Delete(chat);
  api_result r = result_of(" upon", QVL_FINISH_EOS);
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && eq(str_at(o, "object"), "text_completion") && eq(str_at(o, "choices.0.text"), "Once upon") &&
            eq(str_at(o, "choices.0.finish_reason"), "stop") && !strncmp(str_at(o, "id"), "cmpl-", 5),
        "text_completion with echo: %s", json);
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);

  chat = translate(completions_translate, "{\"prompt\":[[5,6,7]],\"max_tokens\":4,\"stream\":true}", &c, &cr);
  CHECK(cr.raw && cr.n_raw_ids == 3 && cr.raw_ids[2] == 7 && !cr.raw_text, "[[ids]] -> raw ids");
  cJSON_Delete(chat);
  const char *pieces[] = {"a", "b", NULL};
  r = result_of("ab", QVL_FINISH_LENGTH);
  char *sse = run_format(&cr, true, pieces, &r);
  CHECK(sse && strstr(sse, "\"text\":\"a\"") && strstr(sse, "\"finish_reason\":\"length\"") &&
            strstr(sse, "\"usage\":{") && strstr(sse, "data: [DONE]\n\n"),
        "stream: chunks, final with usage (--stream-usage), [DONE]: %s", sse ? sse : "");
  free(sse);
  api_result_free(&r);
  compat_request_free(&cr);

  chat = translate(completions_translate, "{\"prompt\":[\"only one\"],\"logprobs\":0,\"best_of\":1,\"suffix\":\"\"}", &c, &cr);
  CHECK(eq(cr.raw_text, "only one"), "[string] -> raw text; neutral logprobs/best_of/suffix accepted");
  cJSON_Delete(chat);
  compat_request_free(&cr);
  expect_refused(completions_translate, "{\"prompt\":\"x\",\"suffix\":\"y\"}", &c, 400, "suffix", NULL);
  expect_refused(completions_translate, "{\"prompt\":[\"x\",\"y\"]}", &c, 400, "prompt", "one prompt");
  expect_refused(completions_translate, "{\"prompt\":[[1],[2]]}", &c, 400, "prompt", "one prompt");
  expect_refused(completions_translate, "{\"prompt\":[1,-2]}", &c, 400, "prompt", NULL);
  expect_refused(completions_translate, "{\"prompt\":[]}", &c, 400, "prompt", NULL);
  expect_refused(completions_translate, "{\"prompt\":\"\"}", &c, 400, "prompt", "empty");
  expect_refused(completions_translate, "{}", &c, 400, "prompt", "required");
  expect_refused(completions_translate, "{\"prompt\":[1,2],\"echo\":true}", &c, 400, "echo", "text prompt");
  expect_refused(completions_translate, "{\"prompt\":\"x\",\"logprobs\":3}", &c, 400, "logprobs", NULL);
  expect_refused(completions_translate, "{\"prompt\":\"x\",\"best_of\":2}", &c, 400, "best_of", NULL);
}

/* ---- Ollama ---------------------------------------------------------------------------------- */

static void test_ollama(void) {
  compat_ctx c = ctx_with(NULL);
  compat_request cr;
  cJSON *chat = translate(ollama_chat_translate,
                          "{\"model\":\"qvl:latest\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                          "{\"role\":\"user\",\"content\":\"what?\",\"images\":[\"iVBORw0KGgo=\",\"/9j/4AAQ\"]}],"
                          "\"options\":{\"temperature\":0.2,\"num_predict\":9,\"repeat_penalty\":1.1,\"top_k\":5,"
                          "\"num_ctx\":4096,\"mirostat\":0,\"stop\":[\"x\"]},\"keep_alive\":\"5m\"}",
                          &c, &cr);
  CHECK(chat && eq(str_at(chat, "model"), "qvl"), "':latest' is the bare name");
  CHECK(chat && cJSON_IsTrue(cJSON_GetObjectItem(chat, "stream")), "Ollama streams by default");
  CHECK(chat && eq(str_at(chat, "messages.1.content.0.image_url.url"), "data:image/png;base64,iVBORw0KGgo=") &&
            eq(str_at(chat, "messages.1.content.1.image_url.url"), "data:image/jpeg;base64,/9j/4AAQ") &&
            eq(str_at(chat, "messages.1.content.2.text"), "what?"),
        "images -> image parts (type from the bytes), then the text");
  CHECK(chat && num_at(chat, "max_tokens") == 9 && fabs(num_at(chat, "repetition_penalty") - 1.1) < 1e-9 &&
            num_at(chat, "top_k") == 5 && eq(str_at(chat, "stop.0"), "x") && !cJSON_GetObjectItem(chat, "num_ctx"),
        "options -> sampling fields; runtime options dropped");
  cJSON_Delete(chat);
  api_result r = result_of("hi", QVL_FINISH_EOS);
  r.t.decode_ms = 2;
  r.t.prefill_ms = 1;
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && eq(str_at(o, "model"), "qvl:latest") && eq(str_at(o, "message.role"), "assistant") &&
            eq(str_at(o, "message.content"), "hi") && cJSON_IsTrue(cJSON_GetObjectItem(o, "done")) &&
            eq(str_at(o, "done_reason"), "stop") && num_at(o, "eval_count") == 3 && num_at(o, "prompt_eval_count") == 11 &&
            num_at(o, "eval_duration") == 2e6 && str_at(o, "created_at"),
        "chat answer: %s", json);
  cJSON_Delete(o);
  free(json);
  const char *pieces[] = {"h", "i", NULL};
  char *nd = run_format(&cr, true, pieces, &r);
  int lines = 0;
  for (const char *p = nd; p && (p = strchr(p, '\n')); p++)
    lines++;
  CHECK(nd && lines == 3 && strstr(nd, "\"done\":false") && strstr(nd, "\"done\":true,\"done_reason\":\"stop\""),
        "NDJSON: a line per piece and a last done line: %s", nd ? nd : "");
  free(nd);
  api_result_free(&r);
  compat_request_free(&cr);

  chat = translate(ollama_generate_translate,
                   "{\"model\":\"qvl\",\"prompt\":\"why?\",\"system\":\"s\",\"images\":[\"UklGRg==\"],\"stream\":false}", &c,
                   &cr);
  CHECK(chat && eq(str_at(chat, "messages.0.role"), "system") &&
            eq(str_at(chat, "messages.1.content.0.image_url.url"), "data:image/webp;base64,UklGRg==") &&
            cJSON_IsFalse(cJSON_GetObjectItem(chat, "stream")) && !cr.raw,
        "generate: system + prompt with an image");
  cJSON_Delete(chat);
  r = result_of("because", QVL_FINISH_LENGTH);
  json = run_format(&cr, false, NULL, &r);
  CHECK(json && strstr(json, "\"response\":\"because\"") && strstr(json, "\"done_reason\":\"length\""), "generate answer");
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);
  chat = translate(ollama_generate_translate, "{\"model\":\"qvl\",\"prompt\":\"<|im_start|>raw\",\"raw\":true}", &c, &cr);
  CHECK(cr.raw && eq(cr.raw_text, "<|im_start|>raw"), "raw: the prompt as given");
  cJSON_Delete(chat);
  compat_request_free(&cr);
  translate(ollama_generate_translate, "{\"model\":\"qvl\"}", &c, &cr);
  CHECK(cr.reply_body && cr.reply_status == 200 && strstr(cr.reply_body, "\"done_reason\":\"load\""),
        "an empty prompt is answered at once");
  compat_request_free(&cr);
  /* not through the chat parser: it refuses response_format until structured output lands */
  const char *fj = "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"format\":\"json\"}";
  api_error fe;
  CHECK(ollama_chat_translate(fj, strlen(fj), &c, &cr, &fe) && cr.chat_body &&
            strstr(cr.chat_body, "\"response_format\":{\"type\":\"json_object\"}"),
        "format json -> response_format");
  compat_request_free(&cr);

  expect_refused(ollama_chat_translate, "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"options\":{\"mirostat\":2}}",
                 &c, 400, "options", "mirostat");
  expect_refused(ollama_chat_translate, "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"options\":{\"foo\":1}}",
                 &c, 400, "options", "foo");
  expect_refused(ollama_chat_translate, "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"think\":true}",
                 &c, 400, "think", NULL);
  expect_refused(ollama_chat_translate, "{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"images\":[5]}]}",
                 &c, 400, "messages[0]", "base64");
  expect_refused(ollama_chat_translate, "{\"model\":\"qvl\",\"messages\":[]}", &c, 400, "messages", NULL);
  expect_refused(ollama_generate_translate, "{\"model\":\"qvl\",\"prompt\":\"x\",\"suffix\":\"y\"}", &c, 400, "suffix", NULL);
  expect_refused(ollama_generate_translate, "{\"model\":\"qvl\",\"prompt\":\"x\",\"context\":[1,2]}", &c, 400, "context", NULL);
  char *err = ollama_format.error_json(NULL, &(api_error){.http = 404, .message = "gone"});
  CHECK(err && !strcmp(err, "{\"error\":\"gone\"}"), "Ollama's error shape: %s", err ? err : "");
  free(err);

  /* the information endpoints: the status, a part of the body and of the Allow header where given */
  static const struct {
    const char *path, *method, *body;
    int status;
    const char *in_body, *in_allow, *what;
  } info[] = {
      {"/api/tags", "GET", "", 200, "\"name\":\"e2e-Q8_0.gguf\"", NULL, "tags"},
      {"/api/ps", "GET", "", 200, "\"expires_at\"", NULL, "ps"},
      {"/api/version", "GET", "", 200, OLLAMA_API_VERSION, NULL, "version"},
      {"/api/show", "POST", "{\"model\":\"e2e-Q8_0.gguf:latest\"}", 200, "\"vision\"", NULL, "show"},
      {"/api/show", "POST", "{\"model\":\"llama3\"}", 404, "llama3", NULL, "show of another model -> 404"},
      {"/api/pull", "POST", "{}", 501, "not supported", NULL, "pull -> 501"},
      {"/api/embed", "POST", "{}", 501, NULL, NULL, "embed -> 501"},
      {"/api/tags", "POST", "", 405, NULL, "GET", "tags with POST -> 405 + Allow"},
      {"/api/nothing", "GET", "", 404, NULL, NULL, "unknown /api/ path -> 404"},
  };
  int status = 0;
  const char *allow = NULL;
  char *j;
  for (size_t i = 0; i < sizeof info / sizeof info[0]; i++) {
    j = ollama_info(info[i].path, info[i].method, info[i].body, strlen(info[i].body), &c, &status, &allow);
    CHECK(status == info[i].status && (!info[i].in_body || (j && strstr(j, info[i].in_body))) &&
              (!info[i].in_allow || (allow && strstr(allow, info[i].in_allow))),
          "%s: status %d: %s", info[i].what, status, j ? j : "");
    free(j);
  }
  compat_ctx loading = c;
  loading.model_id = NULL;
  j = ollama_info("/api/tags", "GET", "", 0, &loading, &status, &allow);
  CHECK(status == 503, "tags while loading -> 503");
  free(j);
}

/* ---- chat extras and the sampler -------------------------------------------------------------- */

static void test_chat_extras(void) {
  api_limits l = limits();
  api_chat_request req;
  api_error e;
  const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
                     "{\"type\":\"file\",\"file\":{\"file_data\":\"data:image/png;base64,AAAA\",\"filename\":\"a.png\"}}]}],"
                     "\"logit_bias\":{\"15\":100,\"7\":-100.0}}";
  bool ok = api_chat_parse(body, strlen(body), &l, &req, &e);
  CHECK(ok, "file part + logit_bias: %s", e.message);
  if (ok) {
    CHECK(req.n_images == 1, "the file part counts as an image");
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(req.messages, 0), "content"), 1);
    CHECK(eq(str_at(part, "type"), "image_url") && eq(str_at(part, "image_url.url"), "data:image/png;base64,AAAA") &&
              !cJSON_GetObjectItem(part, "file"),
          "rewritten into an image_url part");
    const sampler_params *sp = &req.gen.sampling;
    CHECK(sp->n_bias == 2 && sp->bias_ids[0] == 15 && sp->bias[0] == 100 && sp->bias_ids[1] == 7 && sp->bias[1] == -100,
          "logit_bias parsed");
    api_chat_request_free(&req);
  }
  static const struct {
    const char *body, *param;
  } bad[] = {
      {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{\"file_id\":\"file-1\"}}]}]}",
       "messages[0].content[0]"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{\"file_data\":\"data:application/pdf;base64,AA\"}}]}]}",
       "messages[0].content[0]"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"a\":1}}", "logit_bias"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1\":101}}", "logit_bias"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"-1\":1}}", "logit_bias"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[1]}", "logit_bias"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"audio\":{\"voice\":\"a\"}}", "audio"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"low\"}", "reasoning_effort"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\"}}", "prediction"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"web_search_options\":{}}", "web_search_options"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"text\",\"audio\"]}", "modalities"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ok = api_chat_parse(bad[i].body, strlen(bad[i].body), &l, &req, &e);
    CHECK(!ok && e.http == 400 && !strcmp(e.param, bad[i].param), "%s: expected 400 naming %s, got %d '%s'", bad[i].body,
          bad[i].param, ok ? 200 : e.http, ok ? "" : e.param);
    if (ok)
      api_chat_request_free(&req);
  }
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"text\"]}";
  ok = api_chat_parse(body, strlen(body), &l, &req, &e);
  CHECK(ok, "modalities [text] is fine");
  if (ok)
    api_chat_request_free(&req);

  /* the final chunk with usage, for clients that do not ask (--stream-usage) */
  api_result r = result_of("x", QVL_FINISH_EOS);
  char *chunk = api_chunk_json("chatcmpl-1", 1, "m", false, NULL, 0, "stop");
  chunk = compat_chunk_add_usage(chunk, "chatcmpl-1", 1, "m", &r);
  cJSON *o = chunk ? cJSON_Parse(chunk) : NULL;
  CHECK(o && eq(str_at(o, "choices.0.finish_reason"), "stop") && num_at(cJSON_GetObjectItem(o, "usage"), "total_tokens") == 14 &&
            cJSON_GetObjectItem(o, "timings"),
        "usage on the finish chunk: %s", chunk ? chunk : "");
  cJSON_Delete(o);
  free(chunk);
  api_result_free(&r);
}

static void test_sampler_bias(void) {
  sampler_params p = sampler_default_params();
  p.n_bias = 2;
  p.bias_ids[0] = 3;
  p.bias[0] = 5;
  p.bias_ids[1] = 1;
  p.bias[1] = -100;
  sampler *s = NULL;
  CHECK(sampler_init(&p, 8, &s) == QVL_OK, "init with biases");
  float logits[8] = {0, 9, 0, 4.5f, 0, 0, 0, 0}; /* greedy: 1 without biases */
  CHECK(s && sampler_sample(s, logits) == 3, "-100 bans token 1, +5 lifts token 3 over the rest");
  sampler_free(s);
  p.bias_ids[0] = 8;
  CHECK(sampler_init(&p, 8, &s) == QVL_ERR_INVALID_ARG, "a bias outside the vocabulary is refused");
  p.bias_ids[0] = 3;
  p.bias[0] = NAN;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "a NaN bias is refused");
  p.bias[0] = 1;
  p.n_bias = SAMPLER_MAX_BIAS + 1;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "too many biases are refused");
}

/* Stored conversations keep the processed form: image data URLs become qvl-media keys backed by
 * the result's media (hash, grid, bytes by reference); a follow-up resolves them, never re-reads. */
static void test_responses_processed_media(void) {
  resp_store *st = NULL;
  CHECK(resp_store_init(8, 1 << 20, 3600, &st) == QVL_OK, "store");
  compat_ctx c = ctx_with(st);
  compat_request cr;
  api_error e;
  const char *body = "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":"
                     "\"data:image/png;base64,QUFBQQ==\"},{\"type\":\"input_image\",\"image_url\":"
                     "\"data:image/png;base64,QkJCQg==\"},{\"type\":\"input_text\",\"text\":\"two\"}]}]}";
  CHECK(responses_translate(body, strlen(body), &c, &cr, &e), "translate: %s", e.message);
  CHECK(cr.keep_media && !cr.resolve_media, "a stored request keeps its images' bytes; nothing to resolve yet");
  api_result r = result_of("ok", QVL_FINISH_EOS);
  buf b0 = {0}, b1 = {0};
  buf_append_str(&b0, "0123456789");
  buf_append_str(&b1, "abcdefghijklmnopqrst");
  rcbuf *bytes0 = rcbuf_take(&b0), *bytes1 = rcbuf_take(&b1);
  r.media = calloc(2, sizeof *r.media);
  r.n_media = 2;
  r.media[0] = (api_media){.index = 0, .ref = {.bytes_key = 0x1111, .hash = 0xaaaa, .grid_t = 1, .grid_h = 4,
                                               .grid_w = 4, .n_tokens = 4, .bytes = rcbuf_ref(bytes0)}};
  r.media[1] = (api_media){.index = 1, .ref = {.bytes_key = 0x2222, .hash = 0xbbbb, .grid_t = 1, .grid_h = 2,
                                               .grid_w = 2, .n_tokens = 1, .bytes = rcbuf_ref(bytes1)}};
  char *json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  char id[64];
  snprintf(id, sizeof id, "%s", o ? str_at(o, "id") : "");
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);
  resp_media *tab = NULL;
  char *kept = resp_store_get_media(st, id, time_now_s(), &tab);
  CHECK(kept && !strstr(kept, "data:") && strstr(kept, "qvl-media:0000000000001111") &&
            strstr(kept, "qvl-media:0000000000002222"),
        "stored with media keys, no data URL: %s", kept ? kept : "(none)");
  CHECK(resp_media_count(tab) == 2, "the media table holds both images");
  int n = 0;
  size_t bytes = 0;
  resp_store_usage(st, &n, &bytes);
  CHECK(kept && bytes == strlen(kept) + 1 + 30, "the store counts the JSON and the images' bytes (%zu)", bytes);
  free(kept);
  resp_media_unref(tab);

  /* the follow-up resolves the keys from the table: same bytes (no copy), hash and grid */
  char next[256];
  snprintf(next, sizeof next, "{\"input\":\"again\",\"previous_response_id\":\"%s\"}", id);
  cJSON *chat = translate(responses_translate, next, &c, &cr);
  CHECK(cr.chat_body && !strstr(cr.chat_body, "data:") && strstr(cr.chat_body, "qvl-media:0000000000002222"),
        "the follow-up's chat body carries the keys: %s", cr.chat_body ? cr.chat_body : "");
  prompt_media_ref ref;
  CHECK(cr.resolve_media && cr.resolve_media(cr.resolve_user, 0x2222, &ref) && ref.bytes == bytes1 &&
            ref.hash == 0xbbbb && ref.grid_h == 2 && ref.n_tokens == 1,
        "resolved from the table");
  CHECK(cr.resolve_media && !cr.resolve_media(cr.resolve_user, 0x3333, &ref), "an unknown key is not resolved");
  cJSON_Delete(chat);
  /* its answer reports no media (say the policy dropped them): the keys stay backed by the table */
  r = result_of("again ok", QVL_FINISH_EOS);
  json = run_format(&cr, false, NULL, &r);
  o = json ? cJSON_Parse(json) : NULL;
  snprintf(id, sizeof id, "%s", o ? str_at(o, "id") : "");
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);
  kept = resp_store_get_media(st, id, time_now_s(), &tab);
  CHECK(kept && strstr(kept, "qvl-media:0000000000001111") && resp_media_count(tab) == 2 &&
            resp_media_resolve(tab, 0x1111, &ref) && ref.bytes == bytes0,
        "a follow-up's entry shares the images: %s", kept ? kept : "(none)");
  free(kept);
  resp_media_unref(tab);
  resp_store_free(st);
  rcbuf_unref(bytes0);
  rcbuf_unref(bytes1);

  /* the per-request context policy passes through; a chat-shaped text.format is refused */
  chat = translate(responses_translate, "{\"input\":\"x\",\"history\":\"trim\"}", &c, &cr);
  CHECK(chat && eq(str_at(chat, "history"), "trim"), "history reaches the chat body: %s", cr.chat_body);
  cJSON_Delete(chat);
  compat_request_free(&cr);
  expect_refused(responses_translate,
                 "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
                 "\"schema\":{\"type\":\"object\"}}}}}",
                 &c, 400, "text.format", "nested");
  expect_refused(responses_translate, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\",\"x\":1}}}", &c,
                 400, "text.format", "'x'");
}

/* Refused with a 400 either by the translator (fn) or by the chat parser on what it made (fn NULL: a
 * chat body); msg_part must be in the message. */
static void refused_400(compat_translate_fn fn, const char *body, const char *msg_part) {
  api_error e;
  memset(&e, 0, sizeof e);
  compat_request cr;
  memset(&cr, 0, sizeof cr);
  resp_store *st = NULL;
  resp_store_init(16, 1 << 20, 60, &st);
  compat_ctx c = ctx_with(st);
  bool ok = true;
  const char *chat = body;
  size_t len = strlen(body);
  if (fn) {
    ok = fn(body, len, &c, &cr, &e);
    chat = cr.chat_body;
    len = cr.chat_len;
  }
  if (ok && chat) {
    api_limits l = limits();
    api_chat_request req;
    ok = api_chat_parse(chat, len, &l, &req, &e);
    if (ok)
      api_chat_request_free(&req);
  }
  CHECK(!ok && e.http == 400 && strstr(e.message, msg_part), "refused with 400 '%s': %s -> %s", msg_part, body,
        ok ? "accepted" : e.message);
  compat_request_free(&cr);
  resp_store_free(st);
}

/* Tool-call arguments reach every dialect as the model wrote them (issue 22): integers beyond 2^53
 * and long decimals are not reprinted from doubles. */
#define EXACT_ARGS "{\"days\": 333333333333333333333333, \"x\": 0.1000000000000000055511151231257827}"
#define EXACT_CALL "<tool_call>\n{\"name\": \"get\", \"arguments\": " EXACT_ARGS "}\n</tool_call>"
#define EXACT_COMPACT "{\"days\":333333333333333333333333,\"x\":0.1000000000000000055511151231257827}"

static void test_exact_arguments(void) {
  compat_ctx c = ctx_with(NULL);
  compat_request cr;
  const char *body = "{\"model\":\"qvl\",\"stream\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                     "\"get\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  CHECK(ollama_chat_translate(body, strlen(body), &c, &cr, &(api_error){0}), "ollama translate");
  api_result r = tool_result(EXACT_CALL);
  char *json = run_format(&cr, false, NULL, &r);
  CHECK(json && strstr(json, "\"arguments\":" EXACT_COMPACT), "Ollama: arguments embedded with the model's numbers: %s",
        json ? json : "");
  free(json);
  const char *pieces[] = {EXACT_CALL, NULL};
  char *nd = run_format(&cr, true, pieces, &r);
  CHECK(nd && strstr(nd, "\"arguments\":" EXACT_COMPACT), "Ollama stream: the same: %s", nd ? nd : "");
  free(nd);
  api_result_free(&r);
  compat_request_free(&cr);

  resp_store *st = NULL;
  CHECK(resp_store_init(8, 1 << 20, 3600, &st) == QVL_OK, "store");
  c = ctx_with(st);
  const char *rb = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\"}]}";
  CHECK(responses_translate(rb, strlen(rb), &c, &cr, &(api_error){0}), "responses translate");
  r = tool_result(EXACT_CALL);
  json = run_format(&cr, false, NULL, &r);
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  CHECK(o && eq(str_at(o, "output.0.arguments"), EXACT_ARGS), "Responses: function_call arguments as generated: %s",
        json ? json : "");
  cJSON_Delete(o);
  free(json);
  api_result_free(&r);
  compat_request_free(&cr);
  resp_store_free(st);
}

/* Issue 24 item 6: tool names are ^[a-zA-Z0-9_-]{1,64}$ on every path (a NUL no longer cuts a name
 * short), and every boolean field is type-checked alike. */
static void test_names_and_booleans(void) {
  const char *U = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  char b[1024];
  snprintf(b, sizeof b, "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\\u0000evil\"}}]}", U);
  refused_400(NULL, b, "name");
  snprintf(b, sizeof b, "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a.b\"}}]}", U);
  refused_400(NULL, b, "name");
  snprintf(b, sizeof b, "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"%065d\"}}]}", U, 0);
  refused_400(NULL, b, "name");
  snprintf(b, sizeof b,
           "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\"}}],"
           "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\\u0000x\"}}}",
           U);
  refused_400(NULL, b, "name");
  refused_400(responses_translate, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\\u0000evil\"}]}",
              "name");
  refused_400(ollama_chat_translate,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
              "\"function\":{\"name\":\"get\\u0000evil\"}}]}",
              "name");
  /* a NUL in content is not a cut either: it arrives as U+FFFD */
  api_limits l = limits();
  api_chat_request req;
  api_error e;
  const char *nul = "{\"messages\":[{\"role\":\"user\",\"content\":\"ab\\u0000cd \\\\u0000 kept\"}]}";
  bool ok = api_chat_parse(nul, strlen(nul), &l, &req, &e);
  CHECK(ok, "content with a NUL escape parses: %s", e.message);
  if (ok) {
    const char *text = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(req.root, "messages"), 0), "content"));
    CHECK(text && !strcmp(text, "ab\xef\xbf\xbd" "cd \\u0000 kept"), "NUL -> U+FFFD, an escaped backslash kept: %s",
          text ? text : "?");
    api_chat_request_free(&req);
  }

  /* booleans: "yes" is refused wherever a boolean belongs */
  snprintf(b, sizeof b, "{%s,\"stream\":\"yes\"}", U);
  refused_400(NULL, b, "boolean");
  snprintf(b, sizeof b, "{%s,\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}}", U);
  refused_400(NULL, b, "boolean");
  snprintf(b, sizeof b, "{%s,\"logprobs\":\"yes\"}", U);
  refused_400(NULL, b, "boolean");
  snprintf(b, sizeof b, "{%s,\"parallel_tool_calls\":1}", U);
  refused_400(NULL, b, "boolean");
  refused_400(responses_translate, "{\"input\":\"x\",\"stream\":\"yes\"}", "boolean");
  refused_400(responses_translate, "{\"input\":\"x\",\"store\":\"yes\"}", "boolean");
  refused_400(responses_translate, "{\"input\":\"x\",\"parallel_tool_calls\":\"yes\"}", "boolean");
  refused_400(completions_translate, "{\"prompt\":\"x\",\"echo\":\"yes\"}", "boolean");
  refused_400(completions_translate, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}}",
              "boolean");
  refused_400(ollama_generate_translate, "{\"prompt\":\"x\",\"raw\":\"yes\"}", "boolean");
  refused_400(ollama_generate_translate, "{\"prompt\":\"x\",\"raw\":1}", "boolean");
  refused_400(ollama_generate_translate, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "boolean");
  refused_400(ollama_chat_translate, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"think\":\"yes\"}",
              "boolean");
}

int main(void) {
  test_names_and_booleans();
  test_exact_arguments();
  test_responses_translate();
  test_responses_format_and_store();
  test_responses_sampling_echo();
  test_responses_tools();
  test_resp_store();
  test_responses_processed_media();
  test_completions();
  test_ollama();
  test_ollama_tools();
  test_chat_extras();
  test_sampler_bias();
  return TEST_SUMMARY("server_compat");
}
