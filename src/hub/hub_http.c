/* libcurl GETs against the hub: bounded retries with backoff, errors a user can act on, a progress
 * bar, and downloads into a .part file that resume where an earlier run stopped. */
#include "hub/hub_impl.h"

#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/buf.h"
#include "model/verify.h"

/* Caps on what the hub may send us besides JSON: an error body, the number of listing pages. */
#define HUB_MAX_ERROR_BODY 4096
#define HUB_MAX_PAGES 1000

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Percent-encodes everything but unreserved characters (and '/' when keep_slash). */
static char *url_escape(const char *s, int keep_slash) {
  size_t n = strlen(s);
  char *o = malloc(3 * n + 1);
  if (!o)
    return NULL;
  char *d = o;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      *d++ = (char)c;
    else {
      static const char hex[] = "0123456789ABCDEF";
      *d++ = '%';
      *d++ = hex[c >> 4];
      *d++ = hex[c & 15];
    }
  }
  *d = 0;
  return o;
}

static void human_bytes(double b, char *out, size_t n) {
  if (b >= 1e9)
    snprintf(out, n, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    snprintf(out, n, "%.1f MB", b / 1e6);
  else if (b >= 1e3)
    snprintf(out, n, "%.1f kB", b / 1e3);
  else
    snprintf(out, n, "%.0f B", b);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }


/* What one transfer received: status line, the headers we use, and where the body went. */
typedef struct xfer {
  hub_http *c;
  long code;
  char err_code[64];     /* X-Error-Code */
  char err_msg[256];     /* X-Error-Message */
  char link_next[2048];  /* Link: <...>; rel="next" */
  char linked_etag[80];  /* X-Linked-Etag: sha256 of an LFS file */
  uint64_t linked_size;  /* X-Linked-Size */
  uint64_t content_range_total;
  /* memory body (JSON) or error body */
  buf body;
  size_t body_cap;
  /* file body */
  int fd;
  uint64_t start;   /* bytes in the .part before this transfer */
  uint64_t written; /* bytes written by this transfer */
  int positioned;   /* the first body byte decided between append (206) and restart (200) */
  int write_errno;
  int body_to_file;
  /* progress */
  const char *label;
  uint64_t total;
  double t0, last_draw;
  int last_decile;
} xfer;

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\r' || s[n - 1] == '\n' || s[n - 1] == ' '))
    s[--n] = 0;
}

static void header_value(const char *line, size_t len, const char *name, char *out, size_t cap) {
  size_t nn = strlen(name);
  if (len <= nn || strncasecmp(line, name, nn) != 0 || line[nn] != ':')
    return;
  const char *v = line + nn + 1;
  size_t vn = len - nn - 1;
  while (vn && (*v == ' ' || *v == '\t')) {
    v++;
    vn--;
  }
  if (vn >= cap)
    vn = cap - 1;
  memcpy(out, v, vn);
  out[vn] = 0;
  trim(out);
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t len = size * nmemb;
  if (len >= 5 && !strncmp(data, "HTTP/", 5)) {
    /* A new response (after a redirect): its error headers replace the previous ones. The
     * X-Linked-* headers come on the hub's redirect, so they are kept. */
    x->err_code[0] = x->err_msg[0] = x->link_next[0] = 0;
    return len;
  }
  header_value(data, len, "X-Error-Code", x->err_code, sizeof x->err_code);
  header_value(data, len, "X-Error-Message", x->err_msg, sizeof x->err_msg);
  char tmp[2048] = "";
  header_value(data, len, "X-Linked-Etag", tmp, sizeof tmp);
  if (tmp[0]) {
    char *v = tmp;
    if (!strncmp(v, "W/", 2))
      v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
      v[n - 1] = 0;
      v++;
    }
    /* Only a sha256 (64 hex) is of use; anything longer is not one. */
    if (strlen(v) < sizeof x->linked_etag)
      memcpy(x->linked_etag, v, strlen(v) + 1);
  }
  tmp[0] = 0;
  header_value(data, len, "X-Linked-Size", tmp, sizeof tmp);
  if (tmp[0])
    x->linked_size = strtoull(tmp, NULL, 10);
  tmp[0] = 0;
  header_value(data, len, "Content-Range", tmp, sizeof tmp);
  if (tmp[0]) {
    const char *sl = strchr(tmp, '/');
    if (sl && isdigit((unsigned char)sl[1]))
      x->content_range_total = strtoull(sl + 1, NULL, 10);
  }
  tmp[0] = 0;
  header_value(data, len, "Link", tmp, sizeof tmp);
  if (tmp[0]) {
    /* Link: <url>; rel="next"[, <url2>; rel="prev"] */
    for (char *p = tmp; (p = strchr(p, '<'));) {
      char *e = strchr(p, '>');
      if (!e)
        break;
      char *nxt = strchr(e, ',');
      const char *rel = strstr(e, "rel=\"next\"");
      if (rel && (!nxt || rel < nxt)) {
        size_t n = (size_t)(e - p - 1);
        if (n < sizeof x->link_next) {
          memcpy(x->link_next, p + 1, n);
          x->link_next[n] = 0;
        }
        break;
      }
      p = e;
    }
  }
  return len;
}

