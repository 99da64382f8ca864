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
#include "server/http/server.h"

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
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cond.h"
#include "base/logsink.h"
#include "base/status.h"
#include "base/timing.h"
#include "image/budget.h"
#include "server/openai/chat_wire.h"
#include "server/dialects/completions.h"
#include "server/dialects/ollama.h"
#include "server/dialects/responses.h"
#include "server/dialects/dialect.h"
#include "server/http/cors.h"
#include "server/openai/history_field.h"
#include "server/http/conn_guard.h"
#include "server/fetch/fetch.h"
#include "server/jobs/jobs.h"
#include "server/http/load_metrics.h"
#include "server/http/metrics.h"
#include "server/dialects/responses_store.h"
#include "server/http/session.h"
#include "server/http/web_assets.h"
#include "text/unicode.h"

#define WAIT_SLICE_MS 100 /* how often a waiting thread looks for a client hang-up */
#define CONN_RESERVE 4    /* connections past max_connections that answer only /health and /metrics */
#define DRAIN_CANCEL_GRACE_S 5.0 /* after the drain timeout: time for the cancelled requests' answers */

struct server {
  const server_config *cfg;
  struct MHD_Daemon *d;
  int listen_fd;
  int port;
  double t_start;
  int64_t unix_start;

  pthread_rwlock_t be_lock; /* readers: submit/cancel/stats; writer: attach/detach */
  server_backend be;
  bool ready;               /* under be_lock */
  atomic_bool draining;     /* set under mu, read anywhere: never waits for a lock */
  atomic_bool abort_prep;   /* the drain timed out: pre-processing stops at once */
  char **model_ids;         /* [n_model_ids], set once by server_set_ready */
  int n_model_ids;

  jobs *jobs;
  fetch_opts fetch;
  resp_store *responses;    /* Responses API conversations (previous_response_id) */

  pthread_mutex_t mu;       /* calls_alive, accepted, live */
  pthread_cond_t cv;
  int64_t calls_alive;
  int64_t accepted;         /* chat/job requests admitted whose response is not yet sent */
  struct call *live;        /* every call, for cancelling them when the drain times out */
  conn_guard *guard;
  image_budget *budget;

  _Atomic uint64_t http_class[6], rejected_busy, disconnects, seq;
};

/* ---- per-request state ------------------------------------------------------------------- */

/* What one log line says about a request. */
typedef struct req_log {
  char id[JOBS_ID_CAP]; /* a job id is the longest */
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
  char owner[JOBS_OWNER_CAP];      /* jobs: hash of the caller's API key */
  const char *session_hdr;         /* X-Session-Id, valid while the request is handled */
  bool accepted;            /* counted in server.accepted until on_completed */
  bool close_after;         /* answer with Connection: close (reserve connections) */
  int fd;                   /* the client's socket (hang-up checks during pre-processing) */
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
  /* another API's endpoint (compat.h): its formatter and state (owned); NULL for chat */
  const compat_format *fmt;
  void *fmt_state;
  /* context policy (chat_history.h): the request's, and what it dropped (filled at submit) */
  history_policy hpol;
  history_report hist;
  char session[SESSION_KEY_CAP]; /* X-Qvl-Session: the conversation's routing key */
  /* hostile load */
  double deadline;          /* timeout_s from arrival, pre-processing included (0 = none) */
  atomic_bool drain_cancelled; /* cancelled because the drain timed out */
  struct call *live_next, *live_prev; /* server.live, under server.mu */
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
                  r->t.ttft_ms, r->t.decode_tok_s, r->finish_reason ? engine_finish_name(r->finish_reason) : "none");
  if (n < 0)
    return;
  if ((size_t)n >= sizeof line - 1)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  logsink_write(line, (size_t)n); /* one write(2); JSON with --log-format json */
}

