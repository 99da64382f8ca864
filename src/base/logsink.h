/*
 * Where log lines go and in what shape: stderr (fd 2) by default; logsink_open points fd 2 at a
 * file (opened for appending) and logsink_reopen opens that path again, which is what logrotate
 * expects after it renamed the file and sent SIGHUP. Everything written to stderr (log_msg, the
 * request log, messages of the program) follows.
 *
 * Format: lines are written in logfmt (key=value ...); with logsink_set_json(true) logsink_write
 * turns each logfmt line into one JSON object per line ({"key":"value",...}; numbers stay numbers).
 *
 * Thread safety: logsink_write may be called from any thread (one write(2) per line);
 * logsink_open / logsink_reopen / logsink_set_json from one controlling thread.
 */
#ifndef QVL_BASE_LOGSINK_H
#define QVL_BASE_LOGSINK_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl.h"

qvl_status logsink_open(const char *path);
/* Opens the path of logsink_open again (no-op without one). */
qvl_status logsink_reopen(void);
void logsink_set_json(bool json);
bool logsink_json(void);
/* Writes one logfmt line (with or without its '\n') in the configured format. */
void logsink_write(const char *line, size_t len);
/* The JSON form of one logfmt line, into out (cap bytes, always terminated, '\n' at the end). */
size_t logsink_logfmt_to_json(const char *line, size_t len, char *out, size_t cap);

#endif