static void progress_draw(xfer *x, int done) {
  if (x->c->progress < 0 || !x->label)
    return;
  double t = now_s();
  uint64_t have = x->start + x->written;
  double el = t - x->t0;
  /* The first few milliseconds give no useful rate; the final line always gets one. */
  double rate = (el > 0.5 || (done && el > 0)) ? (double)x->written / el : 0;
  int pct = x->total ? (int)(100.0 * (double)have / (double)x->total) : 0;
  char h[32], tot[32];
  human_bytes((double)have, h, sizeof h);
  human_bytes((double)x->total, tot, sizeof tot);
  if (x->c->progress == 1) {
    if (!done && t - x->last_draw < 0.1)
      return;
    x->last_draw = t;
    char eta[32] = "--:--";
    if (rate > 0 && x->total > have) {
      long s = (long)((double)(x->total - have) / rate);
      snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    int width = 24, fill = x->total ? (int)((double)width * (double)have / (double)x->total) : 0;
    char bar[32];
    for (int i = 0; i < width; i++)
      bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\r%-28.28s %3d%% [%s] %s / %s  %.1f MB/s  ETA %s   ", x->label, pct, bar, h, tot, rate / 1e6,
            eta);
    if (done)
      fputc('\n', stderr);
    fflush(stderr);
  } else {
    /* Logs (not a terminal): one line per quarter, so a 4 GB download stays a few lines. */
    int dec = pct / 25;
    if (!done && (dec <= x->last_decile || t - x->last_draw < 2.0))
      return;
    x->last_decile = dec;
    x->last_draw = t;
    fprintf(stderr, "qvl: %s: %s%s / %s (%d%%), %.1f MB/s\n", x->label, done ? "done, " : "", h, tot, pct, rate / 1e6);
  }
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t len = size * nmemb;
  long code = 0;
  curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &code);
  if (!x->body_to_file || (code != 200 && code != 206)) {
    size_t cap = x->body_to_file ? HUB_MAX_ERROR_BODY : x->body_cap;
    if (x->body.len + len > cap) {
      if (x->body_to_file)
        return len; /* an error page: the first few kB are enough */
      x->write_errno = EFBIG;
      return 0;
    }
    return buf_append(&x->body, data, len) == QVL_OK ? len : 0;
  }
  if (!x->positioned) {
    /* 206: the server honoured our Range and continues the .part; 200: it starts over. */
    if (code == 200 && x->start > 0) {
      x->start = 0;
      if (ftruncate(x->fd, 0) != 0) {
        x->write_errno = errno;
        return 0;
      }
    }
    if (lseek(x->fd, (off_t)x->start, SEEK_SET) < 0) {
      x->write_errno = errno;
      return 0;
    }
    x->positioned = 1;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(x->fd, data + off, len - off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      x->write_errno = errno;
      return 0;
    }
    off += (size_t)w;
  }
  x->written += len;
  progress_draw(x, 0);
  return len;
}

qvl_status hub_http_open(hub_http *c) {
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return qvl_errorf(QVL_ERR_INTERNAL, "libcurl initialisation failed: %s", curl_easy_strerror(curl_init_rc));
  c->curl = curl_easy_init();
  if (!c->curl)
    return qvl_errorf(QVL_ERR_INTERNAL, "libcurl: cannot create a handle");
  c->headers = curl_slist_append(NULL, "User-Agent: qvl/" QVL_VERSION);
  if (c->token && *c->token) {
    char *h = strfmt("Authorization: Bearer %s", c->token);
    struct curl_slist *n = h ? curl_slist_append(c->headers, h) : NULL;
    free(h);
    if (!n)
      return nomem();
    c->headers = n;
  }
  return c->headers ? QVL_OK : nomem();
}

