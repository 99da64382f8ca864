/* The OpenAI chat API layer: request validation, response/chunk/error bodies, SSE framing,
 * metrics text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/chat_wire.h"
#include "server/http/metrics.h"
#include "test.h"
#include "wire_test.h"

static api_limits limits(void) { return wire_test_limits(2); }

/* Parses body; expects failure with status http and, when given, the param and a message part. */
static void expect_error(const char *body, int http, const char *param, const char *msg_part) {
  api_limits l = limits();
  api_chat_request r;
  api_error e;
  bool ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(!ok, "accepted: %s", body);
  if (ok) {
    api_chat_request_free(&r);
    return;
  }
  check_refusal(body, &e, http, param, msg_part);
  CHECK(r.root == NULL, "request not cleared on failure");
}

static void test_parse_ok(void) {
  api_limits l = limits();
  api_chat_request r;
  api_error e;
  const char *body =
      "{\"model\":\"qvl\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what?\"},"
      "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\",\"detail\":\"low\"}},"
      "{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,BBBB\"}]}],"
      "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_completion_tokens\":50,"
      "\"temperature\":0,\"top_p\":0.5,\"top_k\":7,\"min_p\":0.1,\"seed\":42,\"stop\":[\"a\",\"bc\"],"
      "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"n\":1,"
      "\"max_pixels\":200000,\"min_pixels\":4096,\"user\":\"ignored\"}  \n";
  bool ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok, "valid request rejected: %s", e.message);
  if (!ok)
    return;
  CHECK(r.stream && r.include_usage, "stream flags");
  CHECK(r.n_images == 2, "images %d", r.n_images);
  CHECK(r.gen.max_tokens == 50, "max_tokens %lld", (long long)r.gen.max_tokens);
  CHECK(r.gen.sampling.temperature == 0.0f && r.gen.sampling.top_p == 0.5f && r.gen.sampling.top_k == 7,
        "sampling");
  CHECK(fabsf(r.gen.sampling.min_p - 0.1f) < 1e-7f && r.gen.sampling.seed == 42, "min_p/seed");
  CHECK(r.gen.sampling.presence_penalty == 0.5f && r.gen.sampling.frequency_penalty == -0.5f, "penalties");
  CHECK(fabsf(r.gen.sampling.repetition_penalty - 1.1f) < 1e-6f, "repetition");
  CHECK(r.gen.n_stop == 2 && !strcmp(r.gen.stop[0], "a") && !strcmp(r.gen.stop[1], "bc"), "stops");
  CHECK(r.max_pixels == 200000 && r.min_pixels == 4096, "pixels %lld %lld", (long long)r.max_pixels,
        (long long)r.min_pixels);
  CHECK(r.model && !strcmp(r.model, "qvl"), "model");
  CHECK(cJSON_GetArraySize(r.messages) == 2, "messages");
  api_chat_request_free(&r);

  /* defaults: absent fields, nulls */
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":null,\"stop\":\"END\",\"seed\":null}";
  ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok, "minimal request rejected: %s", e.message);
  if (ok) {
    CHECK(!r.stream && !r.include_usage && r.model == NULL, "defaults");
    CHECK(r.gen.max_tokens == 100, "default max_tokens = cap, got %lld", (long long)r.gen.max_tokens);
    CHECK(fabsf(r.gen.sampling.temperature - 0.7f) < 1e-7f && fabsf(r.gen.sampling.top_p - 0.8f) < 1e-7f &&
              r.gen.sampling.top_k == 20,
          "Qwen defaults");
    CHECK(r.gen.n_stop == 1 && !strcmp(r.gen.stop[0], "END"), "single stop");
    CHECK(r.max_pixels == 1 << 20 && r.min_pixels == 65536, "default pixels");
    api_chat_request_free(&r);
    /* the model's recommendation, when the server has one */
    sampler_params model = sampler_default_params();
    model.temperature = 0.25f;
    model.top_p = 0.5f;
    model.top_k = 9;
    model.min_p = 0.1f;
    model.repetition_penalty = 1.2f;
    l.sampling = &model;
    ok = api_chat_parse(body, strlen(body), &l, &r, &e);
    CHECK(ok && r.gen.sampling.temperature == 0.25f && r.gen.sampling.top_p == 0.5f && r.gen.sampling.top_k == 9 &&
              r.gen.sampling.min_p == 0.1f && r.gen.sampling.repetition_penalty == 1.2f,
          "the model's defaults: %g %g %d", (double)r.gen.sampling.temperature, (double)r.gen.sampling.top_p,
          (int)r.gen.sampling.top_k);
    l.sampling = NULL;
    if (ok)
      api_chat_request_free(&r);
  }
  /* above the cap: clamped */
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000}";
  ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok && r.gen.max_tokens == 100, "max_tokens clamped");
  if (ok)
    api_chat_request_free(&r);
  /* a low max_pixels lowers the default minimum */
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_pixels\":2048}";
  ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok && r.max_pixels == 2048 && r.min_pixels == 2048, "min follows a low max");
  if (ok)
    api_chat_request_free(&r);
  /* the developer role is the system role for this model */
  body = "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"b\"}]}";
  ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(r.messages, 0), "role")), "system"),
        "developer -> system");
  if (ok)
    api_chat_request_free(&r);
  /* assistant with null content, tools empty array, response_format text */
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null},"
         "{\"role\":\"user\",\"content\":\"b\"}],\"tools\":[],\"response_format\":{\"type\":\"text\"}}";
  ok = api_chat_parse(body, strlen(body), &l, &r, &e);
  CHECK(ok, "assistant null content rejected: %s", e.message);
  if (ok)
    api_chat_request_free(&r);
}

