/*
 * engine_bench — what the serving engine's caches buy, measured through the engine itself:
 *   1. turn 1: an image question (synthetic JPEG, data: URL) in a fresh engine: TTFT, vision, prefill;
 *   2. turn 2: the same conversation + the answer + a follow-up question: TTFT with the prefix cache;
 *   3. a new conversation with another question about the same image: TTFT (image cache / prefix);
 *   4. aggregate decode throughput of N concurrent text requests through the engine (continuous
 *      batching), for each N of --conc.
 * Usage: make bench; build/bench/engine_bench -m MODEL.gguf --mmproj MMPROJ.gguf [--size 1024x768]
 *        [--conc 1,2,4,8] [--decode 32] [-t THREADS] [--skip-turns] [--skip-conc]
 *   --direct STEPS: only decoder_step_batch on --conc sequences, wall and CPU-time tok/s.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* apps/ is not part of libqvl: take the command line helpers and the synthetic JPEG encoder of
 * `qvl bench` from there directly. */
#include "args.h"
#include "commands/bench_image.h"
#include "base/buf.h"
#include "base/dataurl.h"
#include "base/timing.h"
#include "engine/engine.h"
#include "kernels/kernels.h"

/* The engine tests build their messages the same way (tests/ holds the helper). */
#include "chat_msg.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

typedef struct job {
  bool done;
  engine_result r;
  char *text;
  double t_done;
} job;

