/* Monotonic wall-clock time, and process CPU time. */
#ifndef QVL_BASE_TIMING_H
#define QVL_BASE_TIMING_H

#include <stdint.h>
#include <time.h>

static inline double time_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the whole process (every thread), for figures that a loaded machine does not skew. */
static inline double time_process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
