/* Timed waits on condition variables, one way everywhere: every timed condvar runs on the
 * monotonic clock of time_now_s (base/timing.h), so that setting the wall clock neither cuts a
 * wait short nor stretches it, and a deadline is a plain time_now_s() value.
 *
 * Thread safety: as pthread_cond_*. */
#ifndef QVL_BASE_COND_H
#define QVL_BASE_COND_H

#include <pthread.h>

/* pthread_cond_init on CLOCK_MONOTONIC (the clock the waits below assume). */
void cond_init_monotonic(pthread_cond_t *cv);
/* Waits (mu held) until cv is signalled or time_now_s() reaches deadline_s. Like every condvar
 * wait it may return early: callers re-check their condition in a loop. */
void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline_s);
/* The same with a deadline ms milliseconds from now (slices of a polling wait). */
void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);

#endif
