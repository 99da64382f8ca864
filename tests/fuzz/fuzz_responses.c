/* Fuzz target: the Responses translator and formatter over a stored conversation (issue 24). The
 * input is one or two request bodies separated by a 0xFF byte; the generated text is the bytes after a
 * second 0xFF (or the first body). The first request is answered (non-streamed, so that a stored
 * conversation is kept); in the second, "PREV_ID" is replaced by the first answer's id, so
 * previous_response_id chains, item references and function_call_output items reach the store's
 * rebuilt conversation. Each request is answered twice: as JSON and as an SSE stream cut into
 * pieces at arbitrary bytes. Checked: a refusal is a 4xx with a message in the endpoint's error
 * shape; an accepted body is a chat body the chat parser accepts or refuses with a 4xx; every answer
 * and every SSE data line is valid JSON. Never a crash, leak or hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_chat.h"
#include "server/dialects/dialect.h"
#include "server/dialects/responses.h"
#include "server/dialects/responses_store.h"
#include "server/openai/chat_wire.h"

/* Every "data: " line of an SSE stream is one JSON value. */
static void check_sse(const buf *out) {
  const char *p = out->data ? out->data : "";
  while ((p = strstr(p, "data: "))) {
    p += 6;
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    char *line = strndup(p, n);
    if (!line)
      abort();
    if (strcmp(line, "[DONE]"))
      fuzz_assert_json(line);
    free(line);
    p += n;
  }
}

/* Translates and answers one request; writes the answer's id to id_out (when it was answered). */
static void one(const char *body, size_t len, resp_store *st, const char *text, size_t text_len, unsigned seed,
                char *id_out, size_t id_cap) {
  compat_ctx ctx = {.model_id = "m", .created = 1, .started = 1, .responses = st, .stream_usage = (seed & 1) != 0};
  compat_request cr;
  api_error e;
  if (!responses_translate(body, len, &ctx, &cr, &e)) {
    if (e.http < 400 || e.http > 499 || !e.message[0] || !cr.fmt)
      abort();
    char *j = cr.fmt->error_json(cr.state, &e);
    fuzz_assert_json(j);
    free(j);
    compat_request_free(&cr);
    return;
  }
  if (cr.reply_body) {
    fuzz_assert_json(cr.reply_body);
    compat_request_free(&cr);
    return;
  }
  api_chat_request r;
  api_result res;
  memset(&res, 0, sizeof res);
  if (!fuzz_chat_parse(cr.chat_body, cr.chat_len, &r)) {
    compat_request_free(&cr);
    return;
  }
  res.agent = r.agent;
  api_chat_request_free(&r);
  res.finish_reason = seed & 2 ? QVL_FINISH_LENGTH : QVL_FINISH_EOS;
  res.prompt_tokens = 3;
  res.completion_tokens = (int64_t)text_len;
  buf_append(&res.text, text, text_len);
  if (seed & 4) {
    /* a stream: pieces cut at arbitrary bytes (UTF-8 sequences and tags split) */
    buf out = {0};
    size_t step = 1 + (seed >> 3) % 7;
    for (size_t i = 0; i < text_len; i += step)
      cr.fmt->stream_text(cr.state, &out, text + i, text_len - i < step ? text_len - i : step);
    if (seed & 8)
      res.status = QVL_ERR_CANCELLED; /* failed midway: error + response.failed */
    cr.fmt->stream_end(cr.state, &out, &res);
    check_sse(&out);
    buf_free(&out);
  } else {
    char *j = cr.fmt->result_json(cr.state, &res);
    fuzz_assert_json(j);
    free(j);
    snprintf(id_out, id_cap, "%s", cr.id);
  }
  api_result_free(&res);
  compat_request_free(&cr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1 << 16))
    return 0;
  unsigned seed = data[0];
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  const char *sep1 = memchr(p, 0xff, n);
  size_t len1 = sep1 ? (size_t)(sep1 - p) : n;
  const char *rest = sep1 ? sep1 + 1 : NULL;
  size_t rest_n = sep1 ? n - len1 - 1 : 0;
  const char *sep2 = rest ? memchr(rest, 0xff, rest_n) : NULL;
  size_t len2 = sep2 ? (size_t)(sep2 - rest) : rest_n;
  const char *text = sep2 ? sep2 + 1 : p;
  size_t text_len = sep2 ? rest_n - len2 - 1 : len1;

  resp_store *st = NULL;
  if (resp_store_init(4, 1 << 16, 60, &st) != QVL_OK)
    abort();
  char id[64] = "resp_none";
  one(p, len1, st, text, text_len, seed & ~4u, id, sizeof id); /* answered as JSON: stored */
  if (rest) {
    /* the follow-up, with PREV_ID naming the stored answer */
    buf b2 = {0};
    const char *q = rest, *end = rest + len2;
    while (q < end) {
      const char *hit = memmem(q, (size_t)(end - q), "PREV_ID", 7);
      if (!hit) {
        buf_append(&b2, q, (size_t)(end - q));
        break;
      }
      buf_append(&b2, q, (size_t)(hit - q));
      buf_append_str(&b2, id);
      q = hit + 7;
    }
    char id2[64];
    one(b2.data ? b2.data : "", b2.len, st, text, text_len, seed, id2, sizeof id2);
    buf_free(&b2);
  }
  resp_store_free(st);
  return 0;
}
