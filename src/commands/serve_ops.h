/* Process settings of `qvl serve` (CPU affinity, priority, log file and format), applied once at
 * start, before any thread exists, so every thread inherits them. */
#ifndef QVL_COMMANDS_SERVE_OPS_H
#define QVL_COMMANDS_SERVE_OPS_H

#include "server/config/settings.h"

/* 0, or 2 with a message on stderr. */
int serve_apply_process_settings(const server_config *c);

#endif
