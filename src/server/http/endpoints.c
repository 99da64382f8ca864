/* The endpoints that answer without generating (see endpoints.h). */
#include "server/http/endpoints.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/timing.h"
#include "server/http/cors.h"
#include "server/http/load_metrics.h"
#include "server/http/metrics.h"
#include "server/http/reply.h"
#include "server/http/web_assets.h"

static enum MHD_Result models(struct MHD_Connection *c, server *s, conn_req *r, const char *one) {
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

enum MHD_Result endpoints_models(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  return models(c, s, r, NULL);
}

enum MHD_Result endpoints_model(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  return models(c, s, r, t->rest);
}

enum MHD_Result endpoints_health(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
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
enum MHD_Result endpoints_livez(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  pthread_rwlock_rdlock(&s->be_lock);
  bool ready = s->ready, draining = s->draining;
  pthread_rwlock_unlock(&s->be_lock);
  char body[96];
  snprintf(body, sizeof body, "{\"status\":\"alive\",\"ready\":%s,\"draining\":%s}", ready && !draining ? "true" : "false",
           draining ? "true" : "false");
  return reply_json(c, s, r, 200, strdup(body), NULL);
}

enum MHD_Result endpoints_metrics(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
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
  ms.slow_readers = atomic_load(&s->slow_readers);
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

enum MHD_Result endpoints_asset(struct MHD_Connection *c, server *s, conn_req *r, const char *url) {
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
  reply_common_headers(resp);
  cors_add_headers(s->cfg, c, resp);
  return reply_queue(c, s, r, fresh ? 304 : 200, resp);
}

/* A CORS preflight from an allowed origin (cors.h): 204 with what the browser asked to send. */
enum MHD_Result endpoints_preflight(struct MHD_Connection *c, server *s, conn_req *r) {
  const char *hdr[CORS_PREFLIGHT_HEADERS * 2 + 1];
  char allow[CORS_ALLOW_HEADERS_CAP];
  cors_preflight_headers(s->cfg, c, hdr, allow);
  return reply(c, s, r, 204, NULL, NULL, 0, hdr);
}
