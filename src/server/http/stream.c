/*
 * Streamed answers (see stream.h).
 *
 * The stream's headers are sent only once the first text (or the end) is there (chat_endpoint.c
 * waits for it), so a request that fails before producing anything gets a plain JSON error with
 * the right status instead of a broken event stream. libmicrohttpd then pulls the events through
 * stream_reader on the connection's thread, which waits for the engine's text and polls the
 * socket for a hang-up.
 */
#include "server/http/stream.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cond.h"
#include "base/timing.h"
#include "server/http/backend.h"
#include "server/http/cors.h"
#include "server/http/reply.h"
#include "server/openai/chat_wire.h"
#include "server/openai/history_field.h"

/* Appends the chunk j (taken; NULL when out of memory: nothing) as an event. */
static void send_chunk(call *k, char *j) {
  if (j)
    sse_append(&k->out, j);
  free(j);
}

/* A chunk of answer text; the first chunk of the stream carries the role. */
static void send_text(call *k, const char *text, size_t len) {
  send_chunk(k, api_chunk_json(k->id, k->created, k->model, !k->sent_role, text, len, NULL));
  k->sent_role = true;
}

/* Empties a pending buffer whose text has been formatted. */
static void consumed(buf *b) {
  b->len = 0;
  b->data[0] = '\0';
}

/* Formats what is due into k->out (mutex held). */
static void stream_format(call *k) {
  if (k->pending_reasoning.len) { /* reasoning comes before any answer text */
    if (k->fmt && k->fmt->stream_reasoning) {
      k->fmt->stream_reasoning(k->fmt_state, &k->out, k->pending_reasoning.data, k->pending_reasoning.len);
    } else if (!k->fmt) {
      send_chunk(k, api_reasoning_chunk_json(k->id, k->created, k->model, !k->sent_role, k->pending_reasoning.data,
                                             k->pending_reasoning.len));
      k->sent_role = true;
    }
    consumed(&k->pending_reasoning);
    return;
  }
  if (k->fmt) { /* another API's stream shape (dialects/dialect.h) */
    if (k->pending.len) {
      k->fmt->stream_text(k->fmt_state, &k->out, k->pending.data, k->pending.len);
      consumed(&k->pending);
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
    consumed(&k->pending);
    size_t safe = k->tool_seen ? 0 : api_tool_text_safe(k->held.data, k->held.len, &k->tool_seen);
    if (k->done && !k->tool_seen)
      safe = k->held.len;
    if (safe > 0)
      send_text(k, k->held.data, safe);
    size_t keep = k->tool_seen ? 0 : k->held.len - safe;
    memmove(k->held.data, k->held.data + safe, keep);
    k->held.len = keep;
    return;
  }
  if (k->pending.len) {
    send_text(k, k->pending.data, k->pending.len);
    consumed(&k->pending);
    return;
  }
  if (!k->done)
    return;
  const api_result *r = &k->result;
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    send_chunk(k, api_error_json(&e));
  } else {
    if (!k->sent_role) /* no text at all: still one chunk with the role, as OpenAI does */
      send_text(k, "", 0);
    api_agents_stream_tail(&k->out, k->id, k->created, k->model, r);
    const char *fr = api_agents_finish_reason(r);
    char *j = api_chunk_json(k->id, k->created, k->model, false, NULL, 0, fr ? fr : "stop");
    if (j && !k->include_usage && k->srv->cfg->stream_usage)
      j = compat_chunk_add_usage(j, k->id, k->created, k->model, r); /* --stream-usage (dialects/dialect.h) */
    send_chunk(k, j);
    if (k->include_usage)
      send_chunk(k, api_usage_chunk_json(k->id, k->created, k->model, r));
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
      write_watch_progress(&k->watch, time_now_s());
      pthread_mutex_unlock(&k->mu);
      return (ssize_t)n;
    }
    k->out.len = 0;
    k->out_off = 0;
    if (k->finished) {
      pthread_mutex_unlock(&k->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (k->slow) {
      pthread_mutex_unlock(&k->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (k->pending.len || k->pending_reasoning.len || k->done) {
      stream_format(k);
      continue;
    }
    cond_wait_ms(&k->cv, &k->mu, WAIT_SLICE_MS);
    if (!k->pending.len && !k->pending_reasoning.len && !k->done && call_client_gone(k->fd)) {
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
  /* libmicrohttpd closes the socket after this: its number may soon be another connection's, so
   * nothing (the slow-reader shutdown in on_text) may use it any more */
  k->fd = -1;
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
  request_log_write(&k->log);
  call_unref(k);
}

enum MHD_Result stream_respond(struct MHD_Connection *c, server *s, conn_req *r, call *k) {
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
  reply_common_headers(resp);
  cors_add_headers(s->cfg, c, resp);
  pthread_mutex_lock(&k->mu);
  write_watch_start(&k->watch, k->fd, time_now_s()); /* from here on the client is to read */
  pthread_mutex_unlock(&k->mu);
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp); /* the stream's reference to k is released in stream_free */
  r->responded = true;
  r->log_owned_by_stream = true;
  reply_count_status(s, 200);
  return ret;
}