static void test_parse_errors(void) {
  expect_error("", 400, NULL, "empty");
  expect_error("{\"messages\":", 400, NULL, "not valid JSON");
  expect_error("{\"messages\":[]} x", 400, NULL, "extra data");
  expect_error("[1,2]", 400, NULL, "JSON object");
  expect_error("{}", 400, "messages", "required");
  expect_error("{\"messages\":{}}", 400, "messages", "an array");
  expect_error("{\"messages\":[]}", 400, "messages", "empty");
  expect_error("{\"messages\":[5]}", 400, "messages[0]", NULL);
  expect_error("{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0]", "role");
  expect_error("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0]", "unknown role");
  expect_error("{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "required");
  expect_error("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", NULL);
  expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}", 400, "messages[0].content[0]",
               "unsupported content part");
  expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400, "messages[0].content[0]",
               "text");
  expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", 400,
               "messages[0].content[0]", "image_url");
  expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"a\"},"
               "{\"type\":\"image_url\",\"image_url\":\"b\"},{\"type\":\"image_url\",\"image_url\":\"c\"}]}]}",
               400, "messages", "at most 2");
  const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  char b[512];
#define E(extra, http, param, part)                 \
  snprintf(b, sizeof b, "{%s,%s}", m, extra);       \
  expect_error(b, http, param, part)
  E("\"model\":\"gpt-4\"", 404, "model", "does not exist");
  E("\"model\":7", 400, "model", "a string");
  E("\"stream\":\"yes\"", 400, "stream", "a boolean");
  E("\"stream_options\":{\"include_usage\":1}", 400, "include_usage", "a boolean");
  E("\"n\":2", 400, "n", "must be 1");
  E("\"max_tokens\":0", 400, "max_tokens", NULL);
  E("\"max_tokens\":1.5", 400, "max_tokens", "an integer");
  E("\"max_completion_tokens\":\"5\"", 400, "max_completion_tokens", "an integer");
  E("\"temperature\":3", 400, "temperature", "[0, 2]");
  E("\"temperature\":\"hot\"", 400, "temperature", "a number");
  E("\"top_p\":1.5", 400, "top_p", NULL);
  E("\"top_k\":-5", 400, "top_k", NULL);
  E("\"min_p\":-0.1", 400, "min_p", NULL);
  E("\"presence_penalty\":2.5", 400, "presence_penalty", NULL);
  E("\"frequency_penalty\":-3", 400, "frequency_penalty", NULL);
  E("\"repetition_penalty\":0", 400, "repetition_penalty", NULL);
  E("\"seed\":1.25", 400, "seed", "an integer");
  E("\"stop\":5", 400, "stop", NULL);
  E("\"stop\":[\"a\",1]", 400, "stop", NULL);
  E("\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]", 400, "stop", "at most 8");
  /* issue 11: logprobs, tools and JSON response formats are served; bad values are still 400 */
  E("\"logprobs\":1", 400, "logprobs", "a boolean");
  E("\"top_logprobs\":21,\"logprobs\":true", 400, "top_logprobs", "[0, 20]");
  E("\"top_logprobs\":2", 400, "top_logprobs", "requires");
  E("\"tools\":[{\"type\":\"function\"}]", 400, "tools", "name");
  E("\"tools\":[{\"type\":\"retrieval\"}]", 400, "tools", "function");
  E("\"tool_choice\":\"required\"", 400, "tool_choice", "empty");
  E("\"response_format\":{\"type\":\"xml\"}", 400, "response_format", NULL);
  E("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":"
    "\"string\",\"pattern\":\"a+\"}}}", 400, "response_format.json_schema.schema", "pattern");
  E("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
    "\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}}}", 400,
    "response_format.json_schema.schema", "format");
  E("\"max_pixels\":100", 400, "max_pixels", NULL);
  E("\"max_pixels\":999999999", 400, "max_pixels", NULL);
  E("\"min_pixels\":500000,\"max_pixels\":100000", 400, "min_pixels", "larger than max_pixels");
  E("\"precision\":\"turbo\"", 400, "precision", "\"exact\" or \"fast\"");
  E("\"precision\":1", 400, "precision", "\"exact\" or \"fast\"");
