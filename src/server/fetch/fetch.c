/* Allow-listed http(s) image downloads with libcurl (see fetch.h). */
#include "server/fetch/fetch.h"

#include <curl/curl.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"
#include "server/fetch/url.h"

qvl_status fetch_global_init(void) {
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? QVL_OK
                                                           : qvl_errorf(QVL_ERR_INTERNAL, "libcurl failed to initialise");
}

/* Both sides in normal form (url.h): the string compared is the string fetched. */
static bool allowed_normal(const fetch_opts *o, const char *url) {
  size_t ul = strlen(url);
  for (int i = 0; i < o->n_allow; i++) {
    char pre[URL_MAX + 1];
    if (url_normalize(o->allow[i], pre, sizeof pre) != QVL_OK)
      continue;
    size_t n = strlen(pre);
    /* "https://h" normalises to "https://h/": the rule below treats it as the bare origin */
    bool bare = pre[n - 1] == '/' && n >= 2 && strstr(pre, "://") && strchr(strstr(pre, "://") + 3, '/') == pre + n - 1 &&
                o->allow[i][strlen(o->allow[i]) - 1] != '/';
    if (bare)
      n--;
    if (ul < n || strncmp(url, pre, n))
      continue;
    char next = url[n];
    if ((!bare && strchr("/?&=#", pre[n - 1])) || next == '\0' || next == '/' || next == '?' || next == '#')
      return true;
  }
  return false;
}

bool fetch_allowed(const fetch_opts *o, const char *url) {
  char norm[URL_MAX + 1];
  return url_normalize(url, norm, sizeof norm) == QVL_OK && allowed_normal(o, norm);
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

typedef struct stop_ctx {
  qvl_stop_fn stop;
  void *user;
  qvl_status st;
} stop_ctx;

static int on_progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  stop_ctx *c = user;
  c->st = qvl_stop_poll(c->stop, c->user);
  return c->st != QVL_OK; /* non-zero aborts the transfer */
}

qvl_status fetch_remote(void *user, const char *url, size_t max_bytes, buf *out) {
  return fetch_remote_stoppable(user, url, max_bytes, NULL, NULL, out);
}

qvl_status fetch_remote_stoppable(void *user, const char *raw_url, size_t max_bytes, qvl_stop_fn stop, void *stop_user,
                                  buf *out) {
  const fetch_opts *o = user;
  char url[URL_MAX + 1];
  if (url_normalize(raw_url, url, sizeof url) != QVL_OK)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image URL '%.200s' is not allowed by this server: %s", raw_url,
                      qvl_last_error());
  if (!allowed_normal(o, url))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image URL '%.200s' is not allowed by this server (allow_image_url)", raw_url);
  out->len = 0;
  if (out->data)
    out->data[0] = '\0';
  CURL *c = curl_easy_init();
  if (!c)
    return qvl_errorf(QVL_ERR_NOMEM, "libcurl: out of memory");
  sink s = {out, max_bytes, false};
  stop_ctx sc = {stop, stop_user, QVL_OK};
  char err[CURL_ERROR_SIZE] = "";
  long ms = (long)(o->timeout_s * 1e3);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L); /* fetch exactly the normal form that was checked */
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
  if (stop) {
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &sc);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  if (sc.st != QVL_OK)
    return sc.st; /* the stop check set the message */
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
