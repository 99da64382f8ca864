/*
 * The HTTP server of `qvl serve` (see server.h and docs/API.md).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a chat request is parsed
 * and submitted on its connection's thread, which then waits on a condition variable that the
 * engine's callbacks signal. While waiting it polls the socket for a hang-up (POLLRDHUP), so a
 * client that goes away cancels its request and frees its batch slot within a fraction of a
 * second, streaming or not. A stream's headers are sent only once the first text (or the end)
 * is there, so a request that fails before producing anything (a bad image, context overflow)
 * gets a plain JSON error with the right status instead of a broken event stream.
 *
 * Every request has a `call`: the state shared between the connection thread and the engine
 * thread, reference counted because either side may finish last.
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/status.h"
#include "base/timing.h"
#include "server/api.h"
#include "server/fetch.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/web_assets.h"

#define WAIT_SLICE_MS 100 /* how often a waiting thread looks for a client hang-up */

struct server {
  const server_config *cfg;
  struct MHD_Daemon *d;
  int listen_fd;
  int port;
  double t_start;
  int64_t unix_start;

  pthread_rwlock_t be_lock; /* readers: submit/cancel/stats; writer: attach/detach */
  server_backend be;
  bool ready, draining;     /* under be_lock */
  char **model_ids;         /* [n_model_ids], set once by server_set_ready */
  int n_model_ids;

  jobs *jobs;
  fetch_opts fetch;

  pthread_mutex_t mu;       /* calls_alive */
  pthread_cond_t cv;
  int64_t calls_alive;

  _Atomic uint64_t http_class[6], rejected_busy, disconnects, seq;
};

/* ---- per-request state ------------------------------------------------------------------- */

/* What one log line says about a request. */
typedef struct req_log {
  char id[48];
  char method[12];
  char path[128];
  int status;
  double t0;
  bool chat, stream;
  const api_result *res; /* NULL unless a chat request finished */
} req_log;

typedef struct conn_req {
  req_log log;
  buf body;
  bool too_large, responded, log_owned_by_stream;
} conn_req;

typedef struct call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  server *srv;
  uint64_t engine_id;
  bool done, cancelled, any_text;
  api_result result;
  buf pending;              /* text from on_text not yet sent */
  /* response */
  char id[48];
  char model[128];
  int64_t created;
  bool stream, include_usage, sent_role, finished;
  buf out;                  /* SSE bytes formatted, from out_off on not yet handed to MHD */
  size_t out_off;
  int fd;                   /* the client's socket, for hang-up checks */
  req_log log;              /* streams log when the response ends */
  /* jobs */
  bool is_job;
  char job_id[JOBS_ID_CAP];
  api_agent_opts agent;     /* tool calls / logprobs in the response */
  bool tool_seen;           /* stream: a <tool_call> began; no more content deltas */
  buf held;                 /* stream: text that may begin a <tool_call>, not sent yet */
} call;

static double now_ms(double t0) { return (time_now_s() - t0) * 1e3; }

