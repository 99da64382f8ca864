/*
 * The HTTP layer end to end over loopback, against a fake engine (a thread that "generates" the
 * user's text back in small pieces), with libcurl as the client: routing, status codes, OpenAI
 * error bodies, SSE framing, back-pressure, disconnects, jobs, auth, web assets, metrics, drain.
 * The real engine is exercised by tests/e2e/.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/status.h"
#include "base/timing.h"
#include "server/http/server.h"
#include "server/http/web_assets.h"
#include "test.h"

/* ---- the fake engine --------------------------------------------------------------------- */

typedef struct fake_req {
  uint64_t id;
  engine_request r;
  char text[256];
  size_t sent;
  int piece_ms;
  bool cancel, fail_late;
  double next_t;
} fake_req;

#define FAKE_MAX 4
static struct {
  pthread_mutex_t mu;
  pthread_t thread;
  bool stop;
  fake_req *active[FAKE_MAX];
  int n, capacity;
  uint64_t next_id, cancels, submitted;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *last_user_text(const cJSON *msgs) {
  const cJSON *last = NULL;
  for (const cJSON *m = msgs->child; m; m = m->next)
    last = m;
  const cJSON *c = last ? cJSON_GetObjectItem(last, "content") : NULL;
  if (cJSON_IsString(c))
    return c->valuestring;
  for (const cJSON *p = c ? c->child : NULL; p; p = p->next)
    if (cJSON_IsString(cJSON_GetObjectItem(p, "text")))
      return cJSON_GetObjectItem(p, "text")->valuestring;
  return "";
}

static qvl_status fake_submit(void *ctx, const engine_request *r, uint64_t *id) {
  (void)ctx;
  const char *t = last_user_text(r->messages);
  if (!strncmp(t, "bad-image", 9))
    return qvl_errorf(QVL_ERR_FORMAT, "image 0: not a PNG, JPEG or WebP file");
  if (!strncmp(t, "overflow", 8))
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "prompt of 9000 tokens exceeds the context of 8192 tokens");
  pthread_mutex_lock(&fk.mu);
  if (fk.n >= fk.capacity) {
    pthread_mutex_unlock(&fk.mu);
    return qvl_errorf(QVL_ERR_BUSY, "the queue is full");
  }
  fake_req *q = calloc(1, sizeof *q);
  q->id = ++fk.next_id;
  q->r = *r;
  q->r.messages = NULL; /* copied at submit, like the engine: nothing here points into the body */
  q->fail_late = !strncmp(t, "fail-late", 9);
  q->piece_ms = !strncmp(t, "slow", 4) ? 100 : 2;
  snprintf(q->text, sizeof q->text, "echo: %s", t);
  q->next_t = time_now_s();
  fk.active[fk.n++] = q;
  fk.submitted++;
  *id = q->id;
  pthread_mutex_unlock(&fk.mu);
  return QVL_OK;
}

static void fake_cancel(void *ctx, uint64_t id) {
  (void)ctx;
  pthread_mutex_lock(&fk.mu);
  for (int i = 0; i < fk.n; i++)
    if (fk.active[i]->id == id) {
      fk.active[i]->cancel = true;
      fk.cancels++;
    }
  pthread_mutex_unlock(&fk.mu);
}

static void fake_stats(void *ctx, engine_stats *out) {
  (void)ctx;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&fk.mu);
  out->running = fk.n;
  pthread_mutex_unlock(&fk.mu);
  for (int i = 0; i < ENGINE_HIST_BUCKETS; i++)
    out->hist_bounds_ms[i] = 100.0 * (i + 1);
}

static void finish(fake_req *q, qvl_status st, qvl_finish reason, const char *err) {
  engine_result res;
  memset(&res, 0, sizeof res);
  res.status = st;
  snprintf(res.error, sizeof res.error, "%s", err ? err : "");
  res.finish_reason = reason;
  res.prompt_tokens = 10;
  res.completion_tokens = (int64_t)q->sent;
  res.text = q->text;
  res.text_len = q->sent;
  res.t.ttft_ms = 3;
  q->r.on_done(q->r.user, &res);
  free(q);
}

