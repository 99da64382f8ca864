/* Unit tests of src/text/unicode.c: UTF-8 decoding with maximal-subpart replacement, encoding,
 * streaming tails, and NFC (composition, Hangul, canonical reordering, exclusions) against
 * hand-checked Unicode 9.0 results. */
#include <string.h>

#include "base/buf.h"
#include "text/unicode.h"
#include "test.h"

static void test_decode_encode(void) {
  int round = 1;
  for (uint32_t cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF)
      continue;
    char b[4];
    size_t n = utf8_encode(cp, b), m = 0;
    size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (n != want || utf8_decode((const unsigned char *)b, n, &m) != cp || m != n || utf8_valid_prefix(b, n) != n) {
      round = 0;
      CHECK(0, "round trip of U+%04X", cp);
      break;
    }
  }
  CHECK(round, "every scalar value encodes to its length and decodes back");
  /* maximal subparts (Unicode ch. 3, table 3-8): each is one replacement */
  struct { const char *s; size_t n; } bad[] = {
      {"\x80", 1}, {"\xC0\xAF", 1}, {"\xE0\x80", 1}, {"\xED\xA0\x80", 1}, {"\xF4\x90", 1},
      {"\xE2\x82", 2}, {"\xF0\x9F\x98", 3}, {"\xFF", 1}, {"\xC2", 1}, {"\xF5\x80\x80\x80", 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t m = 0;
    CHECK(utf8_decode((const unsigned char *)bad[i].s, strlen(bad[i].s), &m) == UINT32_MAX && m == bad[i].n,
          "ill-formed case %zu: subpart %zu, expected %zu", i, m, bad[i].n);
  }
  CHECK(utf8_valid_prefix("ab\xC3\xA9\xFFz", 6) == 4, "valid prefix stops at the bad byte");
  buf out = {0};
  CHECK(utf8_append_lossy(&out, "a\xE2\x82z\xF0\x9F\x98", 7) == QVL_OK, "lossy");
  CHECK(out.len == 1 + 3 + 1 + 3 && !memcmp(out.data, "a\xEF\xBF\xBDz\xEF\xBF\xBD", out.len),
        "lossy: one U+FFFD per maximal subpart");
  buf_free(&out);
  CHECK(utf8_append_lossy_nonul(&out, "\0a\0\xC3\xA9\xC3\0", 7) == QVL_OK, "lossy without NUL");
  CHECK(out.len == 3 + 1 + 3 + 2 + 3 + 3 &&
            !memcmp(out.data, "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD" "\xC3\xA9" "\xEF\xBF\xBD" "\xEF\xBF\xBD", out.len),
        "every NUL and the cut sequence before one become U+FFFD");
  buf_free(&out);
  CHECK(utf8_incomplete_tail("ab\xF0\x9F\x98", 5) == 3, "3 bytes of a 4-byte sequence held back");
  CHECK(utf8_incomplete_tail("ab\xC3", 3) == 1, "lead byte held back");
  CHECK(utf8_incomplete_tail("ab\xC3\xA9", 4) == 0, "complete sequence: nothing held");
  CHECK(utf8_incomplete_tail("ab\x80", 3) == 0, "a stray continuation byte is not a tail");
  CHECK(utf8_incomplete_tail("\xE0\x80", 2) == 0, "an already invalid prefix is not held back");
}

static int nfc_is(const char *in, const char *want) {
  buf out = {0};
  int ok = unicode_nfc_append(&out, in, strlen(in)) == QVL_OK && out.len == strlen(want) &&
           !memcmp(out.data, want, out.len);
  buf_free(&out);
  return ok;
}

static void test_nfc(void) {
  CHECK(nfc_is("e\xCC\x81", "\xC3\xA9"), "e + acute -> e-acute");
  CHECK(nfc_is("\xC3\xA9", "\xC3\xA9"), "precomposed stays");
  CHECK(nfc_is("\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80"), "Hangul L+V -> syllable GA");
  CHECK(nfc_is("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"), "Hangul L+V+T -> GAG");
  /* a + dot below (ccc 220) + circumflex (ccc 230) in the wrong order: reordered, then composed */
  CHECK(nfc_is("a\xCC\x82\xCC\xA3", "\xE1\xBA\xAD"), "canonical reordering then composition");
  CHECK(nfc_is("\xE2\x84\xAB", "\xC3\x85"), "ANGSTROM SIGN -> A-ring (singleton)");
  CHECK(nfc_is("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"), "composition exclusion U+0958 stays decomposed");
  CHECK(nfc_is("\xEF\xAC\x81", "\xEF\xAC\x81"), "compatibility ligature fi is not touched by NFC");
  CHECK(nfc_is("\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xBD\xA0\xE5\xA5\xBD"), "CJK unchanged");
  CHECK(unicode_nfc_quick_check("plain ascii", 11), "quick check: ASCII is NFC");
  CHECK(!unicode_nfc_quick_check("e\xCC\x81", 3), "quick check: a combining mark is a maybe");
}

int main(void) {
  test_decode_encode();
  test_nfc();
  return TEST_SUMMARY("test_unicode");
}
