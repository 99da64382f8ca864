/* http(s) URL normalisation (see url.h). */
#include "server/fetch/url.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"

static bool unreserved(unsigned char c) { return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'; }

/* Characters that may stay as they are in a path or query (RFC 3986 pchar / query, minus '%'). */
static bool keep_raw(unsigned char c, bool query) {
  if (unreserved(c))
    return true;
  if (strchr("!$&'()*+,;=:@", c))
    return true;
  return c == '/' || (query && c == '?');
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (unsigned char)tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool over;
} sbuf;

static void put(sbuf *b, char c) {
  if (b->n + 1 >= b->cap) {
    b->over = true;
    return;
  }
  b->p[b->n++] = c;
  b->p[b->n] = '\0';
}

static void put_escaped(sbuf *b, unsigned char c) {
  static const char hx[] = "0123456789ABCDEF";
  put(b, '%');
  put(b, hx[c >> 4]);
  put(b, hx[c & 15]);
}

/* Canonical percent-encoding of [s, e) into b. Decoded '/' and '?' stay escaped: they are data. */
static qvl_status encode_part(const char *s, const char *e, bool query, sbuf *b) {
  for (const char *p = s; p < e; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '%') {
      if (e - p < 3 || hexval((unsigned char)p[1]) < 0 || hexval((unsigned char)p[2]) < 0)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "malformed percent-escape");
      unsigned char d = (unsigned char)(hexval((unsigned char)p[1]) * 16 + hexval((unsigned char)p[2]));
      if (unreserved(d))
        put(b, (char)d);
      else
        put_escaped(b, d);
      p += 2;
    } else if (c <= 0x20 || c == 0x7f) {
      return qvl_errorf(QVL_ERR_INVALID_ARG, "control character or space in the URL");
    } else if (c == '\\') {
      return qvl_errorf(QVL_ERR_INVALID_ARG, "backslash in the URL");
    } else if (keep_raw(c, query)) {
      put(b, (char)c);
    } else {
      put_escaped(b, c);
    }
  }
  return QVL_OK;
}

/* RFC 3986 5.2.4 on an absolute, encoded path whose unreserved escapes are already decoded (so
 * "." and ".." segments are literal): segments go on a stack, ".." pops, "." is dropped; a path that
 * ended in a dot segment or '/' keeps its trailing '/'. In place (the result is never longer). */
static void remove_dot_segments(char *path) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 1);
  if (!tmp)
    return;
  memcpy(tmp, path, n + 1);
  size_t o = 0;
  bool trailing = false;
  char *seg = tmp + 1; /* path[0] is '/' */
  for (;;) {
    char *end = strchr(seg, '/');
    size_t sl = end ? (size_t)(end - seg) : strlen(seg);
    trailing = false;
    if (sl == 1 && seg[0] == '.') {
      trailing = true;
    } else if (sl == 2 && seg[0] == '.' && seg[1] == '.') {
      while (o > 0 && path[--o] != '/') { /* drop the last output segment, "/name" */
      }
      trailing = true;
    } else if (!end && sl == 0) {
      trailing = true; /* the path ended in '/' */
    } else {
      path[o++] = '/';
      memcpy(path + o, seg, sl);
      o += sl;
    }
    if (!end)
      break;
    seg = end + 1;
  }
  if (o == 0 || trailing)
    path[o++] = '/';
  path[o] = '\0';
  free(tmp);
}

qvl_status url_normalize(const char *url, char *out, size_t cap) {
  if (cap)
    out[0] = '\0';
  size_t len = strlen(url);
  if (len > URL_MAX)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "URL longer than %d bytes", URL_MAX);
  bool https;
  if (!strncasecmp(url, "http://", 7))
    https = false;
  else if (!strncasecmp(url, "https://", 8))
    https = true;
  else
    return qvl_errorf(QVL_ERR_INVALID_ARG, "'%.200s' is not an http:// or https:// URL", url);
  const char *a = url + (https ? 8 : 7);
  const char *auth_end = a + strcspn(a, "/?#\\");
  if (*auth_end == '\\')
    return qvl_errorf(QVL_ERR_INVALID_ARG, "backslash in the URL '%.200s'", url);
  if (memchr(a, '@', (size_t)(auth_end - a)))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s' has user information (user@host): not allowed", url);
  /* host[:port], the host possibly an [IPv6] literal */
  const char *hs = a, *he, *port = NULL;
  if (*a == '[') {
    he = memchr(a, ']', (size_t)(auth_end - a));
    if (!he)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s': unterminated [IPv6] host", url);
    he++;
    if (he < auth_end && *he != ':')
      return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s': junk after the [IPv6] host", url);
    if (he < auth_end)
      port = he + 1;
  } else {
    he = memchr(a, ':', (size_t)(auth_end - a));
    if (he)
      port = he + 1;
    else
      he = auth_end;
  }
  if (he == hs)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s' names no host", url);
  char buf[URL_MAX * 3 + 64];
  sbuf b = {buf, 0, sizeof buf, false};
  buf[0] = '\0';
  const char *scheme = https ? "https://" : "http://";
  for (const char *p = scheme; *p; p++)
    put(&b, *p);
  for (const char *p = hs; p < he; p++) {
    unsigned char c = (unsigned char)*p;
    if (!(isalnum(c) || c == '-' || c == '.' || c == '_' || (*hs == '[' && (c == ':' || c == '[' || c == ']'))))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s': character '%c' in the host", url, c > 0x20 && c < 0x7f ? c : '?');
    put(&b, (char)tolower(c));
  }
  while (b.n > strlen(scheme) && b.p[b.n - 1] == '.' && *hs != '[') /* "host." is "host" */
    b.p[--b.n] = '\0';
  if (port && port < auth_end) {
    long v = 0;
    for (const char *p = port; p < auth_end; p++) {
      if (!isdigit((unsigned char)*p) || v > 65535)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s': bad port", url);
      v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 65535)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "URL '%.200s': bad port", url);
    if (v != (https ? 443 : 80)) {
      char ps[16];
      snprintf(ps, sizeof ps, ":%ld", v);
      for (char *p = ps; *p; p++)
        put(&b, *p);
    }
  }
  /* path and query, without the fragment */
  const char *ps = auth_end, *qs = ps + strcspn(ps, "?#"), *fs = qs + strcspn(qs, "#");
  size_t path_at = b.n;
  put(&b, '/');
  const char *p0 = ps < qs && *ps == '/' ? ps + 1 : ps;
  qvl_status st = encode_part(p0, qs, false, &b);
  if (st != QVL_OK)
    return qvl_error_prefix(st, "URL '%.200s': ", url);
  if (b.over)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "URL longer than %d bytes", URL_MAX);
  remove_dot_segments(b.p + path_at);
  b.n = strlen(b.p);
  if (b.n == path_at)
    put(&b, '/');
  if (*qs == '?') {
    put(&b, '?');
    st = encode_part(qs + 1, fs, true, &b);
    if (st != QVL_OK)
      return qvl_error_prefix(st, "URL '%.200s': ", url);
  }
  if (b.over || b.n >= cap || b.n > URL_MAX)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "URL longer than %d bytes", URL_MAX);
  memcpy(out, b.p, b.n + 1);
  return QVL_OK;
}
