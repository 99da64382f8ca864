/* Accepting connections with caps, eviction, deadlines and answered rejections (see conn_guard.h). */
#include "server/http/conn_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/lru.h"
#include "base/status.h"
#include "base/timing.h"

#define TICK_MS 100          /* deadline checks and lingering reads */
#define EVICT_MIN_AGE_S 1.0  /* a connection waiting this long for its headers may make room */
#define LINGER_S 2.0         /* how long a rejected socket is read from before it is closed */
#define LINGER_MAX 512       /* rejected sockets lingering at once (past that: closed at once) */
#define ACCEPT_BURST 64      /* connections accepted per wake-up */

typedef enum gc_state { GC_WAITING, GC_BODY, GC_BUSY } gc_state;

typedef struct gconn {
  lru_node link;              /* first member: conn_guard.conns's node converts back to the entry */
  conn_guard *g;
  int fd;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  struct MHD_Connection *mhd; /* set by the STARTED notification */
  gc_state state;
  double t_state;             /* when it entered its state */
  bool reserve, served, kicked;
} gconn;

typedef struct linger_sock {
  int fd;
  double until;
} linger_sock;

struct conn_guard {
  conn_guard_opts o;
  pthread_mutex_t mu;        /* the list, every gconn's fields, the stats */
  lru_list conns;            /* newest first (lru.h, used as a plain list) */
  conn_guard_stats st;
  int listen_fd;
  struct MHD_Daemon *d;
  pthread_t thread;
  bool running;
  atomic_bool stop;
  linger_sock lingers[LINGER_MAX];
  int n_linger;
};

/* Walking the connections (mutex held). */
static gconn *first_conn(const conn_guard *g) { return (gconn *)g->conns.head; }
static gconn *next_conn(const gconn *e) { return (gconn *)e->link.next; }

qvl_status conn_guard_new(const conn_guard_opts *o, conn_guard **out) {
  *out = NULL;
  if (o->max_conns < 1 || o->reserve < 0 || o->per_client < 0 || o->header_timeout_s <= 0 || o->body_timeout_s <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "connection limits: max %d, reserve %d, per client %d, header %g s, body %g s",
                      o->max_conns, o->reserve, o->per_client, o->header_timeout_s, o->body_timeout_s);
  conn_guard *g = calloc(1, sizeof *g);
  if (!g)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  g->o = *o;
  g->listen_fd = -1;
  pthread_mutex_init(&g->mu, NULL);
  *out = g;
  return QVL_OK;
}

static bool same_client(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return false;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                   sizeof(struct in6_addr));
  return true;
}

static void send_all(int fd, const char *s) {
  size_t n = strlen(s), off = 0;
  while (off < n) {
    ssize_t w = send(fd, s + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0)
      return; /* a full send buffer or a gone client: the answer is best effort */
    off += (size_t)w;
  }
}

/* A complete HTTP/1.1 answer with an OpenAI-style error body. */
static void send_answer(int fd, int status, const char *reason, const char *code, const char *msg, bool retry) {
  char body[512], head[1024];
  int bn = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}", msg,
                    status >= 500 ? "server_error" : "invalid_request_error", code);
  snprintf(head, sizeof head,
           "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n"
           "X-Content-Type-Options: nosniff\r\n\r\n%s",
           status, reason, bn, retry ? "Retry-After: 2\r\n" : "", body);
  send_all(fd, head);
}

/* Ends a connection that libmicrohttpd owns, from this thread (mutex held): the socket is shut
 * down, so its thread sees the end and closes it. The peer check guards against a descriptor that
 * was closed and reused in between. */
static void kick(gconn *e, bool answer) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  e->kicked = true;
  if (getpeername(e->fd, (struct sockaddr *)&ss, &sl) || sl != e->addrlen || memcmp(&ss, &e->addr, sl))
    return;
  if (answer)
    send_answer(e->fd, 408, "Request Timeout", "request_timeout",
                "the request did not arrive in time (header_timeout_s / body_timeout_s)", false);
  shutdown(e->fd, SHUT_RDWR);
}

static void linger_add(conn_guard *g, int fd, double now) {
  shutdown(fd, SHUT_WR);
  if (g->n_linger == LINGER_MAX) {
    close(fd);
    return;
  }
  g->lingers[g->n_linger++] = (linger_sock){fd, now + LINGER_S};
}

