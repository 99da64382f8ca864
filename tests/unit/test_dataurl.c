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

int main(void) {
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
