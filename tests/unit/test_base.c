/* Unit tests of src/base: safe relative paths, file images, the intrusive LRU list and the thread
 * pool's contract (every index exactly once, the static partition, nesting runs serially). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cond.h"
#include "base/lru.h"
#include "base/mapfile.h"
#include "base/relpath.h"
#include "base/threadpool.h"
#include "base/timing.h"
#include "test.h"

static void test_relpath(void) {
  const char *ok[] = {"a", "a/b", "model-Q8_0.gguf", "dir/.hidden", "a/..b/c", "x..", "...", "refs/pr/1"};
  const char *bad[] = {"", "/etc/passwd", "..", ".", "a/../b", "a/./b", "a//b", "a/", "../a", "a/..",
                       "a\\b", "a\nb", "\x01", "a/\x1f"};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
    CHECK(relpath_is_safe(ok[i]), "'%s' is safe", ok[i]);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(!relpath_is_safe(bad[i]), "'%s' is refused", bad[i]);
  char longp[1100];
  memset(longp, 'a', sizeof longp - 1);
  longp[sizeof longp - 1] = 0;
  CHECK(!relpath_is_safe(longp), "a path over 1024 bytes is refused");
  longp[1024] = 0;
  CHECK(relpath_is_safe(longp), "a path of exactly 1024 bytes is fine");
}

static void test_file_image(void) {
  char path[] = "/tmp/qvl_test_base_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "temp file");
  CHECK(write(fd, "GGUFdata", 8) == 8, "write");
  close(fd);
  file_image im;
  CHECK(file_image_map(path, 4, "GGUF", &im) == QVL_OK, "map");
  CHECK(im.size == 8 && im.map && !memcmp(im.data, "GGUFdata", 8) && !strcmp(im.label, path), "mapped bytes and label");
  file_image_close(&im);
  CHECK(!im.map && !im.label && !im.data, "close zeroes the image");
  file_image_close(&im); /* twice is harmless */
  CHECK(file_image_map(path, 9, "GGUF", &im) == QVL_ERR_FORMAT, "shorter than min_size: not a GGUF file");
  CHECK(strstr(qvl_last_error(), "not a GGUF file") != NULL, "message: %s", qvl_last_error());
  unlink(path);
  CHECK(file_image_map(path, 4, "GGUF", &im) == QVL_ERR_NOT_FOUND, "missing file");
  CHECK(file_image_map("/tmp", 4, "GGUF", &im) == QVL_ERR_IO, "a directory");
  static const char mem[] = "xyz";
  CHECK(file_image_memory(mem, 3, NULL, &im) == QVL_OK && im.data == (const uint8_t *)mem && !im.map &&
            !strcmp(im.label, "(memory)"),
        "memory image under the default label");
  file_image_close(&im);
  CHECK(file_image_memory(NULL, 0, "empty", &im) == QVL_OK && im.size == 0 && im.data, "empty memory image");
  file_image_close(&im);
  CHECK(file_image_memory(NULL, 5, "bad", &im) == QVL_ERR_INVALID_ARG, "NULL data with a size");
}

typedef struct entry {
  lru_node node; /* first member: a node pointer converts back to its entry */
  int id;
} entry;

/* The list's ids front to back, and checks that the back links agree. */
static int order(const lru_list *l, int *ids, int cap) {
  int n = 0;
  const lru_node *prev = NULL;
  for (const lru_node *x = l->head; x && n < cap; x = x->next) {
    CHECK(x->prev == prev, "back link of %d", ((const entry *)x)->id);
    ids[n++] = ((const entry *)x)->id;
    prev = x;
  }
  CHECK(l->tail == prev, "tail is the last node");
  return n;
}

