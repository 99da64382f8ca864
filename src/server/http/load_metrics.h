/* /metrics lines of the hostile-load guards: connections (conn_guard.h) and the image decoding
 * budget (image/budget.h), appended after metrics_format's. Thread safety: reentrant. */
#ifndef QVL_SERVER_HTTP_LOAD_METRICS_H
#define QVL_SERVER_HTTP_LOAD_METRICS_H

#include "base/buf.h"
#include "image/budget.h"
#include "qvl.h"
#include "server/http/conn_guard.h"

qvl_status load_metrics_format(buf *out, const conn_guard_stats *c, const image_budget_stats *im);

#endif
