/* Tools, response_format and logprobs on chat completions: parsing into grammars, tool-call output
 * into message.tool_calls, the streamed tool-call chunks, logprobs objects. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/chat_wire.h"
#include "test.h"
#include "wire_test.h"
#include "text/grammar.h"

static api_limits limits(void) { return wire_test_limits(2); }

static bool parse(const char *body, api_chat_request *r) {
  api_limits l = limits();
  api_error e;
  bool ok = api_chat_parse(body, strlen(body), &l, r, &e);
  CHECK(ok, "parse %s: %s", body, e.message);
  return ok;
}

static bool accepts(const grammar *g, const char *text) {
  grammar_state st;
  grammar_start(g, &st);
  return grammar_feed(g, &st, text, strlen(text)) && grammar_can_end(g, &st);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define TOOLS                                                                                                    \
  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","  \
  "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}}]"

static void test_parse(void) {
  api_chat_request r;
  if (parse("{" MSG ",\"response_format\":{\"type\":\"json_object\"},\"logprobs\":true,\"top_logprobs\":3}", &r)) {
    CHECK(r.grammar && accepts(r.grammar, "{\"a\": 1}") && !accepts(r.grammar, "[1]"), "json_object grammar");
    CHECK(r.agent.logprobs && r.agent.top_logprobs == 3 && !r.agent.parse_tools, "logprobs options");
    api_chat_request_free(&r);
  }
  if (parse("{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,"
            "\"schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
            "\"additionalProperties\":false}}}}",
            &r)) {
    CHECK(r.grammar && accepts(r.grammar, "{\"n\": 3}") && !accepts(r.grammar, "{\"n\": \"3\"}"), "schema grammar");
    api_chat_request_free(&r);
  }
  if (parse("{" MSG "," TOOLS "}", &r)) {
    CHECK(!r.grammar && r.agent.parse_tools && r.tools, "tools auto: free text, parsed for calls");
    api_chat_request_free(&r);
  }
  if (parse("{" MSG "," TOOLS ",\"tool_choice\":\"none\"}", &r)) {
    CHECK(!r.grammar && !r.agent.parse_tools, "tool_choice none");
    api_chat_request_free(&r);
  }
  if (parse("{" MSG "," TOOLS ",\"tool_choice\":\"required\"}", &r)) {
    CHECK(r.grammar && accepts(r.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n"
                                          "</tool_call>"),
          "required: the call grammar");
    api_chat_request_free(&r);
  }
  if (parse("{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}", &r)) {
    CHECK(r.grammar && !accepts(r.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"),
          "named: arguments follow the schema");
    api_chat_request_free(&r);
  }
  /* legacy functions / function_call */
  if (parse("{" MSG ",\"functions\":[{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}],"
            "\"function_call\":{\"name\":\"f\"}}",
            &r)) {
    CHECK(r.grammar && r.tools && cJSON_GetArraySize(r.tools) == 1 &&
              accepts(r.grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"),
          "functions map onto tools");
    api_chat_request_free(&r);
  }
  api_limits l = limits();
  api_error e;
  const char *bad = "{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}";
  CHECK(!api_chat_parse(bad, strlen(bad), &l, &r, &e) && e.http == 400 && strstr(e.message, "nope"),
        "named tool not in tools: %s", e.message);
}

static cJSON *completion(const char *text, bool tools, engine_result *er) {
  er->status = QVL_OK;
  er->finish_reason = QVL_FINISH_EOS;
  er->text = text;
  er->text_len = strlen(text);
  api_result r;
  CHECK(api_result_copy(&r, er), "copy");
  r.agent.parse_tools = tools;
  r.agent.logprobs = er->logprobs != NULL;
  char *s = api_completion_json("chatcmpl-1", 1, "m", &r);
  cJSON *j = cJSON_Parse(s);
  free(s);
  api_result_free(&r);
  return j;
}

