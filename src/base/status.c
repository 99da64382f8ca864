#include "base/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ERROR_CAP 1024
static _Thread_local char error_message[ERROR_CAP];

static const char *const status_texts[] = {
#define X(name, http, type, code, text) text,
    QVL_STATUS_LIST(X)
#undef X
};
static const int status_http[] = {
#define X(name, http, type, code, text) http,
    QVL_STATUS_LIST(X)
#undef X
};
static const char *const status_types[] = {
#define X(name, http, type, code, text) type,
    QVL_STATUS_LIST(X)
#undef X
};
static const char *const status_codes[] = {
#define X(name, http, type, code, text) code,
    QVL_STATUS_LIST(X)
#undef X
};

static bool known(qvl_status s) { return (int)s >= 0 && s < QVL_STATUS_COUNT; }

const char *qvl_status_text(qvl_status s) {
  if (!known(s))
    return "unknown status";
  return status_texts[s];
}

int qvl_status_http(qvl_status s) {
  if (!known(s))
    return status_http[QVL_ERR_INTERNAL];
  return status_http[s];
}

const char *qvl_status_error_type(qvl_status s) { return status_types[known(s) ? s : QVL_ERR_INTERNAL]; }

const char *qvl_status_error_code(qvl_status s) { return known(s) ? status_codes[s] : NULL; }

const char *qvl_last_error(void) { return error_message; }

void qvl_error_clear(void) { error_message[0] = 0; }

qvl_status qvl_errorf(qvl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
  return s;
}

qvl_status qvl_error_prefix(qvl_status s, const char *fmt, ...) {
  char old[ERROR_CAP];
  memcpy(old, error_message, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof error_message)
    snprintf(error_message + n, sizeof error_message - (size_t)n, "%s", old);
  return s;
}
