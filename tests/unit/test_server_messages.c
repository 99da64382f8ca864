/* Anthropic's Messages API (server/dialects/messages.c): the translator into a chat body (every
 * translated body also goes through api_chat_parse), the message object, the stream's event
 * sequence, errors, and the stop string report it needs (text/stop.c). */
#include <stdlib.h>
#include <string.h>

#include "server/dialects/dialect.h"
#include "server/dialects/messages.h"
#include "server/openai/chat_wire.h"
#include "test.h"
#include "wire_test.h"
#include "text/stop.h"

static bool g_reasoning; /* the served model reasons (ctx and limits) */

static api_limits limits(void) {
  api_limits l = wire_test_limits(4);
  l.reasoning_model = g_reasoning;
  l.reasoning_budget = -1;
  return l;
}

static compat_ctx ctx(void) {
  compat_ctx c;
  memset(&c, 0, sizeof c);
  c.model_id = "e2e-Q8_0.gguf";
  c.created = 1764540000;
  c.reasoning_model = g_reasoning;
  return c;
}

/* Translates body (must be accepted and make a valid chat body); the chat body as cJSON. */
static cJSON *translate(compat_translate_fn fn, const char *body, compat_request *cr) {
  compat_ctx c = ctx();
  api_limits l = limits();
  return translate_checked(fn, body, &c, &l, cr);
}

static void refused(const char *body, int http, const char *param, const char *msg_part) {
  compat_request cr;
  api_error e;
  compat_ctx c = ctx();
  bool ok = messages_translate(body, strlen(body), &c, &cr, &e);
  CHECK(!ok, "accepted: %s", body);
  CHECK(cr.fmt == &messages_format, "%s: no formatter for the error", body);
  if (!ok) {
    check_refusal(body, &e, http, param, msg_part);
    char *j = cr.fmt->error_json(cr.state, &e);
    cJSON *o = j ? cJSON_Parse(j) : NULL;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type")) &&
              !strcmp(cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring, "error") &&
              cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "type")) &&
              cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message")),
          "error body shape: %s", j ? j : "(null)");
    cJSON_Delete(o);
    free(j);
  }
  compat_request_free(&cr);
}

