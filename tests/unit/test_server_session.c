/* The conversation routing key (X-Qvl-Session): header, user, first-turn hash (issue 14). */
#include <cjson/cJSON.h>
#include <string.h>

#include "server/http/session.h"
#include "test.h"

static void key_of(const char *header, const char *body, char out[SESSION_KEY_CAP]) {
  cJSON *root = body ? cJSON_Parse(body) : NULL;
  CHECK(!body || root, "body parses: %s", body);
  session_key(header, root, out);
  cJSON_Delete(root);
}

int main(void) {
  char a[SESSION_KEY_CAP], b[SESSION_KEY_CAP];
  const char *turn1 = "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}}]}]}";
  const char *turn2 = "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}}]},{\"role\":\"assistant\",\"content\":\"a cat\"},{\"role\":\"user\",\"content\":\"its color?\"}],\"max_tokens\":9}";
  const char *other = "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAB\"}}]}]}";

  key_of("conv-42.a_b:c", turn1, a);
  CHECK(!strcmp(a, "conv-42.a_b:c"), "a plain X-Session-Id is the key as sent: %s", a);
  key_of("has space", turn1, a);
  key_of("has space", NULL, b);
  CHECK(!strncmp(a, "h-", 2) && strlen(a) == 18 && !strcmp(a, b) && !strstr(a, "space"), "other header values: h- + hash: %s", a);
  char longh[200];
  memset(longh, 'a', sizeof longh - 1);
  longh[sizeof longh - 1] = '\0';
  key_of(longh, NULL, a);
  CHECK(!strncmp(a, "h-", 2), "a header over 128 characters is hashed");

  key_of(NULL, "{\"user\":\"alice@example.com\",\"messages\":[]}", a);
  key_of(NULL, "{\"user\":\"alice@example.com\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", b);
  CHECK(!strncmp(a, "u-", 2) && !strcmp(a, b) && !strstr(a, "alice"), "user: u- + hash, whatever the messages: %s", a);
  key_of(NULL, "{\"user\":\"bob\",\"messages\":[]}", b);
  CHECK(strcmp(a, b), "two users, two keys");

  key_of(NULL, turn1, a);
  key_of(NULL, turn2, b);
  CHECK(!strncmp(a, "c-", 2) && !strcmp(a, b), "no header, no user: the first turn's hash, equal on turn 2 (%s %s)", a, b);
  key_of(NULL, other, b);
  CHECK(strcmp(a, b), "another conversation (another image): another key");
  key_of("", turn1, b);
  CHECK(!strcmp(a, b), "an empty header counts as none");
  key_of(NULL, NULL, a);
  key_of(NULL, "{\"messages\":\"not a list\"}", b);
  CHECK(!strncmp(a, "c-", 2) && !strcmp(a, b), "no body or no message list: a fixed key, no crash");
  return TEST_SUMMARY("server_session");
}