#undef E
  /* precision: the loaded tier is served, the other one is refused naming the loaded one */
  {
    api_limits pl = limits();
    pl.vision_precision = "fast";
    const char *bodies[] = {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"precision\":\"fast\"}",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"precision\":\"exact\"}"};
    api_chat_request pr;
    api_error pe;
    bool ok = api_chat_parse(bodies[0], strlen(bodies[0]), &pl, &pr, &pe);
    CHECK(ok, "precision = the loaded tier accepted: %s", ok ? "" : pe.message);
    if (ok)
      api_chat_request_free(&pr);
    ok = api_chat_parse(bodies[1], strlen(bodies[1]), &pl, &pr, &pe);
    CHECK(!ok && pe.http == 400 && !strcmp(pe.param, "precision") && strstr(pe.message, "loaded in the \"fast\" tier"),
          "precision other than the loaded tier: 400 naming it (%s)", ok ? "accepted" : pe.message);
    if (ok)
      api_chat_request_free(&pr);
    pl.vision_precision = NULL; /* no tower: either tier is harmless */
    ok = api_chat_parse(bodies[1], strlen(bodies[1]), &pl, &pr, &pe);
    CHECK(ok, "precision without a tower accepted");
    if (ok)
      api_chat_request_free(&pr);
  }
  /* nesting beyond the cap */
  char deep[1024];
  size_t n = 0;
  n += (size_t)snprintf(deep + n, sizeof deep - n, "{%s,\"x\":", m);
  for (int i = 0; i < 70; i++)
    deep[n++] = '[';
  for (int i = 0; i < 70; i++)
    deep[n++] = ']';
  deep[n++] = '}';
  deep[n] = '\0';
  expect_error(deep, 400, NULL, "deeper");
  /* a NUL inside the body is not the end of it */
  const char nul[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}\0garbage";
  api_limits l = limits();
  api_chat_request r;
  api_error e;
  CHECK(!api_chat_parse(nul, sizeof nul - 1, &l, &r, &e), "trailing bytes after NUL accepted");
}

static cJSON *parse(const char *s) {
  cJSON *j = s ? cJSON_Parse(s) : NULL;
  CHECK(j != NULL, "not JSON: %s", s ? s : "(null)");
  return j;
}

