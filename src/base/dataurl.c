#include "base/dataurl.h"

#include <string.h>
#include <strings.h>

#include "base/status.h"

/* Per byte: the symbol's value 0-63 (standard and URL-safe alphabets), B64_SPACE, B64_PAD or
 * B64_BAD; one row per high nibble. */
enum { B64_BAD = -1, B64_SPACE = -2, B64_PAD = -3 };
static const signed char b64_values[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -2, -2, -1, -2, -2, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, 62, -1, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -3, -1, -1,
    -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, 63,
    -1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

/* Whitespace anywhere is skipped; '=' only at the end; a decoded size over max_bytes is
 * QVL_ERR_TOO_LARGE at the first byte past it. Runs of four symbols without whitespace (nearly
 * all of a data URL) are decoded four at a time straight into the reserved buffer: a request's
 * 2.6 MB image payload used to cost ~27 ms of the server's CPU appending byte by byte. */
qvl_status base64_decode(const char *s, size_t len, size_t max_bytes, buf *out) {
  out->len = 0;
  QVL_TRY(buf_reserve(out, len / 4 * 3 + 3 < max_bytes ? len / 4 * 3 + 3 : max_bytes));
  const unsigned char *in = (const unsigned char *)s;
  unsigned char *dst = (unsigned char *)out->data;
  size_t n = 0, symbols = 0;
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  qvl_status st = QVL_OK;
  for (size_t i = 0; i < len;) {
    if (bits == 0 && !pad && i + 4 <= len && n + 3 <= max_bytes) {
      int a = b64_values[in[i]], b = b64_values[in[i + 1]], c = b64_values[in[i + 2]], d = b64_values[in[i + 3]];
      if ((a | b | c | d) >= 0) {
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
        dst[n] = (unsigned char)(v >> 16), dst[n + 1] = (unsigned char)(v >> 8), dst[n + 2] = (unsigned char)v;
        n += 3, symbols += 4, i += 4;
        continue;
      }
    }
    unsigned char ch = in[i];
    int v = b64_values[ch];
    i++;
    if (v == B64_SPACE)
      continue;
    if (v == B64_PAD) {
      pad++;
      continue;
    }
    if (pad || v == B64_BAD) {
      st = pad ? qvl_errorf(QVL_ERR_FORMAT, "base64: data after '=' padding at offset %zu", i - 1)
               : qvl_errorf(QVL_ERR_FORMAT, "base64: invalid character 0x%02x at offset %zu", ch, i - 1);
      break;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    symbols++;
    if (bits >= 8) {
      bits -= 8;
      if (n >= max_bytes) {
        st = qvl_errorf(QVL_ERR_TOO_LARGE, "base64: decoded data exceeds the %zu byte limit", max_bytes);
        break;
      }
      dst[n++] = (unsigned char)(acc >> bits);
    }
  }
  out->len = n;
  dst[n] = 0;
  if (st == QVL_OK && symbols % 4 == 1)
    st = qvl_errorf(QVL_ERR_FORMAT, "base64: truncated input (%zu symbols)", symbols);
  if (st == QVL_OK && (pad > 2 || (pad && (symbols + (size_t)pad) % 4 != 0)))
    st = qvl_errorf(QVL_ERR_FORMAT, "base64: bad padding");
  return st;
}

qvl_status dataurl_encode(const char *mime, const void *data, size_t len, buf *out) {
  QVL_TRY(buf_printf(out, "data:%s;base64,", mime));
  return base64_encode(data, len, out);
}

qvl_status base64_encode(const void *data, size_t len, buf *out) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = data;
  QVL_TRY(buf_reserve(out, (len + 2) / 3 * 4));
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < len)
      v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < len)
      v |= p[i + 2];
    char q[4] = {alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], i + 1 < len ? alphabet[(v >> 6) & 63] : '=',
                 i + 2 < len ? alphabet[v & 63] : '='};
    QVL_TRY(buf_append(out, q, 4));
  }
  return out->data ? QVL_OK : buf_append(out, "", 0);
}

bool dataurl_is(const char *url) { return url && strncasecmp(url, "data:", 5) == 0; }

static int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c |= 0x20;
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

qvl_status dataurl_decode(const char *url, size_t max_bytes, char *mime, size_t mime_cap, buf *out) {
  if (!dataurl_is(url))
    return qvl_errorf(QVL_ERR_FORMAT, "not a data: URL");
  const char *meta = url + 5;
  const char *comma = strchr(meta, ',');
  if (!comma)
    return qvl_errorf(QVL_ERR_FORMAT, "data: URL without ',' before the payload");
  size_t meta_len = (size_t)(comma - meta);
  bool is_b64 = meta_len >= 7 && strncasecmp(comma - 7, ";base64", 7) == 0;
  size_t type_len = strcspn(meta, ";,");
  if (mime && mime_cap) {
    size_t n = type_len < mime_cap - 1 ? type_len : mime_cap - 1;
    memcpy(mime, meta, n);
    mime[n] = 0;
  }
  const char *payload = comma + 1;
  size_t plen = strlen(payload);
  if (is_b64)
    return base64_decode(payload, plen, max_bytes, out);
  out->len = 0;
  for (size_t i = 0; i < plen; i++) {
    unsigned char c = (unsigned char)payload[i];
    if (c == '%') {
      /* The string is NUL-terminated, so reading up to two bytes ahead stops at the terminator. */
      int hi = hex_value((unsigned char)payload[i + 1]);
      int lo = hi >= 0 ? hex_value((unsigned char)payload[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        return qvl_errorf(QVL_ERR_FORMAT, "data: URL has a bad %%-escape at offset %zu", i);
      c = (unsigned char)(hi * 16 + lo);
      i += 2;
    }
    if (out->len >= max_bytes)
      return qvl_errorf(QVL_ERR_TOO_LARGE, "data: URL payload exceeds the %zu byte limit", max_bytes);
    QVL_TRY(buf_append(out, &c, 1));
  }
  return out->data ? QVL_OK : buf_append(out, "", 0);
}
