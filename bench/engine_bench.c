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

static cJSON *user_msg(const char *url, const char *text) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  if (!url) {
    cJSON_AddStringToObject(m, "content", text);
    return m;
  }
  cJSON *c = cJSON_AddArrayToObject(m, "content");
  cJSON *img = cJSON_CreateObject();
  cJSON_AddStringToObject(img, "type", "image_url");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(img, "image_url"), "url", url);
  cJSON_AddItemToArray(c, img);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "type", "text");
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddItemToArray(c, t);
  return m;
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

int main(int argc, char **argv) {
  const char *model = NULL, *mmproj = NULL, *v;
  int threads = 0, w = 1024, h = 768, n_decode = 32, conc[8] = {1, 2, 4, 8}, n_conc = 4;
  bool skip_turns = false, skip_conc = false;
  int direct_steps = 0;
  for (int i = 1; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      model = v;
    else if (arg_value(argc, argv, &i, "--mmproj", NULL, &v))
      mmproj = v;
    else if (arg_value(argc, argv, &i, "--threads", "-t", &v))
      threads = (int)arg_int("--threads", v, 1, 1024);
    else if (arg_value(argc, argv, &i, "--decode", NULL, &v))
      n_decode = (int)arg_int("--decode", v, 2, 4096);
    else if (arg_value(argc, argv, &i, "--size", NULL, &v)) {
      if (sscanf(v, "%dx%d", &w, &h) != 2 || w < 16 || h < 16 || w > 8192 || h > 8192) {
        fprintf(stderr, "--size: expected WxH, found '%s'\n", v);
        return 2;
      }
    } else if (arg_value(argc, argv, &i, "--conc", NULL, &v)) {
      n_conc = 0;
      char tmp[128];
      snprintf(tmp, sizeof tmp, "%s", v);
      for (char *t = strtok(tmp, ","); t && n_conc < 8; t = strtok(NULL, ","))
        conc[n_conc++] = (int)arg_int("--conc", t, 1, 64);
    } else if (arg_value(argc, argv, &i, "--direct", NULL, &v)) {
      direct_steps = (int)arg_int("--direct", v, 1, 4096);
    } else if (arg_flag(argv, i, "--skip-turns", NULL))
      skip_turns = true;
    else if (arg_flag(argv, i, "--skip-conc", NULL))
      skip_conc = true;
    else {
      fprintf(stderr, "usage: engine_bench -m MODEL.gguf --mmproj MMPROJ.gguf [--size 1024x768] [--conc 1,2,4,8] "
                      "[--decode 32] [-t N] [--skip-turns] [--skip-conc] [--direct STEPS]\n");
      return 2;
    }
  }
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
    cJSON_AddItemToArray(t1, user_msg(url.data, "What is in this image? Answer briefly."));
    job j1, j2, j3;
    rc |= run1(e, t1, &po, &g, &j1);
    if (!rc)
      print_turn("turn 1", &j1);
    cJSON *t2 = cJSON_Duplicate(t1, true);
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "role", "assistant");
    cJSON_AddStringToObject(a, "content", j1.text ? j1.text : "");
    cJSON_AddItemToArray(t2, a);
    cJSON_AddItemToArray(t2, user_msg(NULL, "And what colour is the top left corner?"));
    if (!rc)
      rc |= run1(e, t2, &po, &g, &j2);
    if (!rc) {
      print_turn("turn 2 (follow-up)", &j2);
      printf("  turn 2 / turn 1 ttft: %.1f%%\n", 100.0 * j2.r.t.ttft_ms / j1.r.t.ttft_ms);
    }
    cJSON *t3 = cJSON_CreateArray();
    cJSON_AddItemToArray(t3, user_msg(url.data, "Describe the colours of this picture."));
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
        cJSON_AddItemToArray(msgs[i], user_msg(NULL, q));
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
