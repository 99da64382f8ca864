/*
 * The access log: one logfmt line per request (JSON with --log-format json, base/logsink.h),
 * written once the response has ended, whichever file ends it. Calls nothing else in src/server.
 */
#ifndef QVL_SERVER_HTTP_REQUEST_LOG_H
#define QVL_SERVER_HTTP_REQUEST_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "server/jobs/jobs.h"
#include "server/openai/result.h"

/* What one log line says about a request. */
typedef struct req_log {
  char id[JOBS_ID_CAP]; /* a job id is the longest */
  char method[12];
  char path[128];
  int status;
  double t0;
  bool chat, stream;
  const api_result *res; /* NULL unless a chat request finished */
} req_log;

/* Writes the line with a single write(2), so lines never interleave. */
void request_log_write(const req_log *l);
/* The current UTC time as 2006-01-02T15:04:05.000Z into out. */
void request_log_timestamp(char *out, size_t cap);

#endif
