/*
 * The endpoint table and dispatch (see router.h).
 *
 * A route is a path (exact, or a prefix with ROUTE_PREFIX), the methods it answers and its
 * handler; one path may have one line per method. A known path asked with another method gets
 * 405 with Allow listing the methods of all its lines.
 */
#include "server/http/router.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "server/dialects/messages.h"
#include "server/http/auth.h"
#include "server/http/chat_endpoint.h"
#include "server/http/cors.h"
#include "server/http/dialect_endpoints.h"
#include "server/http/endpoints.h"
#include "server/http/prompt_endpoints.h"
#include "server/http/reply.h"
#include "server/http/video_frames_endpoint.h"
#include "server/http/web_assets.h"
#include "server/jobs/jobs_http.h"

enum {
  ROUTE_GET = 1,    /* GET and HEAD */
  ROUTE_POST = 2,
  ROUTE_DELETE = 4,
  ROUTE_OTHER = 8,  /* any other method */
  ROUTE_ANY = ROUTE_GET | ROUTE_POST | ROUTE_DELETE | ROUTE_OTHER,
};

enum {
  ROUTE_PREFIX = 1, /* path is a prefix; the handler gets the rest of the URL in t->rest */
  ROUTE_KEY = 2,    /* needs the API key (implied for every /v1/ URL) */
  ROUTE_OWN_KEY = 4, /* the handler checks the key itself (its API's 401 shape) */
};

typedef struct route {
  const char *path;
  unsigned flags;   /* ROUTE_PREFIX, ROUTE_KEY */
  unsigned methods; /* ROUTE_GET, ... */
  request_handler handle;
} route;

/* Every URL under this prefix needs the API key, a known endpoint or not: a caller without the
 * key learns nothing about which exist. */
#define ROUTER_KEY_AREA "/v1/"

static const route routes[] = {
    {"/health", 0, ROUTE_GET, endpoints_health},
    {"/livez", 0, ROUTE_GET, endpoints_livez},
    {"/metrics", 0, ROUTE_GET, endpoints_metrics},
    {"/api/", ROUTE_PREFIX, ROUTE_ANY, dialect_endpoints_ollama}, /* checks the key itself */
    {"/v1/messages", ROUTE_PREFIX | ROUTE_OWN_KEY, ROUTE_ANY, dialect_endpoints_messages}, /* Anthropic's */
    {"/v1/chat/completions", 0, ROUTE_POST, chat_endpoint_chat},
    {"/v1/responses", 0, ROUTE_POST, dialect_endpoints_responses},
    {"/v1/completions", 0, ROUTE_POST, dialect_endpoints_completions},
    {"/v1/jobs", 0, ROUTE_POST, chat_endpoint_job},
    {"/v1/jobs", 0, ROUTE_GET, jobs_http_list},
    {"/v1/jobs/", ROUTE_PREFIX, ROUTE_GET, jobs_http_get},
    {"/v1/jobs/", ROUTE_PREFIX, ROUTE_DELETE, jobs_http_delete},
    {"/v1/models", 0, ROUTE_GET, endpoints_models},
    {"/v1/models/", ROUTE_PREFIX, ROUTE_GET, endpoints_model},
    {"/tokenize", ROUTE_KEY, ROUTE_POST, prompt_endpoints_serve},
    {"/detokenize", ROUTE_KEY, ROUTE_POST, prompt_endpoints_serve},
    {"/apply-template", ROUTE_KEY, ROUTE_POST, prompt_endpoints_serve},
    {"/video/frames", ROUTE_KEY, ROUTE_POST, video_frames_endpoint},
};

#define N_ROUTES (sizeof routes / sizeof routes[0])

static unsigned method_bit(const char *method) {
  if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
    return ROUTE_GET;
  if (!strcmp(method, "POST"))
    return ROUTE_POST;
  if (!strcmp(method, "DELETE"))
    return ROUTE_DELETE;
  return ROUTE_OTHER;
}