/* One step per ms: each active request emits 3 bytes when its piece time has come. */
static void *fake_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&fk.mu);
    if (fk.stop && fk.n == 0) {
      pthread_mutex_unlock(&fk.mu);
      return NULL;
    }
    fake_req *done[FAKE_MAX];
    int n_done = 0;
    double now = time_now_s();
    for (int i = 0; i < fk.n;) {
      fake_req *q = fk.active[i];
      bool over = q->cancel || q->fail_late || q->sent >= strlen(q->text);
      if (!over && now >= q->next_t) {
        size_t len = strlen(q->text) - q->sent;
        if (len > 3)
          len = 3;
        /* callbacks run with our lock held, as the engine's do under its own rules: quick */
        if (q->r.on_text && !q->r.on_text(q->r.user, q->text + q->sent, len))
          q->cancel = true;
        q->sent += len;
        q->next_t = now + q->piece_ms / 1e3;
        over = q->cancel || q->sent >= strlen(q->text);
      }
      if (over) {
        done[n_done++] = q;
        fk.active[i] = fk.active[--fk.n];
      } else {
        i++;
      }
    }
    pthread_mutex_unlock(&fk.mu);
    for (int i = 0; i < n_done; i++) {
      fake_req *q = done[i];
      if (q->cancel)
        finish(q, QVL_ERR_CANCELLED, QVL_FINISH_CANCELLED, "cancelled");
      else if (q->fail_late)
        finish(q, QVL_ERR_INVALID_ARG, QVL_FINISH_ERROR, "image 1: corrupt PNG data");
      else
        finish(q, QVL_OK, QVL_FINISH_EOS, NULL);
    }
    usleep(1000);
  }
}

/* ---- the client ------------------------------------------------------------------------------ */

typedef struct reply {
  long status;
  buf body, headers;
  int abort_after; /* >0: stop reading after this many body callbacks (a client going away) */
  int calls;
} reply;

static size_t on_body(char *d, size_t sz, size_t n, void *u) {
  reply *r = u;
  r->calls++;
  buf_append(&r->body, d, sz * n);
  if (r->abort_after && r->calls >= r->abort_after)
    return 0;
  return sz * n;
}

static size_t on_header(char *d, size_t sz, size_t n, void *u) {
  reply *r = u;
  buf_append(&r->headers, d, sz * n);
  return sz * n;
}

static int port;

/* method NULL: GET, or POST when body is given. extra_header may be NULL. */
static void http(reply *r, const char *method, const char *path, const char *body, size_t body_len,
                 const char *extra_header) {
  memset(r, 0, sizeof *r);
  CURL *c = curl_easy_init();
  char url[512];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  struct curl_slist *h = NULL;
  h = curl_slist_append(h, "Content-Type: application/json");
  h = curl_slist_append(h, "Expect:");
  if (extra_header)
    h = curl_slist_append(h, extra_header);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  }
  if (method)
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  if (method && !strcmp(method, "HEAD"))
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (!r->body.data)
    buf_append(&r->body, "", 0);
  if (!r->headers.data)
    buf_append(&r->headers, "", 0);
}

static void reply_free(reply *r) {
  buf_free(&r->body);
  buf_free(&r->headers);
}

static bool has_header(const reply *r, const char *line) { return strcasestr(r->headers.data, line) != NULL; }

static void post_chat(reply *r, const char *body) { http(r, NULL, "/v1/chat/completions", body, strlen(body), NULL); }

static cJSON *json(const reply *r) {
  cJSON *j = cJSON_Parse(r->body.data);
  CHECK(j != NULL, "not JSON: %.300s", r->body.data);
  return j;
}

