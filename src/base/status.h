/* Status helpers for library code: set the thread's error message and return the status. */
#ifndef QVL_BASE_STATUS_H
#define QVL_BASE_STATUS_H

#include "qvl.h"

/* Formats the detail message for this thread and returns s, so callers can write
 *   return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s' has %d dims, expected 2", path, name, n);
 */
qvl_status qvl_errorf(qvl_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with more context ("loading model: " + old message). */
qvl_status qvl_error_prefix(qvl_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The OpenAI error "type" of a status as a server reports it ("invalid_request_error",
 * "server_error"; NULL for QVL_OK) and its "code" (NULL: none), from the status list in qvl.h. */
const char *qvl_status_error_type(qvl_status s);
const char *qvl_status_error_code(qvl_status s);

/* Clears the message of this thread. */
void qvl_error_clear(void);

#define QVL_TRY(expr)                  \
  do {                                 \
    qvl_status qvl_try_s_ = (expr);    \
    if (qvl_try_s_ != QVL_OK)          \
      return qvl_try_s_;               \
  } while (0)

#endif
