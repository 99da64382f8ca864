#include <string.h>

#include "base/dataurl.h"
#include "test.h"

static void expect_b64(const char *in, const char *want, size_t want_len) {
  buf b = {0};
  qvl_status s = base64_decode(in, strlen(in), 1 << 20, &b);
  CHECK(s == QVL_OK && b.len == want_len && !memcmp(b.data, want, want_len), "decode '%s': %s", in,
        qvl_last_error());
  buf_free(&b);
}

static void expect_b64_error(const char *in, size_t cap, qvl_status want) {
  buf b = {0};
  qvl_status s = base64_decode(in, strlen(in), cap, &b);
  CHECK(s == want, "decode '%s' gave %d, expected %d", in, s, want);
  buf_free(&b);
}

/* The decoder's contract, one symbol at a time (the oracle for the randomized check below):
 * status, and the bytes decoded when it is QVL_OK. */
static qvl_status slow_b64(const char *in, size_t len, size_t cap, unsigned char *out, size_t *n) {
  static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  size_t syms = 0;
  *n = 0;
  for (size_t i = 0; i < len; i++) {
    char c = in[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')
      continue;
    if (c == '=') {
      pad++;
      continue;
    }
    const char *p = c == '-' ? alpha + 62 : c == '_' ? alpha + 63 : c ? strchr(alpha, c) : NULL;
    if (pad || !p)
      return QVL_ERR_FORMAT;
    acc = acc << 6 | (uint32_t)(p - alpha);
    bits += 6, syms++;
    if (bits >= 8) {
      bits -= 8;
      if (*n >= cap)
        return QVL_ERR_TOO_LARGE;
      out[(*n)++] = (unsigned char)(acc >> bits);
    }
  }
  if (syms % 4 == 1 || pad > 2 || (pad && (syms + (size_t)pad) % 4 != 0))
    return QVL_ERR_FORMAT;
  return QVL_OK;
}

/* Random inputs mostly of valid symbols, with whitespace, padding, bad bytes and limits placed at
 * random, decoded by base64_decode (four symbols at a time where it can) and by the oracle. */
static void test_random_b64(void) {
  static const char pool[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_";
  uint64_t rs = 0x9E3779B97F4A7C15ull;
  char in[200];
  unsigned char want[200];
  int bad = 0;
  for (int t = 0; t < 20000; t++) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    size_t len = (size_t)(rs % 120);
    for (size_t i = 0; i < len; i++) {
      rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
      unsigned r = (unsigned)(rs >> 40) % 1000;
      in[i] = r < 960 ? pool[r % 66] : r < 975 ? "\n \t\r\f"[r % 5] : r < 990 ? '=' : r < 995 ? '!' : (char)(128 + r % 100);
    }
    in[len] = 0;
    size_t cap = (size_t)(rs >> 8) % 4 == 0 ? (size_t)(rs >> 16) % 90 : 1 << 20, n;
    qvl_status ws = slow_b64(in, len, cap, want, &n);
    buf b = {0};
    qvl_status s = base64_decode(in, len, cap, &b);
    bool same = s == ws && (s != QVL_OK || (b.len == n && !memcmp(b.data, want, n) && b.data[n] == 0));
    if (!same && bad++ < 5)
      CHECK(same, "random base64 '%s' (limit %zu): status %d, expected %d", in, cap, s, ws);
    buf_free(&b);
  }
  CHECK(bad == 0, "%d random base64 inputs decoded differently from the one-symbol oracle", bad);
}

int main(void) {
  test_random_b64();
  /* RFC 4648 test vectors. */
  expect_b64("", "", 0);
  expect_b64("Zg==", "f", 1);
  expect_b64("Zm8=", "fo", 2);
  expect_b64("Zm9v", "foo", 3);
  expect_b64("Zm9vYg==", "foob", 4);
  expect_b64("Zm9vYmE=", "fooba", 5);
  expect_b64("Zm9vYmFy", "foobar", 6);
  expect_b64("Zm9v\nYmFy", "foobar", 6);
  expect_b64("Zm9vYg", "foob", 4);       /* unpadded */
  expect_b64("-_8=", "\xfb\xff", 2);     /* URL-safe alphabet */
  expect_b64_error("Zm9v!", 100, QVL_ERR_FORMAT);
  expect_b64_error("Z", 100, QVL_ERR_FORMAT);
  expect_b64_error("Zg==Zg==", 100, QVL_ERR_FORMAT);
  expect_b64_error("Zg===", 100, QVL_ERR_FORMAT);
  expect_b64_error("Zm9vYmFy", 5, QVL_ERR_TOO_LARGE);

  buf e = {0};
  CHECK(base64_encode("foobar", 6, &e) == QVL_OK && !strcmp(e.data, "Zm9vYmFy"), "encode");
  e.len = 0;
  CHECK(base64_encode("fooba", 5, &e) == QVL_OK && !strcmp(e.data, "Zm9vYmE="), "encode pad");
  buf_free(&e);

  char mime[64];
  buf b = {0};
  CHECK(dataurl_decode("data:image/png;base64,Zm9v", 100, mime, sizeof mime, &b) == QVL_OK &&
            !strcmp(mime, "image/png") && b.len == 3 && !memcmp(b.data, "foo", 3),
        "png data url");
  CHECK(dataurl_decode("DATA:text/plain,a%20b", 100, mime, sizeof mime, &b) == QVL_OK && b.len == 3 &&
            !memcmp(b.data, "a b", 3),
        "percent data url");
  CHECK(dataurl_decode("data:,x%2", 100, mime, sizeof mime, &b) == QVL_ERR_FORMAT, "bad escape");
  CHECK(dataurl_decode("data:image/png;base64", 100, mime, sizeof mime, &b) == QVL_ERR_FORMAT, "no comma");
  CHECK(dataurl_decode("http://x/a.png", 100, mime, sizeof mime, &b) == QVL_ERR_FORMAT, "not data");
  CHECK(!dataurl_is("file.png") && dataurl_is("data:x"), "dataurl_is");
  buf_free(&b);
  return TEST_SUMMARY("dataurl");
}
