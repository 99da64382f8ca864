/* Chat template: every fixture case's messages must render to its prompt_text exactly; bad message
 * shapes give errors naming the message; tools and tool calls follow the template text. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "test.h"
#include "test_files.h"
#include "text/chat.h"

static void check_fixture_cases(void) {
  glob_t g;
  int rc = glob("tests/fixtures/cases/*/*/*/case.json", 0, NULL, &g);
  CHECK(rc == 0 && g.gl_pathc >= 40, "expected the fixture cases, found %zu", rc ? 0 : g.gl_pathc);
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
    cJSON *c = test_read_json(g.gl_pathv[i]);
    if (!c)
      continue;
    const cJSON *agp = cJSON_GetObjectItem(c, "add_generation_prompt");
    chat_prompt p;
    qvl_status s = chat_render(cJSON_GetObjectItem(c, "messages"), NULL, !cJSON_IsFalse(agp), &p);
    CHECK(s == QVL_OK, "%s: %s", g.gl_pathv[i], qvl_last_error());
    if (s == QVL_OK) {
      const char *want = cJSON_GetObjectItem(c, "prompt_text")->valuestring;
      CHECK(!strcmp(p.text.data, want), "%s: rendered\n%s\nexpected\n%s", g.gl_pathv[i], p.text.data, want);
      int n_images = cJSON_GetArraySize(cJSON_GetObjectItem(c, "images"));
      int n_videos = cJSON_GetArraySize(cJSON_GetObjectItem(c, "videos")), got_videos = 0;
      for (int k = 0; k < p.n_images; k++)
        got_videos += p.images[k].video;
      CHECK(p.n_images - got_videos == n_images, "%s: %d images, expected %d", g.gl_pathv[i], p.n_images - got_videos,
            n_images);
      CHECK(got_videos == n_videos, "%s: %d videos, expected %d", g.gl_pathv[i], got_videos, n_videos);
      for (int k = 0; k < p.n_images && k < n_images; k++) {
        const char *path = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "images"), k),
                                               "path")->valuestring;
        CHECK(p.images[k].url && !strcmp(p.images[k].url, path), "%s: image %d url", g.gl_pathv[i], k);
      }
      chat_prompt_free(&p);
    }
    cJSON_Delete(c);
  }
  if (rc == 0)
    globfree(&g);
}

/* The Thinking template: every case of chat_thinking_cases.json (rendered by Jinja2 from the real
 * template text, tools/gen_thinking_cases.py) must come out of the C renderer byte for byte. */
static void check_thinking_cases(void) {
  cJSON *cases = test_read_json("tests/unit/chat_thinking_cases.json");
  CHECK(cJSON_GetArraySize(cases) >= 10, "expected the thinking cases");
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const cJSON *tools = cJSON_GetObjectItem(c, "tools");
    chat_render_opts o = {.tools = cJSON_IsNull(tools) ? NULL : tools,
                          .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                          .thinking = true};
    chat_prompt p;
    qvl_status s = chat_render_with(cJSON_GetObjectItem(c, "messages"), &o, &p);
    CHECK(s == QVL_OK, "%s: %s", name, qvl_last_error());
    if (s != QVL_OK)
      continue;
    const char *want = cJSON_GetObjectItem(c, "prompt")->valuestring;
    CHECK(!strcmp(p.text.data, want), "thinking case '%s': rendered\n[%s]\nexpected\n[%s]", name, p.text.data, want);
    chat_prompt_free(&p);
  }
  cJSON_Delete(cases);
  /* Budget 0: the generation prompt closes the think block the template opens, empty. */
  cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
  chat_render_opts o = {.add_generation_prompt = true, .thinking = true, .skip_thinking = true};
  chat_prompt p;
  CHECK(chat_render_with(m, &o, &p) == QVL_OK, "%s", qvl_last_error());
  CHECK(!strcmp(p.text.data, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "skip_thinking: [%s]", p.text.data);
  chat_prompt_free(&p);
  cJSON_Delete(m);
  /* Detection from the template text, not a name. */
  buf t = {0};
  CHECK(buf_read_file("tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja", 1 << 20, &t) == QVL_OK, "read");
  CHECK(chat_template_is_thinking(t.data), "the Thinking template is a reasoning model's");
  buf_free(&t);
  CHECK(buf_read_file("tests/fixtures/tokenizer/qwen3vl_instruct_chat_template.jinja", 1 << 20, &t) == QVL_OK, "read");
  CHECK(!chat_template_is_thinking(t.data), "the Instruct template is not");
  buf_free(&t);
  CHECK(!chat_template_is_thinking(NULL), "no template is not");
  CHECK(!chat_template_is_thinking("{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is "
                                   "false %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}"),
        "a hybrid template (enable_thinking) is not reasoning-first");
}

