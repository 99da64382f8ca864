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

/* X(name, http_status, short description) — one list gives the enum, the text and the HTTP code. */
#define QVL_STATUS_LIST(X)                                                   \
  X(OK, 200, "ok")                                                           \
  X(ERR_INVALID_ARG, 400, "invalid argument")                                \
  X(ERR_FORMAT, 400, "malformed input")                                      \
  X(ERR_UNSUPPORTED, 400, "unsupported")                                     \
  X(ERR_MISMATCH, 400, "mismatch")                                           \
  X(ERR_CONTEXT_OVERFLOW, 400, "context length exceeded")                    \
  X(ERR_TOO_LARGE, 413, "input too large")                                   \
  X(ERR_NOT_FOUND, 404, "not found")                                         \
  X(ERR_IO, 500, "I/O error")                                                \
  X(ERR_NOMEM, 503, "out of memory")                                         \
  X(ERR_BUSY, 503, "busy")                                                   \
  X(ERR_CANCELLED, 499, "cancelled")                                         \
  X(ERR_TIMEOUT, 504, "timed out")                                           \
  X(ERR_INTERNAL, 500, "internal error")

typedef enum qvl_status {
#define QVL_X_ENUM(name, http, text) QVL_##name,
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
