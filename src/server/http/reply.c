/* Whole responses (see reply.h). */
#include "server/http/reply.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/http/cors.h"
#include "text/unicode.h"

void reply_count_status(server *s, int status) {
  int c = status / 100;
  if (c >= 1 && c <= 5)
    atomic_fetch_add(&s->http_class[c], 1);
}

void reply_common_headers(struct MHD_Response *resp) {
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

enum MHD_Result reply_queue(struct MHD_Connection *c, server *s, conn_req *r, int status, struct MHD_Response *resp) {
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  r->log.status = status;
  r->responded = true;
  reply_count_status(s, status);
  return ret;
}

enum MHD_Result reply(struct MHD_Connection *c, server *s, conn_req *r, int status, const char *ctype,
                      char *body, size_t len, const char *const *extra) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  if (ctype)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  reply_common_headers(resp);
  cors_add_headers(s->cfg, c, resp);
  for (int i = 0; extra && extra[i]; i += 2)
    MHD_add_response_header(resp, extra[i], extra[i + 1]);
  if (r->close_after)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  return reply_queue(c, s, r, status, resp);
}

enum MHD_Result reply_json(struct MHD_Connection *c, server *s, conn_req *r, int status, char *json,
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

enum MHD_Result reply_error(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
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

enum MHD_Result reply_errorf(struct MHD_Connection *c, server *s, conn_req *r, qvl_status st,
                             const char *code, const char *fmt, const char *arg) {
  api_error e;
  api_error_status(&e, st, code, NULL, fmt, arg);
  return reply_error(c, s, r, &e, NULL);
}

enum MHD_Result reply_error_as(struct MHD_Connection *c, server *s, conn_req *r, const api_error *e,
                               const compat_format *fmt, void *state) {
  if (!fmt || !fmt->error_json)
    return reply_error(c, s, r, e, NULL);
  static const char *const retry[] = {"Retry-After", "2", NULL}, *const bearer[] = {"WWW-Authenticate", "Bearer", NULL};
  int http = fmt->error_http ? fmt->error_http(e->http) : e->http; /* Anthropic: 503 -> 529 */
  return reply_json(c, s, r, http, fmt->error_json(state, e), e->http == qvl_status_http(QVL_ERR_BUSY) ? retry : e->http == 401 ? bearer : NULL);
}