void hub_http_close(hub_http *c) {
  if (c->curl)
    curl_easy_cleanup(c->curl);
  curl_slist_free_all(c->headers);
  c->curl = NULL;
  c->headers = NULL;
}

/* One GET; fills x and returns the curl result (HTTP errors are in x->code). */
static CURLcode perform(hub_http *c, xfer *x, const char *url, const char *range) {
  CURL *h = c->curl;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  /* Redirects go to a CDN with signed URLs: curl keeps our Authorization header to the original
   * host only (CURLOPT_UNRESTRICTED_AUTH stays off). */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_time_s);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
  if (range)
    curl_easy_setopt(h, CURLOPT_RANGE, range);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->code);
  return rc;
}

static int curl_retryable(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_PARTIAL_FILE:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
    return 1;
  default:
    return 0;
  }
}

static int http_retryable(long code) { return code == 429 || code == 408 || (code >= 500 && code <= 599); }

static long backoff_ms(const hub_http *c, int attempt) {
  long ms = c->retry_base_ms;
  for (int i = 0; i < attempt && ms < 60000; i++)
    ms *= 2;
  return ms > 60000 ? 60000 : ms;
}

/* What to do next is hub.c's to say: it knows whether the cache could stand in for the hub. */
static qvl_status network_error(hub_http *c, CURLcode rc, const char *what, int attempts) {
  if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY ||
      (rc == CURLE_OPERATION_TIMEDOUT && !strstr(what, "download"))) {
    c->unreachable = 1;
    return qvl_errorf(QVL_ERR_IO, "cannot reach the hub at %s while %s: %s (%d attempt%s)", c->endpoint, what,
                      curl_easy_strerror(rc), attempts, attempts == 1 ? "" : "s");
  }
  return qvl_errorf(rc == CURLE_OPERATION_TIMEDOUT ? QVL_ERR_TIMEOUT : QVL_ERR_IO, "%s failed: %s (%d attempt%s)", what,
                    curl_easy_strerror(rc), attempts, attempts == 1 ? "" : "s");
}

/* Turns a final HTTP error status into the message a user can act on. file may be NULL (listing). */
static qvl_status http_error(const hub_http *c, const xfer *x, const char *file) {
  const char *em = x->err_msg[0] ? x->err_msg : "";
  const char *sep = x->err_msg[0] ? ": " : "";
  /* The hub answers 401 + RepoNotFound for private and for nonexistent repos alike. */
  if (x->code == 401)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "repo '%s': access denied (HTTP 401)%s%s. It does not exist, or it is private or gated: %s",
                      c->repo, sep, em,
                      c->token ? "the token in HF_TOKEN was rejected or has no access to it"
                               : "check the name, or set HF_TOKEN to an access token of an account that may read it");
  if (x->code == 404) {
    if (!strcmp(x->err_code, "RevisionNotFound"))
      return qvl_errorf(QVL_ERR_NOT_FOUND, "revision '%s' not found in repo '%s' (HTTP %ld)", c->revision, c->repo,
                        x->code);
    if (file && strcmp(x->err_code, "RepoNotFound") != 0)
      return qvl_errorf(QVL_ERR_NOT_FOUND, "file '%s' not found in repo '%s' (HTTP %ld)", file, c->repo, x->code);
    return qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s' not found on %s (HTTP %ld)%s%s; check the name", c->repo,
                      c->endpoint, x->code, sep, em);
  }
  if (x->code == 403 || !strcmp(x->err_code, "GatedRepo"))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "repo '%s' is gated (HTTP %ld)%s%s: accept its terms at %s/%s and set HF_TOKEN to an access "
                      "token of that account",
                      c->repo, x->code, sep, em, c->endpoint, c->repo);
  return qvl_errorf(QVL_ERR_IO, "hub answered HTTP %ld for %s%s%s%s", x->code, file ? file : "the file listing",
                    file ? " " : "", sep, em);
}

