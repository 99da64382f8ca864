#include "base/dataurl.h"

#include <string.h>
#include <strings.h>

#include "base/status.h"

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

qvl_status base64_decode(const char *s, size_t len, size_t max_bytes, buf *out) {
  out->len = 0;
  QVL_TRY(buf_reserve(out, len / 4 * 3 + 3 < max_bytes ? len / 4 * 3 + 3 : max_bytes));
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  size_t symbols = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (is_space(c))
      continue;
    if (c == '=') {
      pad++;
      continue;
    }
    if (pad)
      return qvl_errorf(QVL_ERR_FORMAT, "base64: data after '=' padding at offset %zu", i);
    int v = b64_value(c);
    if (v < 0)
      return qvl_errorf(QVL_ERR_FORMAT, "base64: invalid character 0x%02x at offset %zu", c, i);
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    symbols++;
    if (bits >= 8) {
      bits -= 8;
      if (out->len >= max_bytes)
        return qvl_errorf(QVL_ERR_TOO_LARGE, "base64: decoded data exceeds the %zu byte limit", max_bytes);
      unsigned char byte = (unsigned char)(acc >> bits);
      QVL_TRY(buf_append(out, &byte, 1));
    }
  }
  if (symbols % 4 == 1)
    return qvl_errorf(QVL_ERR_FORMAT, "base64: truncated input (%zu symbols)", symbols);
  if (pad > 2 || (pad && (symbols + (size_t)pad) % 4 != 0))
    return qvl_errorf(QVL_ERR_FORMAT, "base64: bad padding");
  if (!out->data)
    QVL_TRY(buf_append(out, "", 0));
  return QVL_OK;
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
