/*
 * UTF-8 helpers and NFC normalization for the tokenizer.
 *
 * NFC follows the reference tokenizer exactly, which means Unicode 9.0 normalization data (see
 * unicode_data.h); everything else (UTF-8 validity) is version independent. All functions are
 * pure and thread-safe.
 */
#ifndef QVL_TEXT_UNICODE_H
#define QVL_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "qvl.h"

#define UNICODE_REPLACEMENT 0xFFFDu

/* Decodes the UTF-8 sequence at s[0..len), len >= 1. On success returns the code point and sets
 * *n to its length. On an ill-formed sequence returns UINT32_MAX and sets *n to the length of its
 * maximal invalid subpart (Unicode ch. 3, "U+FFFD substitution of maximal subparts"; >= 1), which is
 * what Python's and Rust's lossy decoders replace by one U+FFFD. */
uint32_t utf8_decode(const unsigned char *s, size_t len, size_t *n);

/* Writes cp (< 0x110000, not a surrogate) as UTF-8 into out; returns the length (1..4). */
size_t utf8_encode(uint32_t cp, char out[4]);

/* Index of the first ill-formed byte of s, or len if s is entirely valid UTF-8. */
size_t utf8_valid_prefix(const char *s, size_t len);

/* Appends s to out with every maximal invalid subpart replaced by U+FFFD. */
qvl_status utf8_append_lossy(buf *out, const char *s, size_t len);

/* As utf8_append_lossy, and NUL becomes U+FFFD too: for text that goes into NUL-terminated
 * strings (cJSON) and must stay valid UTF-8 JSON. */
qvl_status utf8_append_lossy_nonul(buf *out, const char *s, size_t len);

/* Number of bytes at the end of s that form an incomplete but so far valid UTF-8 sequence (0..3):
 * a streaming decoder holds these back until the next bytes arrive. */
size_t utf8_incomplete_tail(const char *s, size_t len);
/* The length of the next piece when s (len bytes) is cut into pieces of about max bytes: max, or
 * len if shorter, plus the continuation bytes that finish a character cut there. */
size_t utf8_piece_len(const char *s, size_t len, size_t max);

/* True if valid UTF-8 s is unchanged by NFC for certain (a fast scan; false means "maybe"). */
bool unicode_nfc_quick_check(const char *s, size_t len);

/* Appends NFC(s) to out. s must be valid UTF-8. Linear up to an O(k log k) sort of each run of
 * k combining marks, so hostile input (a megabyte of accents) stays fast. */
qvl_status unicode_nfc_append(buf *out, const char *s, size_t len);

#endif
