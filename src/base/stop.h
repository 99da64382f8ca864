/*
 * A stop check for long work done on behalf of one request (image fetch/decode, tokenizing, waiting
 * for a budget): the worker polls it between steps and gives up with the status it returns, so a
 * request whose client left, whose deadline passed or whose server is shutting down stops costing
 * CPU and memory at once.
 */
#ifndef QVL_BASE_STOP_H
#define QVL_BASE_STOP_H

#include "qvl.h"

/* QVL_OK: go on. Anything else: stop now and return that status (the function has set the
 * message with qvl_errorf). */
typedef qvl_status (*qvl_stop_fn)(void *user);

static inline qvl_status qvl_stop_poll(qvl_stop_fn fn, void *user) { return fn ? fn(user) : QVL_OK; }

#endif