static call *call_new(server *s) {
  call *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
  pthread_mutex_init(&k->mu, NULL);
  cond_init_monotonic(&k->cv);
  k->refs = 1;
  k->srv = s;
  k->fd = -1;
  pthread_mutex_lock(&s->mu);
  s->calls_alive++;
  k->live_next = s->live;
  if (s->live)
    s->live->live_prev = k;
  s->live = k;
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
  if (k->fmt && k->fmt->free_state)
    k->fmt->free_state(k->fmt_state);
  buf_free(&k->pending);
  buf_free(&k->held);
  buf_free(&k->out);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  pthread_mutex_lock(&s->mu);
  s->calls_alive--;
  if (k->live_prev)
    k->live_prev->live_next = k->live_next;
  else
    s->live = k->live_next;
  if (k->live_next)
    k->live_next->live_prev = k->live_prev;
  free(k);
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
  if (k->result.status == QVL_OK && r->finish_reason == ENGINE_FINISH_CANCELLED) {
    k->result.status = QVL_ERR_CANCELLED;
    snprintf(k->result.error, sizeof k->result.error, "the request was cancelled");
  }
  if (k->drain_cancelled && k->result.status == QVL_ERR_CANCELLED) {
    k->result.status = QVL_ERR_BUSY;
    snprintf(k->result.error, sizeof k->result.error,
             "the server is shutting down: the request was cancelled after drain_timeout_s; retry elsewhere");
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
  cors_add_headers(s->cfg, c, resp);
  for (int i = 0; extra && extra[i]; i += 2)
    MHD_add_response_header(resp, extra[i], extra[i + 1]);
  if (r->close_after)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
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
  size_t n = strlen(json);
  if (utf8_valid_prefix(json, n) != n) { /* a message that copied request bytes: replace what is invalid */
    buf fixed = {0};
    qvl_status st = utf8_append_lossy(&fixed, json, n);
    free(json);
    if (st != QVL_OK) {
      buf_free(&fixed);
      return MHD_NO;
    }
    return reply(c, s, r, status, "application/json", fixed.data, fixed.len, extra);
  }
  return reply(c, s, r, status, "application/json", json, n, extra);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                                   const char *const *extra) {
  const char *hdr[8] = {0};
  int n = 0;
  if (e->http == qvl_status_http(QVL_ERR_BUSY)) { /* 503: say when to retry */
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

static enum MHD_Result reply_errorf(struct MHD_Connection *c, server *s, conn_req *r, qvl_status st,
                                    const char *code, const char *fmt, const char *arg) {
  api_error e;
  api_error_status(&e, st, code, NULL, fmt, arg);
  return reply_error(c, s, r, &e, NULL);
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Formats what is due into k->out (mutex held). */
static void stream_format(call *k) {
  if (k->fmt) { /* another API's stream shape (compat.h) */
    if (k->pending.len) {
      k->fmt->stream_text(k->fmt_state, &k->out, k->pending.data, k->pending.len);
      k->pending.len = 0;
      k->pending.data[0] = '\0';
    } else if (k->done) {
      k->fmt->stream_end(k->fmt_state, &k->out, &k->result);
      k->finished = true;
    }
    return;
  }
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
    if (j && !k->include_usage && k->srv->cfg->stream_usage)
      j = compat_chunk_add_usage(j, k->id, k->created, k->model, r); /* --stream-usage (compat.h) */
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
    cond_wait_ms(&k->cv, &k->mu, WAIT_SLICE_MS);
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
  /* 499 (nginx's code, QVL_ERR_CANCELLED's): the client closed the connection */
  k->log.status = complete ? 200 : qvl_status_http(QVL_ERR_CANCELLED);
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

/* The owner of the jobs a caller makes and sees (jobs.h): a hash of its API key, "" without keys.
 * Called after auth_ok, so the token is one of the configured keys. */
static void caller_owner(server *s, struct MHD_Connection *c, char out[JOBS_OWNER_CAP]) {
  out[0] = '\0';
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (s->cfg->n_api_keys == 0 || !h || strncasecmp(h, "Bearer ", 7))
    return;
  h += 7;
  while (*h == ' ')
    h++;
  jobs_owner_of(h, out);
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
  lim->sampling = s->be.sampling;
  lim->vision_precision = s->be.vision_precision;
  lim->max_videos = (int)cfg->max_videos;
  lim->video_max_frames = cfg->video_max_frames;
  lim->video_max_pixels = cfg->video_max_pixels;
}

/* The stop check of a request's pre-processing (image fetch/decode, tokenizing, budget waits), on
 * its connection thread: the drain gave up, its time is up, or its client has gone. */
static qvl_status prep_stop(void *user) {
  call *k = user;
  if (atomic_load(&k->srv->abort_prep))
    return qvl_errorf(QVL_ERR_BUSY, "the server is shutting down: the request was cancelled after drain_timeout_s");
  if (k->deadline > 0 && time_now_s() > k->deadline)
    return qvl_errorf(QVL_ERR_TIMEOUT, "the request timed out while its input was prepared (timeout_s %lld)",
                      (long long)k->srv->cfg->timeout_s);
  if (conn_gone(k->fd)) {
    atomic_fetch_add(&k->srv->disconnects, 1);
    return qvl_errorf(QVL_ERR_CANCELLED, "the client went away");
  }
  return QVL_OK;
}

/* Parses and submits (be_lock read-held by the caller). On failure fills e and returns NULL. */
static call *submit_chat(server *s, conn_req *r, bool job, compat_request *cr, api_error *e) {
  api_limits lim;
  fill_limits(s, &lim);
  api_chat_request req;
  lim.max_images = -1; /* checked by chat_history_parse: trimming may drop images */
  if (cr ? !api_chat_parse(cr->chat_body, cr->chat_len, &lim, &req, e)
         : !api_chat_parse(r->body.data ? r->body.data : "", r->body.len, &lim, &req, e))
    return NULL;
  history_policy hpol;
  if (!chat_history_parse(req.root, s->cfg, &hpol, e) || !chat_history_check_images(&req, &hpol, s->cfg, e)) {
    api_chat_request_free(&req);
    return NULL;
  }
  call *k = call_new(s);
  if (!k) {
    api_chat_request_free(&req);
    api_error_status(e, QVL_ERR_BUSY, "server_busy", NULL, "out of memory");
    return NULL;
  }
  api_random_id("chatcmpl-", k->id, sizeof k->id);
  if (cr && cr->id[0])
    snprintf(k->id, sizeof k->id, "%s", cr->id);
  snprintf(k->model, sizeof k->model, "%s", s->model_ids[0]);
  k->created = (int64_t)time(NULL);
  k->stream = req.stream && !job;
  k->include_usage = req.include_usage;
  k->is_job = job;
  if (cr) { /* the call now owns the formatter's state */
    k->fmt = cr->fmt;
    k->fmt_state = cr->state;
    cr->state = NULL;
  }
  session_key(r->session_hdr, req.root, k->session);
  k->fd = job ? -1 : r->fd; /* a job outlives its POST: only the drain and the deadline stop it */
  k->deadline = s->cfg->timeout_s > 0 ? r->log.t0 + (double)s->cfg->timeout_s : 0;
  k->log = r->log;
  snprintf(k->log.id, sizeof k->log.id, "%s", k->id);
  k->log.chat = true;
  k->log.stream = k->stream;
  if (job) {
    qvl_status st = jobs_add_owned(s->jobs, time_now_s(), r->owner, k->job_id);
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
  if (cr && cr->raw) { /* legacy completions: the prompt as given, no template */
    er.raw_text = cr->raw_text;
    er.raw_len = cr->raw_len;
    er.raw_ids = cr->raw_ids;
    er.n_raw_ids = cr->n_raw_ids;
  }
  vlm_prompt_opts_default(&er.prompt);
  er.prompt.pre.min_pixels = req.min_pixels;
  er.prompt.pre.max_pixels = req.max_pixels;
  er.prompt.limits.max_bytes = (size_t)s->cfg->max_image_mb << 20;
  er.prompt.source.allow_files = false;
  er.prompt.source.max_bytes = (size_t)s->cfg->max_image_mb << 20;
  if (s->fetch.n_allow) {
    er.prompt.source.fetch_remote = fetch_remote;
    er.prompt.source.fetch_remote_stoppable = fetch_remote_stoppable;
    er.prompt.source.fetch_user = &s->fetch;
  }
  er.prompt.max_images = (int)s->cfg->max_images;
  er.prompt.limits.max_pixels = s->cfg->max_image_pixels;
  er.prompt.max_request_pixels = s->cfg->max_request_pixels;
  /* videos: the request's sampling under the server's caps (video_wire.h), checked again by the
   * prompt builder once the containers are read, before any frame is decoded */
  er.prompt.video = req.video;
  er.prompt.max_videos = (int)s->cfg->max_videos;
  er.prompt.max_video_frames = s->cfg->video_max_frames;
  er.prompt.video_limits.max_bytes = (size_t)s->cfg->max_video_mb << 20;
  er.prompt.video_limits.max_seconds = (double)s->cfg->video_max_seconds;
  er.prompt.budget = s->budget;
  er.prompt.stop = prep_stop;
  er.prompt.stop_user = k;
  er.gen = req.gen;
  er.gen.n_ctx = s->cfg->ctx;
  er.on_text = on_text;
  er.on_done = on_done;
  er.user = k;
  k->hpol = hpol;
  er.history = &k->hpol;
  er.history_out = &k->hist;
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
      api_error_status(e, QVL_ERR_BUSY, "server_busy", NULL,
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

static enum MHD_Result reply_error_as(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                                     const compat_format *fmt, void *state);

static enum MHD_Result reply_result(struct MHD_Connection *c, server *s, conn_req *r, call *k) {
  if (k->result.status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, k->result.status, k->result.error);
    return reply_error_as(c, s, r, &e, k->fmt, k->fmt_state);
  }
  const char *hdr[7] = {"X-Qvl-Session", k->session};
  chat_history_hdr hs;
  chat_history_headers(&k->hist, &hs, hdr + 2);
  if (k->fmt)
    return reply_json(c, s, r, 200, k->fmt->result_json(k->fmt_state, &k->result), hdr);
  return reply_json(c, s, r, 200, api_completion_json(k->id, k->created, k->model, &k->result), hdr);
}

static enum MHD_Result handle_chat(struct MHD_Connection *c, server *s, conn_req *r, bool job, compat_request *cr) {
  api_error e;
  /* Admission, linearised with server_drain: once draining is set no request is admitted, and the
   * drain waits for every admitted one until its response has been sent (on_completed). */
  pthread_mutex_lock(&s->mu);
  bool admitted = !atomic_load(&s->draining);
  if (admitted) {
    s->accepted++;
    r->accepted = true;
  }
  pthread_mutex_unlock(&s->mu);
  const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  r->fd = fdi ? fdi->connect_fd : -1;
  pthread_rwlock_rdlock(&s->be_lock);
  if (!admitted || !s->ready) {
    bool draining = !admitted;
    pthread_rwlock_unlock(&s->be_lock);
    api_error_status(&e, QVL_ERR_BUSY, draining ? "shutting_down" : "model_loading", NULL,
                  draining ? "the server is shutting down" : "the model is still loading; retry in a few seconds");
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    if (cr)
      return reply_error_as(c, s, r, &e, cr->fmt, cr->state);
    return reply_error(c, s, r, &e, draining ? close_hdr : NULL);
  }
  r->session_hdr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Session-Id");
  caller_owner(s, c, r->owner);
  call *k = submit_chat(s, r, job, cr, &e);
  pthread_rwlock_unlock(&s->be_lock);
  if (!k && cr)
    return reply_error_as(c, s, r, &e, cr->fmt, cr->state);
  if (!k)
    return reply_error(c, s, r, &e, NULL);

  r->log = k->log;
  if (job) {
    char body[256];
    snprintf(body, sizeof body, "{\"id\":\"%s\",\"object\":\"job\",\"status\":\"queued\",\"created\":%lld}", k->job_id,
             (long long)k->created);
    char loc[80];
    snprintf(loc, sizeof loc, "/v1/jobs/%s", k->job_id);
    const char *hdr[] = {MHD_HTTP_HEADER_LOCATION, loc, "X-Qvl-Session", k->session, NULL};
    enum MHD_Result ret = reply_json(c, s, r, 202, strdup(body), hdr);
    call_unref(k);
    return ret;
  }

  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  pthread_mutex_lock(&k->mu);
  k->fd = ci ? ci->connect_fd : -1;
  /* Non-streaming: until done. Streaming: until there is something to send. */
  while (!k->done && !(k->stream && k->pending.len)) {
    cond_wait_ms(&k->cv, &k->mu, WAIT_SLICE_MS);
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
    r->log.status = qvl_status_http(QVL_ERR_CANCELLED);
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
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, k->fmt ? k->fmt->stream_content_type : "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  const char *hhdr[5] = {0};
  chat_history_hdr hs;
  for (int i = 0, n = chat_history_headers(&k->hist, &hs, hhdr); i < n; i += 2)
    MHD_add_response_header(resp, hhdr[i], hhdr[i + 1]);
  MHD_add_response_header(resp, "X-Qvl-Session", k->session);
  add_common_headers(resp);
  cors_add_headers(s->cfg, c, resp);
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp); /* the stream's reference to k is released in stream_free */
  r->responded = true;
  r->log_owned_by_stream = true;
  count_status(s, 200);
  return ret;
}

/* ---- the other APIs (compat.h): Responses, legacy completions, Ollama ------------------------- */

/* An error in the shape of the API that was called, with reply_error's headers. */
static enum MHD_Result reply_error_as(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                                     const compat_format *fmt, void *state) {
  if (!fmt || !fmt->error_json)
    return reply_error(c, s, r, e, NULL);
  static const char *const retry[] = {"Retry-After", "2", NULL}, *const bearer[] = {"WWW-Authenticate", "Bearer", NULL};
  return reply_json(c, s, r, e->http, fmt->error_json(state, e), e->http == qvl_status_http(QVL_ERR_BUSY) ? retry : e->http == 401 ? bearer : NULL);
}

static void fill_compat_ctx(server *s, compat_ctx *x) {
  memset(x, 0, sizeof *x);
  pthread_rwlock_rdlock(&s->be_lock);
  x->model_id = s->ready && s->n_model_ids ? s->model_ids[0] : NULL; /* set once, kept until server_stop */
  x->sampling = s->ready ? s->be.sampling : NULL;
  pthread_rwlock_unlock(&s->be_lock);
  x->created = (int64_t)time(NULL);
  x->started = s->unix_start;
  x->responses = s->responses;
  x->stream_usage = s->cfg->stream_usage;
}

/* A POST of another API: translated into a chat request and served by handle_chat. */
static enum MHD_Result handle_compat(struct MHD_Connection *c, server *s, conn_req *r, compat_translate_fn translate) {
  compat_ctx x;
  fill_compat_ctx(s, &x);
  compat_request cr;
  api_error e;
  enum MHD_Result ret;
  if (!translate(r->body.data ? r->body.data : "", r->body.len, &x, &cr, &e)) {
    ret = reply_error_as(c, s, r, &e, cr.fmt, cr.state);
  } else if (cr.reply_body) { /* answered without generating (Ollama's empty "load the model" prompt) */
    ret = reply_json(c, s, r, cr.reply_status, cr.reply_body, NULL);
    cr.reply_body = NULL;
  } else {
    ret = handle_chat(c, s, r, false, &cr);
  }
  compat_request_free(&cr);
  return ret;
}

/* Ollama's API under /api/ (api_ollama.h). */
static enum MHD_Result handle_ollama(struct MHD_Connection *c, server *s, conn_req *r, const char *url,
                                     const char *method) {
  api_error e;
  if (!auth_ok(s, c)) {
    api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                  "Incorrect or missing API key: send 'Authorization: Bearer KEY'");
    return reply_error_as(c, s, r, &e, &ollama_format, NULL);
  }
  bool post = !strcmp(method, "POST");
  if (post && !strcmp(url, "/api/chat"))
    return handle_compat(c, s, r, ollama_chat_translate);
  if (post && !strcmp(url, "/api/generate"))
    return handle_compat(c, s, r, ollama_generate_translate);
  compat_ctx x;
  fill_compat_ctx(s, &x);
  int status = qvl_status_http(QVL_ERR_INTERNAL);
  const char *allow = NULL;
  char *json = ollama_info(url, method, r->body.data ? r->body.data : "", r->body.len, &x, &status, &allow);
  const char *hdr[] = {MHD_HTTP_HEADER_ALLOW, allow, NULL};
  return reply_json(c, s, r, status, json, allow ? hdr : NULL);
}

/* A CORS preflight from an allowed origin (cors.h): 204 with what the browser asked to send. */
static enum MHD_Result handle_preflight(struct MHD_Connection *c, server *s, conn_req *r) {
  const char *hdr[CORS_PREFLIGHT_HEADERS * 2 + 1];
  cors_preflight_headers(s->cfg, c, hdr);
  return reply(c, s, r, 204, NULL, NULL, 0, hdr);
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
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "job_not_found", "no job '%s'", "(invalid id)");
  caller_owner(s, c, r->owner);
  char *json = NULL;
  if (del) {
    /* a finished job is removed at once; a pending one is cancelled (it then reads failed, and a
     * second DELETE removes it) */
    uint64_t eid = 0;
    bool has_eid = false;
    if (jobs_delete(s->jobs, id, r->owner, time_now_s(), &eid, &has_eid, &json) == JOBS_DELETE_CANCEL && has_eid)
      backend_cancel(s, eid);
  } else {
    json = jobs_get_json_owned(s->jobs, id, r->owner, time_now_s());
  }
  /* another key's job answers exactly like an unknown one: ids are not a side channel */
  if (!json)
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "job_not_found",
                        "no job '%s' (unknown, deleted, or finished longer ago than job_ttl_s)", id);
  return reply_json(c, s, r, 200, json, NULL);
}

/* GET /v1/jobs?limit=N&after=ID: the caller's jobs, newest first. */
static enum MHD_Result handle_job_list(struct MHD_Connection *c, server *s, conn_req *r) {
  caller_owner(s, c, r->owner);
  const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
  long limit = 20;
  if (lim) {
    char *end = NULL;
    limit = strtol(lim, &end, 10);
    if (end == lim || *end || limit < 1 || limit > JOBS_LIST_MAX)
      return reply_errorf(c, s, r, QVL_ERR_INVALID_ARG, "invalid_value",
                          "limit must be an integer from 1 to %s", "100 (JOBS_LIST_MAX)");
  }
  if (after && !valid_job_id(after))
    after = "job-invalid"; /* matches nothing: an empty page */
  char *json = jobs_list_json(s->jobs, r->owner, time_now_s(), (int)limit, after);
  if (!json)
    return reply_errorf(c, s, r, QVL_ERR_BUSY, "server_busy", "%s", "out of memory listing the jobs");
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
    return reply_errorf(c, s, r, QVL_ERR_BUSY, "model_loading", "%s", "the model is still loading");
  if (one) {
    cJSON_Delete(list);
    if (!found)
      return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "model_not_found", "The model '%s' does not exist", one);
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
  return reply_json(c, s, r, qvl_status_http(QVL_ERR_BUSY), strdup(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}"), retry);
}

/* Liveness: 200 whenever the process answers at all, loading and draining included (a balancer or
 * kubelet restarts a replica only when this fails; /health is readiness). */
static enum MHD_Result handle_livez(struct MHD_Connection *c, server *s, conn_req *r) {
  pthread_rwlock_rdlock(&s->be_lock);
  bool ready = s->ready, draining = s->draining;
  pthread_rwlock_unlock(&s->be_lock);
  char body[96];
  snprintf(body, sizeof body, "{\"status\":\"alive\",\"ready\":%s,\"draining\":%s}", ready && !draining ? "true" : "false",
           draining ? "true" : "false");
  return reply_json(c, s, r, 200, strdup(body), NULL);
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
  ms.rss_peak_bytes = metrics_rss_peak_bytes();
  buf b = {0};
  conn_guard_stats gs;
  image_budget_stats is;
  conn_guard_get_stats(s->guard, &gs);
  image_budget_get_stats(s->budget, &is);
  if (metrics_format(&b, ms.loaded ? &st : NULL, &ms) != QVL_OK || load_metrics_format(&b, &gs, &is) != QVL_OK) {
    buf_free(&b);
    return reply_errorf(c, s, r, QVL_ERR_INTERNAL, NULL, "%s", "out of memory formatting the metrics");
  }
  return reply(c, s, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
}

static enum MHD_Result handle_asset(struct MHD_Connection *c, server *s, conn_req *r, const char *url) {
  const web_asset *a = web_asset_find(url);
  if (!a)
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "not_found", "no such endpoint or file: %s", url);
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
  cors_add_headers(s->cfg, c, resp);
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
    api_error_status(&e, QVL_ERR_TOO_LARGE, "request_too_large", NULL,
                  "the request body is larger than %lld MiB (max_body_mb)", (long long)s->cfg->max_body_mb);
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    return reply_error(c, s, r, &e, close_hdr);
  }
  if (r->close_after && strcmp(url, "/health") && strcmp(url, "/metrics"))
    return reply_errorf(c, s, r, QVL_ERR_BUSY, "server_busy", "%s",
                        "the server has no free connection (max_connections); only /health and /metrics are answered "
                        "now; retry after a few seconds");
  if (cors_is_preflight(s->cfg, c, method)) /* before the key check: a preflight carries no key */
    return handle_preflight(c, s, r);
  if (!strncmp(url, "/api/", 5))
    return handle_ollama(c, s, r, url, method);
  if (!strcmp(url, "/health"))
    return get ? handle_health(c, s, r) : method_not_allowed(c, s, r, "GET, HEAD");
  if (!strcmp(url, "/livez"))
    return get ? handle_livez(c, s, r) : method_not_allowed(c, s, r, "GET, HEAD");
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
      return post ? handle_chat(c, s, r, false, NULL) : method_not_allowed(c, s, r, "POST");
    if (!strcmp(url, "/v1/responses"))
      return post ? handle_compat(c, s, r, responses_translate) : method_not_allowed(c, s, r, "POST");
    if (!strcmp(url, "/v1/completions"))
      return post ? handle_compat(c, s, r, completions_translate) : method_not_allowed(c, s, r, "POST");
    if (!strcmp(url, "/v1/jobs"))
      return post ? handle_chat(c, s, r, true, NULL) : get ? handle_job_list(c, s, r) : method_not_allowed(c, s, r, "GET, HEAD, POST");
    if (!strncmp(url, "/v1/jobs/", 9)) {
      if (get || !strcmp(method, "DELETE"))
        return handle_job(c, s, r, url + 9, !get);
      return method_not_allowed(c, s, r, "GET, HEAD, DELETE");
    }
    if (!strcmp(url, "/v1/models"))
      return get ? handle_models(c, s, r, NULL) : method_not_allowed(c, s, r, "GET, HEAD");
    if (!strncmp(url, "/v1/models/", 11))
      return get ? handle_models(c, s, r, url + 11) : method_not_allowed(c, s, r, "GET, HEAD");
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "not_found", "no such endpoint: %s", url);
  }
  if (!get) {
    if (web_asset_find(url))
      return method_not_allowed(c, s, r, "GET, HEAD");
    return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "not_found", "no such endpoint: %s", url);
  }
  return handle_asset(c, s, r, url);
}

/* How much of an over-large body is read and dropped before the 413 (see on_request). */
#define TOO_LARGE_DRAIN_BYTES ((size_t)16 << 20)

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
    r->fd = -1;
    r->close_after = conn_guard_is_reserve(c);
    conn_guard_headers_done(c);
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
      /* A client that waits for "100 Continue" gets the 413 at once. One that sends its body
       * straight away would see a reset instead of the answer if we closed on bytes it had sent
       * and we had not read, so up to TOO_LARGE_DRAIN_BYTES more are read and dropped first
       * (the body deadline bounds the time that takes). */
      const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
      if ((expect && !strcasecmp(expect, "100-continue")) ||
          strtoull(cl, NULL, 10) - max_body > TOO_LARGE_DRAIN_BYTES) {
        conn_guard_body_done(c);
        return route(c, s, r, url, method);
      }
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
  conn_guard_body_done(c);
  if (r->responded)
    return MHD_YES;
  return route(c, s, r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  server *s = cls;
  (void)toe;
  conn_guard_response_done(c);
  conn_req *r = *con_cls;
  if (!r)
    return;
  if (r->accepted) { /* its response is sent (or its client gone): the drain may go on */
    pthread_mutex_lock(&s->mu);
    s->accepted--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  if (!r->log_owned_by_stream) {
    if (!r->responded)
      r->log.status = qvl_status_http(QVL_ERR_CANCELLED);
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

/* The job store (jobs.h): --jobs-db or memory; ids carry --replica-id, else "HOST-PORT". */
static qvl_status open_jobs(server *s) {
  const server_config *cfg = s->cfg;
  char replica[JOBS_REPLICA_MAX + 1];
  if (cfg->replica_id) {
    snprintf(replica, sizeof replica, "%s", cfg->replica_id);
    if (strlen(cfg->replica_id) > JOBS_REPLICA_MAX || !jobs_replica_valid(cfg->replica_id))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "replica_id '%s': expected 1 to %d of a-z, 0-9 and '-'", cfg->replica_id,
                        JOBS_REPLICA_MAX);
  } else {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char port[16];
    snprintf(port, sizeof port, "-%d", s->port);
    size_t room = JOBS_REPLICA_MAX - strlen(port), n = 0;
    for (const char *p = host; *p && *p != '.' && n < room; p++) {
      char ch = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
      replica[n++] = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ? ch : '-';
    }
    while (n && replica[n - 1] == '-')
      n--;
    snprintf(replica + n, sizeof replica - n, "%s%s", n ? "" : "qvl", port);
    if (replica[0] == '-')
      replica[0] = 'r';
  }
  jobs_opts o = {cfg->max_jobs, (double)cfg->job_ttl_s, cfg->jobs_db, replica};
  return jobs_open(&o, time_now_s(), &s->jobs);
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
  cond_init_monotonic(&s->cv);
  s->fetch.allow = (const char *const *)cfg->allow_image_url;
  s->fetch.n_allow = cfg->n_allow_image_url;
  s->fetch.timeout_s = (double)cfg->image_fetch_timeout_s;
  qvl_status st = resp_store_init(RESPONSES_STORE_ENTRIES, RESPONSES_STORE_BYTES, RESPONSES_STORE_TTL_S, &s->responses);
  if (st == QVL_OK) {
    int64_t pool = (cfg->image_memory_mb << 20) / IMAGE_BUDGET_BYTES_PER_PIXEL;
    st = image_budget_new(pool, (int)cfg->max_decodes, &s->budget);
  }
  if (st == QVL_OK) {
    conn_guard_opts go = {.max_conns = (int)cfg->max_connections,
                          .reserve = CONN_RESERVE,
                          .per_client = (int)cfg->max_connections_per_client,
                          .header_timeout_s = (double)cfg->header_timeout_s,
                          .body_timeout_s = (double)cfg->body_timeout_s};
    st = conn_guard_new(&go, &s->guard);
  }
  if (st == QVL_OK && s->fetch.n_allow)
    st = fetch_global_init();
  if (st == QVL_OK)
    st = open_listener(cfg->host, (int)cfg->port, &s->listen_fd, &s->port);
  if (st == QVL_OK)
    st = open_jobs(s); /* after the listener: the default replica name has the port in it */
  if (st == QVL_OK) {
    /* The listener is ours (conn_guard accepts and hands connections over), so that a full server
     * still answers. The limit leaves room for evicted connections that are still closing. */
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET,
                            0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * cfg->max_connections + CONN_RESERVE + 16),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, conn_guard_notify, s->guard, MHD_OPTION_END);
    if (!s->d)
      st = qvl_errorf(QVL_ERR_IO, "libmicrohttpd failed to start on %s:%d", cfg->host, s->port);
    if (st == QVL_OK)
      st = conn_guard_start(s->guard, s->listen_fd, s->d);
  }
  if (st != QVL_OK) {
    if (s->d)
      MHD_stop_daemon(s->d);
    conn_guard_free(s->guard);
    image_budget_free(s->budget);
    if (s->listen_fd >= 0)
      close(s->listen_fd);
    jobs_free(s->jobs);
    resp_store_free(s->responses);
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

/* Waits (s->mu held) until nothing admitted is left or the deadline passes. */
static bool wait_idle(server *s, double deadline) {
  while ((s->calls_alive > 0 || s->accepted > 0) && time_now_s() < deadline) {
    cond_wait_ms(&s->cv, &s->mu, 50);
  }
  return s->calls_alive == 0 && s->accepted == 0;
}

bool server_drain(server *s, double timeout_s) {
  /* At once, without waiting for any lock a request holds: /health says draining, new requests get
   * 503 (the listener stays open so that they are answered, not refused). */
  pthread_mutex_lock(&s->mu);
  atomic_store(&s->draining, true);
  bool idle = wait_idle(s, time_now_s() + timeout_s);
  if (!idle) {
    /* Out of time: cancel what is left; each still gets a complete (error) response. */
    atomic_store(&s->abort_prep, true);
    uint64_t ids[256];
    int n = 0;
    for (call *k = s->live; k && n < 256; k = k->live_next) {
      k->drain_cancelled = true;
      if (k->engine_id)
        ids[n++] = k->engine_id;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
      backend_cancel(s, ids[i]);
    pthread_mutex_lock(&s->mu);
    idle = wait_idle(s, time_now_s() + DRAIN_CANCEL_GRACE_S);
  }
  pthread_mutex_unlock(&s->mu);
  /* all answered: now the listener goes (kept-alive connections get 503 until server_stop) */
  conn_guard_stop(s->guard);
  if (s->listen_fd >= 0) {
    close(s->listen_fd);
    s->listen_fd = -1;
  }
  pthread_rwlock_wrlock(&s->be_lock);
  s->ready = false;
  memset(&s->be, 0, sizeof s->be);
  pthread_rwlock_unlock(&s->be_lock);
  return idle;
}

void server_stop(server *s) {
  if (!s)
    return;
  conn_guard_stop(s->guard);
  if (s->d)
    MHD_stop_daemon(s->d);
  conn_guard_free(s->guard);
  image_budget_free(s->budget);
  if (s->listen_fd >= 0)
    close(s->listen_fd);
  /* Calls still referenced by the engine (a drain that timed out) stay allocated: their on_done
   * still comes, from engine_stop. */
  jobs_free(s->jobs);
  resp_store_free(s->responses);
  for (int i = 0; i < s->n_model_ids; i++)
    free(s->model_ids[i]);
  free(s->model_ids);
  pthread_rwlock_destroy(&s->be_lock);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