/* GET a JSON document with bounded retries. */
static qvl_status get_json(hub_http *c, const char *url, const char *what, cJSON **out, char *link_next, size_t ln_cap) {
  *out = NULL;
  for (int attempt = 0;; attempt++) {
    xfer x = {.c = c, .fd = -1, .body_cap = HUB_MAX_JSON_BYTES};
    CURLcode rc = perform(c, &x, url, NULL);
    int retry = (rc != CURLE_OK && curl_retryable(rc)) || (rc == CURLE_OK && http_retryable(x.code));
    if (retry && attempt < c->max_retries) {
      buf_free(&x.body);
      long ms = backoff_ms(c, attempt);
      /* the retries of an unreachable hub take a while: say so rather than sit silent */
      if (c->progress >= 0) {
        char why[64];
        if (rc != CURLE_OK)
          snprintf(why, sizeof why, "%s", curl_easy_strerror(rc));
        else
          snprintf(why, sizeof why, "HTTP %ld", x.code);
        fprintf(stderr, "qvl: %s: %s; trying again in %.1f s (attempt %d of %d)\n", what, why, ms / 1000.0,
                attempt + 2, c->max_retries + 1);
      }
      sleep_ms(ms);
      continue;
    }
    qvl_status s = QVL_OK;
    if (rc == CURLE_WRITE_ERROR && x.write_errno == EFBIG)
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: the hub's answer exceeds %u bytes", what, HUB_MAX_JSON_BYTES);
    else if (rc != CURLE_OK)
      s = network_error(c, rc, what, attempt + 1);
    else if (x.code != 200)
      s = http_error(c, &x, NULL);
    else if (!(*out = cJSON_ParseWithLength(x.body.data ? x.body.data : "", x.body.len)))
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: the hub's answer is not JSON (%zu bytes)", what, x.body.len);
    if (s == QVL_OK && link_next)
      snprintf(link_next, ln_cap, "%s", x.link_next);
    buf_free(&x.body);
    return s;
  }
}

qvl_status hub_http_fetch_listing(hub_http *c, hub_listing *l) {
  char *rev = url_escape(c->revision, 0);
  char *url = rev ? strfmt("%s/api/models/%s/tree/%s?recursive=true", c->endpoint, c->repo, rev) : NULL;
  free(rev);
  if (!url)
    return nomem();
  char what[300];
  snprintf(what, sizeof what, "listing repo '%s'", c->repo);
  qvl_status s = QVL_OK;
  for (int page = 0; s == QVL_OK; page++) {
    if (page >= HUB_MAX_PAGES) {
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: more than %d pages", what, HUB_MAX_PAGES);
      break;
    }
    cJSON *j;
    char next[2048];
    s = get_json(c, url, what, &j, next, sizeof next);
    if (s == QVL_OK)
      s = hub_listing_add_json(l, j, what);
    cJSON_Delete(j);
    free(url);
    url = NULL;
    if (s != QVL_OK || !next[0])
      break;
    /* Follow pages on the same hub only: the token must not go elsewhere. */
    if (next[0] == '/')
      url = strfmt("%s%s", c->endpoint, next);
    else if (!strncmp(next, c->endpoint, strlen(c->endpoint)) && next[strlen(c->endpoint)] == '/')
      url = strdup(next);
    else
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: next page '%.200s' is not on %s", what, next, c->endpoint);
    if (s == QVL_OK && !url)
      s = nomem();
  }
  free(url);
  return s;
}

/* What the .part holds now; one longer than the file belongs to another version: start over. */
static qvl_status part_size(int fd, const char *part, uint64_t want, uint64_t *have) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return qvl_errorf(QVL_ERR_IO, "%s: cannot stat: %s", part, strerror(errno));
  *have = (uint64_t)st.st_size;
  if (*have > want) {
    if (ftruncate(fd, 0) != 0)
      return qvl_errorf(QVL_ERR_IO, "%s: cannot truncate: %s", part, strerror(errno));
    *have = 0;
  }
  return QVL_OK;
}

