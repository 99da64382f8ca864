/* What the server's wire-level unit tests share: the limits a chat request is parsed under (the e2e
 * model's ids), the check of a refusal's api_error, and a translated body run through the chat
 * parser (what a dialect's translator writes must be a valid chat request). Include after test.h. */
#ifndef QVL_WIRE_TEST_H
#define QVL_WIRE_TEST_H

#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/dialects/dialect.h"
#include "server/openai/chat_wire.h"

static const char *const wire_test_model_ids[] = {"e2e-Q8_0.gguf", "qvl"};

/* The limits of the tests' served model: 100 tokens, max_images images, 4 Mpixels (1 Mpixel and
 * 64 Kpixels by default). */
static inline api_limits wire_test_limits(int max_images) {
  api_limits l;
  memset(&l, 0, sizeof l);
  l.max_tokens = 100;
  l.max_images = max_images;
  l.max_pixels = 4 << 20;
  l.default_max_pixels = 1 << 20;
  l.default_min_pixels = 65536;
  l.model_ids = wire_test_model_ids;
  l.n_model_ids = 2;
  return l;
}

/* CHECKs the refusal e of body: status http and, when given, the param and a part of the message. */
static inline void check_refusal(const char *body, const api_error *e, int http, const char *param,
                                 const char *msg_part) {
  CHECK(e->http == http, "%s: http %d, expected %d (%s)", body, e->http, http, e->message);
  if (param)
    CHECK(!strcmp(e->param, param), "%s: param '%s', expected '%s'", body, e->param, param);
  if (msg_part)
    CHECK(strstr(e->message, msg_part) != NULL, "%s: message '%s' lacks '%s'", body, e->message, msg_part);
}

/* Translates body with fn (a refusal is a failed CHECK); when the translator made a chat body, CHECKs
 * that api_chat_parse accepts it under *l and returns it as cJSON (caller frees); NULL otherwise. */
static inline cJSON *translate_checked(compat_translate_fn fn, const char *body, const compat_ctx *c,
                                       const api_limits *l, compat_request *cr) {
  api_error e;
  if (!fn(body, strlen(body), c, cr, &e)) {
    CHECK(0, "%s: refused: %s", body, e.message);
    return NULL;
  }
  if (cr->reply_body)
    return NULL;
  api_chat_request req;
  bool ok = api_chat_parse(cr->chat_body, cr->chat_len, l, &req, &e);
  CHECK(ok, "%s: translated body refused by the chat parser: %s (%s)", body, e.message, cr->chat_body);
  if (ok)
    api_chat_request_free(&req);
  return cJSON_Parse(cr->chat_body);
}

#endif
