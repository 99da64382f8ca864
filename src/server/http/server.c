/*
 * The lifecycle of the HTTP server of `qvl serve` (see server.h and docs/API.md): start (the
 * stores, the image budget, the connection guard, the listener, libmicrohttpd), attaching the
 * engine, the drain and the stop. What happens to one request starts in request.c; the endpoints
 * are listed in router.c.
 *
 * Who calls whom among the server's files (no loops; a file calls only those to its right):
 *   server → request → router → {endpoints, dialect_endpoints → chat_endpoint, jobs/jobs_http}
 *   chat_endpoint → {stream → call, call} → jobs/jobs_http → {reply, auth, backend}
 *   and below them all request_log, reply → cors, auth, backend; docs/ARCHITECTURE.md has the
 *   whole order.
 */
#include "server/http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/cond.h"
#include "base/status.h"
#include "base/timing.h"
#include "server/dialects/responses.h"
#include "server/http/backend.h"
#include "server/http/call.h"
#include "server/http/request.h"
#include "server/http/request_log.h"
#include "server/http/server_state.h"
#include "server/jobs/jobs_http.h"

#define DRAIN_CANCEL_GRACE_S 5.0 /* after the drain timeout: time for the cancelled requests' answers */

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512], ts[40], line[640];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
    msg[--n] = '\0';
  request_log_timestamp(ts, sizeof ts);
  int len = snprintf(line, sizeof line, "ts=%s level=warn msg=\"microhttpd: %s\"\n", ts, msg);
  if (len > 0) {
    ssize_t w = write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    (void)w;
  }
}

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
    st = jobs_http_open(cfg, s->port, &s->jobs); /* after the listener: the default replica name has the port in it */
  if (st == QVL_OK) {
    /* The listener is ours (conn_guard accepts and hands connections over), so that a full server
     * still answers. The limit leaves room for evicted connections that are still closing. */
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET,
                            0, NULL, NULL, request_on_access, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * cfg->max_connections + CONN_RESERVE + 16),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_NOTIFY_COMPLETED, request_on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, conn_guard_notify, s->guard, MHD_OPTION_END);
    if (!s->d)
      st = qvl_errorf(QVL_ERR_IO, "libmicrohttpd failed to start on %s:%d", cfg->host, s->port);
    if (st == QVL_OK)
      st = conn_guard_start(s->guard, s->listen_fd, s->d);
  }
  if (st != QVL_OK) {
    server_stop(s); /* releases whatever of the above was set up: every part may still be unset */
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
    for (call *k = (call *)s->live.head; k && n < 256; k = (call *)k->live.next) {
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