static bool route_matches(const route *rt, const char *url) {
  if (rt->flags & ROUTE_PREFIX)
    return !strncmp(url, rt->path, strlen(rt->path));
  return !strcmp(url, rt->path);
}

static bool same_path(const route *a, const route *b) {
  return (a->flags & ROUTE_PREFIX) == (b->flags & ROUTE_PREFIX) && !strcmp(a->path, b->path);
}

/* "GET, HEAD, POST, DELETE", those of methods, in that order. */
static void allow_list(unsigned methods, char *out, size_t cap) {
  out[0] = '\0';
  static const struct {
    unsigned bit;
    const char *names;
  } order[] = {{ROUTE_GET, "GET, HEAD"}, {ROUTE_POST, "POST"}, {ROUTE_DELETE, "DELETE"}};
  size_t n = 0;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
    if (methods & order[i].bit)
      n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", order[i].names);
}

static enum MHD_Result method_not_allowed(struct MHD_Connection *c, server *s, conn_req *r, const char *allow) {
  api_error e;
  api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: method not allowed (allowed: %s)",
                r->log.method, r->log.path, allow);
  const char *hdr[] = {MHD_HTTP_HEADER_ALLOW, allow, NULL};
  return reply_error(c, s, r, &e, hdr);
}

enum MHD_Result router_dispatch(struct MHD_Connection *c, server *s, conn_req *r, const char *url, const char *method) {
  if (r->too_large) {
    api_error e;
    api_error_status(&e, QVL_ERR_TOO_LARGE, "request_too_large", NULL,
                     "the request body is larger than %lld MiB (max_body_mb)", (long long)s->cfg->max_body_mb);
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    if (!strncmp(url, "/v1/messages", 12)) /* Anthropic's error shape */
      return reply_json(c, s, r, e.http, messages_format.error_json(NULL, &e), close_hdr);
    return reply_error(c, s, r, &e, close_hdr);
  }
  if (r->close_after && strcmp(url, "/health") && strcmp(url, "/metrics"))
    return reply_errorf(c, s, r, QVL_ERR_BUSY, "server_busy", "%s",
                        "the server has no free connection (max_connections); only /health and /metrics are answered "
                        "now; retry after a few seconds");
  if (cors_is_preflight(s->cfg, c, method)) /* before the key check: a preflight carries no key */
    return endpoints_preflight(c, s, r);
  const route *found = NULL;
  for (size_t i = 0; i < N_ROUTES && !found; i++)
    if (route_matches(&routes[i], url))
      found = &routes[i];
  bool key_area = !strncmp(url, ROUTER_KEY_AREA, strlen(ROUTER_KEY_AREA));
  bool own_key = found && (found->flags & ROUTE_OWN_KEY);
  if ((key_area || (found && (found->flags & ROUTE_KEY))) && !own_key && !auth_key_ok(s, c)) {
    api_error e;
    api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                  "Incorrect or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
    return reply_error(c, s, r, &e, NULL);
  }
  unsigned m = method_bit(method);
  if (!found) {
    if (key_area)
      return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "not_found", "no such endpoint: %s", url);
    if (m != ROUTE_GET) {
      if (web_asset_find(url))
        return method_not_allowed(c, s, r, "GET, HEAD");
      return reply_errorf(c, s, r, QVL_ERR_NOT_FOUND, "not_found", "no such endpoint: %s", url);
    }
    return endpoints_asset(c, s, r, url);
  }
  unsigned allowed = 0;
  for (size_t i = 0; i < N_ROUTES; i++) {
    const route *rt = &routes[i];
    if (!same_path(rt, found))
      continue;
    if (rt->methods & m) {
      request_target t = {url, method, (rt->flags & ROUTE_PREFIX) ? url + strlen(rt->path) : url};
      return rt->handle(c, s, r, &t);
    }
    allowed |= rt->methods;
  }
  char allow[64];
  allow_list(allowed, allow, sizeof allow);
  return method_not_allowed(c, s, r, allow);
}