/* Checks an OpenAI error body: status, error.type and (when given) error.code. */
static void check_error(const reply *r, long status, const char *type, const char *code, const char *what) {
  CHECK(r->status == status, "%s: status %ld, expected %ld (%.200s)", what, r->status, status, r->body.data);
  CHECK(has_header(r, "Content-Type: application/json"), "%s: JSON content type", what);
  cJSON *j = json(r);
  cJSON *e = cJSON_GetObjectItem(j, "error");
  CHECK(cJSON_IsObject(e) && cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
            cJSON_GetObjectItem(e, "param") && cJSON_GetObjectItem(e, "code"),
        "%s: error shape", what);
  const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(e, "type"));
  CHECK(t && !strcmp(t, type), "%s: type %s, expected %s", what, t ? t : "(none)", type);
  if (code) {
    const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(e, "code"));
    CHECK(c && !strcmp(c, code), "%s: code %s, expected %s", what, c ? c : "(null)", code);
  }
  cJSON_Delete(j);
}

static const char *chat_body(const char *text, bool stream) {
  static char b[1024];
  snprintf(b, sizeof b,
           "{\"model\":\"fake-model\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"stream\":%s,"
           "\"stream_options\":{\"include_usage\":true}}",
           text, stream ? "true" : "false");
  return b;
}

/* Splits an SSE body into its data payloads; checks the framing on the way. */
static int sse_events(const char *body, char ***out) {
  int n = 0;
  char **ev = NULL;
  const char *p = body;
  while (*p) {
    const char *end = strstr(p, "\n\n");
    CHECK(end != NULL && !strncmp(p, "data: ", 6), "SSE framing at '%.40s'", p);
    if (!end || strncmp(p, "data: ", 6))
      break;
    ev = realloc(ev, sizeof *ev * (size_t)(n + 1));
    ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
    p = end + 2;
  }
  *out = ev;
  return n;
}

static int metric_value(const char *name) {
  reply r;
  http(&r, NULL, "/metrics", NULL, 0, NULL);
  char key[128];
  snprintf(key, sizeof key, "\n%s ", name);
  const char *p = strstr(r.body.data, key);
  int v = p ? atoi(p + strlen(key)) : -1;
  reply_free(&r);
  return v;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_loading(void) {
  reply r;
  http(&r, NULL, "/health", NULL, 0, NULL);
  CHECK(r.status == 503 && strstr(r.body.data, "\"loading\"") && has_header(&r, "Retry-After:"), "health loading");
  reply_free(&r);
  post_chat(&r, chat_body("hi", false));
  check_error(&r, 503, "server_error", "model_loading", "chat while loading");
  CHECK(has_header(&r, "Retry-After:"), "Retry-After while loading");
  reply_free(&r);
  CHECK(metric_value("qvl_model_loaded") == 0, "metrics while loading");
  /* liveness is not readiness: alive while loading (issue 14) */
  http(&r, NULL, "/livez", NULL, 0, NULL);
  CHECK(r.status == 200 && strstr(r.body.data, "\"ready\":false"), "livez 200 while loading: %ld", r.status);
  reply_free(&r);
}

static void test_basic(void) {
  reply r;
  http(&r, NULL, "/health", NULL, 0, NULL);
  CHECK(r.status == 200 && !strcmp(r.body.data, "{\"status\":\"ok\"}"), "health ok: %ld %s", r.status, r.body.data);
  reply_free(&r);

  http(&r, NULL, "/v1/models", NULL, 0, NULL);
  cJSON *j = json(&r);
  CHECK(r.status == 200 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "list"), "models list");
  cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
  CHECK(d0 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(d0, "id")), "fake-model"), "model id");
  cJSON_Delete(j);
  reply_free(&r);
  http(&r, NULL, "/v1/models/qvl", NULL, 0, NULL);
  CHECK(r.status == 200 && strstr(r.body.data, "\"id\":\"qvl\""), "retrieve alias");
  reply_free(&r);
  http(&r, NULL, "/v1/models/gpt-4", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", "model_not_found", "retrieve unknown model");
  reply_free(&r);

  post_chat(&r, chat_body("hello world", false));
  CHECK(r.status == 200, "chat status %ld: %s", r.status, r.body.data);
  j = json(&r);
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "chat.completion"), "object");
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content"));
  CHECK(content && !strcmp(content, "echo: hello world"), "content '%s'", content ? content : "(null)");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "stop"), "finish_reason");
  cJSON *u = cJSON_GetObjectItem(j, "usage");
  CHECK(u && cJSON_GetObjectItem(u, "completion_tokens")->valuedouble == 17 &&
            cJSON_GetObjectItem(u, "total_tokens")->valuedouble == 27,
        "usage");
  CHECK(cJSON_GetObjectItem(j, "timings") != NULL, "timings");
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "model")), "fake-model"), "model in response");
  cJSON_Delete(j);
  reply_free(&r);
}