static void test_tool_output(void) {
  engine_result er;
  memset(&er, 0, sizeof er);
  cJSON *j = completion("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                        "</tool_call>",
                        true, &er);
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cJSON *m = cJSON_GetObjectItem(c0, "message");
  cJSON *tc = cJSON_GetObjectItem(m, "tool_calls");
  CHECK(cJSON_GetArraySize(tc) == 2, "two calls");
  cJSON *f1 = cJSON_GetObjectItem(cJSON_GetArrayItem(tc, 1), "function");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(f1, "name")), "get_weather") &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(f1, "arguments")), "{\"city\": \"Rome\"}"),
        "name and arguments (a JSON string)");
  const char *id0 = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(tc, 0), "id"));
  CHECK(id0 && !strncmp(id0, "call_", 5), "ids");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")), "Let me look."), "content before the call");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "tool_calls"), "finish_reason");
  cJSON_Delete(j);
  /* The arguments are the model's bytes: no number through a double (issue 22). */
  const char *exact = "{\"days\": 333333333333333333333333, \"x\": 0.1000000000000000055511151231257827,\n \"n\": -0}";
  char text[512];
  snprintf(text, sizeof text, "<tool_call>\n{\"name\": \"f\", \"arguments\": %s }\n</tool_call>", exact);
  j = completion(text, true, &er);
  const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
                                                                                        cJSON_GetObjectItem(j, "choices"), 0),
                                                                                    "message"),
                                                                "tool_calls"),
                                             0),
                          "function"),
      "arguments"));
  CHECK(got && !strcmp(got, exact), "arguments exactly as generated: %s", got ? got : "(none)");
  cJSON_Delete(j);
  j = completion("<tool_call>\n{\"name\": broken</tool_call>", true, &er);
  c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  CHECK(!cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "tool_calls") &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "stop"),
        "a call that does not parse stays text");
  cJSON_Delete(j);

  bool seen = false;
  CHECK(api_tool_text_safe("hello <tool", 11, &seen) == 6 && !seen, "a possible start is held");
  CHECK(api_tool_text_safe("hi <tool_call>\n{", 16, &seen) == 3 && seen, "text before the call goes");
  seen = false;
  CHECK(api_tool_text_safe("a < b", 5, &seen) == 5 && !seen, "other text goes");

  /* the stream tail reassembles to the same arguments */
  api_result r;
  er.text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"a long argument string that is cut \xc3\xa9 "
            "into several fragments\"}}\n</tool_call>";
  er.text_len = strlen(er.text);
  api_result_copy(&r, &er);
  r.agent.parse_tools = true;
  buf out = {0};
  api_agents_stream_tail(&out, "c", 1, "m", &r);
  CHECK(!strcmp(api_agents_finish_reason(&r), "tool_calls"), "stream finish_reason");
  buf args = {0};
  int chunks = 0;
  for (char *p = out.data; p && (p = strstr(p, "data: ")); p += 6) {
    char *end = strstr(p, "\n\n");
    cJSON *c = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
    cJSON *d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), "delta");
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0);
    CHECK(cJSON_GetObjectItem(t, "index")->valueint == 0, "index");
    const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "function"), "arguments"));
    if (a)
      buf_append_str(&args, a);
    chunks++;
    cJSON_Delete(c);
  }
  CHECK(chunks >= 3, "name chunk + fragments (%d)", chunks);
  CHECK(args.data && !strcmp(args.data, "{\"text\": \"a long argument string that is cut \xc3\xa9 into several fragments\"}"),
        "fragments reassemble: %s", args.data ? args.data : "");
  buf_free(&args);
  buf_free(&out);
  api_result_free(&r);
}

static void test_logprobs(void) {
  engine_result er;
  memset(&er, 0, sizeof er);
  er.completion_tokens = 2;
  int32_t tok[2] = {5, 7};
  float lp[2] = {-0.5f, -INFINITY};
  int32_t top[4] = {5, 6, 7, -1};
  float tlp[4] = {-0.5f, -1.5f, -0.1f, -INFINITY};
  const char *text = "ab\xc3x";
  uint32_t off[7] = {0, 1, 1, 2, 3, 4, 4}; /* tok0 "a", alt "" , alt "b" | tok1 "\xc3", alt "x", alt "" */
  er.ids = tok;
  er.logprobs = lp;
  er.top_ids = top;
  er.top_logprobs = tlp;
  er.n_top = 2;
  er.lp_text = text;
  er.lp_off = off;
  cJSON *j = completion("ab", false, &er);
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
  CHECK(cJSON_GetArraySize(content) == 2, "one entry per token");
  cJSON *t0 = cJSON_GetArrayItem(content, 0), *t1 = cJSON_GetArrayItem(content, 1);
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(t0, "token")), "a") &&
            fabs(cJSON_GetObjectItem(t0, "logprob")->valuedouble + 0.5) < 1e-6,
        "token and logprob");
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t0, "top_logprobs")) == 2, "two alternatives");
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t1, "top_logprobs")) == 1, "alternatives stop at -1");
  cJSON *b1 = cJSON_GetObjectItem(t1, "bytes");
  CHECK(cJSON_GetArraySize(b1) == 1 && cJSON_GetArrayItem(b1, 0)->valueint == 0xc3, "partial UTF-8 kept in bytes");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(t1, "token")), "\xEF\xBF\xBD"), "replaced in token");
  CHECK(cJSON_GetObjectItem(t1, "logprob")->valuedouble == -9999.0, "-inf written as -9999");
  cJSON_Delete(j);
}

int main(void) {
  test_parse();
  test_tool_output();
  test_logprobs();
  return TEST_SUMMARY("test_api_agents");
}
