/* One request at a time, as qvl run and qvl chat work: the engine of one they start, and a request's
 * answer as their main thread sees it (a copy of the result taken on the engine thread: a
 * qvl_result lives only during on_done) with the wait for it. */
#ifndef QVL_APPS_ANSWER_H
#define QVL_APPS_ANSWER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "qvl.h"

typedef struct answer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  qvl_status status;
  char error[512];
  qvl_finish finish;
  char *text;              /* the whole answer, as far as it got (NUL-terminated; NULL without memory) */
  size_t text_len;
  char *reasoning;         /* a reasoning model's reasoning (NUL-terminated; NULL without memory) */
  int32_t *ids;            /* [n_ids] generated ids */
  int64_t n_ids;
  qvl_usage usage;
  qvl_timings t;
} answer;

/* Loads the model and starts an engine that runs one request at a time with a context of n_ctx
 * tokens; caches false turns the image and prefix caches off (a single request reuses nothing).
 * Returns 0, or the exit code after printing what failed. */
int answer_engine_open(const char *model, const char *mmproj, const qvl_model_params *mp, int64_t n_ctx, bool caches,
                       qvl_model **m, qvl_engine **e);

void answer_init(answer *a);
void answer_free(answer *a);
/* The qvl_on_done_fn to give qvl_request_set_callbacks with user = the answer. */
void answer_on_done(void *user, const qvl_result *r);
/* Waits until the answer is done. With interrupt (may be NULL), a true there (set by a signal
 * handler) cancels the request once and goes on waiting for its end. */
void answer_wait(answer *a, qvl_engine *e, uint64_t id, atomic_bool *interrupt);

#endif