static void test_stream(void) {
  reply r;
  post_chat(&r, chat_body("streaming text here", true));
  CHECK(r.status == 200 && has_header(&r, "Content-Type: text/event-stream"), "stream status/type %ld", r.status);
  char **ev = NULL;
  int n = sse_events(r.body.data, &ev);
  CHECK(n >= 4, "%d events", n);
  buf text = {0};
  bool role_first = false, finish_seen = false, usage_seen = false;
  for (int i = 0; i < n - 1; i++) {
    cJSON *j = cJSON_Parse(ev[i]);
    CHECK(j != NULL, "event %d JSON: %s", i, ev[i]);
    if (!j)
      continue;
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "chat.completion.chunk"), "chunk object");
    cJSON *ch = cJSON_GetObjectItem(j, "choices");
    if (cJSON_GetArraySize(ch) == 0) {
      usage_seen = cJSON_GetObjectItem(j, "usage") != NULL;
      CHECK(i == n - 2, "usage chunk is last before [DONE]");
    } else {
      cJSON *c0 = cJSON_GetArrayItem(ch, 0);
      cJSON *d = cJSON_GetObjectItem(c0, "delta");
      if (i == 0)
        role_first = cJSON_GetObjectItem(d, "role") != NULL;
      const char *piece = cJSON_GetStringValue(cJSON_GetObjectItem(d, "content"));
      if (piece)
        buf_append_str(&text, piece);
      const char *fr = cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason"));
      if (fr) {
        finish_seen = !strcmp(fr, "stop");
        CHECK(cJSON_GetArraySize(d) == 0, "final delta empty");
      }
    }
    cJSON_Delete(j);
  }
  CHECK(n > 0 && !strcmp(ev[n - 1], "[DONE]"), "ends with [DONE]");
  CHECK(role_first && finish_seen && usage_seen, "role %d finish %d usage %d", role_first, finish_seen, usage_seen);
  CHECK(text.data && !strcmp(text.data, "echo: streaming text here"), "streamed text '%s'", text.data);
  buf_free(&text);
  for (int i = 0; i < n; i++)
    free(ev[i]);
  free(ev);
  reply_free(&r);

  /* a request that fails before any text gets a JSON error, not an event stream */
  post_chat(&r, chat_body("fail-late", true));
  check_error(&r, 400, "invalid_request_error", NULL, "stream failing before any text");
  CHECK(strstr(r.body.data, "corrupt PNG"), "engine message passed on");
  reply_free(&r);
}

