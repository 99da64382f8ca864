#include "answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"

int answer_engine_open(const char *model, const char *mmproj, const qvl_model_params *mp, int64_t n_ctx, bool caches,
                       qvl_model **m, qvl_engine **e) {
  *e = NULL;
  qvl_status s = qvl_model_load(model, mmproj, mp, m);
  if (s != QVL_OK)
    return report_error("loading the model", s);
  qvl_engine_params ep;
  qvl_engine_params_default(&ep);
  ep.max_batch_size = 1;
  ep.max_wait_ms = 0;
  ep.queue_capacity = 1;
  if (!caches)
    ep.image_cache_mb = ep.prefix_cache_mb = 0;
  ep.n_ctx = n_ctx;
  s = qvl_engine_start(*m, &ep, e);
  if (s != QVL_OK) {
    qvl_model_free(*m);
    *m = NULL;
    return report_error("starting the engine", s);
  }
  return 0;
}

void answer_init(answer *a) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
}

void answer_free(answer *a) {
  free(a->text);
  free(a->reasoning);
  free(a->ids);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
}

void answer_on_done(void *user, const qvl_result *r) {
  answer *a = user;
  pthread_mutex_lock(&a->mu);
  a->status = qvl_result_status(r);
  snprintf(a->error, sizeof a->error, "%s", qvl_result_error(r));
  a->finish = qvl_result_finish(r);
  size_t rlen;
  const char *reasoning = qvl_result_reasoning(r, &rlen);
  if ((a->reasoning = malloc(rlen + 1))) {
    memcpy(a->reasoning, reasoning, rlen);
    a->reasoning[rlen] = '\0';
  }
  const char *text = qvl_result_text(r, &a->text_len);
  if ((a->text = malloc(a->text_len + 1))) {
    memcpy(a->text, text, a->text_len);
    a->text[a->text_len] = '\0';
  } else {
    a->text_len = 0;
  }
  const int32_t *ids = qvl_result_ids(r, &a->n_ids);
  if (a->n_ids > 0 && (a->ids = malloc((size_t)a->n_ids * sizeof *ids)))
    memcpy(a->ids, ids, (size_t)a->n_ids * sizeof *ids);
  else
    a->n_ids = 0;
  qvl_result_usage(r, &a->usage);
  qvl_result_timings(r, &a->t);
  a->done = true;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

void answer_wait(answer *a, qvl_engine *e, uint64_t id, atomic_bool *interrupt) {
  bool cancelled = false;
  pthread_mutex_lock(&a->mu);
  while (!a->done) {
    if (!interrupt) {
      pthread_cond_wait(&a->cv, &a->mu);
      continue;
    }
    if (!cancelled && atomic_exchange(interrupt, false)) {
      cancelled = true;
      pthread_mutex_unlock(&a->mu);
      qvl_engine_cancel(e, id);
      pthread_mutex_lock(&a->mu);
      continue;
    }
    /* A signal does not wake a condition variable: look at the flag every 20 ms. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
  }
  pthread_mutex_unlock(&a->mu);
}