static const char *str_at(const cJSON *o, const char *path) {
  /* "a.b.0.c": object keys and array indexes */
  char p[128];
  snprintf(p, sizeof p, "%s", path);
  const cJSON *j = o;
  for (char *save = NULL, *t = strtok_r(p, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
    j = (*t >= '0' && *t <= '9') ? cJSON_GetArrayItem(j, atoi(t)) : cJSON_GetObjectItemCaseSensitive(j, t);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

static bool str_is(const cJSON *o, const char *path, const char *want) {
  const char *s = str_at(o, path);
  return s && !strcmp(s, want);
}

static void test_translate(void) {
  compat_request cr;
  g_reasoning = true; /* (thinking enabled is refused by a model that does not reason) */
  cJSON *chat = translate(messages_translate,
                          "{\"model\":\"e2e-Q8_0.gguf\",\"max_tokens\":7,\"system\":[{\"type\":\"text\",\"text\":\"Be "
                          "brief.\"},{\"type\":\"text\",\"text\":\"Be kind.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                          "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is this?\"},"
                          "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":"
                          "\"iVBORw0KGgo=\"}},{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":"
                          "\"https://example.com/a.jpg\"}}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
                          "\"thinking\":\"hmm\",\"signature\":\"x\"},{\"type\":\"text\",\"text\":\"A cat.\"}]},{\"role\":"
                          "\"user\",\"content\":\"Sure?\"}],\"stop_sequences\":[\"END\",\"###\"],\"temperature\":0.2,"
                          "\"top_p\":0.9,\"top_k\":5,\"metadata\":{\"user_id\":\"u1\"},\"stream\":true,"
                          "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":3}}",
                          &cr);
  CHECK(chat != NULL, "translated");
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(chat, "messages");
  CHECK(cJSON_GetArraySize(msgs) == 4, "system + 3 messages: %d", cJSON_GetArraySize(msgs));
  CHECK(str_is(msgs, "0.role", "system") && str_is(msgs, "0.content", "Be brief.\nBe kind."), "system blocks joined");
  CHECK(str_is(msgs, "1.content.0.text", "What is this?"), "text part");
  CHECK(str_is(msgs, "1.content.1.image_url.url", "data:image/png;base64,iVBORw0KGgo="), "base64 image as data URL");
  CHECK(str_is(msgs, "1.content.2.image_url.url", "https://example.com/a.jpg"), "url image");
  CHECK(str_is(msgs, "2.role", "assistant") && str_is(msgs, "2.content", "A cat."), "thinking dropped, text kept");
  CHECK(str_is(msgs, "3.content", "Sure?"), "string content");
  CHECK(cJSON_GetObjectItemCaseSensitive(chat, "max_tokens")->valuedouble == 7, "max_tokens");
  CHECK(str_is(chat, "stop.1", "###"), "stop_sequences -> stop");
  CHECK(cJSON_GetObjectItemCaseSensitive(chat, "top_k")->valuedouble == 5, "top_k passes");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(chat, "stream")), "stream");
  CHECK(!strncmp(cr.id, "msg_", 4), "id %s", cr.id);
  const cJSON *mrt = cJSON_GetObjectItemCaseSensitive(chat, "max_reasoning_tokens");
  CHECK(cJSON_IsNumber(mrt) && mrt->valuedouble == 3, "thinking.budget_tokens -> max_reasoning_tokens");
  cJSON_Delete(chat);
  compat_request_free(&cr);
  g_reasoning = false;
}

static const char *const tool_body =
    "{\"model\":\"qvl\",\"max_tokens\":50,\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}],"
    "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
    "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me look.\"},{\"type\":\"tool_use\",\"id\":"
    "\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"18 C\"},"
    "{\"type\":\"text\",\"text\":\"Thanks\"}]}]}";

static void test_tools(void) {
  compat_request cr;
  cJSON *chat = translate(messages_translate, tool_body, &cr);
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(chat, "messages");
  CHECK(cJSON_GetArraySize(msgs) == 4, "user, assistant, tool, user: %d", cJSON_GetArraySize(msgs));
  CHECK(str_is(msgs, "1.content", "Let me look."), "assistant text");
  CHECK(str_is(msgs, "1.tool_calls.0.id", "toolu_1") && str_is(msgs, "1.tool_calls.0.function.name", "get_weather") &&
            str_is(msgs, "1.tool_calls.0.function.arguments", "{\"city\":\"Paris\"}"),
        "tool_use -> tool_calls");
  CHECK(str_is(msgs, "2.role", "tool") && str_is(msgs, "2.tool_call_id", "toolu_1") && str_is(msgs, "2.content", "18 C"),
        "tool_result -> tool message");
  CHECK(str_is(msgs, "3.role", "user") && str_is(msgs, "3.content.0.text", "Thanks"), "the rest of the user turn after");
  CHECK(str_is(chat, "tools.0.function.name", "get_weather") &&
            str_is(chat, "tools.0.function.parameters.required.0", "city"),
        "input_schema -> parameters");
  CHECK(str_is(chat, "tool_choice", "required"), "any -> required");
  CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(chat, "parallel_tool_calls")), "disable_parallel_tool_use");
  cJSON_Delete(chat);
  compat_request_free(&cr);

  chat = translate(messages_translate,
                   "{\"model\":\"qvl\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
                   "\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   &cr);
  CHECK(str_is(chat, "tool_choice.type", "function") && str_is(chat, "tool_choice.function.name", "f"), "tool -> named");
  cJSON_Delete(chat);
  compat_request_free(&cr);
  refused("{\"model\":\"qvl\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"boom\"}]}]}",
          400, "messages[0].content[0]", "no tool_use block");
  chat = translate(messages_translate,
                   "{\"model\":\"qvl\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
                   "\"tool_choice\":{\"type\":\"none\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                   "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"is_error\":true,"
                   "\"content\":[{\"type\":\"text\",\"text\":\"boom\"}]}]}]}",
                   &cr);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(chat, "messages");
  CHECK(str_is(chat, "tool_choice", "none"), "none");
  CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(m, 1), "content")), "calls only: content null");
  CHECK(str_is(m, "2.content.0.text", "Error: ") && str_is(m, "2.content.1.text", "boom"), "is_error said");
  cJSON_Delete(chat);
  compat_request_free(&cr);
}

