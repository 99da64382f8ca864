/*
 * A reasoning model on the wire, without a server: the budget fields (api_reasoning_parse: which
 * decides, the effort table, refusals for a model that does not reason), the chat body and chunk
 * (reasoning_content, reasoning_tokens), the Responses and Ollama translators (reasoning.effort,
 * think) and formatters (the reasoning item before the message, message.thinking), and the prompt
 * tools (/tokenize, /detokenize, /apply-template bodies) on the e2e model's tokenizer.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "server/dialects/dialect.h"
#include "server/dialects/ollama.h"
#include "server/dialects/responses.h"
#include "server/openai/chat_wire.h"
#include "server/openai/reasoning_field.h"
#include "server/openai/tokenize_wire.h"
#include "test.h"

static int64_t budget_of(const char *body, bool reasoning_model, int64_t dflt, const char **err_param) {
  cJSON *root = cJSON_Parse(body);
  api_error e;
  int64_t b = -99;
  bool ok = api_reasoning_parse(root, reasoning_model, dflt, &b, &e);
  *err_param = ok ? NULL : e.param;
  cJSON_Delete(root);
  return ok ? b : -99;
}

static void test_budget_fields(void) {
  const char *p;
  CHECK(budget_of("{}", true, 7, &p) == 7, "no field: the server's default");
  CHECK(budget_of("{\"max_reasoning_tokens\":12,\"reasoning_effort\":\"high\"}", true, 7, &p) == 12,
        "max_reasoning_tokens first");
  CHECK(budget_of("{\"reasoning_effort\":\"low\"}", true, -1, &p) == API_REASONING_LOW, "low");
  CHECK(budget_of("{\"reasoning_effort\":\"medium\"}", true, -1, &p) == API_REASONING_MEDIUM, "medium");
  CHECK(budget_of("{\"reasoning_effort\":\"high\"}", true, -1, &p) == API_REASONING_HIGH, "high");
  CHECK(budget_of("{\"reasoning_effort\":\"none\"}", true, -1, &p) == 0, "none");
  CHECK(budget_of("{\"reasoning_effort\":\"minimal\",\"chat_template_kwargs\":{\"enable_thinking\":true}}", true, -1,
                  &p) == 0, "minimal");
  CHECK(budget_of("{\"chat_template_kwargs\":{\"enable_thinking\":false}}", true, 9, &p) == 0, "enable_thinking false");
  CHECK(budget_of("{\"chat_template_kwargs\":{\"enable_thinking\":true}}", true, 9, &p) == 9, "enable_thinking true");
  CHECK(budget_of("{\"max_reasoning_tokens\":-1}", true, 9, &p) == -1, "-1 unbounded");
  CHECK(budget_of("{\"max_reasoning_tokens\":null}", true, 9, &p) == 9, "null = absent");
  static const struct {
    const char *body, *param;
  } bad[] = {{"{\"max_reasoning_tokens\":-2}", "max_reasoning_tokens"},
             {"{\"max_reasoning_tokens\":1.5}", "max_reasoning_tokens"},
             {"{\"max_reasoning_tokens\":\"3\"}", "max_reasoning_tokens"},
             {"{\"max_reasoning_tokens\":1e12}", "max_reasoning_tokens"},
             {"{\"reasoning_effort\":\"max\"}", "reasoning_effort"},
             {"{\"reasoning_effort\":2}", "reasoning_effort"},
             {"{\"chat_template_kwargs\":[]}", "chat_template_kwargs"},
             {"{\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", "chat_template_kwargs.enable_thinking"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(budget_of(bad[i].body, true, -1, &p) == -99 && p && !strcmp(p, bad[i].param), "%s: 400 naming %s (%s)",
          bad[i].body, bad[i].param, p ? p : "accepted");
  }
  /* a model that does not reason */
  CHECK(budget_of("{\"reasoning_effort\":\"low\"}", false, -1, &p) == -99 && !strcmp(p, "reasoning_effort"),
        "reasoning_effort refused without reasoning");
  CHECK(budget_of("{\"max_reasoning_tokens\":0}", false, -1, &p) == -99 && !strcmp(p, "max_reasoning_tokens"),
        "max_reasoning_tokens refused without reasoning");
  CHECK(budget_of("{\"chat_template_kwargs\":{\"enable_thinking\":false}}", false, -1, &p) == -1,
        "enable_thinking is harmless without reasoning");
}

static api_result a_result(const char *text, const char *reasoning) {
  api_result r;
  memset(&r, 0, sizeof r);
  r.status = QVL_OK;
  r.finish_reason = QVL_FINISH_EOS;
  r.prompt_tokens = 10;
  r.completion_tokens = 9;
  r.reasoning_tokens = reasoning ? 5 : 0;
  buf_append_str(&r.text, text);
  buf_append_str(&r.reasoning, reasoning ? reasoning : "");
  return r;
}