static void test_errors_json(void) {
  api_error e;
  api_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "no model '%s'", "x\"y");
  char *s = api_error_json(&e);
  cJSON *j = parse(s);
  cJSON *err = cJSON_GetObjectItem(j, "error");
  CHECK(cJSON_IsObject(err), "error object");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "message")), "no model 'x\"y'"), "message escaped");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "type")), "invalid_request_error"), "type");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "param")), "model"), "param");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(err, "code")), "model_not_found"), "code");
  cJSON_Delete(j);
  free(s);
  api_error_set(&e, 500, "server_error", NULL, NULL, "boom");
  s = api_error_json(&e);
  j = parse(s);
  err = cJSON_GetObjectItem(j, "error");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(err, "param")) && cJSON_IsNull(cJSON_GetObjectItem(err, "code")),
        "null param and code");
  cJSON_Delete(j);
  free(s);
  s = api_error_inner_json(&e);
  j = parse(s);
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "message")), "boom"), "inner object");
  cJSON_Delete(j);
  free(s);
  /* status mapping */
  struct {
    qvl_status s;
    int http;
    const char *code;
  } map[] = {{QVL_ERR_CONTEXT_OVERFLOW, 400, "context_length_exceeded"},
             {QVL_ERR_TOO_LARGE, 413, "request_too_large"},
             {QVL_ERR_FORMAT, 400, NULL},
             {QVL_ERR_INVALID_ARG, 400, NULL},
             {QVL_ERR_BUSY, 503, "server_busy"},
             {QVL_ERR_TIMEOUT, 504, "timeout"},
             {QVL_ERR_INTERNAL, 500, NULL},
             {QVL_ERR_IO, 500, NULL}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    api_error_from_status(&e, map[i].s, "m");
    CHECK(e.http == map[i].http, "status %d -> %d, expected %d", (int)map[i].s, e.http, map[i].http);
    CHECK((map[i].code == NULL) == (e.code == NULL) && (!e.code || !strcmp(e.code, map[i].code)), "code of %d",
          (int)map[i].s);
    CHECK(!strcmp(e.message, "m"), "message kept");
    CHECK(!strcmp(e.type, e.http >= 500 ? "server_error" : "invalid_request_error"), "type of %d", (int)map[i].s);
  }
  /* The bodies clients see, byte for byte, for every status of the list (qvl.h carries the mapping). */
  static const char *const want[QVL_STATUS_COUNT] = {
      [QVL_OK] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_INVALID_ARG] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_FORMAT] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_UNSUPPORTED] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_MISMATCH] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_CONTEXT_OVERFLOW] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":\"messages\","
                                   "\"code\":\"context_length_exceeded\"}}",
      [QVL_ERR_TOO_LARGE] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,"
                            "\"code\":\"request_too_large\"}}",
      [QVL_ERR_NOT_FOUND] = "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"not_found\"}}",
      [QVL_ERR_IO] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
      [QVL_ERR_NOMEM] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_busy\"}}",
      [QVL_ERR_BUSY] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_busy\"}}",
      [QVL_ERR_CANCELLED] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":\"cancelled\"}}",
      [QVL_ERR_TIMEOUT] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":\"timeout\"}}",
      [QVL_ERR_INTERNAL] = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"};
  static const int want_http[QVL_STATUS_COUNT] = {500, 400, 400, 400, 400, 400, 413, 404, 500, 503, 503, 499, 504, 500};
  for (int i = 0; i < QVL_STATUS_COUNT; i++) {
    api_error_from_status(&e, (qvl_status)i, "m");
    s = api_error_json(&e);
    CHECK(want[i] && s && !strcmp(s, want[i]) && e.http == want_http[i], "%s: %d %s", qvl_status_text((qvl_status)i),
          e.http, s ? s : "(null)");
    free(s);
  }
  /* a more specific code keeps the status's HTTP status and type */
  api_error_status(&e, QVL_ERR_NOT_FOUND, "model_not_found", "model", "no %s", "x");
  CHECK(e.http == 404 && !strcmp(e.type, "invalid_request_error") && !strcmp(e.code, "model_not_found") &&
            !strcmp(e.param, "model") && !strcmp(e.message, "no x"),
        "api_error_status with a code: %d %s %s", e.http, e.type, e.code);
  api_error_from_status(&e, QVL_ERR_BUSY, "");
  CHECK(!strcmp(e.message, "busy"), "an empty message takes the status text: %s", e.message);
}