static void test_refusals(void) {
  refused("{\"model\":\"qvl\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens", "required");
  refused("{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "model", "required");
  refused("{\"model\":\"qvl\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":3}", 400, "messages", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", 400, "messages[0]",
          "top-level 'system'");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
          "\"content\":\"The answer is\"}]}",
          400, "messages[1]", "prefill");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\","
          "\"source\":{}}]}]}",
          400, "messages[0].content[0]", "document");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
          "\"source\":{\"type\":\"file\",\"file_id\":\"f\"}}]}]}",
          400, "messages[0].content[0]", "files API");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
          "\"source\":{\"type\":\"base64\",\"media_type\":\"text/html\",\"data\":\"AA==\"}}]}]}",
          400, "messages[0].content[0]", "media_type");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
          "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          400, "tools[0]", "server tool");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":"
          "\"x\"}]}",
          400, "tools[0]", "input_schema");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"tool_choice\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\","
          "\"content\":\"x\"}]}",
          400, "tool_choice.type", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":10,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":10},\"messages\":[{"
          "\"role\":\"user\",\"content\":\"x\"}]}",
          400, "thinking.budget_tokens", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":10,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":5},\"messages\":[{"
          "\"role\":\"user\",\"content\":\"x\"}]}",
          400, "thinking", "no reasoning");
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"mcp_servers\":[{\"url\":\"x\"}],\"messages\":[{\"role\":\"user\","
          "\"content\":\"x\"}]}",
          400, "mcp_servers", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"stop_sequences\":[\"\"],\"messages\":[{\"role\":\"user\",\"content\":"
          "\"x\"}]}",
          400, "stop_sequences", NULL);
  refused("{\"model\":\"qvl\",\"max_tokens\":3,\"metadata\":\"u\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          400, "metadata", NULL);
  refused("not json", 400, NULL, "JSON");
  CHECK(messages_error_http(503) == 529 && messages_error_http(400) == 400, "503 -> 529");
  CHECK(!strcmp(messages_error_type(401), "authentication_error") && !strcmp(messages_error_type(404), "not_found_error") &&
            !strcmp(messages_error_type(429), "rate_limit_error") && !strcmp(messages_error_type(500), "api_error") &&
            !strcmp(messages_error_type(503), "overloaded_error") && !strcmp(messages_error_type(413), "request_too_large"),
        "error types");
}

/* A result with text t; tools: whether the request had tools (the chat's parse_tools). */
static void result_of(api_result *r, const char *t, qvl_finish f, bool tools) {
  memset(r, 0, sizeof *r);
  r->status = QVL_OK;
  r->finish_reason = f;
  r->prompt_tokens = 20;
  r->cached_prompt_tokens = 8;
  r->completion_tokens = 6;
  r->agent.parse_tools = tools;
  buf_append_str(&r->text, t);
}

