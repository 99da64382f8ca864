/*
 * Chat requests in flight (see call.h).
 *
 * The connection thread parses and submits; the engine thread calls on_text and on_done, which
 * only store and signal (quick, no engine calls but cancel). Pre-processing (image fetch and
 * decode, tokenizing, budget waits) runs on the connection thread and stops through prep_stop.
 */
#include "server/http/call.h"

#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cond.h"
#include "base/status.h"
#include "base/timing.h"
#include "image/budget.h"
#include "server/fetch/fetch.h"
#include "server/http/backend.h"
#include "server/jobs/jobs_http.h"
#include "server/openai/chat_wire.h"
#include "server/openai/history_field.h"

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
  lru_push_front(&s->live, &k->live);
  pthread_mutex_unlock(&s->mu);
  return k;
}

void call_unref(call *k) {
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
  buf_free(&k->pending_reasoning);
  buf_free(&k->held);
  buf_free(&k->out);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  pthread_mutex_lock(&s->mu);
  s->calls_alive--;
  lru_unlink(&s->live, &k->live);
  free(k);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* ---- engine callbacks (engine thread: quick, no engine calls but cancel) --------------------- */

/* A piece of answer (into pending) or reasoning (into pending_reasoning) for the streaming side. */
static bool take_piece(call *k, buf *into, const char *text, size_t len) {
  pthread_mutex_lock(&k->mu);
  bool keep = !k->cancelled;
  if (keep && write_watch_stalled(&k->watch, k->fd, time_now_s(), (double)k->srv->cfg->write_timeout_s)) {
    /* the client has not read for --write-timeout-s: free the batch slot (false cancels) and end
     * the connection, whose writes could only wait */
    k->cancelled = k->slow = true;
    keep = false;
    atomic_fetch_add(&k->srv->slow_readers, 1);
    if (k->fd >= 0)
      shutdown(k->fd, SHUT_RDWR);
  }
  if (keep) {
    if (buf_append(into, text, len) != QVL_OK)
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

static bool on_text(void *user, const char *text, size_t len) {
  call *k = user;
  return take_piece(k, &k->pending, text, len);
}

static bool on_reasoning(void *user, const char *text, size_t len) {
  call *k = user;
  return take_piece(k, &k->pending_reasoning, text, len);
}

static void on_done(void *user, const engine_result *r) {
  call *k = user;
  pthread_mutex_lock(&k->mu);
  if (!api_result_copy(&k->result, r)) {
    k->result.status = QVL_ERR_NOMEM;
    snprintf(k->result.error, sizeof k->result.error, "out of memory copying the result");
  }
  k->result.agent = k->agent;
  if (k->result.status == QVL_OK && r->finish_reason == QVL_FINISH_CANCELLED) {
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
    jobs_finish(k->srv->jobs, k->job_id, time_now_s(), k->result.status == QVL_OK, jobs_http_result_json(k->id, k->created, k->model, &k->result));
    api_error e;
    api_error_from_status(&e, k->result.status, "");
    k->log.status = k->result.status == QVL_OK ? 200 : e.http;
    k->log.res = &k->result;
    request_log_write(&k->log);
  }
  call_unref(k);
}

bool call_client_gone(int fd) {
  if (fd < 0)
    return false;
  struct pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void call_fill_limits(server *s, api_limits *lim) {
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
  lim->reasoning_model = s->be.model && s->be.model->thinking;
  lim->reasoning_budget = cfg->reasoning_budget;
  lim->boxes = s->cfg->boxes;
}

/* The stop check of a request's pre-processing (image fetch/decode, tokenizing, budget waits), on
 * its connection thread: the drain gave up, its time is up, or its client has gone. */
qvl_status call_prep_check(server *s, int fd, double deadline) {
  if (atomic_load(&s->abort_prep))
    return qvl_errorf(QVL_ERR_BUSY, "the server is shutting down: the request was cancelled after drain_timeout_s");
  if (deadline > 0 && time_now_s() > deadline)
    return qvl_errorf(QVL_ERR_TIMEOUT, "the request timed out while its input was prepared (timeout_s %lld)",
                      (long long)s->cfg->timeout_s);
  if (call_client_gone(fd)) {
    atomic_fetch_add(&s->disconnects, 1);
    return qvl_errorf(QVL_ERR_CANCELLED, "the client went away");
  }
  return QVL_OK;
}

static qvl_status prep_stop(void *user) {
  call *k = user;
  return call_prep_check(k->srv, k->fd, k->deadline);
}

bool call_admit(server *s, struct MHD_Connection *c, conn_req *r) {
  pthread_mutex_lock(&s->mu);
  bool admitted = !atomic_load(&s->draining);
  if (admitted) {
    s->accepted++;
    r->accepted = true;
  }
  pthread_mutex_unlock(&s->mu);
  const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  r->fd = fdi ? fdi->connect_fd : -1;
  return admitted;
}

double call_deadline(const server *s, const conn_req *r) {
  return s->cfg->timeout_s > 0 ? r->log.t0 + (double)s->cfg->timeout_s : 0;
}

void call_fill_media(server *s, image_source_opts *src, video_limits *video) {
  memset(src, 0, sizeof *src);
  src->allow_files = false;
  src->max_bytes = (size_t)s->cfg->max_image_mb << 20;
  if (s->fetch.n_allow) {
    src->fetch_remote = fetch_remote;
    src->fetch_remote_stoppable = fetch_remote_stoppable;
    src->fetch_user = &s->fetch;
  }
  video_limits_default(video);
  video->max_bytes = (size_t)s->cfg->max_video_mb << 20;
  video->max_seconds = (double)s->cfg->video_max_seconds;
}

/* Parses and submits (be_lock read-held by the caller). On failure fills e and returns NULL. */
call *call_submit(server *s, conn_req *r, bool job, compat_request *cr, api_error *e) {
  api_limits lim;
  call_fill_limits(s, &lim);
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
  k->deadline = call_deadline(s, r);
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
  engine_request_init(&er);
  er.messages = req.messages;
  if (cr && cr->raw) { /* legacy completions: the prompt as given, no template */
    er.raw_text = cr->raw_text;
    er.raw_len = cr->raw_len;
    er.raw_ids = cr->raw_ids;
    er.n_raw_ids = cr->n_raw_ids;
  }
  er.prompt.pre.min_pixels = req.min_pixels;
  er.prompt.pre.max_pixels = req.max_pixels;
  er.prompt.limits.max_bytes = (size_t)s->cfg->max_image_mb << 20;
  call_fill_media(s, &er.prompt.source, &er.prompt.video_limits);
  er.prompt.max_images = (int)s->cfg->max_images;
  er.prompt.limits.max_pixels = s->cfg->max_image_pixels;
  er.prompt.max_request_pixels = s->cfg->max_request_pixels;
  /* videos: the request's sampling under the server's caps (video_wire.h), checked again by the
   * prompt builder once the containers are read, before any frame is decoded */
  er.prompt.video = req.video;
  er.prompt.max_videos = (int)s->cfg->max_videos;
  er.prompt.max_video_frames = s->cfg->video_max_frames;
  er.prompt.content_special_tokens = s->cfg->content_special_tokens;
  er.prompt.budget = s->budget;
  er.prompt.stop = prep_stop;
  er.prompt.stop_user = k;
  er.gen = req.gen;
  er.gen.n_ctx = s->cfg->ctx;
  er.on_text = on_text;
  er.on_reasoning = on_reasoning;
  er.on_done = on_done;
  er.user = k;
  k->hpol = hpol;
  er.history = &k->hpol;
  er.history_out = &k->hist;
  er.prompt.tools = req.tools;
  if (cr) { /* a stored conversation's images are resolved, not fetched (dialects/responses_store.h) */
    er.prompt.resolve_media = cr->resolve_media;
    er.prompt.resolve_user = cr->resolve_user;
    er.prompt.keep_sources = cr->keep_media;
  }
  er.grammar = req.grammar; /* the engine's from here on */
  req.grammar = NULL;
  er.logprobs = req.agent.logprobs;
  er.top_logprobs = req.agent.top_logprobs;
  er.count_only = cr && cr->count_only;
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