static qvl_status disk_room(int fd, const hub_entry *e, uint64_t have, const char *dir) {
  struct statvfs vfs;
  if (fstatvfs(fd, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < e->size - have) {
    char need[32], free_b[32];
    human_bytes((double)(e->size - have), need, sizeof need);
    human_bytes((double)vfs.f_bavail * (double)vfs.f_frsize, free_b, sizeof free_b);
    return qvl_errorf(QVL_ERR_IO, "disk full: '%s' needs %s more in %s, only %s free (set QVL_CACHE to another disk)",
                      e->path, need, dir, free_b);
  }
  return QVL_OK;
}

typedef enum part_step { PART_DONE, PART_RETRY, PART_FAILED } part_step;

/* One GET of the rest of the file, appended to the .part; *s says why on PART_FAILED. */
static part_step transfer(hub_http *c, const hub_entry *e, const char *url, int fd, const char *part, uint64_t have,
                          int *attempt, qvl_status *s) {
  xfer x = {.c = c, .fd = fd, .start = have, .body_to_file = 1, .label = e->path, .total = e->size, .t0 = now_s()};
  if (c->progress == 0 && *attempt == 0) {
    char tot[32];
    human_bytes((double)e->size, tot, sizeof tot);
    fprintf(stderr, "qvl: downloading %s (%s)%s from %s/%s\n", e->path, tot, have ? ", resuming" : "", c->endpoint,
            c->repo);
  }
  char range[48];
  snprintf(range, sizeof range, "%llu-", (unsigned long long)have);
  CURLcode rc = perform(c, &x, url, have ? range : NULL);
  uint64_t now_have = x.start + x.written;
  if (x.written)
    progress_draw(&x, rc == CURLE_OK && now_have == e->size);
  if (c->progress == 1 && x.written && !(rc == CURLE_OK && now_have == e->size))
    fputc('\n', stderr);
  buf_free(&x.body);
  if (x.write_errno) {
    int en = x.write_errno;
    *s = qvl_errorf(QVL_ERR_IO, "%s writing %s: %s", en == ENOSPC ? "disk full" : "write error", part, strerror(en));
    return PART_FAILED;
  }
  if (rc == CURLE_OK && x.code == 416) {
    /* Our .part does not fit the file the hub has now: start over. */
    if (ftruncate(fd, 0) != 0 || (*attempt)++ >= c->max_retries + 1) {
      *s = qvl_errorf(QVL_ERR_IO, "'%s': the hub rejected resuming at byte %llu (HTTP 416)", e->path,
                      (unsigned long long)have);
      return PART_FAILED;
    }
    return PART_RETRY;
  }
  if (rc == CURLE_OK && x.code != 200 && x.code != 206) {
    if (!http_retryable(x.code) || *attempt >= c->max_retries) {
      *s = http_error(c, &x, e->path);
      return PART_FAILED;
    }
    sleep_ms(backoff_ms(c, (*attempt)++));
    return PART_RETRY;
  }
  if (x.linked_etag[0] && verify_is_sha256(x.linked_etag) && e->sha256[0] && strcasecmp(x.linked_etag, e->sha256) != 0) {
    *s = qvl_errorf(QVL_ERR_MISMATCH,
                    "'%s': the hub's listing says sha256 %s but the download says %s: the repo changed while "
                    "downloading; run again",
                    e->path, e->sha256, x.linked_etag);
    return PART_FAILED;
  }
  /* A server that closes early without saying so (chunked, no length) looks like success. */
  if (rc == CURLE_OK && now_have < e->size)
    rc = CURLE_PARTIAL_FILE;
  if (rc != CURLE_OK) {
    if (curl_retryable(rc) && *attempt < c->max_retries) {
      sleep_ms(backoff_ms(c, (*attempt)++));
      return PART_RETRY;
    }
    char what[600];
    if (now_have > 0)
      snprintf(what, sizeof what, "download of '%s' from repo '%s' (stopped at %llu of %llu bytes; run again to resume)",
               e->path, c->repo, (unsigned long long)now_have, (unsigned long long)e->size);
    else
      snprintf(what, sizeof what, "download of '%s' from repo '%s'", e->path, c->repo);
    *s = network_error(c, rc, what, *attempt + 1);
    return PART_FAILED;
  }
  if (now_have > e->size) {
    *s = qvl_errorf(QVL_ERR_MISMATCH, "'%s': the hub sent %llu bytes, the listing says %llu", e->path,
                    (unsigned long long)now_have, (unsigned long long)e->size);
    if (ftruncate(fd, 0) != 0) {
    }
    return PART_FAILED;
  }
  return PART_DONE;
}

qvl_status hub_http_fetch_part(hub_http *c, const hub_entry *e, int fd, const char *part, const char *dir,
                               int *attempt, uint64_t *had) {
  char *rev = url_escape(c->revision, 0), *pe = url_escape(e->path, 1);
  char *url = rev && pe ? strfmt("%s/%s/resolve/%s/%s", c->endpoint, c->repo, rev, pe) : NULL;
  free(rev);
  free(pe);
  if (!url)
    return nomem();
  qvl_status s = QVL_OK;
  for (;;) {
    uint64_t have = 0;
    if ((s = part_size(fd, part, e->size, &have)) != QVL_OK)
      break;
    *had = have;
    if (have == e->size || (s = disk_room(fd, e, have, dir)) != QVL_OK)
      break;
    if (transfer(c, e, url, fd, part, have, attempt, &s) != PART_RETRY)
      break;
  }
  free(url);
  return s;
}