static void test_answer(void) {
  compat_request cr;
  cJSON *chat = translate(messages_translate,
                          "{\"model\":\"qvl\",\"max_tokens\":9,\"stop_sequences\":[\"A\",\"B\"],\"messages\":[{\"role\":"
                          "\"user\",\"content\":\"x\"}]}",
                          &cr);
  cJSON_Delete(chat);
  api_result r;
  result_of(&r, "Hello", QVL_FINISH_EOS, false);
  char *j = cr.fmt->result_json(cr.state, &r);
  cJSON *o = cJSON_Parse(j);
  CHECK(str_is(o, "type", "message") && str_is(o, "role", "assistant") && str_is(o, "model", "qvl") &&
            !strncmp(str_at(o, "id") ? str_at(o, "id") : "", "msg_", 4),
        "message: %s", j);
  CHECK(str_is(o, "content.0.type", "text") && str_is(o, "content.0.text", "Hello"), "text block: %s", j);
  CHECK(str_is(o, "stop_reason", "end_turn") && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "stop_sequence")),
        "end_turn: %s", j);
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
  CHECK(cJSON_GetObjectItemCaseSensitive(u, "input_tokens")->valuedouble == 12 &&
            cJSON_GetObjectItemCaseSensitive(u, "cache_read_input_tokens")->valuedouble == 8 &&
            cJSON_GetObjectItemCaseSensitive(u, "output_tokens")->valuedouble == 6,
        "usage: %s", j);
  cJSON_Delete(o);
  free(j);
  r.stop_match = 2;
  j = cr.fmt->result_json(cr.state, &r);
  o = cJSON_Parse(j);
  CHECK(str_is(o, "stop_reason", "stop_sequence") && str_is(o, "stop_sequence", "B"), "stop_sequence: %s", j);
  cJSON_Delete(o);
  free(j);
  r.finish_reason = QVL_FINISH_LENGTH;
  j = cr.fmt->result_json(cr.state, &r);
  o = cJSON_Parse(j);
  CHECK(str_is(o, "stop_reason", "max_tokens"), "max_tokens: %s", j);
  cJSON_Delete(o);
  free(j);
  api_result_free(&r);
  compat_request_free(&cr);
}

