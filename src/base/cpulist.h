/*
 * CPU lists as Linux writes them ("0-3,8", /proc/PID/status Cpus_allowed_list, taskset -c): parse
 * into a cpu_set_t, and the process-wide affinity that worker threads pin themselves to.
 *
 * Thread safety: cpulist_parse is reentrant; cpulist_set_pinning must be called before the
 * threads that read it (threadpool workers) are started.
 */
#ifndef QVL_BASE_CPULIST_H
#define QVL_BASE_CPULIST_H

#include <sched.h>
#include <stdbool.h>

#include "qvl.h"

/* "0-3,8" -> set (and the CPUs in ascending order into cpus[max_cpus], count in *n when cpus is not
 * NULL). Errors name the offending part. Empty lists, reversed ranges, CPUs >= CPU_SETSIZE fail. */
qvl_status cpulist_parse(const char *s, cpu_set_t *set, int *cpus, int max_cpus, int *n);

/* Pinning: when set, threadpool worker t runs on cpus[t % n] (one per core), the calling thread
 * keeps the whole set. NULL / 0 turns it off. The list is copied. */
void cpulist_set_pinning(const int *cpus, int n);
/* The CPU thread t should be pinned to, or -1 when pinning is off. */
int cpulist_pin_cpu(int t);

#endif
