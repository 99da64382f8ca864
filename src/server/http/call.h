/*
 * A chat request in flight: the state shared by its connection thread and the engine thread
 * (reference counted, because either side may finish last), its submission (parse, context
 * policy, the engine_request, the job record) and the engine's callbacks, which only store what
 * comes and wake the connection thread.
 */
#ifndef QVL_SERVER_HTTP_CALL_H
#define QVL_SERVER_HTTP_CALL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/lru.h"
#include "prompt/history.h"
#include "prompt/image_source.h"
#include "video/decode.h"
#include "server/dialects/dialect.h"
#include "server/http/request.h"
#include "server/http/session.h"
#include "server/http/write_watch.h"
#include "server/openai/api_error.h"
#include "server/openai/result.h"

typedef struct call {
  lru_node live;            /* first member: server.live's node converts back to the call (under server.mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  server *srv;
  uint64_t engine_id;
  bool done, cancelled, any_text;
  api_result result;
  buf pending;              /* text from on_text not yet sent */
  buf pending_reasoning;    /* reasoning from on_reasoning not yet sent (it precedes all text) */
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
  /* another API's endpoint (dialect.h): its formatter and state (owned); NULL for chat */
  const compat_format *fmt;
  void *fmt_state;
  /* context policy (history_field.h): the request's, and what it dropped (filled at submit) */
  history_policy hpol;
  history_report hist;
  char session[SESSION_KEY_CAP]; /* X-Qvl-Session: the conversation's routing key */
  /* hostile load */
  double deadline;          /* timeout_s from arrival, pre-processing included (0 = none) */
  atomic_bool drain_cancelled; /* cancelled because the drain timed out */
  api_agent_opts agent;     /* tool calls / logprobs in the response */
  bool tool_seen;           /* stream: a <tool_call> began; no more content deltas */
  buf held;                 /* stream: text that may begin a <tool_call>, not sent yet */
  write_watch watch;        /* stream: is the client reading? (--write-timeout-s) */
  bool slow;                /* stream: cancelled because its client stopped reading */
} call;

/* Drops a reference; the last one frees the call and wakes a waiting drain. */
void call_unref(call *k);
/* Parses the chat body (cr's translation when given, else r's body), checks it and submits it
 * (be_lock read-held by the caller). job: stored as an async job. Returns the call with the
 * caller's reference, or NULL with e filled. */
call *call_submit(server *s, conn_req *r, bool job, compat_request *cr, api_error *e);
/* The request limits of this server's chat requests (settings, model ids, the model's defaults). */
void call_fill_limits(server *s, api_limits *lim);
/* Whether the client on fd has hung up (POLLRDHUP; false for fd < 0). */
bool call_client_gone(int fd);
/* The stop check of a request's pre-processing on its connection thread: the drain gave up
 * (abort_prep), the deadline (0: none) has passed, or the client on fd has gone. */
qvl_status call_prep_check(server *s, int fd, double deadline);
/* When a request that arrived as r times out (timeout_s; 0 when there is none). */
double call_deadline(const server *s, const conn_req *r);
/* Admission, linearised with server_drain: false once draining has begun; otherwise r is counted in
 * server.accepted, so the drain waits until its response has been sent (request_on_completed). Also
 * records the connection's fd in r, for the stop checks that notice a client that left. */
bool call_admit(server *s, struct MHD_Connection *c, conn_req *r);
/* Where a request's images and videos may come from, and the caps on its videos, under this
 * server's settings (data: URLs, allow-listed fetches, --max-image-mb, --max-video-mb,
 * --video-max-seconds). */
void call_fill_media(server *s, image_source_opts *src, video_limits *video);

#endif
