/* What the fuzz targets of the HTTP APIs share: the limits they parse chat bodies under, and the
 * chat parser's verdict on what a dialect's translator wrote (include after fuzz.h). */
#ifndef QVL_FUZZ_CHAT_H
#define QVL_FUZZ_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "server/openai/chat_wire.h"

/* 64 tokens, 4 images of 4 Mpixels at most, the served model named "m" or "qvl". */
static inline api_limits fuzz_chat_limits(void) {
  static const char *const ids[] = {"m", "qvl"};
  api_limits lim = {.max_tokens = 64, .max_images = 4, .max_pixels = 1 << 22, .default_max_pixels = 1 << 20,
                    .default_min_pixels = 65536, .model_ids = ids, .n_model_ids = 2};
  return lim;
}

/* Parses a translated chat body: true when the chat parser accepts it (*r then holds the request,
 * the caller frees it); a refusal must be a 4xx, anything else aborts. */
static inline bool fuzz_chat_parse(const char *body, size_t len, api_chat_request *r) {
  api_limits lim = fuzz_chat_limits();
  api_error e;
  if (api_chat_parse(body, len, &lim, r, &e))
    return true;
  FUZZ_ASSERT(e.http >= 400 && e.http <= 499);
  return false;
}

#endif