static void test_chat_bodies(void) {
  api_result r = a_result("4", "2+2 is 4");
  char *js = api_completion_json("id", 1, "m", &r);
  cJSON *o = cJSON_Parse(js);
  const cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
  CHECK(!strcmp(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "2+2 is 4") &&
            !strcmp(cJSON_GetObjectItem(msg, "content")->valuestring, "4"),
        "message.reasoning_content and content: %s", js);
  CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "completion_tokens_details"),
                            "reasoning_tokens")->valueint == 5, "reasoning_tokens: %s", js);
  cJSON_Delete(o);
  free(js);
  api_result_free(&r);
  r = a_result("4", NULL);
  js = api_completion_json("id", 1, "m", &r);
  CHECK(!strstr(js, "reasoning"), "no reasoning fields without reasoning: %s", js);
  free(js);
  api_result_free(&r);
  js = api_reasoning_chunk_json("id", 1, "m", true, "hm\xff", 3);
  CHECK(strstr(js, "\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hm\xef\xbf\xbd\"}") != NULL,
        "reasoning chunk (ill-formed UTF-8 replaced): %s", js);
  free(js);
}

static void test_dialects(void) {
  compat_ctx c;
  memset(&c, 0, sizeof c);
  c.model_id = "think.gguf";
  c.reasoning_model = true;
  compat_request cr;
  api_error e;
  const char *body = "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"low\"}}";
  CHECK(responses_translate(body, strlen(body), &c, &cr, &e), "responses: %s", e.message);
  CHECK(strstr(cr.chat_body, "\"reasoning_effort\":\"low\"") != NULL, "reasoning.effort -> reasoning_effort: %s",
        cr.chat_body);
  api_result r = a_result("hello", "think first");
  char *js = cr.fmt->result_json(cr.state, &r);
  cJSON *o = cJSON_Parse(js);
  const cJSON *out = cJSON_GetObjectItem(o, "output");
  const cJSON *o0 = cJSON_GetArrayItem(out, 0), *o1 = cJSON_GetArrayItem(out, 1);
  CHECK(!strcmp(cJSON_GetObjectItem(o0, "type")->valuestring, "reasoning") &&
            !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o0, "content"), 0), "text")->valuestring,
                    "think first") &&
            !strcmp(cJSON_GetObjectItem(o1, "type")->valuestring, "message"),
        "the reasoning item, then the message: %s", js);
  CHECK(strstr(js, "\"effort\":\"low\"") && strstr(js, "\"reasoning_tokens\":5"), "effort echoed, usage: %s", js);
  cJSON_Delete(o);
  free(js);
  /* streamed: reasoning events first, the message at output_index 1 */
  buf sse = {0};
  cr.fmt->stream_reasoning(cr.state, &sse, "think ", 6);
  cr.fmt->stream_reasoning(cr.state, &sse, "first", 5);
  cr.fmt->stream_text(cr.state, &sse, "hello", 5);
  cr.fmt->stream_end(cr.state, &sse, &r);
  const char *d1 = strstr(sse.data, "response.reasoning_text.delta"), *dn = strstr(sse.data, "response.reasoning_text.done"),
             *t1 = strstr(sse.data, "response.output_text.delta");
  CHECK(d1 && dn && t1 && d1 < dn && dn < t1, "reasoning deltas, done, then text: %s", sse.data);
  CHECK(strstr(sse.data, "\"item_id\":\"msg_") && strstr(t1, "\"output_index\":1"), "the message is output 1");
  buf_free(&sse);
  compat_request_free(&cr);
  api_result_free(&r);

  body = "{\"model\":\"think.gguf\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "\"a\",\"thinking\":\"t\"},{\"role\":\"user\",\"content\":\"b\"}],\"think\":false}";
  CHECK(ollama_chat_translate(body, strlen(body), &c, &cr, &e), "ollama: %s", e.message);
  CHECK(strstr(cr.chat_body, "\"max_reasoning_tokens\":0") && strstr(cr.chat_body, "\"reasoning_content\":\"t\""),
        "think false -> budget 0; thinking -> reasoning_content: %s", cr.chat_body);
  r = a_result("hello", "mm");
  js = cr.fmt->result_json(cr.state, &r);
  CHECK(strstr(js, "\"message\":{\"role\":\"assistant\",\"content\":\"hello\",\"thinking\":\"mm\"}") != NULL,
        "message.thinking: %s", js);
  free(js);
  sse = (buf){0};
  cr.fmt->stream_reasoning(cr.state, &sse, "mm", 2);
  CHECK(sse.data && strstr(sse.data, "\"content\":\"\",\"thinking\":\"mm\"") != NULL, "a thinking line: %s", sse.data);
  buf_free(&sse);
  compat_request_free(&cr);
  api_result_free(&r);
  body = "{\"model\":\"think.gguf\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"think\":\"high\"}";
  CHECK(ollama_chat_translate(body, strlen(body), &c, &cr, &e) && strstr(cr.chat_body, "\"reasoning_effort\":\"high\""),
        "think \"high\" -> reasoning_effort");
  compat_request_free(&cr);
  c.reasoning_model = false;
  body = "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"low\"}}";
  CHECK(!responses_translate(body, strlen(body), &c, &cr, &e) && !strcmp(e.param, "reasoning"),
        "reasoning refused for a model that does not reason");
  compat_request_free(&cr);
}

