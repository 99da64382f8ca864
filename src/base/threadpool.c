#include "base/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cpulist.h"
#include "base/log.h"
#include "base/status.h"

/*
 * Waiting: a decode step issues a few hundred short loops and waking a sleeping thread costs tens
 * of microseconds, so a waiting thread (a worker waiting for the next loop, the caller waiting for
 * the workers) first spins. How long is adaptive, per waiting thread: the budget doubles (up to
 * SPIN_MAX_NS) each time the spin sees the event, and halves (down to SPIN_MIN_NS) each time it
 * runs out and the thread sleeps. Back-to-back loops keep the full budget; a pool whose loops come
 * with gaps (or whose caller is descheduled on an oversubscribed machine: wall time runs while it
 * does not) soon parks at once instead of burning a core per worker. While spinning the thread
 * yields now and then, so on a busy core the thread it waits for gets to run.
 */
#define SPIN_MAX_NS 200000
#define SPIN_MIN_NS 1000
#define SPIN_CHECK 64      /* spins between clock reads */
#define SPIN_YIELD 1024    /* spins between sched_yield calls */

typedef struct worker {
  threadpool *pool;
  pthread_t tid;
  int index;
  int64_t spin_ns; /* this worker's spin budget (see SPIN_MAX_NS) */
} worker;

struct threadpool {
  int n_threads; /* including the caller */
  worker *workers; /* [n_threads - 1] */

  /* The current loop. Written by the caller before gen is bumped (release), read by workers
   * after they observe the new gen (acquire). */
  threadpool_fn fn;
  void *arg;
  int64_t n;
  int64_t chunk;
  _Atomic int64_t next; /* dynamic chunking: next index to hand out */

  _Atomic uint64_t gen;   /* bumped once per loop */
  _Atomic int pending;    /* workers that have not finished the current loop */
  _Atomic bool stop;

  pthread_mutex_t lock;   /* protects sleeping on the condition variables */
  pthread_cond_t wake;    /* workers sleep here waiting for gen to change */
  pthread_cond_t done;    /* the caller sleeps here waiting for pending == 0 */
  pthread_mutex_t busy;   /* held by the thread running a loop on this pool */
  int64_t caller_spin_ns; /* the caller's spin budget (under busy) */
};

static _Thread_local threadpool *tls_inside; /* pool whose loop this thread is running */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("pause");
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* What a spinning thread waits for: ready(p, arg) becomes true. */
typedef bool (*spin_ready)(threadpool *p, uint64_t arg);

static bool gen_moved(threadpool *p, uint64_t seen) {
  return atomic_load_explicit(&p->gen, memory_order_acquire) != seen;
}

static bool workers_done(threadpool *p, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

/* Spins until ready or the budget runs out (then the caller sleeps); adapts the budget. */
static bool spin_until(threadpool *p, spin_ready ready, uint64_t arg, int64_t *budget_ns) {
  int64_t t0 = 0;
  for (unsigned k = 1;; k++) {
    if (ready(p, arg)) {
      *budget_ns = *budget_ns * 2 < SPIN_MAX_NS ? *budget_ns * 2 : SPIN_MAX_NS;
      return true;
    }
    cpu_relax();
    if (k % SPIN_CHECK)
      continue;
    int64_t t = now_ns();
    if (!t0)
      t0 = t;
    else if (t - t0 >= *budget_ns) {
      *budget_ns = *budget_ns / 2 > SPIN_MIN_NS ? *budget_ns / 2 : SPIN_MIN_NS;
      return false;
    }
    if (k % SPIN_YIELD == 0)
      sched_yield();
  }
}

static void run_range(threadpool_fn fn, void *arg, int64_t a, int64_t b, int thread) {
  for (int64_t i = a; i < b; i++)
    fn(arg, i, thread);
}

/* The share of the current loop done by thread t. */
static void run_share(threadpool *p, int t) {
  threadpool_fn fn = p->fn;
  void *arg = p->arg;
  int64_t n = p->n;
  if (p->chunk <= 0) {
    int64_t T = p->n_threads;
    run_range(fn, arg, n * t / T, n * (t + 1) / T, t);
    return;
  }
  int64_t chunk = p->chunk;
  for (;;) {
    int64_t a = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
    if (a >= n)
      break;
    run_range(fn, arg, a, a + chunk < n ? a + chunk : n, t);
  }
}

static void *worker_main(void *varg) {
  worker *w = varg;
  threadpool *p = w->pool;
  uint64_t seen = 0;
  tls_inside = p;
  for (;;) {
    uint64_t g;
    if (spin_until(p, gen_moved, seen, &w->spin_ns)) {
      g = atomic_load_explicit(&p->gen, memory_order_acquire);
    } else {
      pthread_mutex_lock(&p->lock);
      while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
             !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->lock);
      pthread_mutex_unlock(&p->lock);
    }
    if (atomic_load(&p->stop))
      break;
    seen = g;
    run_share(p, w->index);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->lock);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->lock);
    }
  }
  return NULL;
}

