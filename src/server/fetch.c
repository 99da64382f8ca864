/* Allow-listed http(s) image downloads with libcurl (see fetch.h). */
#include "server/fetch.h"

#include <curl/curl.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"

qvl_status fetch_global_init(void) {
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? QVL_OK
                                                           : qvl_errorf(QVL_ERR_INTERNAL, "libcurl failed to initialise");
}

/* Length of "scheme://host[:port]" of an absolute URL (0 when it has none). */
static size_t origin_len(const char *u) {
  const char *p = strstr(u, "://");
  if (!p)
    return 0;
  p += 3;
  return (size_t)(p - u) + strcspn(p, "/?#");
}

bool fetch_allowed(const fetch_opts *o, const char *url) {
  if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
    return false;
  for (int i = 0; i < o->n_allow; i++) {
    const char *pre = o->allow[i];
    size_t n = strlen(pre), on = origin_len(pre);
    if (!n || strlen(url) < n)
      continue;
    if (on > n)
      on = n;
    if (strncasecmp(url, pre, on) || strncmp(url + on, pre + on, n - on))
      continue;
    char next = url[n];
    if (strchr("/?&=#", pre[n - 1]) || next == '\0' || next == '/' || next == '?' || next == '#')
      return true;
  }
  return false;
}

typedef struct sink {
  buf *out;
  size_t max;
  bool too_large;
} sink;

static size_t on_data(char *data, size_t size, size_t n, void *user) {
  sink *s = user;
  size_t len = size * n;
  if (s->out->len + len > s->max) {
    s->too_large = true;
    return 0; /* makes curl stop with CURLE_WRITE_ERROR */
  }
  return buf_append(s->out, data, len) == QVL_OK ? len : 0;
}

qvl_status fetch_remote(void *user, const char *url, size_t max_bytes, buf *out) {
  const fetch_opts *o = user;
  if (!fetch_allowed(o, url))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image URL '%.200s' is not allowed by this server (allow_image_url)", url);
  out->len = 0;
  if (out->data)
    out->data[0] = '\0';
  CURL *c = curl_easy_init();
  if (!c)
    return qvl_errorf(QVL_ERR_NOMEM, "libcurl: out of memory");
  sink s = {out, max_bytes, false};
  char err[CURL_ERROR_SIZE] = "";
  long ms = (long)(o->timeout_s * 1e3);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for DNS timeouts */
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "qvl/" QVL_VERSION);
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  if (s.too_large || rc == CURLE_FILESIZE_EXCEEDED)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "image at '%.200s' is larger than %zu bytes", url, max_bytes);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return qvl_errorf(QVL_ERR_TIMEOUT, "image at '%.200s': no complete answer within %g s", url, o->timeout_s);
  if (rc != CURLE_OK)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image at '%.200s' could not be fetched: %s", url,
                      err[0] ? err : curl_easy_strerror(rc));
  if (code != 200)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image at '%.200s' could not be fetched: HTTP status %ld%s", url, code,
                      code >= 300 && code < 400 ? " (redirects are not followed)" : "");
  return QVL_OK;
}
