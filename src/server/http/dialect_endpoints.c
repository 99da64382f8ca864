/* The other APIs' endpoints (see dialect_endpoints.h). */
#include "server/http/dialect_endpoints.h"

#include <string.h>
#include <time.h>

#include "server/dialects/completions.h"
#include "server/dialects/messages.h"
#include "server/dialects/ollama.h"
#include "server/dialects/responses.h"
#include "server/http/auth.h"
#include "server/http/chat_endpoint.h"
#include "server/http/reply.h"

static void fill_compat_ctx(server *s, compat_ctx *x) {
  memset(x, 0, sizeof *x);
  pthread_rwlock_rdlock(&s->be_lock);
  x->model_id = s->ready && s->n_model_ids ? s->model_ids[0] : NULL; /* set once, kept until server_stop */
  x->sampling = s->ready ? s->be.sampling : NULL;
  x->reasoning_model = s->ready && s->be.model && s->be.model->thinking;
  pthread_rwlock_unlock(&s->be_lock);
  x->created = (int64_t)time(NULL);
  x->started = s->unix_start;
  x->responses = s->responses;
  x->stream_usage = s->cfg->stream_usage;
}

/* A POST of another API: translated into a chat request and served by chat_endpoint_serve. */
static enum MHD_Result dialect_serve(struct MHD_Connection *c, server *s, conn_req *r, compat_translate_fn translate) {
  compat_ctx x;
  fill_compat_ctx(s, &x);
  compat_request cr;
  api_error e;
  enum MHD_Result ret;
  if (!translate(r->body.data ? r->body.data : "", r->body.len, &x, &cr, &e)) {
    ret = reply_error_as(c, s, r, &e, cr.fmt, cr.state);
  } else if (cr.reply_body) { /* answered without generating (Ollama's empty "load the model" prompt) */
    ret = reply_json(c, s, r, cr.reply_status, cr.reply_body, NULL);
    cr.reply_body = NULL;
  } else {
    ret = chat_endpoint_serve(c, s, r, false, &cr);
  }
  compat_request_free(&cr);
  return ret;
}

enum MHD_Result dialect_endpoints_responses(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  return dialect_serve(c, s, r, responses_translate);
}

enum MHD_Result dialect_endpoints_completions(struct MHD_Connection *c, server *s, conn_req *r,
                                              const request_target *t) {
  (void)t;
  return dialect_serve(c, s, r, completions_translate);
}

/* Ollama's API under /api/ (dialects/ollama.h). */
enum MHD_Result dialect_endpoints_ollama(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  const char *url = t->url, *method = t->method;
  api_error e;
  if (!auth_key_ok(s, c)) {
    api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                  "Incorrect or missing API key: send 'Authorization: Bearer KEY'");
    return reply_error_as(c, s, r, &e, &ollama_format, NULL);
  }
  bool post = !strcmp(method, "POST");
  if (post && !strcmp(url, "/api/chat"))
    return dialect_serve(c, s, r, ollama_chat_translate);
  if (post && !strcmp(url, "/api/generate"))
    return dialect_serve(c, s, r, ollama_generate_translate);
  compat_ctx x;
  fill_compat_ctx(s, &x);
  int status = qvl_status_http(QVL_ERR_INTERNAL);
  const char *allow = NULL;
  char *json = ollama_info(url, method, r->body.data ? r->body.data : "", r->body.len, &x, &status, &allow);
  const char *hdr[] = {MHD_HTTP_HEADER_ALLOW, allow, NULL};
  return reply_json(c, s, r, status, json, allow ? hdr : NULL);
}

/* Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens, with its key check (x-api-key
 * or Bearer) and its error shape for everything under /v1/messages. */
enum MHD_Result dialect_endpoints_messages(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  const char *url = t->url;
  api_error e;
  if (!auth_key_ok(s, c)) {
    api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                  "Incorrect or missing API key: send 'x-api-key: KEY' or 'Authorization: Bearer KEY'");
    return reply_error_as(c, s, r, &e, &messages_format, NULL);
  }
  compat_translate_fn fn = !strcmp(url, "/v1/messages")                ? messages_translate
                           : !strcmp(url, "/v1/messages/count_tokens") ? messages_count_translate
                                                                       : NULL;
  if (fn && !strcmp(t->method, "POST"))
    return dialect_serve(c, s, r, fn);
  if (fn)
    api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                  "%s %s: method not allowed (allowed: POST)", r->log.method, r->log.path);
  else
    api_error_status(&e, QVL_ERR_NOT_FOUND, "not_found", NULL, "no such endpoint: %s", r->log.path);
  return reply_error_as(c, s, r, &e, &messages_format, NULL);
}