static void reject(conn_guard *g, int fd, bool per_client, double now) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  if (per_client)
    send_answer(fd, 429, "Too Many Requests", "too_many_connections",
                "too many connections from your address (max_connections_per_client); retry after a few seconds", true);
  else
    send_answer(fd, qvl_status_http(QVL_ERR_BUSY), "Service Unavailable", qvl_status_error_code(QVL_ERR_BUSY),
                "the server has no free connection (max_connections); retry after a few seconds", true);
  linger_add(g, fd, now);
}

/* The oldest connection waiting for headers for EVICT_MIN_AGE_S or more (mutex held). */
static gconn *evictable(conn_guard *g, const struct sockaddr_storage *client, double now) {
  gconn *best = NULL;
  for (gconn *e = first_conn(g); e; e = next_conn(e))
    if (!e->kicked && !e->reserve && e->state == GC_WAITING && now - e->t_state >= EVICT_MIN_AGE_S &&
        (!client || same_client(&e->addr, client)) && (!best || e->t_state < best->t_state))
      best = e;
  return best;
}

static void admit(conn_guard *g, int fd, const struct sockaddr_storage *addr, socklen_t addrlen) {
  double now = time_now_s();
  pthread_mutex_lock(&g->mu);
  int pool = 0, res = 0, mine = 0;
  for (gconn *e = first_conn(g); e; e = next_conn(e)) {
    if (e->kicked)
      continue;
    if (e->reserve)
      res++;
    else
      pool++;
    if (same_client(&e->addr, addr))
      mine++;
  }
  bool reserve = false;
  if (g->o.per_client > 0 && mine >= g->o.per_client) {
    gconn *v = evictable(g, addr, now);
    if (!v) {
      g->st.rejected_client++;
      pthread_mutex_unlock(&g->mu);
      reject(g, fd, true, now);
      return;
    }
    g->st.evicted++;
    kick(v, !v->served);
    if (!v->reserve)
      pool--;
  }
  if (pool >= g->o.max_conns) {
    gconn *v = evictable(g, NULL, now);
    if (v) {
      g->st.evicted++;
      kick(v, !v->served);
    } else if (res < g->o.reserve) {
      reserve = true;
    } else {
      g->st.rejected_full++;
      pthread_mutex_unlock(&g->mu);
      reject(g, fd, false, now);
      return;
    }
  }
  gconn *e = calloc(1, sizeof *e);
  if (!e) {
    pthread_mutex_unlock(&g->mu);
    reject(g, fd, false, now);
    return;
  }
  e->g = g;
  e->fd = fd;
  memcpy(&e->addr, addr, addrlen);
  e->addrlen = addrlen;
  e->state = GC_WAITING;
  e->t_state = now;
  e->reserve = reserve;
  lru_push_front(&g->conns, &e->link);
  g->st.accepted++;
  pthread_mutex_unlock(&g->mu);
  if (MHD_add_connection(g->d, fd, (const struct sockaddr *)addr, addrlen) != MHD_YES) {
    /* libmicrohttpd closed the socket; forget the entry unless its CLOSED notification did */
    pthread_mutex_lock(&g->mu);
    for (gconn *x = first_conn(g); x; x = next_conn(x))
      if (x == e) {
        lru_unlink(&g->conns, &e->link);
        free(e);
        break;
      }
    pthread_mutex_unlock(&g->mu);
  }
}

static void check_deadlines(conn_guard *g, double now) {
  pthread_mutex_lock(&g->mu);
  for (gconn *e = first_conn(g); e; e = next_conn(e)) {
    if (e->kicked || e->state == GC_BUSY)
      continue;
    double limit = e->state == GC_WAITING ? g->o.header_timeout_s : g->o.body_timeout_s;
    if (now - e->t_state > limit) {
      g->st.timed_out++;
      kick(e, !e->served || e->state == GC_BODY);
    }
  }
  pthread_mutex_unlock(&g->mu);
}