static void on_done(void *user, const engine_result *r) {
  job *j = user;
  pthread_mutex_lock(&mu);
  j->r = *r;
  j->text = strndup(r->text, r->text_len);
  j->r.text = j->text;
  j->r.ids = NULL;
  j->t_done = time_now_s();
  j->done = true;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void wait_all(job *jobs, int n) {
  pthread_mutex_lock(&mu);
  for (;;) {
    int d = 0;
    for (int i = 0; i < n; i++)
      d += jobs[i].done;
    if (d == n)
      break;
    pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
}

static int run1(engine *e, const cJSON *msgs, const vlm_prompt_opts *po, const gen_params *g, job *j) {
  memset(j, 0, sizeof *j);
  engine_request rq = {.messages = msgs, .prompt = *po, .gen = *g, .on_done = on_done, .user = j};
  uint64_t id;
  if (engine_submit(e, &rq, &id) != QVL_OK) {
    fprintf(stderr, "submit: %s\n", qvl_last_error());
    return 1;
  }
  wait_all(j, 1);
  if (j->r.status != QVL_OK) {
    fprintf(stderr, "request failed: %s\n", j->r.error);
    return 1;
  }
  return 0;
}

static void print_turn(const char *name, const job *j) {
  printf("  %-22s ttft %9.1f ms  (queue %.1f, preprocess %.1f, vision %.1f, prefill %.1f ms; prompt %lld tokens, "
         "%lld cached, image cache %d hit / %d miss)\n",
         name, j->r.t.ttft_ms, j->r.t.queue_ms, j->r.t.preprocess_ms, j->r.t.vision_ms, j->r.t.prefill_ms,
         (long long)j->r.prompt_tokens, (long long)j->r.cached_prompt_tokens, j->r.image_cache_hits,
         j->r.image_cache_misses);
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* decoder_step_batch on n sequences directly (no engine): wall-clock tok/s, and tok/s per second of
 * CPU time consumed by this process, which stays meaningful on a machine shared with other jobs
 * (with -t 1 the CPU time is the time the one core spent on it). */
static int batch_direct(const vlm *m, const int *sizes, int n_sizes, int steps) {
  printf("decoder_step_batch directly, %d steps after a 16-token prompt (tok/s wall | tok/s per CPU-second):\n",
         steps);
  for (int k = 0; k < n_sizes; k++) {
    int n = sizes[k];
    decoder_seq **seqs = calloc((size_t)n, sizeof *seqs);
    int32_t *toks = malloc(sizeof *toks * (size_t)n), prompt[16];
    for (int i = 0; i < 16; i++)
      prompt[i] = 1000 + 17 * i;
    qvl_status s = QVL_OK;
    for (int i = 0; s == QVL_OK && i < n; i++) {
      decoder_seq_params sp = {.n_ctx = 16 + steps + 1, .n_batch = 16};
      s = decoder_seq_init(m->text, &sp, &seqs[i]);
      decoder_input in = {.n_tokens = 16, .tokens = prompt};
      if (s == QVL_OK)
        s = decoder_prefill(seqs[i], &in, NULL, NULL);
    }
    double w0 = time_now_s(), c0 = cpu_now();
    for (int t = 0; s == QVL_OK && t < steps; t++) {
      for (int i = 0; i < n; i++)
        toks[i] = 2000 + 31 * t + i;
      s = decoder_step_batch(seqs, toks, n, NULL);
    }
    double wall = time_now_s() - w0, cpu = cpu_now() - c0;
    if (s != QVL_OK) {
      fprintf(stderr, "decoder_step_batch: %s\n", qvl_last_error());
      return 1;
    }
    printf("  %d sequences: %8.2f tok/s wall | %8.2f tok/s per CPU-second (%.2f s wall, %.2f s CPU)\n", n,
           (double)n * steps / wall, (double)n * steps / cpu, wall, cpu);
    for (int i = 0; i < n; i++)
      decoder_seq_free(seqs[i]);
    free(seqs);
    free(toks);
  }
  return 0;
}

/* --size WxH */
static qvl_status parse_size(void *dst, const qvl_opt_bind *b, const char *v, const char *where) {
  int *wh = (int *)((char *)dst + b->off);
  if (sscanf(v, "%dx%d", &wh[0], &wh[1]) != 2 || wh[0] < 16 || wh[1] < 16 || wh[0] > 8192 || wh[1] > 8192)
    return qvl_opts_fail("%s: expected WxH (16..8192 each), found '%s'", where, v);
  return QVL_OK;
}

/* --conc 1,2,4,8 */
static qvl_status parse_conc(void *dst, const qvl_opt_bind *b, const char *v, const char *where) {
  static const qvl_opt one = {"conc", NULL, QVL_OPT_INT, .min = 1, .max = 64};
  int *c = (int *)((char *)dst + b->off), n = 0;
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s", v);
  for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
    int64_t x;
    if (n == 8)
      return qvl_opts_fail("%s: at most 8 concurrency levels", where);
    qvl_status st = qvl_opt_int(&one, t, where, &x);
    if (st != QVL_OK)
      return st;
    c[1 + n++] = (int)x;
  }
  if (n == 0)
    return qvl_opts_fail("%s: give at least one concurrency level", where);
  c[0] = n;
  return QVL_OK;
}

typedef struct bench_opts {
  const char *model, *mmproj;
  int64_t threads, n_decode, direct_steps;
  int size[2];
  int conc[9]; /* count, then the levels */
  bool skip_turns, skip_conc;
} bench_opts;

static const qvl_opt o_decode = {"decode", NULL, QVL_OPT_INT, 2, 4096, .help = "tokens decoded per turn"};
static const qvl_opt o_size = {"size", NULL, QVL_OPT_CALL, .meta = "WxH", .help = "image size"};
static const qvl_opt o_conc = {"conc", NULL, QVL_OPT_CALL, .meta = "N,N,..", .help = "concurrent sequences per row"};
static const qvl_opt o_direct = {"direct", NULL, QVL_OPT_INT, 1, 4096, .help = "decoder_step_batch steps, no engine"};
static const qvl_opt o_skip_turns = {"skip_turns", NULL, QVL_OPT_BOOL, .help = "skip the multi-turn rows"};
static const qvl_opt o_skip_conc = {"skip_conc", NULL, QVL_OPT_BOOL, .help = "skip the concurrency rows"};

static const qvl_opt_bind bench_binds[] = {
    QVL_OPT_FIELD(qvl_opt_model, bench_opts, model),   QVL_OPT_FIELD(qvl_opt_mmproj, bench_opts, mmproj),
    QVL_OPT_FIELD(qvl_opt_threads, bench_opts, threads), QVL_OPT_FIELD(o_decode, bench_opts, n_decode),
    {&o_size, offsetof(bench_opts, size), 0, parse_size, NULL},
    {&o_conc, offsetof(bench_opts, conc), 0, parse_conc, NULL},
    QVL_OPT_FIELD(o_direct, bench_opts, direct_steps), QVL_OPT_FIELD(o_skip_turns, bench_opts, skip_turns),
    QVL_OPT_FIELD(o_skip_conc, bench_opts, skip_conc)};

static const qvl_opt_cmd bench_cmd = {.name = "engine_bench",
                                      .usage = "usage: engine_bench -m MODEL.gguf --mmproj MMPROJ.gguf [options]\n",
                                      .opts = bench_binds,
                                      .n_opts = sizeof bench_binds / sizeof bench_binds[0]};

int main(int argc, char **argv) {
  bench_opts o = {.n_decode = 32, .size = {1024, 768}, .conc = {4, 1, 2, 4, 8}};
  bool help = false;
  if (qvl_opts_parse(&bench_cmd, argc, argv, 1, &o, NULL, NULL, NULL, &help) != QVL_OK) {
    fprintf(stderr, "%s\n", qvl_last_error());
    qvl_opts_usage(&bench_cmd, &o, stderr);
    return 2;
  }
  if (help) {
    qvl_opts_usage(&bench_cmd, &o, stdout);
    return 0;
  }
  const char *model = o.model, *mmproj = o.mmproj;
  int threads = (int)o.threads, w = o.size[0], h = o.size[1], n_decode = (int)o.n_decode, n_conc = o.conc[0];
  int *conc = o.conc + 1, direct_steps = (int)o.direct_steps;
  bool skip_turns = o.skip_turns, skip_conc = o.skip_conc;
  if (!model) {
    fprintf(stderr, "engine_bench: -m MODEL.gguf is required\n");
    return 2;
  }
  if (kernels_init(NULL, threads) != QVL_OK) {
    fprintf(stderr, "kernels: %s\n", qvl_last_error());
    return 1;
  }
  vlm *m = NULL;
  vlm_paths paths = {.model = model, .mmproj = mmproj};
  if (vlm_load(&paths, &m) != QVL_OK) {
    fprintf(stderr, "load: %s\n", qvl_last_error());
    return 1;
  }
  printf("engine_bench: %s, isa %s, %d threads\n", model, kernels_isa(), kernels_threads());
  if (direct_steps > 0) {
    int rc = batch_direct(m, conc, n_conc, direct_steps);
    vlm_free(m);
    return rc;
  }
  engine_config c;
  engine_config_default(&c);
  c.max_batch_size = 8;
  engine *e = NULL;
  if (engine_start(m, &c, &e) != QVL_OK) {
    fprintf(stderr, "engine: %s\n", qvl_last_error());
    return 1;
  }
  int rc = 0;
  gen_params g = gen_params_default();
  g.sampling.temperature = 0;
  g.max_tokens = 8;
  g.ignore_eos = true;
  vlm_prompt_opts po;
  vlm_prompt_opts_default(&po);
  po.pre.min_pixels = 1;
  po.pre.max_pixels = (int64_t)w * h; /* full resolution, as qvl bench's ttft */
  if (!skip_turns && mmproj) {
    unsigned char *jpg = NULL;
    unsigned long jsize = 0;
    if (bench_make_jpeg(w, h, &jpg, &jsize) != 0)
      return 1;
    buf url = {0};
    buf_append_str(&url, "data:image/jpeg;base64,");
    base64_encode(jpg, jsize, &url);
    free(jpg);
    printf("multi-turn TTFT, %dx%d image, max_tokens %lld:\n", w, h, (long long)g.max_tokens);
    cJSON *t1 = cJSON_CreateArray();
    cJSON_AddItemToArray(t1, chat_msg("user", url.data, "What is in this image? Answer briefly."));
    job j1, j2, j3;
    rc |= run1(e, t1, &po, &g, &j1);
    if (!rc)
      print_turn("turn 1", &j1);
    cJSON *t2 = cJSON_Duplicate(t1, true);
    cJSON_AddItemToArray(t2, chat_msg("assistant", NULL, j1.text ? j1.text : ""));
    cJSON_AddItemToArray(t2, chat_msg("user", NULL, "And what colour is the top left corner?"));
    if (!rc)
      rc |= run1(e, t2, &po, &g, &j2);
    if (!rc) {
      print_turn("turn 2 (follow-up)", &j2);
      printf("  turn 2 / turn 1 ttft: %.1f%%\n", 100.0 * j2.r.t.ttft_ms / j1.r.t.ttft_ms);
    }
    cJSON *t3 = cJSON_CreateArray();
    cJSON_AddItemToArray(t3, chat_msg("user", url.data, "Describe the colours of this picture."));
    if (!rc)
      rc |= run1(e, t3, &po, &g, &j3);
    if (!rc) {
      print_turn("new question, same image", &j3);
      printf("  same-image question / turn 1 ttft: %.1f%%\n", 100.0 * j3.r.t.ttft_ms / j1.r.t.ttft_ms);
    }
    free(j1.text), free(j2.text), free(j3.text);
    cJSON_Delete(t1);
    cJSON_Delete(t2);
    cJSON_Delete(t3);
    buf_free(&url);
  }
  if (!skip_conc && !rc) {
    printf("concurrent text requests through the engine, %d tokens each (decode tok/s = all tokens after each "
           "request's first / time from the first first-token to the last token):\n", n_decode);
    gen_params gd = g;
    gd.max_tokens = n_decode;
    for (int k = 0; k < n_conc && !rc; k++) {
      int n = conc[k];
      job *jobs = calloc((size_t)n, sizeof *jobs);
      cJSON **msgs = calloc((size_t)n, sizeof *msgs);
      char q[128];
      double t0 = time_now_s();
      for (int i = 0; i < n; i++) {
        snprintf(q, sizeof q, "Request %d: write a short story about the number %d.", i, i * 7);
        msgs[i] = cJSON_CreateArray();
        cJSON_AddItemToArray(msgs[i], chat_msg("user", NULL, q));
        engine_request rq = {.messages = msgs[i], .prompt = po, .gen = gd, .on_done = on_done, .user = &jobs[i]};
        uint64_t id;
        if (engine_submit(e, &rq, &id) != QVL_OK) {
          fprintf(stderr, "submit: %s\n", qvl_last_error());
          rc = 1;
          jobs[i].done = true;
        }
      }
      wait_all(jobs, n);
      double first = 1e300, last = 0, ttft_max = 0;
      int64_t toks = 0;
      for (int i = 0; i < n; i++) {
        double tf = t0 + jobs[i].r.t.ttft_ms / 1e3;
        if (tf < first)
          first = tf;
        if (jobs[i].t_done > last)
          last = jobs[i].t_done;
        if (jobs[i].r.t.ttft_ms > ttft_max)
          ttft_max = jobs[i].r.t.ttft_ms;
        toks += jobs[i].r.completion_tokens - 1;
      }
      printf("  %d concurrent: %8.2f tok/s aggregate (%lld tokens, %.0f ms; max ttft %.0f ms)\n", n,
             (double)toks / (last - first), (long long)toks, (last - first) * 1e3, ttft_max);
      for (int i = 0; i < n; i++) {
        free(jobs[i].text);
        cJSON_Delete(msgs[i]);
      }
      free(jobs);
      free(msgs);
    }
  }
  engine_stats st;
  engine_get_stats(e, &st);
  printf("stats: %llu done, %llu failed; image cache %llu/%llu hit/miss; prefix cache %llu/%llu hit/miss, %.1f MiB\n",
         (unsigned long long)st.requests_done, (unsigned long long)st.requests_failed,
         (unsigned long long)st.image_cache_hits, (unsigned long long)st.image_cache_misses,
         (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_misses,
         (double)st.prefix_cache_bytes / 1048576.0);
  engine_stop(e, true);
  vlm_free(m);
  return rc;
}