static void test_errors(void) {
  reply r;
  const char *bad = "{\"messages\": [";
  http(&r, NULL, "/v1/chat/completions", bad, strlen(bad), NULL);
  check_error(&r, 400, "invalid_request_error", "invalid_json", "bad JSON");
  reply_free(&r);
  post_chat(&r, "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
  check_error(&r, 404, "invalid_request_error", "model_not_found", "unknown model");
  reply_free(&r);
  post_chat(&r, chat_body("bad-image", false));
  check_error(&r, 400, "invalid_request_error", NULL, "bad image");
  CHECK(strstr(r.body.data, "not a PNG"), "image message");
  reply_free(&r);
  post_chat(&r, chat_body("overflow", false));
  check_error(&r, 400, "invalid_request_error", "context_length_exceeded", "context overflow");
  reply_free(&r);
  http(&r, NULL, "/v1/chat/completions", NULL, 0, NULL);
  check_error(&r, 405, "invalid_request_error", "method_not_allowed", "GET on chat");
  CHECK(has_header(&r, "Allow: POST"), "Allow header");
  reply_free(&r);
  http(&r, "DELETE", "/health", NULL, 0, NULL);
  check_error(&r, 405, "invalid_request_error", NULL, "DELETE /health");
  reply_free(&r);
  http(&r, NULL, "/v1/nothing", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", "not_found", "unknown endpoint");
  reply_free(&r);
  http(&r, NULL, "/no/such/file.js", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", NULL, "unknown file");
  reply_free(&r);
  /* max_body_mb is 1 here */
  size_t big = (1u << 20) + 10;
  char *body = malloc(big);
  memset(body, ' ', big);
  memcpy(body, "{\"messages\":\"", 13);
  http(&r, NULL, "/v1/chat/completions", body, big, NULL);
  check_error(&r, 413, "invalid_request_error", "request_too_large", "body too large");
  reply_free(&r);
  free(body);
}

typedef struct bg {
  pthread_t t;
  const char *body;
  reply r;
} bg;

/* The endpoint table (http/router.c): a known path asked with another method answers 405 with the
 * methods of all its routes in Allow; prefix routes get the rest of the URL; /v1/ URLs that no
 * route knows are 404; a web file answers only GET and HEAD. */
static void test_routes(void) {
  static const struct {
    const char *method, *path, *allow;
  } not_allowed[] = {
      {"PUT", "/v1/jobs", "Allow: GET, HEAD, POST"},
      {"PATCH", "/v1/jobs/job-abc", "Allow: GET, HEAD, DELETE"},
      {"POST", "/v1/jobs/job-abc", "Allow: GET, HEAD, DELETE"},
      {"POST", "/v1/models", "Allow: GET, HEAD"},
      {"DELETE", "/v1/models/qvl", "Allow: GET, HEAD"},
      {"GET", "/v1/responses", "Allow: POST"},
      {"GET", "/v1/completions", "Allow: POST"},
      {"POST", "/livez", "Allow: GET, HEAD"},
      {"PUT", "/metrics", "Allow: GET, HEAD"},
  };
  reply r;
  for (size_t i = 0; i < sizeof not_allowed / sizeof not_allowed[0]; i++) {
    http(&r, not_allowed[i].method, not_allowed[i].path, NULL, 0, NULL);
    check_error(&r, 405, "invalid_request_error", "method_not_allowed", not_allowed[i].path);
    CHECK(has_header(&r, not_allowed[i].allow), "%s %s: %s in %s", not_allowed[i].method, not_allowed[i].path,
          not_allowed[i].allow, r.headers.data);
    reply_free(&r);
  }
  http(&r, NULL, "/v1/models/qvl", NULL, 0, NULL); /* prefix route: the rest is the id */
  cJSON *j = json(&r);
  const char *id = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "id")) : NULL;
  CHECK(r.status == 200 && id && !strcmp(id, "qvl"), "GET /v1/models/qvl: %ld %s", r.status, r.body.data);
  cJSON_Delete(j);
  reply_free(&r);
  http(&r, NULL, "/v1/models/", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", "model_not_found", "GET /v1/models/ (empty id)");
  reply_free(&r);
  http(&r, "HEAD", "/health", NULL, 0, NULL);
  CHECK(r.status == 200, "HEAD /health: %ld", r.status);
  reply_free(&r);
  http(&r, "DELETE", "/v1/chat/completions/x", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", "not_found", "an unknown /v1/ path");
  reply_free(&r);
  if (web_assets_count > 0) {
    http(&r, "POST", "/index.html", "{}", 2, NULL);
    check_error(&r, 405, "invalid_request_error", "method_not_allowed", "POST to a web file");
    CHECK(has_header(&r, "Allow: GET, HEAD"), "web file Allow");
    reply_free(&r);
  }
}

static void *bg_main(void *arg) {
  bg *b = arg;
  post_chat(&b->r, b->body);
  return NULL;
}

static bool wait_for(uint64_t *counter, uint64_t want, double timeout_s) {
  double end = time_now_s() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&fk.mu);
    bool ok = *counter >= want;
    pthread_mutex_unlock(&fk.mu);
    if (ok)
      return true;
    if (time_now_s() > end)
      return false;
    usleep(2000);
  }
}

static void test_busy_and_disconnect(void) {
  /* capacity 1: one slow request holds it; the next is refused at once with 503 */
  pthread_mutex_lock(&fk.mu);
  fk.capacity = 1;
  uint64_t sub0 = fk.submitted;
  pthread_mutex_unlock(&fk.mu);
  bg slow = {.body = chat_body("slow request that takes a while", false)};
  pthread_create(&slow.t, NULL, bg_main, &slow);
  CHECK(wait_for(&fk.submitted, sub0 + 1, 5), "slow request submitted");
  double t0 = time_now_s();
  reply r;
  post_chat(&r, chat_body("one more", false));
  double dt = time_now_s() - t0;
  check_error(&r, 503, "server_error", "server_busy", "queue full");
  CHECK(has_header(&r, "Retry-After:"), "Retry-After on 503");
  CHECK(dt < 1.0, "503 took %.3f s", dt);
  reply_free(&r);
  pthread_join(slow.t, NULL);
  CHECK(slow.r.status == 200 && strstr(slow.r.body.data, "echo: slow request"), "slow one completes");
  reply_free(&slow.r);
  CHECK(metric_value("qvl_rejected_busy_total") == 1, "rejected metric");

  /* a client that goes away mid-stream cancels its request */
  pthread_mutex_lock(&fk.mu);
  fk.capacity = FAKE_MAX;
  uint64_t c0 = fk.cancels;
  pthread_mutex_unlock(&fk.mu);
  memset(&r, 0, sizeof r);
  r.abort_after = 1;
  {
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port);
    const char *b = chat_body("slow stream that the client abandons after the first piece", true);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
  }
  CHECK(r.body.data && strstr(r.body.data, "data: "), "got a first chunk");
  reply_free(&r);
  CHECK(wait_for(&fk.cancels, c0 + 1, 3), "disconnect cancelled the request");
  double end = time_now_s() + 3;
  while (metric_value("qvl_running_sequences") != 0 && time_now_s() < end)
    usleep(10000);
  CHECK(metric_value("qvl_running_sequences") == 0, "slot freed");
  CHECK(metric_value("qvl_client_disconnects_total") == 1, "disconnect metric");

  /* the same for a non-streaming request: the client gives up after 300 ms */
  c0 = fk.cancels;
  {
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, chat_body("slow non-stream request abandoned by its client", false));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 300L);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    reply_free(&r);
  }
  CHECK(wait_for(&fk.cancels, c0 + 1, 3), "non-stream disconnect cancelled");
}

