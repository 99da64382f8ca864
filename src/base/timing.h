/* Monotonic wall-clock time. */
#ifndef QVL_BASE_TIMING_H
#define QVL_BASE_TIMING_H

#include <stdint.h>
#include <time.h>

static inline double time_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