static void linger_tick(conn_guard *g, const struct pollfd *p, double now) {
  char scratch[4096];
  int k = 0;
  for (int i = 0; i < g->n_linger; i++) {
    linger_sock l = g->lingers[i];
    bool done = now >= l.until;
    if (!done && p && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r;
      while ((r = recv(l.fd, scratch, sizeof scratch, MSG_DONTWAIT)) > 0) {
      }
      done = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
    if (done)
      close(l.fd);
    else
      g->lingers[k++] = l;
  }
  g->n_linger = k;
}

static void *guard_main(void *arg) {
  conn_guard *g = arg;
  struct pollfd *p = calloc(LINGER_MAX + 1, sizeof *p);
  double last_check = 0;
  while (!atomic_load(&g->stop)) {
    int n = 0;
    if (p) {
      p[n++] = (struct pollfd){g->listen_fd, POLLIN, 0};
      for (int i = 0; i < g->n_linger; i++)
        p[n++] = (struct pollfd){g->lingers[i].fd, POLLIN, 0};
      poll(p, (nfds_t)n, TICK_MS);
    } else {
      struct pollfd one = {g->listen_fd, POLLIN, 0};
      poll(&one, 1, TICK_MS);
    }
    double now = time_now_s();
    linger_tick(g, p ? p + 1 : NULL, now);
    for (int i = 0; i < ACCEPT_BURST; i++) {
      struct sockaddr_storage ss;
      socklen_t sl = sizeof ss;
      int fd = accept4(g->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
      if (fd < 0)
        break; /* EAGAIN (the listener is non-blocking), or a transient error: next tick */
      admit(g, fd, &ss, sl);
    }
    if (now - last_check >= TICK_MS / 1e3) {
      check_deadlines(g, now);
      last_check = now;
    }
  }
  free(p);
  return NULL;
}

qvl_status conn_guard_start(conn_guard *g, int listen_fd, struct MHD_Daemon *d) {
  int fl = fcntl(listen_fd, F_GETFL);
  if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return qvl_errorf(QVL_ERR_IO, "listener: %s", strerror(errno));
  g->listen_fd = listen_fd;
  g->d = d;
  if (pthread_create(&g->thread, NULL, guard_main, g))
    return qvl_errorf(QVL_ERR_INTERNAL, "cannot start the accepting thread");
  g->running = true;
  return QVL_OK;
}

void conn_guard_stop(conn_guard *g) {
  if (!g || !g->running)
    return;
  atomic_store(&g->stop, true);
  pthread_join(g->thread, NULL);
  g->running = false;
  for (int i = 0; i < g->n_linger; i++)
    close(g->lingers[i].fd);
  g->n_linger = 0;
}

void conn_guard_free(conn_guard *g) {
  if (!g)
    return;
  conn_guard_stop(g);
  gconn *e = first_conn(g);
  while (e) { /* none once the daemon has stopped; freed anyway */
    gconn *n = next_conn(e);
    free(e);
    e = n;
  }
  pthread_mutex_destroy(&g->mu);
  free(g);
}

void conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code) {
  conn_guard *g = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
      return;
    pthread_mutex_lock(&g->mu);
    for (gconn *e = first_conn(g); e; e = next_conn(e))
      if (!e->mhd && e->fd == ci->connect_fd) {
        e->mhd = c;
        *socket_context = e;
        break;
      }
    pthread_mutex_unlock(&g->mu);
    return;
  }
  gconn *e = *socket_context;
  if (!e)
    return;
  pthread_mutex_lock(&g->mu);
  lru_unlink(&g->conns, &e->link);
  pthread_mutex_unlock(&g->mu);
  free(e);
  *socket_context = NULL;
}

static gconn *entry_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

static void set_state(struct MHD_Connection *c, gc_state s, bool served) {
  gconn *e = entry_of(c);
  if (!e)
    return;
  pthread_mutex_lock(&e->g->mu);
  if (e->state != s) {
    e->state = s;
    e->t_state = time_now_s();
  }
  e->served |= served;
  pthread_mutex_unlock(&e->g->mu);
}

void conn_guard_headers_done(struct MHD_Connection *c) { set_state(c, GC_BODY, false); }
void conn_guard_body_done(struct MHD_Connection *c) { set_state(c, GC_BUSY, false); }
void conn_guard_response_done(struct MHD_Connection *c) { set_state(c, GC_WAITING, true); }

bool conn_guard_is_reserve(struct MHD_Connection *c) {
  gconn *e = entry_of(c);
  return e && e->reserve; /* set before the connection existed, never changed */
}

void conn_guard_get_stats(conn_guard *g, conn_guard_stats *out) {
  pthread_mutex_lock(&g->mu);
  *out = g->st;
  out->open = out->reserve_open = 0;
  for (gconn *e = first_conn(g); e; e = next_conn(e)) {
    out->open++;
    out->reserve_open += e->reserve;
  }
  pthread_mutex_unlock(&g->mu);
}
