/* libFuzzer target for the tokenizer (the mock512 vocabulary, loaded once): encode arbitrary bytes
 * with and without added-token matching, decode the ids, and check what is guaranteed:
 *   - every id is inside the vocabulary;
 *   - with added-token matching off, decode(encode(x)) == NFC(x'), x' being x with invalid UTF-8
 *     replaced by U+FFFD;
 *   - with it on, the spans between added tokens are normalized separately (like the reference:
 *     "<|im_end|>" + U+0338 keeps its '>'), so only NFC(decode(encode(x))) == NFC(x') holds;
 *   - the streaming pieces (tokenizer_token_bytes) concatenate to the same bytes;
 *   - utf8_incomplete_tail never holds back more than 3 bytes.
 * Run from the repository root (the replay in make test does). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

static tokenizer *tok;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_tokenizer: %s\n", what);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tok && tokenizer_init_hf("tests/fixtures/tokenizer/mock512/tokenizer.json", &tok) != QVL_OK) {
    fprintf(stderr, "fuzz_tokenizer: cannot load the mock tokenizer: %s\n", qvl_last_error());
    abort();
  }
  if (size > (1u << 16))
    size = 1u << 16;
  const char *text = (const char *)data;
  buf expect = {0}, clean = {0};
  if (utf8_append_lossy(&clean, text, size) != QVL_OK ||
      unicode_nfc_append(&expect, clean.data ? clean.data : "", clean.len) != QVL_OK)
    fail("lossy/NFC failed");
  for (unsigned flags = 0; flags <= TOKENIZER_ENCODE_NO_ADDED; flags += TOKENIZER_ENCODE_NO_ADDED) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode_flags(tok, text, size, flags, &ids, &n) != QVL_OK)
      fail("encode failed");
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok))
        fail("id out of range");
    buf out = {0}, raw = {0};
    if (tokenizer_decode(tok, ids, n, false, &out) != QVL_OK)
      fail("decode failed");
    buf renorm = {0};
    const buf *got = &out;
    if (!(flags & TOKENIZER_ENCODE_NO_ADDED)) {
      if (unicode_nfc_append(&renorm, out.data ? out.data : "", out.len) != QVL_OK)
        fail("NFC of the decoded text failed");
      got = &renorm;
    }
    if (got->len != expect.len || (got->len && memcmp(got->data, expect.data, got->len) != 0))
      fail("decode(encode(x)) is not NFC(x)");
    buf_free(&renorm);
    for (size_t i = 0; i < n; i++) {
      size_t len;
      const char *p = tokenizer_token_bytes(tok, ids[i], &len);
      buf_append(&raw, p, len);
      if (utf8_incomplete_tail(raw.data, raw.len) > 3)
        fail("incomplete tail > 3");
    }
    if (raw.len != out.len || (raw.len && memcmp(raw.data, out.data, raw.len) != 0))
      fail("token bytes do not concatenate to the decoded text");
    buf_free(&out);
    buf_free(&raw);
    free(ids);
  }
  buf_free(&expect);
  buf_free(&clean);
  return 0;
}