static void test_prompt_tools(const vlm *m) {
  api_error e;
  const char *body = "{\"content\":\"Hello <|im_start|>\",\"with_pieces\":true}";
  char *js = tok_wire_tokenize(m->tok, body, strlen(body), &e);
  CHECK(js && !strcmp(js, "{\"tokens\":[{\"id\":9707,\"piece\":\"Hello\"},{\"id\":220,\"piece\":\" \"},"
                          "{\"id\":151644,\"piece\":\"<|im_start|>\"}]}"),
        "tokenize with pieces: %s", js ? js : e.message);
  free(js);
  body = "{\"content\":\"Hello\"}";
  js = tok_wire_tokenize(m->tok, body, strlen(body), &e);
  CHECK(js && !strcmp(js, "{\"tokens\":[9707]}"), "tokenize: %s", js ? js : e.message);
  free(js);
  body = "{\"content\":\"\xc3\xa9\",\"with_pieces\":true}"; /* one token whose bytes are a whole character */
  js = tok_wire_tokenize(m->tok, body, strlen(body), &e);
  CHECK(js && strstr(js, "\"piece\":\"\xc3\xa9\""), "a multi-byte piece: %s", js ? js : e.message);
  free(js);
  body = "{\"tokens\":[9707,151644]}";
  js = tok_wire_detokenize(m->tok, body, strlen(body), &e);
  CHECK(js && !strcmp(js, "{\"content\":\"Hello<|im_start|>\"}"), "detokenize: %s", js ? js : e.message);
  free(js);
  static const char *const bad[] = {"{\"tokens\":[1.5]}", "{\"tokens\":[999999999]}", "{\"tokens\":{}}", "[]", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    js = tok_wire_detokenize(m->tok, bad[i], strlen(bad[i]), &e);
    CHECK(!js && e.http == 400, "detokenize %s: 400", bad[i]);
    free(js);
  }
  js = tok_wire_tokenize(m->tok, "{\"content\":\"x\",\"with_pieces\":1}", 31, &e);
  CHECK(!js && !strcmp(e.param, "with_pieces"), "with_pieces must be a boolean");
  free(js);
  /* apply-template: the model's template decides; budget 0 closes an empty block */
  api_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.max_tokens = 10;
  lim.max_pixels = 1 << 22;
  lim.default_max_pixels = 1 << 20;
  lim.default_min_pixels = 65536;
  lim.reasoning_budget = -1;
  vlm thinking = *m;
  thinking.thinking = true;
  lim.reasoning_model = true;
  const struct {
    const vlm *model;
    const char *body, *prompt;
  } cases[] = {
      {NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
      {NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":false}",
       "<|im_start|>user\nhi<|im_end|>\n"},
      {&thinking, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"},
      {&thinking, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_reasoning_tokens\":0}",
       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {&thinking, "{\"messages\":[{\"role\":\"developer\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"role\":\"assistant\",\"content\":\"<think>r</think>a\"},{\"role\":\"user\",\"content\":\"q2\"}]}",
       "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
       "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const vlm *mm = cases[i].model ? cases[i].model : m;
    lim.reasoning_model = mm->thinking;
    api_chat_request req;
    bool ok = api_chat_parse(cases[i].body, strlen(cases[i].body), &lim, &req, &e);
    CHECK(ok, "%s: %s", cases[i].body, e.message);
    if (!ok)
      continue;
    js = tok_wire_apply_template(mm, &req, &e);
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    const cJSON *pr = cJSON_GetObjectItem(o, "prompt");
    CHECK(cJSON_IsString(pr) && !strcmp(pr->valuestring, cases[i].prompt), "apply-template %s: %s", cases[i].body,
          js ? js : e.message);
    cJSON_Delete(o);
    free(js);
    api_chat_request_free(&req);
  }
}

int main(void) {
  test_budget_fields();
  test_chat_bodies();
  test_dialects();
  if (kernels_init(NULL, 0) == QVL_OK) {
    vlm *m = NULL;
    vlm_paths paths = {.model = "tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf"};
    CHECK(vlm_load(&paths, &m) == QVL_OK, "load: %s", qvl_last_error());
    if (m) {
      CHECK(!m->thinking, "the e2e model (Instruct template) does not reason");
      test_prompt_tools(m);
    }
    vlm_free(m);
  }
  return TEST_SUMMARY("reasoning_wire");
}