/* Big integers and long decimals in a call's arguments reach tool_use.input as the chat gives them. */
static void test_tool_answer(void) {
  compat_request cr;
  cJSON *chat = translate(messages_translate, tool_body, &cr);
  cJSON_Delete(chat);
  api_result r;
  result_of(&r,
            "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
            "333333333333333333333333, \"t\": 0.1000000000000000055511151231257827}}\n</tool_call>",
            QVL_FINISH_EOS, true);
  cJSON *choice = compat_chat_choice(&r);
  const char *args = str_at(choice, "message.tool_calls.0.function.arguments");
  CHECK(args != NULL, "the chat found the call");
  char *j = cr.fmt->result_json(cr.state, &r);
  cJSON *o = cJSON_Parse(j);
  CHECK(str_is(o, "stop_reason", "tool_use"), "tool_use: %s", j);
  CHECK(str_is(o, "content.0.text", "Checking.") && str_is(o, "content.1.type", "tool_use") &&
            str_is(o, "content.1.name", "get_weather") && !strncmp(str_at(o, "content.1.id") ?: "", "toolu_", 6),
        "blocks: %s", j);
  CHECK(str_is(o, "content.1.input.city", "Paris"), "input is an object: %s", j);
  /* the model's numbers as written (json_raw.h), whitespace between tokens dropped */
  static const char *const exact = "{\"city\":\"Paris\",\"days\":333333333333333333333333,\"t\":0.1000000000000000055511151231257827}";
  CHECK(strstr(j, exact) != NULL, "input embeds the model's JSON as written: %s", j);
  cJSON_Delete(o);
  free(j);

  /* the stream: text, then the tool_use block whose input_json_delta pieces spell the arguments */
  buf out = {0};
  cr.fmt->stream_text(cr.state, &out, r.text.data, 5);
  cr.fmt->stream_text(cr.state, &out, r.text.data + 5, r.text.len - 5);
  cr.fmt->stream_end(cr.state, &out, &r);
  const char *want[] = {"message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop",
                        "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                        "message_stop"};
  size_t wi = 0;
  buf partial = {0}, text = {0};
  bool shapes = true;
  for (char *line = out.data, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = 0;
    if (!strncmp(line, "event: ", 7)) {
      const char *ev = line + 7;
      if (!strcmp(ev, "content_block_delta") && wi > 0 && !strcmp(want[wi - 1], "content_block_delta"))
        continue; /* several deltas */
      CHECK(wi < sizeof want / sizeof want[0] && !strcmp(ev, want[wi]), "event %zu: %s", wi, ev);
      wi++;
    } else if (!strncmp(line, "data: ", 6)) {
      cJSON *d = cJSON_Parse(line + 6);
      shapes &= d != NULL && str_at(d, "type") != NULL;
      if (str_is(d, "delta.type", "input_json_delta"))
        buf_append_str(&partial, str_at(d, "delta.partial_json"));
      if (str_is(d, "delta.type", "text_delta"))
        buf_append_str(&text, str_at(d, "delta.text"));
      if (str_is(d, "type", "content_block_start") && str_is(d, "content_block.type", "tool_use"))
        CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "content_block"), "input") &&
                  cJSON_GetObjectItemCaseSensitive(d, "index")->valuedouble == 1,
              "tool_use block 1 opens with input {}");
      if (str_is(d, "type", "message_delta"))
        CHECK(str_is(d, "delta.stop_reason", "tool_use") &&
                  cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "usage"), "output_tokens"),
              "message_delta: %s", line + 6);
      cJSON_Delete(d);
    }
  }
  CHECK(wi == sizeof want / sizeof want[0], "%zu of the events", wi);
  CHECK(shapes, "every data line is JSON with a type");
  CHECK(text.data && !strcmp(text.data, "Checking."), "streamed text: %s", text.data ? text.data : "");
  CHECK(partial.data && !strcmp(partial.data, exact), "partial_json spells the same input: %s",
        partial.data ? partial.data : "");
  buf_free(&out);
  buf_free(&partial);
  buf_free(&text);
  cJSON_Delete(choice);
  api_result_free(&r);
  compat_request_free(&cr);
}

