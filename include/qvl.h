/*
 * qvl — Qwen3-VL on CPUs. Public C API.
 *
 * Every fallible function returns a qvl_status. On failure, qvl_last_error() returns a
 * human-readable message for the calling thread (which file, which tensor or key, what was
 * expected and what was found). Library code never exits the process.
 *
 * Thread safety: qvl_last_error() is per thread; everything else is documented where declared.
 */
#ifndef QVL_H
#define QVL_H

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_VERSION "0.1.0"

/* X(name, http_status, error type, error code, short description): one list gives the enum, the
 * text and how a server reports the status on the wire (HTTP status, OpenAI error "type" and
 * "code"; NULL = a null code). A server may give a more specific code for one error. */
#define QVL_STATUS_LIST(X)                                                                           \
  X(OK, 200, NULL, NULL, "ok")                                                                       \
  X(ERR_INVALID_ARG, 400, "invalid_request_error", NULL, "invalid argument")                         \
  X(ERR_FORMAT, 400, "invalid_request_error", NULL, "malformed input")                               \
  X(ERR_UNSUPPORTED, 400, "invalid_request_error", NULL, "unsupported")                              \
  X(ERR_MISMATCH, 400, "invalid_request_error", NULL, "mismatch")                                    \
  X(ERR_CONTEXT_OVERFLOW, 400, "invalid_request_error", "context_length_exceeded", "context length exceeded") \
  X(ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large", "input too large")             \
  X(ERR_NOT_FOUND, 404, "invalid_request_error", "not_found", "not found")                           \
  X(ERR_IO, 500, "server_error", NULL, "I/O error")                                                  \
  X(ERR_NOMEM, 503, "server_error", "server_busy", "out of memory")                                  \
  X(ERR_BUSY, 503, "server_error", "server_busy", "busy")                                            \
  X(ERR_CANCELLED, 499, "server_error", "cancelled", "cancelled")                                    \
  X(ERR_TIMEOUT, 504, "server_error", "timeout", "timed out")                                        \
  X(ERR_INTERNAL, 500, "server_error", NULL, "internal error")

typedef enum qvl_status {
#define QVL_X_ENUM(name, http, type, code, text) QVL_##name,
  QVL_STATUS_LIST(QVL_X_ENUM)
#undef QVL_X_ENUM
  QVL_STATUS_COUNT
} qvl_status;

/* Short description of a status ("malformed input"). Never NULL. */
const char *qvl_status_text(qvl_status s);
/* HTTP status that a server should answer with for this status. */
int qvl_status_http(qvl_status s);
/* The detailed message of the last failure on this thread ("" if none). */
const char *qvl_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
