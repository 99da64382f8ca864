/* The model's JSON kept byte for byte (issue 22): json_raw_member finds a member's bytes,
 * json_raw_value embeds a value without reprinting numbers. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/json_raw.h"
#include "test.h"

#define BIG "{\"days\": 333333333333333333333333, \"x\": 0.1000000000000000055511151231257827, \"e\": 1E+400, \"s\": \"a\\n b\"}"

static void test_member(void) {
  const char *t = " {\"name\": \"f\", \"a\\u0072guments\" :\n " BIG " } ";
  size_t off = 0, n = 0;
  CHECK(json_raw_member(t, strlen(t), "arguments", &off, &n) && n == strlen(BIG) && !memcmp(t + off, BIG, n),
        "the member's bytes (escaped key, whitespace around): %.*s", (int)n, t + off);
  CHECK(json_raw_member(t, strlen(t), "name", &off, &n) && n == 3 && !memcmp(t + off, "\"f\"", 3), "a string member");
  CHECK(!json_raw_member(t, strlen(t), "nope", &off, &n), "no such member");
  CHECK(!json_raw_member("[1]", 3, "a", &off, &n) && !json_raw_member("{\"a\":1} x", 9, "a", &off, &n) &&
            !json_raw_member("{\"a\":", 5, "a", &off, &n),
        "not an object, trailing bytes, truncated");
  const char *nested = "{\"b\": {\"arguments\": 1, \"s\": \"}\\\"\"}, \"arguments\": [1, {\"k\": \"]\"}]}";
  CHECK(json_raw_member(nested, strlen(nested), "arguments", &off, &n) && n == 15 &&
            !memcmp(nested + off, "[1, {\"k\": \"]\"}]", n),
        "top-level member only, brackets inside strings skipped: %.*s", (int)n, nested + off);
}

static void test_value(void) {
  cJSON *o = cJSON_CreateObject();
  cJSON *raw = json_raw_value("\n " BIG "\n", strlen(BIG) + 3, true);
  CHECK(raw != NULL, "a valid object");
  cJSON_AddItemToObject(o, "arguments", raw);
  char *s = cJSON_PrintUnformatted(o);
  CHECK(s && !strcmp(s, "{\"arguments\":{\"days\":333333333333333333333333,\"x\":0.1000000000000000055511151231257827,"
                        "\"e\":1E+400,\"s\":\"a\\n b\"}}"),
        "numbers as written, whitespace outside strings dropped, inside kept: %s", s ? s : "");
  CHECK(s && !strchr(s, '\n'), "no newline (NDJSON and SSE framing)");
  free(s);
  cJSON_Delete(o);
  cJSON *a = json_raw_value("[1]", 3, false);
  CHECK(!json_raw_value("[1]", 3, true) && a, "object_only");
  cJSON_Delete(a);
  CHECK(!json_raw_value("{\"a\":1} {}", 10, false) && !json_raw_value("{\"a\":", 5, false) &&
            !json_raw_value("{\"a\":\"\0\"}", 9, false) && !json_raw_value("", 0, false),
        "two values, truncated, NUL, empty: refused");
}

int main(void) {
  test_member();
  test_value();
  return TEST_SUMMARY("test_json_raw");
}