/* Submits a job asking text; its URL path into path. */
static void submit_job(const char *text, char *path, size_t cap) {
  reply r;
  const char *b = chat_body(text, false);
  http(&r, NULL, "/v1/jobs", b, strlen(b), NULL);
  cJSON *j = json(&r);
  snprintf(path, cap, "/v1/jobs/%s", cJSON_GetStringValue(cJSON_GetObjectItem(j, "id")));
  cJSON_Delete(j);
  reply_free(&r);
}

static void test_jobs(void) {
  reply r;
  const char *b = chat_body("job text", false);
  http(&r, NULL, "/v1/jobs", b, strlen(b), NULL);
  CHECK(r.status == 202 && has_header(&r, "Location: /v1/jobs/job-"), "job accepted: %ld", r.status);
  cJSON *j = json(&r);
  char id[64] = "";
  snprintf(id, sizeof id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(j, "id")));
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "queued"), "queued at once");
  cJSON_Delete(j);
  reply_free(&r);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  const char *st = "";
  double end = time_now_s() + 5;
  cJSON *res = NULL;
  while (time_now_s() < end) {
    http(&r, NULL, path, NULL, 0, NULL);
    cJSON_Delete(res);
    res = json(&r);
    reply_free(&r);
    st = cJSON_GetStringValue(cJSON_GetObjectItem(res, "status"));
    if (!st || !strcmp(st, "done") || !strcmp(st, "failed"))
      break;
    usleep(5000);
  }
  CHECK(st && !strcmp(st, "done"), "job done: %s", st ? st : "(null)");
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "result"), "choices"), 0);
  const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content"));
  CHECK(content && !strcmp(content, "echo: job text"), "job result");
  cJSON_Delete(res);

  /* a failing job, a cancelled job, unknown ids */
  submit_job("fail-late", path, sizeof path);
  end = time_now_s() + 5;
  do {
    usleep(5000);
    http(&r, NULL, path, NULL, 0, NULL);
    j = json(&r);
    reply_free(&r);
    st = cJSON_GetStringValue(cJSON_GetObjectItem(j, "status"));
    bool fin = st && strcmp(st, "queued") && strcmp(st, "running");
    if (fin)
      break;
    cJSON_Delete(j);
    j = NULL;
  } while (time_now_s() < end);
  CHECK(j && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed") &&
            strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")), "corrupt"),
        "failed job carries the error");
  cJSON_Delete(j);

  submit_job("slow job to cancel", path, sizeof path);
  usleep(50000);
  http(&r, "DELETE", path, NULL, 0, NULL);
  CHECK(r.status == 200, "delete job %ld", r.status);
  reply_free(&r);
  end = time_now_s() + 3;
  st = NULL;
  while (time_now_s() < end) {
    http(&r, NULL, path, NULL, 0, NULL);
    st = strstr(r.body.data, "\"status\":\"failed\"") ? "failed" : NULL;
    reply_free(&r);
    if (st)
      break;
    usleep(5000);
  }
  CHECK(st != NULL, "cancelled job reads failed");

  http(&r, NULL, "/v1/jobs/job-0000", NULL, 0, NULL);
  check_error(&r, 404, "invalid_request_error", "job_not_found", "unknown job");
  reply_free(&r);
  http(&r, NULL, "/v1/jobs/..%2f..%2fetc", NULL, 0, NULL);
  CHECK(r.status == 404, "odd job id");
  reply_free(&r);
  http(&r, NULL, "/v1/jobs", NULL, 0, NULL);
  CHECK(r.status == 200 && strstr(r.body.data, "\"object\":\"list\""), "GET /v1/jobs lists the jobs (issue 10)");
  reply_free(&r);
}

