/*
 * The state of a running server, shared by the files of src/server/http (and jobs/jobs_http.c):
 * private to the server, never included from outside src/server. server.c creates and frees it;
 * the other files read the configuration and the backend and count what happens.
 *
 * Locks: be_lock guards the backend (readers: submit/cancel/stats; writer: attach/detach); mu
 * guards calls_alive, accepted and live. draining and abort_prep are atomics read without a lock.
 */
#ifndef QVL_SERVER_HTTP_SERVER_STATE_H
#define QVL_SERVER_HTTP_SERVER_STATE_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/lru.h"
#include "image/budget.h"
#include "server/dialects/responses_store.h"
#include "server/fetch/fetch.h"
#include "server/http/conn_guard.h"
#include "server/http/server.h"
#include "server/jobs/jobs.h"

#define WAIT_SLICE_MS 100 /* how often a waiting thread looks for a client hang-up */
#define CONN_RESERVE 4    /* connections past max_connections that answer only /health and /metrics */

struct call;

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
  lru_list live;            /* every call (lru.h, used as a plain list), for cancelling them when the drain times out */
  conn_guard *guard;
  image_budget *budget;

  _Atomic uint64_t http_class[6], rejected_busy, disconnects, slow_readers, seq;
};

#endif
