/* OpenAI-style errors (see api_error.h). */
#include "server/openai/api_error.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/status.h"
#include "server/openai/json_print.h"

static void error_vset(api_error *e, int http, const char *type, const char *code, const char *param,
                       const char *fmt, va_list ap) {
  e->http = http;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void api_error_set(api_error *e, int http, const char *type, const char *code, const char *param, const char *fmt,
                   ...) {
  va_list ap;
  va_start(ap, fmt);
  error_vset(e, http, type, code, param, fmt, ap);
  va_end(ap);
}

void api_error_status(api_error *e, qvl_status s, const char *code, const char *param, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_vset(e, qvl_status_http(s), qvl_status_error_type(s), code ? code : qvl_status_error_code(s), param, fmt,
             ap);
  va_end(ap);
}

void api_error_from_status(api_error *e, qvl_status s, const char *message) {
  if (s == QVL_OK)
    s = QVL_ERR_INTERNAL; /* an error that says "ok" is a bug of its caller: still an error */
  const char *msg = message && *message ? message : qvl_status_text(s);
  /* the one status whose culprit is known: the prompt, i.e. the messages */
  api_error_status(e, s, NULL, s == QVL_ERR_CONTEXT_OVERFLOW ? "messages" : NULL, "%s", msg);
}

static cJSON *error_object(const api_error *e) {
  cJSON *err = cJSON_CreateObject();
  cJSON_AddStringToObject(err, "message", e->message);
  cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error");
  if (e->param[0])
    cJSON_AddStringToObject(err, "param", e->param);
  else
    cJSON_AddNullToObject(err, "param");
  if (e->code)
    cJSON_AddStringToObject(err, "code", e->code);
  else
    cJSON_AddNullToObject(err, "code");
  return err;
}

char *api_error_json(const api_error *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "error", error_object(e));
  return json_print_take(o);
}

char *api_error_inner_json(const api_error *e) {
  cJSON *o = error_object(e);
  return json_print_take(o);
}