static void timestamp(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* One line per request, logfmt, written with a single write(2) so lines never interleave. */
static void log_request(const req_log *l) {
  char ts[40], line[1024];
  timestamp(ts, sizeof ts);
  int n = snprintf(line, sizeof line, "ts=%s level=info msg=request id=%s method=%s path=%s status=%d total_ms=%.1f",
                   ts, l->id, l->method, l->path, l->status, now_ms(l->t0));
  if (l->chat && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, " stream=%d", l->stream);
  const api_result *r = l->res;
  if (r && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n,
                  " prompt_tokens=%lld completion_tokens=%lld image_tokens=%lld cached_prompt_tokens=%lld "
                  "image_cache_hits=%d image_cache_misses=%d queue_ms=%.1f ttft_ms=%.1f decode_tok_s=%.2f finish=%s",
                  (long long)r->prompt_tokens, (long long)r->completion_tokens, (long long)r->image_tokens,
                  (long long)r->cached_prompt_tokens, r->image_cache_hits, r->image_cache_misses, r->t.queue_ms,
                  r->t.ttft_ms, r->t.decode_tok_s, r->finish_reason[0] ? r->finish_reason : "none");
  if (n < 0)
    return;
  if ((size_t)n >= sizeof line - 1)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
}

static call *call_new(server *s) {
  call *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
  k->refs = 1;
  k->srv = s;
  k->fd = -1;
  pthread_mutex_lock(&s->mu);
  s->calls_alive++;
  pthread_mutex_unlock(&s->mu);
  return k;
}

static void call_unref(call *k) {
  pthread_mutex_lock(&k->mu);
  int left = --k->refs;
  pthread_mutex_unlock(&k->mu);
  if (left)
    return;
  server *s = k->srv;
  api_result_free(&k->result);
  buf_free(&k->pending);
  buf_free(&k->held);
  buf_free(&k->out);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  free(k);
  pthread_mutex_lock(&s->mu);
  s->calls_alive--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void backend_cancel(server *s, uint64_t id) {
  pthread_rwlock_rdlock(&s->be_lock);
  if (s->ready)
    s->be.cancel(s->be.ctx, id);
  pthread_rwlock_unlock(&s->be_lock);
}

/* ---- engine callbacks (engine thread: quick, no engine calls but cancel) --------------------- */

static bool on_text(void *user, const char *text, size_t len) {
  call *k = user;
  pthread_mutex_lock(&k->mu);
  bool keep = !k->cancelled;
  if (keep) {
    if (buf_append(&k->pending, text, len) != QVL_OK)
      keep = false;
    bool first = !k->any_text;
    k->any_text = true;
    pthread_cond_broadcast(&k->cv);
    if (first && k->is_job)
      jobs_set_running(k->srv->jobs, k->job_id);
  }
  pthread_mutex_unlock(&k->mu);
  return keep;
}

static char *job_result_json(call *k) {
  if (k->result.status == QVL_OK)
    return api_completion_json(k->id, k->created, k->model, &k->result);
  api_error e;
  api_error_from_status(&e, k->result.status, k->result.error);
  return api_error_inner_json(&e);
}

static void on_done(void *user, const engine_result *r) {
  call *k = user;
  pthread_mutex_lock(&k->mu);
  if (!api_result_copy(&k->result, r)) {
    k->result.status = QVL_ERR_NOMEM;
    snprintf(k->result.error, sizeof k->result.error, "out of memory copying the result");
  }
  k->result.agent = k->agent;
  if (k->result.status == QVL_OK && r->finish_reason && !strcmp(r->finish_reason, "cancelled")) {
    k->result.status = QVL_ERR_CANCELLED;
    snprintf(k->result.error, sizeof k->result.error, "the request was cancelled");
  }
  k->done = true;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->mu);
  if (k->is_job) {
    /* the job's text is in pending (on_text) and in the result; the result is authoritative */
    jobs_finish(k->srv->jobs, k->job_id, time_now_s(), k->result.status == QVL_OK, job_result_json(k));
    api_error e;
    api_error_from_status(&e, k->result.status, "");
    k->log.status = k->result.status == QVL_OK ? 200 : e.http;
    k->log.res = &k->result;
    log_request(&k->log);
  }
  call_unref(k);
}

/* ---- responses ---------------------------------------------------------------------------- */

static bool conn_gone(int fd) {
  if (fd < 0)
    return false;
  struct pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void count_status(server *s, int status) {
  int c = status / 100;
  if (c >= 1 && c <= 5)
    atomic_fetch_add(&s->http_class[c], 1);
}

static void add_common_headers(struct MHD_Response *resp) {
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

/* Queues a response whose body (malloc'd) is taken. extra: NULL-terminated name, value pairs. */
static enum MHD_Result reply(struct MHD_Connection *c, server *s, conn_req *r, int status, const char *ctype,
                             char *body, size_t len, const char *const *extra) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  if (ctype)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  add_common_headers(resp);
  for (int i = 0; extra && extra[i]; i += 2)
    MHD_add_response_header(resp, extra[i], extra[i + 1]);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  r->log.status = status;
  r->responded = true;
  count_status(s, status);
  return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, server *s, conn_req *r, int status, char *json,
                                  const char *const *extra) {
  if (!json)
    return MHD_NO;
  return reply(c, s, r, status, "application/json", json, strlen(json), extra);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                                   const char *const *extra) {
  const char *hdr[8] = {0};
  int n = 0;
  if (e->http == 503) {
    hdr[n++] = "Retry-After";
    hdr[n++] = "2";
  } else if (e->http == 401) {
    hdr[n++] = "WWW-Authenticate";
    hdr[n++] = "Bearer";
  }
  for (int i = 0; extra && extra[i] && n < 6; i += 2) {
    hdr[n++] = extra[i];
    hdr[n++] = extra[i + 1];
  }
  return reply_json(c, s, r, e->http, api_error_json(e), hdr);
}

static enum MHD_Result reply_errorf(struct MHD_Connection *c, server *s, conn_req *r, int http, const char *type,
                                    const char *code, const char *fmt, const char *arg) {
  api_error e;
  api_error_set(&e, http, type, code, NULL, fmt, arg);
  return reply_error(c, s, r, &e, NULL);
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Formats what is due into k->out (mutex held). */
static void stream_format(call *k) {
  if (k->agent.parse_tools && (k->pending.len || (k->done && k->held.len))) {
    /* Text from a <tool_call> on goes out as tool_calls deltas at the end, not as content; a tail
     * that may begin one waits in held. */
    if (!k->tool_seen)
      buf_append(&k->held, k->pending.data, k->pending.len);
    k->pending.len = 0;
    k->pending.data[0] = '\0';
    size_t safe = k->tool_seen ? 0 : api_tool_text_safe(k->held.data, k->held.len, &k->tool_seen);
    if (k->done && !k->tool_seen)
      safe = k->held.len;
    if (safe > 0) {
      char *j = api_chunk_json(k->id, k->created, k->model, !k->sent_role, k->held.data, safe, NULL);
      if (j)
        sse_append(&k->out, j);
      free(j);
      k->sent_role = true;
    }
    size_t keep = k->tool_seen ? 0 : k->held.len - safe;
    memmove(k->held.data, k->held.data + safe, keep);
    k->held.len = keep;
    return;
  }
  if (k->pending.len) {
    char *j = api_chunk_json(k->id, k->created, k->model, !k->sent_role, k->pending.data, k->pending.len, NULL);
    if (j)
      sse_append(&k->out, j);
    free(j);
    k->sent_role = true;
    k->pending.len = 0;
    k->pending.data[0] = '\0';
    return;
  }
  if (!k->done)
    return;
  const api_result *r = &k->result;
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    char *j = api_error_json(&e);
    if (j)
      sse_append(&k->out, j);
    free(j);
  } else {
    if (!k->sent_role) { /* no text at all: still one chunk with the role, as OpenAI does */
      char *j = api_chunk_json(k->id, k->created, k->model, true, "", 0, NULL);
      if (j)
        sse_append(&k->out, j);
      free(j);
      k->sent_role = true;
    }
    api_agents_stream_tail(&k->out, k->id, k->created, k->model, r);
    const char *fr = api_agents_finish_reason(r);
    char *j = api_chunk_json(k->id, k->created, k->model, false, NULL, 0, fr ? fr : "stop");
    if (j)
      sse_append(&k->out, j);
    free(j);
    if (k->include_usage) {
      j = api_usage_chunk_json(k->id, k->created, k->model, r);
      if (j)
        sse_append(&k->out, j);
      free(j);
    }
  }
  sse_append_done(&k->out);
  k->finished = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *dst, size_t max) {
  (void)pos;
  call *k = cls;
  pthread_mutex_lock(&k->mu);
  for (;;) {
    if (k->out_off < k->out.len) {
      size_t n = k->out.len - k->out_off;
      if (n > max)
        n = max;
      memcpy(dst, k->out.data + k->out_off, n);
      k->out_off += n;
      pthread_mutex_unlock(&k->mu);
      return (ssize_t)n;
    }
    k->out.len = 0;
    k->out_off = 0;
    if (k->finished) {
      pthread_mutex_unlock(&k->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (k->pending.len || k->done) {
      stream_format(k);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    if (!k->pending.len && !k->done && conn_gone(k->fd)) {
      pthread_mutex_unlock(&k->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free cancels the request */
    }
  }
}

/* The response is gone: finished, or the client went away. */
static void stream_free(void *cls) {
  call *k = cls;
  pthread_mutex_lock(&k->mu);
  bool cancel = !k->done && !k->cancelled;
  if (cancel)
    k->cancelled = true;
  bool complete = k->finished && k->out_off >= k->out.len;
  k->log.status = complete ? 200 : 499; /* 499: the client closed the connection (nginx's code) */
  k->log.res = k->done ? &k->result : NULL;
  pthread_mutex_unlock(&k->mu);
  if (cancel) {
    atomic_fetch_add(&k->srv->disconnects, 1);
    backend_cancel(k->srv, k->engine_id);
  }
  /* k->result is written only before done is set, so reading it here without the lock is safe */
  log_request(&k->log);
  call_unref(k);
}

/* ---- chat completions and jobs ----------------------------------------------------------- */

static bool auth_ok(server *s, struct MHD_Connection *c) {
  const server_config *cfg = s->cfg;
  if (cfg->n_api_keys == 0)
    return true;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Bearer ", 7))
    return false;
  h += 7;
  while (*h == ' ')
    h++;
  size_t n = strlen(h);
  bool ok = false;
  for (int i = 0; i < cfg->n_api_keys; i++) {
    const char *k = cfg->api_keys[i];
    size_t kn = strlen(k);
    /* constant time in the key's content: no early exit on the first differing byte */
    unsigned char diff = (unsigned char)(kn != n);
    for (size_t j = 0; j < kn; j++)
      diff |= (unsigned char)(k[j] ^ (j < n ? h[j] : 0));
    ok |= diff == 0;
  }
  return ok;
}

static void fill_limits(server *s, api_limits *lim) {
  const server_config *cfg = s->cfg;
  memset(lim, 0, sizeof *lim);
  lim->max_tokens = cfg->max_tokens;
  lim->max_images = (int)cfg->max_images;
  lim->max_pixels = cfg->max_pixels;
  lim->default_max_pixels = cfg->default_max_pixels;
  lim->default_min_pixels = IMAGE_CPU_DEFAULT_MIN_PIXELS;
  lim->model_ids = (const char *const *)s->model_ids;
  lim->n_model_ids = s->n_model_ids;
}

/* Parses and submits (be_lock read-held by the caller). On failure fills e and returns NULL. */
static call *submit_chat(server *s, conn_req *r, bool job, api_error *e) {
  api_limits lim;
  fill_limits(s, &lim);
  api_chat_request req;
  if (!api_chat_parse(r->body.data ? r->body.data : "", r->body.len, &lim, &req, e))
    return NULL;
  call *k = call_new(s);
  if (!k) {
    api_chat_request_free(&req);
    api_error_set(e, 503, "server_error", "server_busy", NULL, "out of memory");
    return NULL;
  }
  api_random_id("chatcmpl-", k->id, sizeof k->id);
  snprintf(k->model, sizeof k->model, "%s", s->model_ids[0]);
  k->created = (int64_t)time(NULL);
  k->stream = req.stream && !job;
  k->include_usage = req.include_usage;
  k->is_job = job;
  k->log = r->log;
  snprintf(k->log.id, sizeof k->log.id, "%s", k->id);
  k->log.chat = true;
  k->log.stream = k->stream;
  if (job) {
    qvl_status st = jobs_add(s->jobs, time_now_s(), k->job_id);
    if (st != QVL_OK) {
      api_chat_request_free(&req);
      call_unref(k);
      api_error_from_status(e, st, qvl_last_error());
      return NULL;
    }
    snprintf(k->log.id, sizeof k->log.id, "%s", k->job_id);
  }

  engine_request er;
  memset(&er, 0, sizeof er);
  er.messages = req.messages;
  vlm_prompt_opts_default(&er.prompt);
  er.prompt.pre.min_pixels = req.min_pixels;
  er.prompt.pre.max_pixels = req.max_pixels;
  er.prompt.limits.max_bytes = (size_t)s->cfg->max_image_mb << 20;
  er.prompt.source.allow_files = false;
  er.prompt.source.max_bytes = (size_t)s->cfg->max_image_mb << 20;
  if (s->fetch.n_allow) {
    er.prompt.source.fetch_remote = fetch_remote;
    er.prompt.source.fetch_user = &s->fetch;
  }
  er.prompt.max_images = (int)s->cfg->max_images;
  er.gen = req.gen;
  er.gen.n_ctx = s->cfg->ctx;
  er.on_text = on_text;
  er.on_done = on_done;
  er.user = k;
  er.prompt.tools = req.tools;
  er.grammar = req.grammar; /* the engine's from here on */
  req.grammar = NULL;
  er.logprobs = req.agent.logprobs;
  er.top_logprobs = req.agent.top_logprobs;
  k->agent = req.agent;
  k->refs++; /* the engine's reference, dropped in on_done */
  qvl_status st = s->be.submit(s->be.ctx, &er, &k->engine_id);
  api_chat_request_free(&req);
  if (st != QVL_OK) {
    if (st == QVL_ERR_BUSY) {
      atomic_fetch_add(&s->rejected_busy, 1);
      api_error_set(e, 503, "server_error", "server_busy", NULL,
                    "the server is busy: the request queue is full; retry after a few seconds");
    } else {
      api_error_from_status(e, st, qvl_last_error());
    }
    if (job)
      jobs_remove(s->jobs, k->job_id);
    k->refs--;
    call_unref(k);
    return NULL;
  }
  if (job)
    jobs_set_engine_id(s->jobs, k->job_id, k->engine_id);
  return k;
}

static enum MHD_Result reply_result(struct MHD_Connection *c, server *s, conn_req *r, call *k) {
  if (k->result.status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, k->result.status, k->result.error);
    return reply_error(c, s, r, &e, NULL);
  }
  return reply_json(c, s, r, 200, api_completion_json(k->id, k->created, k->model, &k->result), NULL);
}

static enum MHD_Result handle_chat(struct MHD_Connection *c, server *s, conn_req *r, bool job) {
  api_error e;
  pthread_rwlock_rdlock(&s->be_lock);
  if (s->draining || !s->ready) {
    bool draining = s->draining;
    pthread_rwlock_unlock(&s->be_lock);
    api_error_set(&e, 503, "server_error", draining ? "shutting_down" : "model_loading", NULL,
                  draining ? "the server is shutting down" : "the model is still loading; retry in a few seconds");
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    return reply_error(c, s, r, &e, draining ? close_hdr : NULL);
  }
  call *k = submit_chat(s, r, job, &e);
  pthread_rwlock_unlock(&s->be_lock);
  if (!k)
    return reply_error(c, s, r, &e, NULL);

  r->log = k->log;
  if (job) {
    char body[256];
    snprintf(body, sizeof body, "{\"id\":\"%s\",\"object\":\"job\",\"status\":\"queued\",\"created\":%lld}", k->job_id,
             (long long)k->created);
    char loc[80];
    snprintf(loc, sizeof loc, "/v1/jobs/%s", k->job_id);
    const char *hdr[] = {MHD_HTTP_HEADER_LOCATION, loc, NULL};
    enum MHD_Result ret = reply_json(c, s, r, 202, strdup(body), hdr);
    call_unref(k);
    return ret;
  }

  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  pthread_mutex_lock(&k->mu);
  k->fd = ci ? ci->connect_fd : -1;
  /* Non-streaming: until done. Streaming: until there is something to send. */
  while (!k->done && !(k->stream && k->pending.len)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    if (!k->done && !k->cancelled && conn_gone(k->fd)) {
      k->cancelled = true;
      pthread_mutex_unlock(&k->mu);
      atomic_fetch_add(&s->disconnects, 1);
      backend_cancel(s, k->engine_id);
      pthread_mutex_lock(&k->mu);
    }
  }
  bool cancelled = k->cancelled;
  bool failed_early = k->done && !k->any_text && k->result.status != QVL_OK;
  pthread_mutex_unlock(&k->mu);
  if (cancelled) {
    r->log.status = 499;
    r->log.res = &k->result;
    log_request(&r->log);
    r->log_owned_by_stream = true;
    call_unref(k);
    return MHD_NO; /* the client is gone: close */
  }
  if (!k->stream || failed_early) {
    r->log.res = &k->result;
    enum MHD_Result ret = reply_result(c, s, r, k);
    log_request(&r->log);
    r->log_owned_by_stream = true;
    call_unref(k);
    return ret;
  }
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, k, stream_free);
  if (!resp) {
    pthread_mutex_lock(&k->mu);
    bool cancel = !k->done && !k->cancelled;
    k->cancelled = true;
    pthread_mutex_unlock(&k->mu);
    if (cancel)
      backend_cancel(s, k->engine_id);
    call_unref(k);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  add_common_headers(resp);
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp); /* the stream's reference to k is released in stream_free */
  r->responded = true;
  r->log_owned_by_stream = true;
  count_status(s, 200);
  return ret;
}

static bool valid_job_id(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n >= JOBS_ID_CAP)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-'))
      return false;
  return true;
}

static enum MHD_Result handle_job(struct MHD_Connection *c, server *s, conn_req *r, const char *id, bool del) {
  if (!valid_job_id(id))
    return reply_errorf(c, s, r, 404, "invalid_request_error", "job_not_found", "no job '%s'", "(invalid id)");
  if (del) {
    uint64_t eid;
    if (jobs_engine_id(s->jobs, id, &eid))
      backend_cancel(s, eid);
  }
  char *json = jobs_get_json(s->jobs, id, time_now_s());
  if (!json)
    return reply_errorf(c, s, r, 404, "invalid_request_error", "job_not_found",
                        "no job '%s' (unknown, or finished longer ago than job_ttl_s)", id);
  return reply_json(c, s, r, 200, json, NULL);
}

/* ---- small endpoints --------------------------------------------------------------------- */

static enum MHD_Result handle_models(struct MHD_Connection *c, server *s, conn_req *r, const char *one) {
  pthread_rwlock_rdlock(&s->be_lock);
  bool ready = s->ready;
  cJSON *list = NULL, *found = NULL;
  if (ready) {
    list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(list, "data");
    for (int i = 0; i < s->n_model_ids; i++) {
      cJSON *m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "id", s->model_ids[i]);
      cJSON_AddStringToObject(m, "object", "model");
      cJSON_AddNumberToObject(m, "created", (double)s->unix_start);
      cJSON_AddStringToObject(m, "owned_by", "qvl");
      if (one && !strcmp(one, s->model_ids[i]) && !found)
        found = cJSON_Duplicate(m, true);
      /* the first id is the model; the others are aliases accepted in requests */
      if (i == 0)
        cJSON_AddItemToArray(data, m);
      else
        cJSON_Delete(m);
    }
  }
  pthread_rwlock_unlock(&s->be_lock);
  if (!ready)
    return reply_errorf(c, s, r, 503, "server_error", "model_loading", "%s", "the model is still loading");
  if (one) {
    cJSON_Delete(list);
    if (!found)
      return reply_errorf(c, s, r, 404, "invalid_request_error", "model_not_found", "The model '%s' does not exist", one);
    char *j = cJSON_PrintUnformatted(found);
    cJSON_Delete(found);
    return reply_json(c, s, r, 200, j, NULL);
  }
  char *j = cJSON_PrintUnformatted(list);
  cJSON_Delete(list);
  return reply_json(c, s, r, 200, j, NULL);
}

static enum MHD_Result handle_health(struct MHD_Connection *c, server *s, conn_req *r) {
  pthread_rwlock_rdlock(&s->be_lock);
  bool ready = s->ready, draining = s->draining;
  pthread_rwlock_unlock(&s->be_lock);
  if (ready && !draining)
    return reply_json(c, s, r, 200, strdup("{\"status\":\"ok\"}"), NULL);
  static const char *const retry[] = {"Retry-After", "2", NULL};
  return reply_json(c, s, r, 503, strdup(draining ? "{\"status\":\"shutting_down\"}" : "{\"status\":\"loading\"}"), retry);
}

static enum MHD_Result handle_metrics(struct MHD_Connection *c, server *s, conn_req *r) {
  engine_stats st;
  metrics_server ms;
  memset(&ms, 0, sizeof ms);
  pthread_rwlock_rdlock(&s->be_lock);
  ms.loaded = s->ready;
  if (s->ready)
    s->be.stats(s->be.ctx, &st);
  pthread_rwlock_unlock(&s->be_lock);
  ms.uptime_s = time_now_s() - s->t_start;
  for (int i = 0; i < 6; i++)
    ms.http_responses[i] = atomic_load(&s->http_class[i]);
  ms.rejected_busy = atomic_load(&s->rejected_busy);
  ms.disconnects = atomic_load(&s->disconnects);
  jobs_counts(s->jobs, time_now_s(), &ms.jobs_stored, &ms.jobs_pending);
  ms.rss_bytes = metrics_rss_bytes();
  buf b = {0};
  if (metrics_format(&b, ms.loaded ? &st : NULL, &ms) != QVL_OK) {
    buf_free(&b);
    return reply_errorf(c, s, r, 500, "server_error", NULL, "%s", "out of memory formatting the metrics");
  }
  return reply(c, s, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
}

static enum MHD_Result handle_asset(struct MHD_Connection *c, server *s, conn_req *r, const char *url) {
  const web_asset *a = web_asset_find(url);
  if (!a)
    return reply_errorf(c, s, r, 404, "invalid_request_error", "not_found", "no such endpoint or file: %s", url);
  const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
  bool fresh = inm && a->etag && strstr(inm, a->etag);
  struct MHD_Response *resp = MHD_create_response_from_buffer(fresh ? 0 : a->len, fresh ? (void *)"" : (void *)a->data,
                                                              MHD_RESPMEM_PERSISTENT);
  if (!resp)
    return MHD_NO;
  if (!fresh)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
  if (a->etag)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a->etag);
  /* file names carry no content hash, so browsers revalidate every time (a 304 is cheap) */
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "Content-Security-Policy", WEB_ASSETS_CSP);
  add_common_headers(resp);
  int status = fresh ? 304 : 200;
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  r->log.status = status;
  r->responded = true;
  count_status(s, status);
  return ret;
}

static enum MHD_Result method_not_allowed(struct MHD_Connection *c, server *s, conn_req *r, const char *allow) {
  api_error e;
  api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: method not allowed (allowed: %s)",
                r->log.method, r->log.path, allow);
  const char *hdr[] = {MHD_HTTP_HEADER_ALLOW, allow, NULL};
  return reply_error(c, s, r, &e, hdr);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static enum MHD_Result route(struct MHD_Connection *c, server *s, conn_req *r, const char *url, const char *method) {
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
  if (r->too_large) {
    api_error e;
    api_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                  "the request body is larger than %lld MiB (max_body_mb)", (long long)s->cfg->max_body_mb);
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    return reply_error(c, s, r, &e, close_hdr);
  }
  if (!strcmp(url, "/health"))
    return get ? handle_health(c, s, r) : method_not_allowed(c, s, r, "GET, HEAD");
  if (!strcmp(url, "/metrics"))
    return get ? handle_metrics(c, s, r) : method_not_allowed(c, s, r, "GET, HEAD");
  if (!strncmp(url, "/v1/", 4)) {
    if (!auth_ok(s, c)) {
      api_error e;
      api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                    "Incorrect or missing API key: send 'Authorization: Bearer KEY'");
      return reply_error(c, s, r, &e, NULL);
    }
    if (!strcmp(url, "/v1/chat/completions"))
      return post ? handle_chat(c, s, r, false) : method_not_allowed(c, s, r, "POST");
    if (!strcmp(url, "/v1/jobs"))
      return post ? handle_chat(c, s, r, true) : method_not_allowed(c, s, r, "POST");
    if (!strncmp(url, "/v1/jobs/", 9)) {
      if (get || !strcmp(method, "DELETE"))
        return handle_job(c, s, r, url + 9, !get);
      return method_not_allowed(c, s, r, "GET, HEAD, DELETE");
    }
    if (!strcmp(url, "/v1/models"))
      return get ? handle_models(c, s, r, NULL) : method_not_allowed(c, s, r, "GET, HEAD");
    if (!strncmp(url, "/v1/models/", 11))
      return get ? handle_models(c, s, r, url + 11) : method_not_allowed(c, s, r, "GET, HEAD");
    return reply_errorf(c, s, r, 404, "invalid_request_error", "not_found", "no such endpoint: %s", url);
  }
  if (!get) {
    if (web_asset_find(url))
      return method_not_allowed(c, s, r, "GET, HEAD");
    return reply_errorf(c, s, r, 404, "invalid_request_error", "not_found", "no such endpoint: %s", url);
  }
  return handle_asset(c, s, r, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  server *s = cls;
  conn_req *r = *con_cls;
  size_t max_body = (size_t)s->cfg->max_body_mb << 20;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r)
      return MHD_NO;
    *con_cls = r;
    r->log.t0 = time_now_s();
    snprintf(r->log.id, sizeof r->log.id, "req-%llu", (unsigned long long)atomic_fetch_add(&s->seq, 1) + 1);
    snprintf(r->log.method, sizeof r->log.method, "%s", method);
    snprintf(r->log.path, sizeof r->log.path, "%s", url);
    for (char *p = r->log.path; *p; p++)
      if ((unsigned char)*p <= ' ' || *p == '"' || (unsigned char)*p >= 0x7f)
        *p = '?'; /* keep the log line one token per field */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > max_body) {
      r->too_large = true;
      return route(c, s, r, url, method);
    }
    return MHD_YES;
  }
  if (*upload_data_size) {
    if (!r->too_large && !r->responded) {
      if (r->body.len + *upload_data_size > max_body) {
        r->too_large = true;
        buf_free(&r->body);
      } else if (buf_append(&r->body, upload_data, *upload_data_size) != QVL_OK) {
        return MHD_NO;
      }
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (r->responded)
    return MHD_YES;
  return route(c, s, r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  conn_req *r = *con_cls;
  if (!r)
    return;
  if (!r->log_owned_by_stream) {
    if (!r->responded)
      r->log.status = 499;
    log_request(&r->log);
  }
  buf_free(&r->body);
  free(r);
  *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512], ts[40], line[640];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
    msg[--n] = '\0';
  timestamp(ts, sizeof ts);
  int len = snprintf(line, sizeof line, "ts=%s level=warn msg=\"microhttpd: %s\"\n", ts, msg);
  if (len > 0) {
    ssize_t w = write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    (void)w;
  }
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static qvl_status open_listener(const char *host, int port, int *fd_out, int *port_out) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "host '%s': %s", host, gai_strerror(rc));
  int fd = -1, err = 0;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128)) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return qvl_errorf(QVL_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(err));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int bound = port;
  if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
    bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
  *fd_out = fd;
  *port_out = bound;
  return QVL_OK;
}