static void test_lru(void) {
  entry e[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
  lru_list l = {0};
  int ids[8], n;
  for (int i = 0; i < 3; i++)
    lru_push_front(&l, &e[i].node);
  n = order(&l, ids, 8);
  CHECK(n == 3 && ids[0] == 2 && ids[1] == 1 && ids[2] == 0, "push_front: most recent first");
  lru_unlink(&l, &e[1].node);
  n = order(&l, ids, 8);
  CHECK(n == 2 && ids[0] == 2 && ids[1] == 0 && !e[1].node.prev && !e[1].node.next, "unlink from the middle");
  lru_unlink(&l, &e[0].node); /* the tail */
  lru_unlink(&l, &e[2].node); /* the head, now alone */
  CHECK(!l.head && !l.tail, "empty after unlinking everything");
  lru_insert_after(&l, NULL, &e[0].node);
  lru_insert_after(&l, &e[0].node, &e[1].node);
  lru_insert_after(&l, &e[0].node, &e[2].node);
  lru_insert_after(&l, NULL, &e[3].node);
  n = order(&l, ids, 8);
  CHECK(n == 4 && ids[0] == 3 && ids[1] == 0 && ids[2] == 2 && ids[3] == 1, "insert_after in the middle, at the tail and at the front");
  /* touching = unlink + push_front moves an entry to the front */
  lru_unlink(&l, &e[1].node);
  lru_push_front(&l, &e[1].node);
  n = order(&l, ids, 8);
  CHECK(n == 4 && ids[0] == 1 && ids[3] == 2 && l.tail == &e[2].node, "touch moves the tail to the front");
}

/* Eviction takes the tail, the least recently used: entries touched later survive longer. */
static void test_lru_eviction(void) {
  entry e[5];
  lru_list l = {0};
  CHECK(!l.head && !l.tail, "a zero list is empty");
  for (int i = 0; i < 5; i++) {
    e[i] = (entry){.id = i};
    lru_push_front(&l, &e[i].node); /* used in the order 0 1 2 3 4 */
  }
  /* use 1 and 3 again: the order of use is now 0 2 4 1 3 */
  int touch[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    lru_unlink(&l, &e[touch[i]].node);
    lru_push_front(&l, &e[touch[i]].node);
  }
  int want[] = {0, 2, 4, 1, 3}, got[5], n = 0;
  while (l.tail && n < 5) {
    lru_node *victim = l.tail;
    got[n++] = ((entry *)victim)->id;
    lru_unlink(&l, victim);
  }
  CHECK(n == 5 && !l.head && !l.tail, "evicted everything: %d", n);
  bool same = n == 5;
  for (int i = 0; i < n && same; i++)
    same = got[i] == want[i];
  CHECK(same, "eviction order is least recently used first: %d %d %d %d %d", got[0], got[1], got[2], got[3], got[4]);
  /* one entry: it is head and tail; touching it changes nothing */
  lru_push_front(&l, &e[0].node);
  lru_unlink(&l, &e[0].node);
  lru_push_front(&l, &e[0].node);
  CHECK(l.head == &e[0].node && l.tail == &e[0].node && !e[0].node.prev && !e[0].node.next, "a single entry");
  /* insert behind the tail: the new tail, evicted next */
  lru_insert_after(&l, l.tail, &e[1].node);
  CHECK(l.tail == &e[1].node && l.head == &e[0].node && e[0].node.next == &e[1].node && e[1].node.prev == &e[0].node,
        "insert_after the tail");
}

#define N_IDX 1000
typedef struct loop_state {
  atomic_int hits[N_IDX];
  int thread_of[N_IDX];
  threadpool *pool;
  atomic_int nested_calls, nested_off_caller;
} loop_state;

static void count_body(void *arg, int64_t i, int thread) {
  loop_state *st = arg;
  atomic_fetch_add(&st->hits[i], 1);
  st->thread_of[i] = thread;
}

static void inner_body(void *arg, int64_t i, int thread) {
  loop_state *st = arg;
  /* CHECK is not thread-safe: count here, check on the main thread */
  if (thread != 0)
    atomic_fetch_add(&st->nested_off_caller, 1);
  atomic_fetch_add(&st->nested_calls, 1);
}

static void outer_body(void *arg, int64_t i, int thread) {
  loop_state *st = arg;
  threadpool_for(st->pool, 5, 0, inner_body, st);
}

static void test_threadpool(void) {
  threadpool *p = NULL;
  CHECK(threadpool_init(0, &p) != QVL_OK, "zero threads is refused");
  for (int T = 1; T <= 3; T++) {
    CHECK(threadpool_init(T, &p) == QVL_OK && p, "init %d threads", T);
    loop_state *st = calloc(1, sizeof *st);
    st->pool = p;
    threadpool_for(p, N_IDX, 0, count_body, st);
    int once = 1, in_range = 1, monotone = 1;
    for (int i = 0; i < N_IDX; i++) {
      once &= atomic_load(&st->hits[i]) == 1;
      int t = st->thread_of[i];
      /* static partition: thread t owns [n*t/T, n*(t+1)/T) */
      in_range &= (int64_t)N_IDX * t / T <= i && i < (int64_t)N_IDX * (t + 1) / T;
      monotone &= i == 0 || st->thread_of[i - 1] <= t;
    }
    CHECK(once, "static: every index exactly once (%d threads)", T);
    CHECK(in_range && monotone, "static: contiguous ranges by thread index (%d threads)", T);
    for (int r = 0; r < 20; r++) { /* the pool is reused loop after loop */
      memset(st->hits, 0, sizeof st->hits);
      threadpool_for(p, N_IDX, 7, count_body, st);
      once = 1;
      for (int i = 0; i < N_IDX; i++)
        once &= atomic_load(&st->hits[i]) == 1;
      if (!once)
        break;
    }
    CHECK(once, "dynamic chunks: every index exactly once, 20 loops (%d threads)", T);
    memset(st->hits, 0, sizeof st->hits);
    threadpool_for(p, 0, 0, count_body, st);
    threadpool_for(p, 1, 0, count_body, st);
    CHECK(atomic_load(&st->hits[0]) == 1 && atomic_load(&st->hits[1]) == 0, "n = 0 and n = 1");
    threadpool_for(p, 4, 1, outer_body, st);
    CHECK(atomic_load(&st->nested_calls) == 20, "nested loops complete: %d of 20", atomic_load(&st->nested_calls));
    CHECK(atomic_load(&st->nested_off_caller) == 0, "a nested loop runs serially on its caller");
    free(st);
    threadpool_free(p);
  }
  threadpool_free(NULL);
  CHECK(threadpool_physical_cores() >= 1, "at least one core");
}

/* More threads than indices, one thread, and chunks larger than the loop. */
static void test_threadpool_small_loops(void) {
  threadpool *p = NULL;
  CHECK(threadpool_init(8, &p) == QVL_OK, "init 8 threads");
  loop_state *st = calloc(1, sizeof *st);
  for (int n = 1; n <= 9; n++) {
    for (int mode = 0; mode < 3; mode++) {
      int64_t chunk = mode == 0 ? 0 : mode == 1 ? 1 : 100; /* static, dynamic, one chunk for all */
      memset(st->hits, 0, sizeof st->hits);
      memset(st->thread_of, 0xff, sizeof st->thread_of);
      threadpool_for(p, n, chunk, count_body, st);
      int once = 1, threads_ok = 1;
      for (int i = 0; i < N_IDX; i++) {
        once &= atomic_load(&st->hits[i]) == (i < n);
        if (i < n)
          threads_ok &= st->thread_of[i] >= 0 && st->thread_of[i] < 8;
      }
      CHECK(once && threads_ok, "8 threads, n = %d, chunk %lld: each index once, thread ids in 0..7", n,
            (long long)chunk);
      if (n == 1)
        CHECK(st->thread_of[0] == 0, "a loop of one index runs on the caller (chunk %lld)", (long long)chunk);
      if (chunk == 0 && n > 1 && n < 8) { /* static: thread t gets [n*t/8, n*(t+1)/8) */
        int in_range = 1;
        for (int i = 0; i < n; i++) {
          int t = st->thread_of[i];
          in_range &= (int64_t)n * t / 8 <= i && i < (int64_t)n * (t + 1) / 8;
        }
        CHECK(in_range, "static partition with more threads than indices (n = %d)", n);
      }
    }
  }
  free(st);
  threadpool_free(p);
  /* one thread: everything on the caller, in order */
  CHECK(threadpool_init(1, &p) == QVL_OK, "init 1 thread");
  st = calloc(1, sizeof *st);
  threadpool_for(p, N_IDX, 3, count_body, st);
  int on_caller = 1;
  for (int i = 0; i < N_IDX; i++)
    on_caller &= atomic_load(&st->hits[i]) == 1 && st->thread_of[i] == 0;
  CHECK(on_caller, "one thread: every index once, on the caller");
  free(st);
  threadpool_free(p);
}

typedef struct caller_arg {
  threadpool *pool;
  loop_state *st;
} caller_arg;

static void *second_caller(void *arg) {
  caller_arg *a = arg;
  for (int r = 0; r < 50; r++)
    threadpool_for(a->pool, N_IDX, 5, count_body, a->st);
  return NULL;
}

/* Two threads calling the same pool at once: the pool documents that the second runs serially;
 * either way both loops complete exactly. */
static void test_threadpool_two_callers(void) {
  threadpool *p = NULL;
  CHECK(threadpool_init(3, &p) == QVL_OK, "init 3 threads");
  loop_state *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
  caller_arg ca = {p, b};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, second_caller, &ca) == 0, "second caller");
  for (int r = 0; r < 50; r++)
    threadpool_for(p, N_IDX, 5, count_body, a);
  pthread_join(t, NULL);
  int exact = 1;
  for (int i = 0; i < N_IDX; i++)
    exact &= atomic_load(&a->hits[i]) == 50 && atomic_load(&b->hits[i]) == 50;
  CHECK(exact, "concurrent callers: every index of both loops ran 50 times");
  free(a);
  free(b);
  threadpool_free(p);
}