static void expect_render(const char *messages_json, const char *tools_json, bool agp,
                          const char *want) {
  cJSON *m = cJSON_Parse(messages_json);
  cJSON *t = tools_json ? cJSON_Parse(tools_json) : NULL;
  chat_prompt p;
  qvl_status s = chat_render(m, t, agp, &p);
  CHECK(s == QVL_OK, "%s: %s", messages_json, qvl_last_error());
  if (s == QVL_OK) {
    CHECK(!strcmp(p.text.data, want), "%s rendered\n[%s]\nexpected\n[%s]", messages_json, p.text.data, want);
    chat_prompt_free(&p);
  }
  cJSON_Delete(m);
  cJSON_Delete(t);
}

static void expect_error(const char *messages_json, const char *needle) {
  cJSON *m = cJSON_Parse(messages_json);
  chat_prompt p;
  qvl_status s = chat_render(m, NULL, true, &p);
  CHECK(s == QVL_ERR_INVALID_ARG || s == QVL_ERR_UNSUPPORTED, "%s: expected an error", messages_json);
  CHECK(strstr(qvl_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", messages_json,
        qvl_last_error(), needle);
  if (s == QVL_OK)
    chat_prompt_free(&p);
  cJSON_Delete(m);
}

int main(void) {
  check_fixture_cases();
  check_thinking_cases();
  /* Expected strings below are written from the template text by hand. */
  expect_render("[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"hi\"}]", NULL, true,
                "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  expect_render("[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, false, "<|im_start|>user\nhi<|im_end|>\n");
  expect_render("[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},{\"type\":\"text\",\"text\":\"a\"},"
                "{\"image_url\":\"x.png\"}]}]",
                NULL, true,
                "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>a<|vision_start|><|image_pad|>"
                "<|vision_end|><|im_end|>\n<|im_start|>assistant\n");
  /* A system message after the first one is dropped by the template. */
  expect_render("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"s\"}]", NULL, false,
                "<|im_start|>user\na<|im_end|>\n");
  /* System content given as parts. */
  expect_render("[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"text\",\"text\":\"y\"}]}]",
                NULL, false, "<|im_start|>system\nxy<|im_end|>\n");
  expect_render("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                "[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":\"\\u00e9\"}}},{\"name\":\"g\","
                "\"arguments\":\"{}\"}]},{\"role\":\"tool\",\"content\":\"r1\"},{\"role\":\"tool\",\"content\":\"r2\"}]",
                NULL, true,
                "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                "{\"a\": 1, \"b\": \"\xc3\xa9\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n"
                "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\n"
                "r2\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  expect_render("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"}]",
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]", true,
                "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user "
                "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}\n</tools>\n\nFor each "
                "function call, return a json object with function name and arguments within <tool_call></tool_call> "
                "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
                "<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  expect_error("{}", "messages must be an array");
  expect_error("[]", "must not be empty");
  expect_error("[1]", "messages[0] must be an object");
  expect_error("[{\"content\":\"x\"}]", "messages[0] has no string 'role'");
  expect_error("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\",\"content\":\"x\"}]", "messages[1].role 'bot'");
  expect_error("[{\"role\":\"user\",\"content\":5}]", "messages[0].content must be");
  expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]", "unknown content part type 'audio'");
  /* videos (issue 23): the template's video item and the OpenAI-style video_url part render the same */
  expect_render("[{\"role\":\"user\",\"content\":[{\"type\":\"video\",\"video\":\"v.mp4\"},{\"type\":\"text\",\"text\":\"q\"}]}]",
                NULL, true,
                "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>q<|im_end|>\n<|im_start|>assistant\n");
  expect_render("[{\"role\":\"user\",\"content\":[{\"type\":\"video_url\",\"video_url\":{\"url\":\"v.mp4\"}}]}]", NULL,
                true, "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n");
  expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]", "content[0].text must be a string");
  return TEST_SUMMARY("chat");
}
