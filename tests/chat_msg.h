/* One chat message as a request's messages array holds it, for the tests and benchmarks that drive
 * the engine directly: text only, or an image part then a text part. */
#ifndef QVL_CHAT_MSG_H
#define QVL_CHAT_MSG_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* {"role": role, "content": text}, or with image_url set, content [{image_url}, {text}]. The
 * caller frees it (or the array it is added to). */
static inline cJSON *chat_msg(const char *role, const char *image_url, const char *text) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", role);
  if (!image_url) {
    cJSON_AddStringToObject(m, "content", text);
    return m;
  }
  cJSON *c = cJSON_AddArrayToObject(m, "content");
  cJSON *img = cJSON_CreateObject();
  cJSON_AddStringToObject(img, "type", "image_url");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(img, "image_url"), "url", image_url);
  cJSON_AddItemToArray(c, img);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "type", "text");
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddItemToArray(c, t);
  return m;
}

/* A system message, then `turns` questions about image_url ("What is in picture N?"), each but the
 * last answered with answer: a conversation whose length the caller chooses. */
static inline cJSON *picture_conversation(int turns, const char *image_url, const char *answer) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, chat_msg("system", NULL, "You answer questions about pictures."));
  for (int i = 0; i < turns; i++) {
    char q[64];
    snprintf(q, sizeof q, "What is in picture %d?", i);
    cJSON_AddItemToArray(a, chat_msg("user", image_url, q));
    if (i < turns - 1)
      cJSON_AddItemToArray(a, chat_msg("assistant", NULL, answer));
  }
  return a;
}

#endif