/* ---- timed condvar waits (base/cond.h) */
typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool flag;
} waiter;

static void *signal_later(void *arg) {
  waiter *w = arg;
  struct timespec ts = {0, 20 * 1000000L};
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&w->mu);
  w->flag = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static void test_cond(void) {
  waiter w = {.flag = false};
  pthread_mutex_init(&w.mu, NULL);
  cond_init_monotonic(&w.cv);
  pthread_mutex_lock(&w.mu);
  double t0 = time_now_s();
  cond_wait_ms(&w.cv, &w.mu, 30);
  double waited = time_now_s() - t0;
  CHECK(waited >= 0.029, "cond_wait_ms(30) waits its time without a signal: %.1f ms", waited * 1e3);
  t0 = time_now_s();
  cond_wait_until(&w.cv, &w.mu, t0 - 1.0); /* a deadline in the past returns at once */
  CHECK(time_now_s() - t0 < 0.5, "a past deadline does not block (%.1f ms)", (time_now_s() - t0) * 1e3);
  pthread_mutex_unlock(&w.mu);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, signal_later, &w) == 0, "signaller");
  pthread_mutex_lock(&w.mu);
  double deadline = time_now_s() + 30.0;
  while (!w.flag && time_now_s() < deadline)
    cond_wait_until(&w.cv, &w.mu, deadline);
  bool got = w.flag;
  pthread_mutex_unlock(&w.mu);
  pthread_join(t, NULL);
  CHECK(got && time_now_s() < deadline - 25, "a signal ends the wait long before its deadline");
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
}

