/* Fuzz target: /v1/chat/completions bodies through the validator; accepted requests are also
 * turned into response and chunk JSON (with the input bytes as the generated text), which must
 * parse back. Never a crash, leak or hang, whatever the bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_chat.h"
#include "server/openai/chat_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  api_limits lim = fuzz_chat_limits();
  api_chat_request r;
  api_error e;
  if (!api_chat_parse((const char *)data, size, &lim, &r, &e)) {
    if (e.http < 400 || e.http > 499 || !e.message[0])
      abort();
    char *j = api_error_json(&e);
    fuzz_assert_json(j);
    free(j);
    return 0;
  }
  if (r.gen.max_tokens < 1 || r.gen.max_tokens > 64 || r.n_images > 4 || r.min_pixels > r.max_pixels)
    abort();
  api_result res;
  memset(&res, 0, sizeof res);
  res.finish_reason = QVL_FINISH_EOS;
  buf_append(&res.text, data, size);
  char *j = api_completion_json("chatcmpl-x", 1, "m", &res);
  char *c = api_chunk_json("chatcmpl-x", 1, "m", true, res.text.data, res.text.len, NULL);
  fuzz_assert_json(j);
  fuzz_assert_json(c);
  FUZZ_ASSERT(!strchr(c, '\n'));
  free(j);
  free(c);
  api_result_free(&res);
  api_chat_request_free(&r);
  return 0;
}