static void test_responses(void) {
  engine_result er;
  memset(&er, 0, sizeof er);
  er.status = QVL_OK;
  er.finish_reason = QVL_FINISH_LENGTH;
  er.prompt_tokens = 12;
  er.completion_tokens = 5;
  er.image_tokens = 4;
  er.cached_prompt_tokens = 8;
  er.image_cache_hits = 1;
  er.t.ttft_ms = 12.5;
  er.t.queue_ms = 1.5;
  er.text = "he said \"hi\"\n\tbye";
  er.text_len = strlen(er.text);
  api_result r;
  CHECK(api_result_copy(&r, &er), "copy");
  char *s = api_completion_json("chatcmpl-1", 1700000000, "m", &r);
  cJSON *j = parse(s);
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "chat.completion"), "object");
  CHECK(cJSON_GetObjectItem(j, "created")->valuedouble == 1700000000, "created");
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cJSON *msg = cJSON_GetObjectItem(c0, "message");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "content")), "he said \"hi\"\n\tbye"), "content");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "role")), "assistant"), "role");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "length"), "finish_reason");
  cJSON *u = cJSON_GetObjectItem(j, "usage");
  CHECK(cJSON_GetObjectItem(u, "prompt_tokens")->valuedouble == 12 &&
            cJSON_GetObjectItem(u, "completion_tokens")->valuedouble == 5 &&
            cJSON_GetObjectItem(u, "total_tokens")->valuedouble == 17,
        "usage");
  cJSON *t = cJSON_GetObjectItem(j, "timings");
  CHECK(cJSON_GetObjectItem(t, "ttft_ms")->valuedouble == 12.5, "ttft");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(t, "image_cache_hit")) && cJSON_IsTrue(cJSON_GetObjectItem(t, "prefix_cache_hit")),
        "cache hits");
  CHECK(cJSON_GetObjectItem(t, "cached_prompt_tokens")->valuedouble == 8 &&
            cJSON_GetObjectItem(t, "image_tokens")->valuedouble == 4 &&
            cJSON_GetObjectItem(t, "queue_ms")->valuedouble == 1.5 && cJSON_GetObjectItem(t, "prefill_tok_s") &&
            cJSON_GetObjectItem(t, "decode_tok_s"),
        "timings fields");
  cJSON_Delete(j);
  free(s);

  s = api_chunk_json("id1", 5, "m", true, "ab\"c", 4, NULL);
  j = parse(s);
  CHECK(strchr(s, '\n') == NULL, "chunk JSON on one line");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "chat.completion.chunk"), "chunk object");
  c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cJSON *d = cJSON_GetObjectItem(c0, "delta");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(d, "role")), "assistant") &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(d, "content")), "ab\"c"),
        "delta");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")), "no finish yet");
  cJSON_Delete(j);
  free(s);
  s = api_chunk_json("id1", 5, "m", false, NULL, 0, "stop");
  j = parse(s);
  c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c0, "delta")) == 0, "empty final delta");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "stop"), "final finish");
  cJSON_Delete(j);
  free(s);
  s = api_usage_chunk_json("id1", 5, "m", &r);
  j = parse(s);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")) == 0, "usage chunk has no choices");
  CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valuedouble == 17, "usage chunk");
  cJSON_Delete(j);
  free(s);
  api_result_free(&r);

  /* ill-formed UTF-8 -> one U+FFFD per maximal subpart, as Python's errors="replace" */
  static const struct {
    const char *in, *out;
  } u8[] = {
      {"a\xff b", "a\xef\xbf\xbd b"},
      {"\xe4\xb8" "A", "\xef\xbf\xbd" "A"},                       /* truncated 3-byte sequence: one */
      {"\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!"},                 /* valid 4-byte */
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: three */
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                   /* overlong: two */
      {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
      {"\xe2\x82\xac\xe2\x82", "\xe2\x82\xac\xef\xbf\xbd"},       /* euro, then a cut one */
  };
  for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++) {
    s = api_chunk_json("id", 1, "m", false, u8[i].in, strlen(u8[i].in), NULL);
    j = parse(s);
    const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "delta"), "content"));
    CHECK(got && !strcmp(got, u8[i].out), "utf8 case %zu", i);
    cJSON_Delete(j);
    free(s);
  }
  s = api_chunk_json("id", 1, "m", false, "a\0b", 3, NULL);
  j = parse(s);
  const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "delta"), "content"));
  CHECK(got && !strcmp(got, "a\xef\xbf\xbd" "b"), "NUL replaced, not a cut");
  cJSON_Delete(j);
  free(s);

  CHECK(!strcmp(finish_openai(QVL_FINISH_LENGTH), "length") && !strcmp(finish_openai(QVL_FINISH_EOS), "stop") &&
            !strcmp(finish_openai(QVL_FINISH_STOP_STRING), "stop") && finish_openai(QVL_FINISH_NONE) == NULL,
        "finish reasons");
  CHECK(!strcmp(finish_openai(QVL_FINISH_CANCELLED), "stop") && !strcmp(finish_openai(QVL_FINISH_ERROR), "stop"),
        "OpenAI has no word for cancelled or failed: the body's status says it");
  CHECK(!strcmp(qvl_finish_name(QVL_FINISH_EOS), "eos") && !strcmp(qvl_finish_name(QVL_FINISH_STOP_STRING), "stop_string") &&
            !strcmp(qvl_finish_name(QVL_FINISH_LENGTH), "length") &&
            !strcmp(qvl_finish_name(QVL_FINISH_CANCELLED), "cancelled") &&
            !strcmp(qvl_finish_name(QVL_FINISH_ERROR), "error") && !strcmp(qvl_finish_name(QVL_FINISH_NONE), "none") &&
            !strcmp(qvl_finish_name((qvl_finish)99), "error"),
        "the list's own words");
  CHECK(QVL_FINISH_EOS == 0 && QVL_FINISH_STOP_STRING == 1 && QVL_FINISH_LENGTH == 2 && QVL_FINISH_CANCELLED == 3 &&
            QVL_FINISH_ERROR == 4 && QVL_FINISH_NONE == -1,
        "the public values of 0.1.0 kept");
  CHECK(!strcmp(finish_ollama(QVL_FINISH_LENGTH), "length") && !strcmp(finish_ollama(QVL_FINISH_EOS), "stop") &&
            !strcmp(finish_ollama(QVL_FINISH_STOP_STRING), "stop") && finish_ollama(QVL_FINISH_NONE) == NULL,
        "Ollama's done_reason");
  CHECK(!strcmp(finish_responses(QVL_FINISH_LENGTH), "incomplete") && !strcmp(finish_responses(QVL_FINISH_EOS), "completed") &&
            !strcmp(finish_responses(QVL_FINISH_STOP_STRING), "completed") &&
            !strcmp(finish_responses(QVL_FINISH_ERROR), "failed") && finish_responses(QVL_FINISH_NONE) == NULL,
        "the Responses status");
  CHECK(!strcmp(finish_anthropic(QVL_FINISH_LENGTH), "max_tokens") && !strcmp(finish_anthropic(QVL_FINISH_EOS), "end_turn") &&
            !strcmp(finish_anthropic(QVL_FINISH_STOP_STRING), "stop_sequence") && finish_anthropic(QVL_FINISH_NONE) == NULL &&
            finish_anthropic((qvl_finish)99) == NULL,
        "Anthropic's stop_reason");

  buf b = {0};
  CHECK(sse_append(&b, "{\"a\":1}") == QVL_OK && sse_append_done(&b) == QVL_OK, "sse");
  CHECK(b.data && !strcmp(b.data, "data: {\"a\":1}\n\ndata: [DONE]\n\n"), "SSE framing: %s", b.data);
  buf_free(&b);

  char id1[48], id2[48];
  api_random_id("chatcmpl-", id1, sizeof id1);
  api_random_id("chatcmpl-", id2, sizeof id2);
  CHECK(!strncmp(id1, "chatcmpl-", 9) && strlen(id1) == 9 + 24 && strcmp(id1, id2), "ids %s %s", id1, id2);
}