static void test_assets(void) {
  if (web_assets_count == 0)
    return;
  reply r;
  http(&r, NULL, "/", NULL, 0, NULL);
  const web_asset *a = web_asset_find("/index.html");
  CHECK(r.status == 200 && a && r.body.len == a->len && !memcmp(r.body.data, a->data, a->len), "index served");
  CHECK(has_header(&r, "Content-Type: text/html"), "index content type");
  CHECK(has_header(&r, "Content-Security-Policy: default-src 'self'"), "CSP");
  CHECK(has_header(&r, "Cache-Control: no-cache") && has_header(&r, "ETag: \""), "caching headers");
  reply_free(&r);
  char inm[200];
  snprintf(inm, sizeof inm, "If-None-Match: %s", a->etag);
  http(&r, NULL, "/index.html", NULL, 0, inm);
  CHECK(r.status == 304 && r.body.len == 0, "304 on a matching ETag: %ld", r.status);
  reply_free(&r);
  for (size_t i = 0; i < web_assets_count; i++) {
    http(&r, "HEAD", web_assets[i].path, NULL, 0, NULL);
    char ct[200];
    snprintf(ct, sizeof ct, "Content-Type: %s", web_assets[i].content_type);
    CHECK(r.status == 200 && has_header(&r, ct), "%s: %ld", web_assets[i].path, r.status);
    reply_free(&r);
  }
  http(&r, NULL, "/../etc/passwd", NULL, 0, NULL);
  CHECK(r.status == 404, "no path traversal");
  reply_free(&r);
}

static void test_metrics(void) {
  reply r;
  http(&r, NULL, "/metrics", NULL, 0, NULL);
  CHECK(r.status == 200 && has_header(&r, "Content-Type: text/plain; version=0.0.4"), "metrics type");
  CHECK(strstr(r.body.data, "qvl_model_loaded 1\n") && strstr(r.body.data, "qvl_http_responses_total{code=\"2xx\"}") &&
            strstr(r.body.data, "qvl_ttft_seconds_bucket{le=\"+Inf\"}") &&
            strstr(r.body.data, "qvl_process_resident_memory_bytes "),
        "metrics content");
  reply_free(&r);
}