static void test_stream_error_and_empty(void) {
  compat_request cr;
  cJSON *chat = translate(messages_translate,
                          "{\"model\":\"qvl\",\"max_tokens\":9,\"stream\":true,\"messages\":[{\"role\":\"user\","
                          "\"content\":\"x\"}]}",
                          &cr);
  cJSON_Delete(chat);
  api_result r;
  result_of(&r, "", QVL_FINISH_EOS, false);
  buf out = {0};
  cr.fmt->stream_end(cr.state, &out, &r);
  CHECK(out.data && strstr(out.data, "\"content_block\":{\"type\":\"text\",\"text\":\"\"}") &&
            strstr(out.data, "event: message_stop"),
        "an empty answer still has its text block: %s", out.data ? out.data : "");
  buf_free(&out);
  api_result_free(&r);
  compat_request_free(&cr);

  chat = translate(messages_translate,
                   "{\"model\":\"qvl\",\"max_tokens\":9,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   &cr);
  cJSON_Delete(chat);
  result_of(&r, "part", QVL_FINISH_ERROR, false);
  r.status = QVL_ERR_BUSY;
  snprintf(r.error, sizeof r.error, "shutting down");
  cr.fmt->stream_text(cr.state, &out, "part", 4);
  cr.fmt->stream_end(cr.state, &out, &r);
  CHECK(out.data && strstr(out.data, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"") &&
            !strstr(out.data, "message_stop"),
        "a failure midway ends with an error event: %s", out.data ? out.data : "");
  buf_free(&out);
  api_result_free(&r);
  compat_request_free(&cr);
}

static void test_count(void) {
  compat_request cr;
  cJSON *chat = translate(messages_count_translate,
                          "{\"model\":\"qvl\",\"system\":\"s\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &cr);
  CHECK(cr.count_only, "count_only");
  CHECK(chat && cJSON_GetObjectItemCaseSensitive(chat, "max_tokens")->valuedouble == 1 &&
            cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(chat, "stream")),
        "counts generate nothing and do not stream");
  cJSON_Delete(chat);
  api_result r;
  result_of(&r, "", QVL_FINISH_EOS, false);
  char *j = cr.fmt->result_json(cr.state, &r);
  CHECK(j && !strcmp(j, "{\"input_tokens\":20}"), "count answer: %s", j ? j : "");
  free(j);
  api_result_free(&r);
  compat_request_free(&cr);
}

/* stop_matched: which stop string ended the text (the earliest match wins, then the first listed). */
static void test_stop_matched(void) {
  const char *strs[] = {"xyz", "b", "ab"};
  stop_params sp = {.strings = strs, .n_strings = 3, .max_tokens = 100};
  stop_state *s = NULL;
  CHECK(stop_init(&sp, &s) == QVL_OK, "stop_init");
  stop_push(s, 1, "hello a", 7);
  CHECK(stop_matched(s) == 0, "no match yet");
  CHECK(stop_push(s, 2, "bc", 2) == QVL_FINISH_STOP_STRING, "stopped");
  CHECK(stop_matched(s) == 3, "'ab' starts first: %d", stop_matched(s));
  stop_reset(s);
  CHECK(stop_matched(s) == 0, "reset");
  stop_push(s, 3, "xyb", 3);
  CHECK(stop_matched(s) == 2, "'b': %d", stop_matched(s));
  stop_free(s);
}

/* thinking on a reasoning model: the budget mapping, the thinking block first, and the stream's
 * thinking block (thinking_delta pieces, signature_delta, stop) before the text block at index 1. */
static void test_thinking(void) {
  g_reasoning = true;
  static const char *const bodies[][2] = {
      {"{\"model\":\"qvl\",\"max_tokens\":50,\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\","
       "\"content\":\"x\"}]}",
       "0"},
      {"{\"model\":\"qvl\",\"max_tokens\":50,\"thinking\":{\"type\":\"adaptive\"},\"messages\":[{\"role\":\"user\","
       "\"content\":\"x\"}]}",
       NULL},
      {"{\"model\":\"qvl\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL},
  };
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    compat_request cr;
    cJSON *chat = translate(messages_translate, bodies[i][0], &cr);
    const cJSON *mrt = cJSON_GetObjectItemCaseSensitive(chat, "max_reasoning_tokens");
    if (bodies[i][1])
      CHECK(cJSON_IsNumber(mrt) && mrt->valuedouble == atof(bodies[i][1]), "%s: budget %s", bodies[i][0], bodies[i][1]);
    else
      CHECK(chat && !mrt, "%s: the default budget", bodies[i][0]);
    cJSON_Delete(chat);
    compat_request_free(&cr);
  }
  /* count_tokens has no max_tokens: any budget is accepted */
  compat_request cr;
  cJSON *chat = translate(messages_count_translate,
                          "{\"model\":\"qvl\",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
                          "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                          &cr);
  CHECK(chat != NULL, "count_tokens with thinking");
  cJSON_Delete(chat);
  compat_request_free(&cr);

  chat = translate(messages_translate,
                   "{\"model\":\"qvl\",\"max_tokens\":50,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":20},"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   &cr);
  cJSON_Delete(chat);
  api_result r;
  result_of(&r, "Paris.", QVL_FINISH_EOS, false);
  buf_append_str(&r.reasoning, "Let me think.");
  r.reasoning_tokens = 4;
  char *j = cr.fmt->result_json(cr.state, &r);
  cJSON *o = cJSON_Parse(j);
  CHECK(str_is(o, "content.0.type", "thinking") && str_is(o, "content.0.thinking", "Let me think.") &&
            str_is(o, "content.0.signature", ""),
        "thinking block first: %s", j);
  CHECK(str_is(o, "content.1.type", "text") && str_is(o, "content.1.text", "Paris.") &&
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "content")) == 2,
        "then the text block: %s", j);
  CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "usage"), "output_tokens")->valuedouble == 6,
        "output_tokens counts the reasoning too (completion_tokens): %s", j);
  cJSON_Delete(o);
  free(j);

  buf out = {0};
  cr.fmt->stream_reasoning(cr.state, &out, "Let me ", 7);
  cr.fmt->stream_reasoning(cr.state, &out, "think.", 6);
  cr.fmt->stream_text(cr.state, &out, "Paris.", 6);
  cr.fmt->stream_end(cr.state, &out, &r);
  const char *want[][3] = {
      {"message_start", NULL, NULL},
      {"content_block_start", "content_block.type", "thinking"},
      {"ping", NULL, NULL},
      {"content_block_delta", "delta.thinking", "Let me "},
      {"content_block_delta", "delta.thinking", "think."},
      {"content_block_delta", "delta.type", "signature_delta"},
      {"content_block_stop", NULL, NULL},
      {"content_block_start", "content_block.type", "text"},
      {"content_block_delta", "delta.text", "Paris."},
      {"content_block_stop", NULL, NULL},
      {"message_delta", "delta.stop_reason", "end_turn"},
      {"message_stop", NULL, NULL},
  };
  const int index[] = {-1, 0, -1, 0, 0, 0, 0, 1, 1, 1, -1, -1};
  size_t n = 0, want_n = sizeof want / sizeof want[0];
  const char *ev = NULL;
  for (char *line = out.data, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = 0;
    if (!strncmp(line, "event: ", 7)) {
      ev = line + 7;
    } else if (!strncmp(line, "data: ", 6)) {
      cJSON *d = cJSON_Parse(line + 6);
      if (n < want_n) {
        CHECK(ev && !strcmp(ev, want[n][0]) && str_is(d, "type", want[n][0]), "event %zu: %s, expected %s", n,
              ev ? ev : "", want[n][0]);
        if (want[n][1])
          CHECK(str_is(d, want[n][1], want[n][2]), "event %zu: %s is not '%s': %s", n, want[n][1], want[n][2],
                line + 6);
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(d, "index");
        if (index[n] >= 0)
          CHECK(cJSON_IsNumber(ix) && ix->valuedouble == index[n], "event %zu: index %d: %s", n, index[n], line + 6);
        if (n == 5)
          CHECK(str_is(d, "delta.signature", ""), "signature_delta: %s", line + 6);
      }
      n++;
      cJSON_Delete(d);
    }
  }
  CHECK(n == want_n, "%zu events, expected %zu", n, want_n);
  buf_free(&out);

  /* reasoning the stream never saw piece by piece: stream_end sends it in the thinking block first */
  compat_request_free(&cr);
  chat = translate(messages_translate,
                   "{\"model\":\"qvl\",\"max_tokens\":50,\"stream\":true,\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}]}",
                   &cr);
  cJSON_Delete(chat);
  cr.fmt->stream_end(cr.state, &out, &r);
  const char *th = out.data ? strstr(out.data, "\"thinking_delta\",\"thinking\":\"Let me think.\"") : NULL;
  const char *tx = out.data ? strstr(out.data, "\"text_delta\",\"text\":\"Paris.\"") : NULL;
  CHECK(th && tx && th < tx, "thinking, then text at the end: %s", out.data ? out.data : "");
  buf_free(&out);
  api_result_free(&r);
  compat_request_free(&cr);
  g_reasoning = false;
}

int main(void) {
  test_translate();
  test_thinking();
  test_tools();
  test_refusals();
  test_answer();
  test_tool_answer();
  test_stream_error_and_empty();
  test_count();
  test_stop_matched();
  return TEST_SUMMARY("server_messages");
}