static void test_metrics(void) {
  engine_stats st;
  memset(&st, 0, sizeof st);
  st.queued = 3;
  st.running = 2;
  st.kv_used_bytes = 25;
  st.kv_total_bytes = 100;
  st.image_cache_hits = 7;
  st.prefix_cache_misses = 4;
  for (int i = 0; i < ENGINE_HIST_BUCKETS; i++) {
    st.hist_bounds_ms[i] = 100.0 * (i + 1);
    st.ttft_hist[i] = (uint64_t)i;
  }
  st.ttft_hist[ENGINE_HIST_BUCKETS] = 20;
  st.ttft_sum_ms = 1500;
  for (int i = 0; i < ENGINE_HIST_BUCKETS; i++) {
    st.img_tok_bounds[i] = 64.0 * (i + 1);
    st.img_tok_hist[i] = i >= 11 ? 2 : i >= 2 ? 1 : 0; /* one image of 150 tokens, one of 700 */
    st.vision_hist[i] = i >= 4 ? 1 : 0;                 /* one encode of 500 ms */
  }
  st.img_tok_hist[ENGINE_HIST_BUCKETS] = 2;
  st.img_tok_sum = 850;
  st.vision_hist[ENGINE_HIST_BUCKETS] = 1;
  st.vision_sum_ms = 500;
  metrics_server ms;
  memset(&ms, 0, sizeof ms);
  ms.loaded = true;
  ms.http_responses[2] = 9;
  ms.rss_bytes = metrics_rss_bytes();
  CHECK(ms.rss_bytes > 0, "rss %lld", (long long)ms.rss_bytes);
  buf b = {0};
  CHECK(metrics_format(&b, &st, &ms) == QVL_OK, "format");
  const char *want[] = {"qvl_queue_length 3\n", "qvl_running_sequences 2\n", "qvl_kv_cache_usage_ratio 0.25\n",
                        "qvl_image_cache_hits_total 7\n", "qvl_prefix_cache_misses_total 4\n",
                        "qvl_ttft_seconds_bucket{le=\"0.1\"} 0\n",
                        "qvl_ttft_seconds_bucket{le=\"+Inf\"} 20\n", "qvl_ttft_seconds_sum 1.5\n",
                        "qvl_ttft_seconds_count 20\n", "# TYPE qvl_ttft_seconds histogram\n",
                        "qvl_http_responses_total{code=\"2xx\"} 9\n", "qvl_model_loaded 1\n",
                        "# TYPE qvl_image_cache_hits_total counter\n", "qvl_process_resident_memory_bytes ",
                        "# TYPE qvl_vision_encode_seconds histogram\n", "qvl_vision_encode_seconds_bucket{le=\"0.4\"} 0\n",
                        "qvl_vision_encode_seconds_bucket{le=\"0.5\"} 1\n", "qvl_vision_encode_seconds_sum 0.5\n",
                        "qvl_vision_encode_seconds_count 1\n", "# TYPE qvl_image_tokens histogram\n",
                        "qvl_image_tokens_bucket{le=\"128\"} 0\n", "qvl_image_tokens_bucket{le=\"192\"} 1\n",
                        "qvl_image_tokens_bucket{le=\"768\"} 2\n", "qvl_image_tokens_bucket{le=\"+Inf\"} 2\n",
                        "qvl_image_tokens_sum 850\n", "qvl_image_tokens_count 2\n"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECK(b.data && strstr(b.data, want[i]), "metrics lack '%s'", want[i]);
  /* every non-comment line is "name[{labels}] value" */
  int bad = 0;
  for (char *line = b.data; line && *line;) {
    char *nl = strchr(line, '\n');
    if (!nl)
      break;
    if (line[0] != '#') {
      char *sp = memchr(line, ' ', (size_t)(nl - line));
      char *end = NULL;
      if (!sp || (strtod(sp + 1, &end), end != nl))
        bad++;
    }
    line = nl + 1;
  }
  CHECK(bad == 0, "%d malformed metric lines", bad);
  buf_free(&b);
  ms.loaded = false;
  CHECK(metrics_format(&b, NULL, &ms) == QVL_OK && strstr(b.data, "qvl_model_loaded 0\n") &&
            strstr(b.data, "qvl_running_sequences 0\n"),
        "metrics before the engine runs");
  buf_free(&b);
}

int main(void) {
  test_parse_ok();
  test_parse_errors();
  test_errors_json();
  test_responses();
  test_metrics();
  return TEST_SUMMARY("server_api");
}