/* A second server with API keys. */
static void test_auth(const server_backend *be) {
  server_config c;
  server_config_init(&c);
  free(c.host);
  c.host = strdup("127.0.0.1");
  c.port = 0;
  c.api_keys = calloc(2, sizeof *c.api_keys);
  c.api_keys[0] = strdup("sk-one");
  c.api_keys[1] = strdup("sk-two");
  c.n_api_keys = 2;
  server *s = NULL;
  CHECK(server_start(&c, &s) == QVL_OK, "auth server: %s", qvl_last_error());
  if (!s)
    return;
  const char *ids[] = {"fake-model"};
  server_set_ready(s, be, ids, 1);
  int saved = port;
  port = server_port(s);
  reply r;
  post_chat(&r, chat_body("x", false));
  check_error(&r, 401, "invalid_request_error", "invalid_api_key", "no key");
  CHECK(has_header(&r, "WWW-Authenticate: Bearer"), "WWW-Authenticate");
  reply_free(&r);
  const char *b = chat_body("x", false);
  http(&r, NULL, "/v1/chat/completions", b, strlen(b), "Authorization: Bearer sk-on");
  check_error(&r, 401, "invalid_request_error", "invalid_api_key", "wrong key (prefix)");
  reply_free(&r);
  http(&r, NULL, "/v1/chat/completions", b, strlen(b), "Authorization: Bearer sk-two");
  CHECK(r.status == 200, "right key: %ld", r.status);
  reply_free(&r);
  http(&r, NULL, "/v1/models", NULL, 0, "Authorization: Bearer sk-one");
  CHECK(r.status == 200, "models with key");
  reply_free(&r);
  http(&r, NULL, "/health", NULL, 0, NULL);
  CHECK(r.status == 200, "health needs no key");
  reply_free(&r);
  server_drain(s, 5);
  server_stop(s);
  server_config_free(&c);
  port = saved;
}

static void test_drain(server *s) {
  /* a request in flight when the drain starts still completes; then the listener is gone */
  bg slow = {.body = chat_body("slow request during drain", false)};
  uint64_t sub0 = fk.submitted;
  pthread_create(&slow.t, NULL, bg_main, &slow);
  CHECK(wait_for(&fk.submitted, sub0 + 1, 5), "submitted before drain");
  CHECK(server_drain(s, 10), "drain finished in time");
  pthread_join(slow.t, NULL);
  CHECK(slow.r.status == 200 && strstr(slow.r.body.data, "echo: slow request during drain"), "drained request ok");
  reply_free(&slow.r);
  reply r;
  http(&r, NULL, "/health", NULL, 0, NULL);
  CHECK(r.status == 0, "no listener after drain (%ld)", r.status);
  reply_free(&r);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  fk.capacity = FAKE_MAX;
  pthread_create(&fk.thread, NULL, fake_main, NULL);
  server_config c;
  server_config_init(&c);
  c.port = 0;
  c.max_body_mb = 1;
  server *s = NULL;
  qvl_status st = server_start(&c, &s);
  CHECK(st == QVL_OK, "start: %s", qvl_last_error());
  if (!s)
    return TEST_SUMMARY("server_http");
  port = server_port(s);
  CHECK(port > 0, "bound port %d", port);
  test_loading();
  server_backend be = {fake_submit, fake_cancel, fake_stats, NULL, NULL, NULL, NULL};
  const char *ids[] = {"fake-model", "qvl"};
  server_set_ready(s, &be, ids, 2);
  test_basic();
  test_stream();
  test_errors();
  test_routes();
  test_busy_and_disconnect();
  test_jobs();
  test_assets();
  test_metrics();
  test_auth(&be);
  test_drain(s);
  server_stop(s);
  server_config_free(&c);
  pthread_mutex_lock(&fk.mu);
  fk.stop = true;
  pthread_mutex_unlock(&fk.mu);
  pthread_join(fk.thread, NULL);
  curl_global_cleanup();
  return TEST_SUMMARY("server_http");
}