qvl_status server_start(const server_config *cfg, server **out) {
  *out = NULL;
  server *s = calloc(1, sizeof *s);
  if (!s)
    return qvl_errorf(QVL_ERR_NOMEM, "server: out of memory");
  s->cfg = cfg;
  s->t_start = time_now_s();
  s->unix_start = (int64_t)time(NULL);
  s->listen_fd = -1;
  pthread_rwlock_init(&s->be_lock, NULL);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->fetch.allow = (const char *const *)cfg->allow_image_url;
  s->fetch.n_allow = cfg->n_allow_image_url;
  s->fetch.timeout_s = (double)cfg->image_fetch_timeout_s;
  qvl_status st = jobs_init(cfg->max_jobs, (double)cfg->job_ttl_s, &s->jobs);
  if (st == QVL_OK && s->fetch.n_allow)
    st = fetch_global_init();
  if (st == QVL_OK)
    st = open_listener(cfg->host, (int)cfg->port, &s->listen_fd, &s->port);
  if (st == QVL_OK) {
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_END);
    if (!s->d)
      st = qvl_errorf(QVL_ERR_IO, "libmicrohttpd failed to start on %s:%d", cfg->host, s->port);
  }
  if (st != QVL_OK) {
    if (s->listen_fd >= 0)
      close(s->listen_fd);
    jobs_free(s->jobs);
    pthread_rwlock_destroy(&s->be_lock);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return st;
  }
  *out = s;
  return QVL_OK;
}