static double cpu_ms(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void noop_body(void *arg, int64_t i, int thread) {
  (void)arg;
  (void)i;
  (void)thread;
}

/* Waiting workers park: an idle pool costs ~no CPU, and a pool whose loops come with gaps (a
 * descheduled caller on an oversubscribed machine looks the same) stops spinning through them.
 * CPU time, not wall time, so the load on the machine does not matter. */
static void test_threadpool_parks(void) {
  threadpool *p = NULL;
  CHECK(threadpool_init(3, &p) == QVL_OK, "init 3 threads");
  threadpool_for(p, 64, 0, noop_body, NULL);
  double c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
  sleep_ms(1000);
  double idle = cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
  CHECK(idle < 20, "an idle pool of 2 workers used %.1f ms of CPU in 1 s (expected ~0)", idle);
  /* 100 loops, each followed by 3 ms in which the caller does not use the pool. */
  c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
  double self0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
  for (int i = 0; i < 100; i++) {
    threadpool_for(p, 64, 0, noop_body, NULL);
    sleep_ms(3);
  }
  double workers = cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0 - (cpu_ms(CLOCK_THREAD_CPUTIME_ID) - self0);
  CHECK(workers < 20, "2 workers used %.1f ms of CPU over 100 gaps of 3 ms (spinning through them: ~60+)", workers);
  /* Back to back, the loops still run (and the budget grows back). */
  loop_state *st = calloc(1, sizeof *st);
  for (int r = 0; r < 200; r++)
    threadpool_for(p, N_IDX, 0, count_body, st);
  int all = 1;
  for (int i = 0; i < N_IDX; i++)
    all &= atomic_load(&st->hits[i]) == 200;
  CHECK(all, "200 back-to-back loops after parking: every index 200 times");
  free(st);
  threadpool_free(p);
}

int main(void) {
  test_relpath();
  test_file_image();
  test_lru();
  test_lru_eviction();
  test_threadpool();
  test_threadpool_small_loops();
  test_threadpool_two_callers();
  test_threadpool_parks();
  test_cond();
  return TEST_SUMMARY("test_base");
}
