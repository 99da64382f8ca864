/*
 * One HTTP request (see request.h): libmicrohttpd calls request_on_access once with the headers,
 * then with each piece of the body, then once more when the body is complete.
 */
#include "server/http/request.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"
#include "base/timing.h"
#include "server/http/router.h"

/* How much of an over-large body is read and dropped before the 413 (see request_on_access). */
#define TOO_LARGE_DRAIN_BYTES ((size_t)16 << 20)

enum MHD_Result request_on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
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
        return router_dispatch(c, s, r, url, method);
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
  return router_dispatch(c, s, r, url, method);
}

void request_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
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
    request_log_write(&r->log);
  }
  buf_free(&r->body);
  free(r);
  *con_cls = NULL;
}