int server_port(const server *s) { return s->port; }

void server_set_ready(server *s, const server_backend *b, const char *const *ids, int n) {
  char **copy = calloc((size_t)(n > 0 ? n : 1), sizeof *copy);
  for (int i = 0; copy && i < n; i++)
    copy[i] = strdup(ids[i]);
  pthread_rwlock_wrlock(&s->be_lock);
  s->be = *b;
  s->model_ids = copy;
  s->n_model_ids = copy ? n : 0;
  s->ready = copy != NULL && n > 0;
  pthread_rwlock_unlock(&s->be_lock);
}

bool server_drain(server *s, double timeout_s) {
  pthread_rwlock_wrlock(&s->be_lock);
  s->draining = true;
  pthread_rwlock_unlock(&s->be_lock);
  /* no new connections; the listening socket comes back to us */
  if (s->d) {
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET && fd == s->listen_fd) {
      close(s->listen_fd);
      s->listen_fd = -1;
    }
  }
  double deadline = time_now_s() + timeout_s;
  pthread_mutex_lock(&s->mu);
  while (s->calls_alive > 0 && time_now_s() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  bool idle = s->calls_alive == 0;
  pthread_mutex_unlock(&s->mu);
  pthread_rwlock_wrlock(&s->be_lock);
  s->ready = false;
  memset(&s->be, 0, sizeof s->be);
  pthread_rwlock_unlock(&s->be_lock);
  return idle;
}

void server_stop(server *s) {
  if (!s)
    return;
  if (s->d)
    MHD_stop_daemon(s->d);
  if (s->listen_fd >= 0)
    close(s->listen_fd);
  /* Calls still referenced by the engine (a drain that timed out) stay allocated: their on_done
   * still comes, from engine_stop. */
  jobs_free(s->jobs);
  for (int i = 0; i < s->n_model_ids; i++)
    free(s->model_ids[i]);
  free(s->model_ids);
  pthread_rwlock_destroy(&s->be_lock);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
