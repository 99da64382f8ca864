/*
 * The generating endpoints (see chat_endpoint.h).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a chat request is parsed
 * and submitted on its connection's thread, which then waits on the call's condition variable
 * that the engine's callbacks signal. While waiting it polls the socket for a hang-up
 * (POLLRDHUP), so a client that goes away cancels its request and frees its batch slot within a
 * fraction of a second, streaming or not.
 */
#include "server/http/chat_endpoint.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cond.h"
#include "server/http/auth.h"
#include "server/http/backend.h"
#include "server/http/call.h"
#include "server/http/reply.h"
#include "server/http/stream.h"
#include "server/openai/chat_wire.h"
#include "server/openai/history_field.h"

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

enum MHD_Result chat_endpoint_serve(struct MHD_Connection *c, server *s, conn_req *r, bool job, compat_request *cr) {
  api_error e;
  bool admitted = call_admit(s, c, r);
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
  auth_owner(s, c, r->owner);
  call *k = call_submit(s, r, job, cr, &e);
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
  while (!k->done && !(k->stream && (k->pending.len || k->pending_reasoning.len))) {
    cond_wait_ms(&k->cv, &k->mu, WAIT_SLICE_MS);
    if (!k->done && !k->cancelled && call_client_gone(k->fd)) {
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
    request_log_write(&r->log);
    r->log_owned_by_stream = true;
    call_unref(k);
    return MHD_NO; /* the client is gone: close */
  }
  if (!k->stream || failed_early) {
    r->log.res = &k->result;
    enum MHD_Result ret = reply_result(c, s, r, k);
    request_log_write(&r->log);
    r->log_owned_by_stream = true;
    call_unref(k);
    return ret;
  }
  return stream_respond(c, s, r, k);
}

enum MHD_Result chat_endpoint_chat(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  return chat_endpoint_serve(c, s, r, false, NULL);
}

enum MHD_Result chat_endpoint_job(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  return chat_endpoint_serve(c, s, r, true, NULL);
}