qvl_status threadpool_init(int n_threads, threadpool **out) {
  *out = NULL;
  if (n_threads < 1 || n_threads > 1024)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "threadpool: %d threads requested, expected 1..1024",
                      n_threads);
  threadpool *p = calloc(1, sizeof *p);
  if (!p)
    return qvl_errorf(QVL_ERR_NOMEM, "threadpool: out of memory");
  p->n_threads = n_threads;
  p->caller_spin_ns = SPIN_MAX_NS;
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_init(&p->busy, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  if (n_threads > 1) {
    p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
    if (!p->workers) {
      threadpool_free(p);
      return qvl_errorf(QVL_ERR_NOMEM, "threadpool: out of memory");
    }
  }
  for (int i = 0; i < n_threads - 1; i++) {
    worker *w = &p->workers[i];
    w->pool = p;
    w->index = i + 1;
    w->spin_ns = SPIN_MAX_NS;
    int rc = pthread_create(&w->tid, NULL, worker_main, w);
    if (rc != 0) {
      p->n_threads = i + 1; /* only join the ones that started */
      threadpool_free(p);
      return qvl_errorf(QVL_ERR_INTERNAL, "threadpool: pthread_create failed for worker %d: %s",
                        i + 1, strerror(rc));
    }
    /* --cpu-affinity: worker t on the t-th CPU of the list (the caller, thread 0, keeps the first
     * one free for itself), so workers do not migrate between cores mid-loop. */
    int cpu = cpulist_pin_cpu(i + 1);
    if (cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(w->tid, sizeof one, &one);
    }
  }
  *out = p;
  return QVL_OK;
}

void threadpool_free(threadpool *p) {
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < p->n_threads - 1; i++)
    pthread_join(p->workers[i].tid, NULL);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->busy);
  free(p->workers);
  free(p);
}

void threadpool_for(threadpool *p, int64_t n, int64_t chunk, threadpool_fn fn, void *arg) {
  if (n <= 0)
    return;
  /* Serial: no pool, a single thread, a single index, nested inside a loop of this pool, or the
   * pool busy with another caller's loop. */
  if (!p || p->n_threads == 1 || n == 1 || tls_inside == p || pthread_mutex_trylock(&p->busy)) {
    run_range(fn, arg, 0, n, 0);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->chunk = chunk;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
  pthread_mutex_lock(&p->lock);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);

  tls_inside = p;
  run_share(p, 0);
  tls_inside = NULL;

  if (!spin_until(p, workers_done, 0, &p->caller_spin_ns)) {
    pthread_mutex_lock(&p->lock);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
      pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
  }
  pthread_mutex_unlock(&p->busy);
}

/* Counts distinct thread_siblings_list values over the CPUs this process may run on. */
static int cores_from_sysfs(const cpu_set_t *allowed) {
  enum { MAX_CORES = 1024 };
  static char seen[MAX_CORES][64];
  int n_seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (allowed && !CPU_ISSET(cpu, allowed))
      continue;
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    char line[64] = {0};
    if (!fgets(line, sizeof line, f)) {
      fclose(f);
      continue;
    }
    fclose(f);
    line[strcspn(line, "\n")] = 0;
    bool dup = false;
    for (int i = 0; i < n_seen && !dup; i++)
      dup = !strcmp(seen[i], line);
    if (!dup && n_seen < MAX_CORES)
      memcpy(seen[n_seen++], line, sizeof line);
  }
  return n_seen;
}

/* Distinct (physical id, core id) pairs in /proc/cpuinfo. */
static int cores_from_cpuinfo(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return 0;
  enum { MAX_CORES = 1024 };
  static long pairs[MAX_CORES][2];
  int n = 0;
  long phys = 0, core = -1;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "physical id", 11))
      phys = strtol(strchr(line, ':') ? strchr(line, ':') + 1 : "0", NULL, 10);
    else if (!strncmp(line, "core id", 7))
      core = strtol(strchr(line, ':') ? strchr(line, ':') + 1 : "0", NULL, 10);
    else if (line[0] == '\n' && core >= 0) {
      bool dup = false;
      for (int i = 0; i < n && !dup; i++)
        dup = pairs[i][0] == phys && pairs[i][1] == core;
      if (!dup && n < MAX_CORES) {
        pairs[n][0] = phys;
        pairs[n][1] = core;
        n++;
      }
      core = -1;
    }
  }
  fclose(f);
  return n;
}

int threadpool_physical_cores(void) {
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
  static int cached;
  pthread_mutex_lock(&once);
  if (!cached) {
    cpu_set_t set;
    bool have_set = sched_getaffinity(0, sizeof set, &set) == 0;
    int n = cores_from_sysfs(have_set ? &set : NULL);
    if (n <= 0)
      n = cores_from_cpuinfo();
    if (n <= 0)
      n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (have_set && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n)
      n = CPU_COUNT(&set);
    cached = n > 0 ? n : 1;
    log_debug("threadpool: %d physical cores", cached);
  }
  int n = cached;
  pthread_mutex_unlock(&once);
  return n;
}
