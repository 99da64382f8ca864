/*
 * An error as the OpenAI wire format reports it: the api_error value every parser of the server
 * fills, and its JSON bodies. The bottom of src/server/openai: it calls nothing else there.
 *
 * Thread safety: reentrant; no global state.
 */
#ifndef QVL_SERVER_OPENAI_API_ERROR_H
#define QVL_SERVER_OPENAI_API_ERROR_H

#include "qvl.h"

/* An error as OpenAI reports it: {"error":{"message","type","param","code"}} with an HTTP status. */
typedef struct api_error {
  int http;           /* 400, 401, 404, 405, 413, 500, 503, ... */
  const char *type;   /* "invalid_request_error", "authentication_error", "server_error", ... */
  const char *code;   /* NULL (null in JSON) or e.g. "model_not_found", "context_length_exceeded" */
  char param[64];     /* "" = null */
  char message[1024];
} api_error;

/* An error of a library status: its HTTP status, type and code come from the status list (qvl.h);
 * code (when not NULL) names the error more precisely ("invalid_value", "model_not_found"). */
void api_error_status(api_error *e, qvl_status s, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An HTTP-level error that no library status stands for (401, 405, 408, 429, 501). */
void api_error_set(api_error *e, int http, const char *type, const char *code, const char *param, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));
/* From a library status and message (the message of qvl_last_error() or an engine_result). */
void api_error_from_status(api_error *e, qvl_status s, const char *message);
/* The error body {"error":{...}}, malloc'd. */
char *api_error_json(const api_error *e);
/* Only the inner object {"message","type","param","code"} (job results), malloc'd. */
char *api_error_inner_json(const api_error *e);

#endif
