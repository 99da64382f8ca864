#include "base/cond.h"

#include <time.h>

#include "base/timing.h"

void cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline_s) {
  struct timespec ts;
  ts.tv_sec = (time_t)deadline_s;
  ts.tv_nsec = (long)((deadline_s - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  } else if (ts.tv_nsec < 0) {
    ts.tv_nsec = 0;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
  cond_wait_until(cv, mu, time_now_s() + ms * 1e-3);
}
