/*
 * GET /metrics: the engine's statistics and the HTTP layer's counters in the Prometheus text
 * exposition format (version 0.0.4). Thread safety: reentrant.
 */
#ifndef QVL_SERVER_HTTP_METRICS_H
#define QVL_SERVER_HTTP_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/engine.h"
#include "qvl.h"

typedef struct metrics_server {
  bool loaded;                 /* the model is loaded and the engine runs */
  double uptime_s;
  uint64_t http_responses[6];  /* by status class: [1] 1xx .. [5] 5xx */
  uint64_t rejected_busy;      /* 503 answers because the queue was full */
  uint64_t disconnects;        /* requests cancelled because the client went away */
  uint64_t slow_readers;       /* streams cancelled because the client stopped reading (--write-timeout-s) */
  int64_t jobs_stored, jobs_pending;
  int64_t rss_bytes;           /* resident memory (metrics_rss_bytes) */
  int64_t rss_peak_bytes;      /* its peak since the start (metrics_rss_peak_bytes; 0: not shown) */
} metrics_server;

/* Appends the exposition text. st is NULL before the engine runs (engine metrics then read 0). */
qvl_status metrics_format(buf *out, const engine_stats *st, const metrics_server *s);
/* Peak resident set size (VmHWM of /proc/self/status); -1 when unavailable. */
int64_t metrics_rss_peak_bytes(void);
/* Resident set size from /proc/self/statm; -1 when unavailable. */
int64_t metrics_rss_bytes(void);

#endif
