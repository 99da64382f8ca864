/*
 * A fixed pool of pthread workers for data-parallel loops. The calling thread takes part in every
 * loop, so a pool of n threads starts n - 1 workers. A loop allocates nothing: the job lives in the
 * pool object and workers pick it up by watching a generation counter (a spin whose length adapts
 * to how soon the next loop came lately, then a condition variable: idle workers, and workers of an
 * oversubscribed machine, park instead of burning a shared core).
 *
 * Thread safety: threadpool_for may be called from any thread. Only one loop runs on the pool at a
 * time; a call made while another loop is running (from another thread, or from inside a loop
 * body) runs its loop serially on the calling thread instead of waiting, so nesting cannot
 * deadlock.
 */
#ifndef QVL_BASE_THREADPOOL_H
#define QVL_BASE_THREADPOOL_H

#include <stdint.h>

#include "qvl.h"

typedef struct threadpool threadpool;

/* Body of a loop: called once per index i; thread is the index (0 .. n_threads-1) of the thread
 * running it (0 = the caller), for per-thread scratch memory. */
typedef void (*threadpool_fn)(void *arg, int64_t i, int thread);

/* n_threads >= 1 (the caller included). */
qvl_status threadpool_init(int n_threads, threadpool **out);
/* Stops and joins the workers. NULL is a no-op. No loop may be running. */
void threadpool_free(threadpool *p);

/*
 * Runs fn(arg, i, thread) for every i in [0, n) and returns when all calls are done.
 * chunk <= 0: static partition, thread t of T gets the contiguous range [n*t/T, n*(t+1)/T), so
 *   which thread computes which index is fixed for a given pool size (for work of equal cost).
 * chunk > 0: dynamic, threads take chunks of `chunk` consecutive indices from an atomic counter
 *   (for work of unequal cost).
 * Either way each index is run exactly once, in increasing order within a thread's range.
 * A loop of one index, a loop nested in a loop of the same pool, and a loop whose pool is busy
 * with another caller's run serially on the calling thread, as thread 0.
 */
void threadpool_for(threadpool *p, int64_t n, int64_t chunk, threadpool_fn fn, void *arg);

/* Number of physical cores available to this process (sysfs topology, then /proc/cpuinfo,
 * then sysconf), at least 1. */
int threadpool_physical_cores(void);

#endif
