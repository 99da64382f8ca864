/*
 * The serving engine and its decoder support, on the e2e fixture model (tiny; seconds):
 *  - decoder_step_batch gives each sequence bit-identical logits to decoder_step alone, whatever
 *    else is in the batch; decoder_prefill_part in any pieces equals one decoder_prefill; a mixed
 *    decoder_forward_batch (decode rows + prefill pieces) equals the single-sequence calls, and so
 *    does decoder_forward on a caller's decoder_work with shared_work sequences;
 *  - 8 concurrent engine requests (text and images, greedy and seeded sampling) produce exactly the
 *    tokens of their solo generate() runs (an independent path: one sequence, no engine);
 *  - image cache: a second question about the same image skips the vision tower (vision_ms == 0)
 *    and still answers as a cache-less run;
 *  - prefix cache: a follow-up turn reuses KV (cached_prompt_tokens > 0) and answers as generate();
 *  - back-pressure: a full queue answers QVL_ERR_BUSY at once; requests that can never fit are
 *    refused at submit; cancel frees the slot; timeout; drain and abort on stop.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/timing.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/image_cache.h"
#include "engine/prefix_cache.h"
#include "kernels/kernels.h"
#include "qvl_tools.h"
#include "test.h"
#include "test_model.h"
#include "chat_msg.h"
#include "text/kv_cache.h"

#define IMG(name) "tests/fixtures/images/" name

/* ---- collecting results from the engine thread ----------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

typedef struct job {
  bool done;
  int n_done_calls;
  engine_result res; /* text/ids pointers replaced by the copies below */
  char *text;
  int32_t *ids;
  char streamed[8192];
  size_t n_streamed;
  int n_pieces;
  double t_first_piece, t_done;
  bool stop_streaming; /* on_text returns false (client gone) */
} job;

static bool on_text(void *user, const char *t, size_t n) {
  job *j = user;
  pthread_mutex_lock(&g_mu);
  if (j->n_pieces++ == 0)
    j->t_first_piece = time_now_s();
  if (j->n_streamed + n < sizeof j->streamed) {
    memcpy(j->streamed + j->n_streamed, t, n);
    j->n_streamed += n;
  }
  bool go_on = !j->stop_streaming;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  return go_on;
}

static void on_done(void *user, const engine_result *r) {
  job *j = user;
  pthread_mutex_lock(&g_mu);
  j->res = *r;
  j->text = malloc(r->text_len + 1);
  memcpy(j->text, r->text, r->text_len);
  j->text[r->text_len] = 0;
  j->ids = malloc(sizeof *j->ids * (size_t)(r->completion_tokens + 1));
  if (r->completion_tokens > 0)
    memcpy(j->ids, r->ids, sizeof *j->ids * (size_t)r->completion_tokens);
  j->res.text = j->text;
  j->res.ids = j->ids;
  j->done = true;
  j->n_done_calls++;
  j->t_done = time_now_s();
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

static bool wait_done(job *j, double timeout_s) {
  double end = time_now_s() + timeout_s;
  pthread_mutex_lock(&g_mu);
  while (!j->done && time_now_s() < end) {
    pthread_mutex_unlock(&g_mu);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&g_mu);
  }
  bool d = j->done;
  pthread_mutex_unlock(&g_mu);
  return d;
}

static int pieces_of(job *j) {
  pthread_mutex_lock(&g_mu);
  int n = j->n_pieces;
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void job_free(job *j) {
  free(j->text);
  free(j->ids);
  memset(j, 0, sizeof *j);
}

/* ---- requests ---------------------------------------------------------------------------------- */

static cJSON *conv1(const char *image, const char *text) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, chat_msg("user", image, text));
  return a;
}

static vlm_prompt_opts test_prompt_opts(void) {
  vlm_prompt_opts o;
  vlm_prompt_opts_default(&o);
  o.source.allow_files = true;
  return o;
}

static gen_params greedy(int64_t max_tokens) {
  gen_params g = gen_params_default();
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  g.ignore_eos = true; /* fixed lengths: every token is compared */
  return g;
}

/* The independent reference: one sequence through generate(). */
static bool solo(const vlm *m, const cJSON *msgs, const gen_params *g, gen_result *out) {
  vlm_prompt_opts o = test_prompt_opts();
  vlm_prompt p;
  qvl_status s = vlm_prompt_build(m, msgs, &o, &p);
  CHECK(s == QVL_OK, "solo prompt: %s", qvl_last_error());
  if (s != QVL_OK)
    return false;
  s = generate(m, &p, g, NULL, NULL, out);
  CHECK(s == QVL_OK, "solo generate: %s", qvl_last_error());
  vlm_prompt_free(&p);
  return s == QVL_OK;
}

static qvl_status submit(engine *e, const cJSON *msgs, const gen_params *g, job *j, uint64_t *id) {
  engine_request rq = {.messages = msgs, .prompt = test_prompt_opts(), .gen = *g, .on_text = on_text,
                       .on_done = on_done, .user = j};
  uint64_t dummy;
  return engine_submit(e, &rq, id ? id : &dummy);
}

static void check_same(const char *what, const job *j, const gen_result *ref) {
  CHECK(j->res.status == QVL_OK, "%s: status %s (%s)", what, qvl_status_text(j->res.status), j->res.error);
  CHECK(j->res.completion_tokens == ref->n_ids, "%s: %lld tokens, solo %lld", what,
        (long long)j->res.completion_tokens, (long long)ref->n_ids);
  bool same = j->res.completion_tokens == ref->n_ids &&
              memcmp(j->ids, ref->ids, sizeof *ref->ids * (size_t)ref->n_ids) == 0;
  CHECK(same, "%s: generated ids differ from the solo run", what);
  CHECK(strlen(j->text) == ref->text.len && memcmp(j->text, ref->text.data, ref->text.len) == 0,
        "%s: text differs from the solo run", what);
  CHECK(j->n_streamed == strlen(j->text) && memcmp(j->streamed, j->text, j->n_streamed) == 0,
        "%s: streamed pieces do not add up to the final text", what);
}

/* ---- decoder: batched step and prefill pieces ---------------------------------------------------- */

/* For each KV element type: the F16 cache keeps batch and chunk invariance (every row reads its own
 * K/V back from the cache, so it sees the same rounded values in any batch). */
static void test_decoder_batch(const vlm *m, kv_type kt) {
  const decoder_model *dm = m->text;
  int64_t V = dm->hp.n_vocab;
  enum { N = 5, STEPS = 6 };
  decoder_seq *solo_s[N], *bat_s[N];
  int32_t prompt[40];
  for (int i = 0; i < 40; i++)
    prompt[i] = 100 + 37 * i;
  float *ref = malloc(sizeof(float) * (size_t)(V * N * STEPS));
  /* Different prompt lengths: the sequences sit at different positions in every step. */
  for (int i = 0; i < N; i++) {
    decoder_seq_params sp = {.n_ctx = 64, .n_batch = 8, .kv_type = kt};
    CHECK(decoder_seq_init(dm, &sp, &solo_s[i]) == QVL_OK, "seq init");
    CHECK(decoder_seq_init(dm, &sp, &bat_s[i]) == QVL_OK, "seq init");
    decoder_input in = {.n_tokens = 3 + 7 * i, .tokens = prompt + i};
    CHECK(decoder_prefill(solo_s[i], &in, NULL, NULL) == QVL_OK, "prefill");
    /* The batched copy is prefilled in pieces of 1, 2, 3, ... tokens. */
    int64_t b = 0, step = 1;
    const float *l = NULL;
    while (b < in.n_tokens) {
      int64_t e = b + step < in.n_tokens ? b + step : in.n_tokens;
      CHECK(decoder_prefill_part(bat_s[i], &in, b, e, &l) == QVL_OK, "prefill_part: %s", qvl_last_error());
      b = e;
      step++;
    }
    CHECK(decoder_seq_n_past(bat_s[i]) == in.n_tokens, "prefill_part: %lld cached", (long long)decoder_seq_n_past(bat_s[i]));
  }
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < N; i++) {
      const float *l;
      CHECK(decoder_step(solo_s[i], 500 + 11 * k + i, &l) == QVL_OK, "step");
      memcpy(ref + ((size_t)k * N + (size_t)i) * (size_t)V, l, sizeof(float) * (size_t)V);
    }
  /* Batched: all five, then a varying subset each step is not possible (all need every token),
   * so vary the order instead: composition and row order must not matter. */
  int mismatches = 0;
  for (int k = 0; k < STEPS; k++) {
    decoder_seq *seqs[N];
    int32_t toks[N];
    int idx[N];
    for (int i = 0; i < N; i++)
      idx[i] = (i + k) % N; /* rotate the rows */
    for (int i = 0; i < N; i++) {
      seqs[i] = bat_s[idx[i]];
      toks[i] = 500 + 11 * k + idx[i];
    }
    const float *lg[N];
    /* Step 2 runs the batch split in two calls of different sizes. */
    if (k == 2) {
      CHECK(decoder_step_batch(seqs, toks, 2, lg) == QVL_OK, "step_batch: %s", qvl_last_error());
      CHECK(decoder_step_batch(seqs + 2, toks + 2, N - 2, lg + 2) == QVL_OK, "step_batch: %s", qvl_last_error());
    } else {
      CHECK(decoder_step_batch(seqs, toks, N, lg) == QVL_OK, "step_batch: %s", qvl_last_error());
    }
    for (int i = 0; i < N; i++)
      if (memcmp(lg[i], ref + ((size_t)k * N + (size_t)idx[i]) * (size_t)V, sizeof(float) * (size_t)V) != 0)
        mismatches++;
  }
  CHECK(mismatches == 0, "decoder_step_batch: %d of %d logit rows differ from decoder_step", mismatches, N * STEPS);
  /* Errors leave every sequence unchanged. */
  decoder_seq *dup[2] = {bat_s[0], bat_s[0]};
  int32_t t2[2] = {1, 2};
  int64_t before = decoder_seq_n_past(bat_s[0]);
  CHECK(decoder_step_batch(dup, t2, 2, NULL) == QVL_ERR_INVALID_ARG, "a sequence twice in a batch is refused");
  decoder_seq *two[2] = {bat_s[0], bat_s[1]};
  int32_t bad[2] = {1, (int32_t)V};
  CHECK(decoder_step_batch(two, bad, 2, NULL) == QVL_ERR_INVALID_ARG, "a bad id is refused");
  CHECK(decoder_seq_n_past(bat_s[0]) == before, "a refused batch changes nothing");
  /* A mixed step: one decode row and two prefill pieces (one asking for logits, one not) in one
   * forward give what the single-sequence calls give. */
  {
    decoder_seq *a = NULL, *b = NULL, *c = NULL, *a2 = NULL, *b2 = NULL, *c2 = NULL;
    decoder_seq_params sp = {.n_ctx = 64, .n_batch = 4, .kv_type = kt};
    decoder_seq_init(dm, &sp, &a), decoder_seq_init(dm, &sp, &b), decoder_seq_init(dm, &sp, &c);
    decoder_seq_init(dm, &sp, &a2), decoder_seq_init(dm, &sp, &b2), decoder_seq_init(dm, &sp, &c2);
    decoder_input pa = {.n_tokens = 7, .tokens = prompt}, pb = {.n_tokens = 11, .tokens = prompt + 3},
                  pc = {.n_tokens = 9, .tokens = prompt + 9};
    const float *la, *lb, *lc;
    /* reference: a prefilled then stepped; b prefilled whole; c prefilled 0..5 then 5..9 */
    decoder_prefill(a, &pa, NULL, NULL);
    decoder_step(a, 77, &la);
    decoder_prefill(b, &pb, NULL, &lb);
    decoder_prefill_part(c, &pc, 0, 5, NULL);
    decoder_prefill_part(c, &pc, 5, 9, &lc);
    /* batched: a2 prefilled, then {a2 decode 77, b2 prefill 0..11 with logits, c2 prefill 0..5} */
    decoder_prefill(a2, &pa, NULL, NULL);
    decoder_batch_item it[3] = {{.seq = a2, .token = 77},
                                {.seq = b2, .in = &pb, .begin = 0, .end = 11, .logits = true},
                                {.seq = c2, .in = &pc, .begin = 0, .end = 5}};
    const float *lo[3];
    CHECK(decoder_forward_batch(it, 3, lo) == QVL_OK, "mixed batch: %s", qvl_last_error());
    CHECK(lo[2] == NULL, "a prefill piece without logits returns NULL");
    CHECK(lo[0] && memcmp(lo[0], la, sizeof(float) * (size_t)V) == 0, "mixed batch: decode row equals decoder_step");
    CHECK(lo[1] && memcmp(lo[1], lb, sizeof(float) * (size_t)V) == 0, "mixed batch: prefill equals decoder_prefill");
    decoder_batch_item it2[2] = {{.seq = c2, .in = &pc, .begin = 5, .end = 9, .logits = true}, {.seq = a2, .token = 5}};
    CHECK(decoder_forward_batch(it2, 2, lo) == QVL_OK, "mixed batch 2: %s", qvl_last_error());
    CHECK(memcmp(lo[0], lc, sizeof(float) * (size_t)V) == 0, "prefill pieces across steps equal decoder_prefill_part");
    CHECK(decoder_seq_n_past(c2) == 9 && decoder_seq_n_past(a2) == 9 && decoder_seq_n_past(b2) == 11,
          "cache lengths after mixed steps");
    decoder_batch_item outside[1] = {{.seq = b2, .in = &pb, .begin = 11, .end = 12}};
    CHECK(decoder_forward_batch(outside, 1, NULL) == QVL_ERR_INVALID_ARG, "range outside the prompt is refused");
    decoder_seq_free(a), decoder_seq_free(b), decoder_seq_free(c);
    decoder_seq_free(a2), decoder_seq_free(b2), decoder_seq_free(c2);
  }
  for (int i = 0; i < N; i++) {
    decoder_seq_free(solo_s[i]);
    decoder_seq_free(bat_s[i]);
  }
  free(ref);
}

/* Sequences without work buffers of their own run on a caller's decoder_work and give the logits of
 * sequences with their own; the memory accounting comes from the table that allocates the buffers. */
static void test_decoder_work(const vlm *m) {
  const decoder_model *dm = m->text;
  int64_t V = dm->hp.n_vocab;
  int32_t prompt[12];
  for (int i = 0; i < 12; i++)
    prompt[i] = 200 + 29 * i;
  decoder_seq_params own = {.n_ctx = 32, .n_batch = 4}, shared = {.n_ctx = 32, .shared_work = true};
  uint64_t wb = decoder_work_bytes(dm, 4);
  CHECK(wb > 0 && decoder_work_bytes(dm, 8) == 2 * wb, "work bytes grow with the rows (%llu)", (unsigned long long)wb);
  CHECK(decoder_seq_bytes(dm, &own) == decoder_seq_bytes(dm, &shared) + wb,
        "a sequence's own work buffers are decoder_work_bytes of its n_batch");
  decoder_seq *ref = NULL, *a = NULL, *b = NULL;
  decoder_work *w = NULL;
  CHECK(decoder_seq_init(dm, &own, &ref) == QVL_OK && decoder_seq_init(dm, &shared, &a) == QVL_OK &&
            decoder_seq_init(dm, &shared, &b) == QVL_OK && decoder_work_init(dm, 3, &w) == QVL_OK,
        "init: %s", qvl_last_error());
  if (ref && a && b && w) {
    decoder_input in = {.n_tokens = 12, .tokens = prompt};
    const float *lr = NULL, *lo[2] = {NULL, NULL};
    CHECK(decoder_prefill(ref, &in, NULL, &lr) == QVL_OK, "reference prefill");
    CHECK(decoder_prefill(a, &in, NULL, NULL) == QVL_ERR_INVALID_ARG, "a shared_work sequence alone is refused");
    CHECK(decoder_step(a, 5, NULL) == QVL_ERR_INVALID_ARG && decoder_seq_n_past(a) == 0, "and changes nothing");
    /* 12 prompt rows on a 3-row workspace: it grows to the step */
    decoder_batch_item it[2] = {{.seq = a, .in = &in, .begin = 0, .end = 12, .logits = true},
                                {.seq = b, .in = &in, .begin = 0, .end = 5}};
    CHECK(decoder_forward(w, it, 2, lo) == QVL_OK, "forward on the caller's work: %s", qvl_last_error());
    CHECK(lo[0] && memcmp(lo[0], lr, sizeof(float) * (size_t)V) == 0 && !lo[1],
          "the caller's work buffers give the sequence's own logits");
    const float *ls = NULL;
    CHECK(decoder_step(ref, 9, &ls) == QVL_OK, "reference step");
    decoder_batch_item st[2] = {{.seq = b, .in = &in, .begin = 5, .end = 12}, {.seq = a, .token = 9}};
    CHECK(decoder_forward(w, st, 2, lo) == QVL_OK && lo[1] && memcmp(lo[1], ls, sizeof(float) * (size_t)V) == 0,
          "decode row on shared work equals decoder_step");
    CHECK(decoder_forward(NULL, st, 2, lo) == QVL_ERR_INVALID_ARG, "decoder_forward needs work buffers");
  }
  decoder_work_free(w);
  decoder_seq_free(ref);
  decoder_seq_free(a);
  decoder_seq_free(b);
}

/* ---- engine --------------------------------------------------------------------------------------- */

static engine_config small_config(void) {
  engine_config c;
  engine_config_default(&c);
  c.kv_cache_mb = 512;
  c.n_ctx = 4096;
  c.prefill_chunk = 16;         /* several chunks per prompt: interleaving is exercised */
  c.vision_layers_per_step = 1; /* the tower in slices of one block */
  return c;
}

static void test_concurrent_equals_solo(const vlm *m) {
  enum { N = 8 };
  const char *images[N] = {NULL, IMG("rgb_64x64.png"), NULL, IMG("photo_96x60.jpg"), IMG("scene_64x128.png"),
                           NULL, IMG("rgb_64x64.png"), IMG("gray_72x56.png")};
  const char *texts[N] = {"Hello, who are you?", "What is in this picture?", "Count from one to ten.",
                          "Describe the colours.", "Is this tall or wide?", "Write a haiku about CPUs.",
                          "Another question about the same image.", "Grey?"};
  cJSON *msgs[N];
  gen_params g[N];
  gen_result ref[N];
  for (int i = 0; i < N; i++) {
    msgs[i] = conv1(images[i], texts[i]);
    g[i] = greedy(12 + 3 * i);
    if (i == 5) { /* sampling: per-request state, seeded */
      g[i].sampling.temperature = 0.9f;
      g[i].sampling.top_k = 40;
      g[i].sampling.top_p = 0.9f;
      g[i].sampling.seed = 1234;
      g[i].sampling.repetition_penalty = 1.1f;
    }
    if (i == 2) { /* EOS and a stop string allowed */
      g[i].ignore_eos = false;
    }
    solo(m, msgs[i], &g[i], &ref[i]);
  }
  engine_config c = small_config();
  c.max_batch_size = N;
  c.image_cache_mb = 0; /* every image through the tower, as solo */
  c.prefix_cache_mb = 0;
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  job jobs[N];
  memset(jobs, 0, sizeof jobs);
  for (int i = 0; i < N; i++)
    CHECK(submit(e, msgs[i], &g[i], &jobs[i], NULL) == QVL_OK, "submit %d: %s", i, qvl_last_error());
  for (int i = 0; i < N; i++)
    CHECK(wait_done(&jobs[i], 120), "request %d finished", i);
  char what[64];
  for (int i = 0; i < N; i++) {
    snprintf(what, sizeof what, "concurrent request %d", i);
    check_same(what, &jobs[i], &ref[i]);
    CHECK(jobs[i].n_done_calls == 1, "%s: on_done called %d times", what, jobs[i].n_done_calls);
  }
  /* They really ran together: most pairs were alive at the same time (short ones may end before the
   * last image prompt is prefilled). */
  int overlaps = 0;
  for (int i = 0; i < N; i++)
    for (int k = 0; k < N; k++)
      if (i != k && jobs[i].n_pieces > 0 && jobs[i].t_first_piece < jobs[k].t_done)
        overlaps++;
  CHECK(overlaps >= N * (N - 1) / 2, "requests overlapped in time (%d of %d pairs)", overlaps, N * (N - 1));
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK(st.requests_done == N && st.requests_failed == 0, "stats: %llu done, %llu failed",
        (unsigned long long)st.requests_done, (unsigned long long)st.requests_failed);
  CHECK(st.running == 0 && st.queued == 0 && st.kv_used_bytes == 0, "stats: idle after (running %d, kv %lld)",
        st.running, (long long)st.kv_used_bytes);
  CHECK(st.ttft_hist[ENGINE_HIST_BUCKETS] == N && st.latency_hist[ENGINE_HIST_BUCKETS] == N, "histograms count %d", N);
  engine_stop(e, true);
  for (int i = 0; i < N; i++) {
    job_free(&jobs[i]);
    gen_result_free(&ref[i]);
    cJSON_Delete(msgs[i]);
  }
}

static void test_image_cache(const vlm *m) {
  engine_config c = small_config();
  c.prefix_cache_mb = 0; /* only the image cache can help */
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  cJSON *q1 = conv1(IMG("rgb_333x250.png"), "What is in this image?");
  cJSON *q2 = conv1(IMG("rgb_333x250.png"), "Which colour dominates?");
  gen_params g = greedy(10);
  job a = {0}, b = {0};
  CHECK(submit(e, q1, &g, &a, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&a, 60), "first question done");
  CHECK(submit(e, q2, &g, &b, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&b, 60), "second question done");
  CHECK(a.res.image_cache_misses == 1 && a.res.image_cache_hits == 0 && a.res.t.vision_ms > 0,
        "first question: image cache miss, vision ran (hits %d, misses %d, vision %.2f ms)", a.res.image_cache_hits,
        a.res.image_cache_misses, a.res.t.vision_ms);
  CHECK(b.res.image_cache_hits == 1 && b.res.image_cache_misses == 0 && b.res.t.vision_ms == 0,
        "second question: image cache hit, no vision (hits %d, misses %d, vision %.2f ms)", b.res.image_cache_hits,
        b.res.image_cache_misses, b.res.t.vision_ms);
  gen_result ref;
  if (solo(m, q2, &g, &ref)) {
    check_same("image-cache hit", &b, &ref);
    gen_result_free(&ref);
  }
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK(st.image_cache_hits == 1 && st.image_cache_misses == 1 && st.image_cache_bytes > 0,
        "stats: image cache %llu hits, %llu misses, %lld bytes", (unsigned long long)st.image_cache_hits,
        (unsigned long long)st.image_cache_misses, (long long)st.image_cache_bytes);
  /* The same pixels at another resolution limit are another entry (the key holds min/max pixels). */
  job d = {0};
  engine_request rq = {.messages = q2, .prompt = test_prompt_opts(), .gen = g, .on_done = on_done, .user = &d};
  rq.prompt.pre.min_pixels = 32 * 32;
  rq.prompt.pre.max_pixels = 128 * 128;
  uint64_t id;
  CHECK(engine_submit(e, &rq, &id) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&d, 60), "resized question done");
  CHECK(d.res.image_cache_misses == 1, "other max_pixels: a miss (%d)", d.res.image_cache_misses);
  engine_stop(e, true);
  job_free(&a);
  job_free(&b);
  job_free(&d);
  cJSON_Delete(q1);
  cJSON_Delete(q2);
}

/* What the result tells about the prompt's images, seen during the callback. */
typedef struct images_seen {
  job j;
  int n;
  vlm_image first, last; /* width, height, message_index are read */
} images_seen;

static void on_done_images(void *user, const engine_result *r) {
  images_seen *s = user;
  s->n = r->n_images;
  if (r->n_images > 0 && r->images) {
    s->first = r->images[0];
    s->last = r->images[r->n_images - 1];
  }
  on_done(&s->j, r);
}

/* count_only: the prompt is built and counted, nothing runs; a stop string's index is reported;
 * the prompt's images come with their displayed sizes (EXIF applied) and messages. */
static void test_count_stop_images(const vlm *m) {
  engine_config c = small_config();
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  cJSON *q = conv1(IMG("rgb_333x250.png"), "What is in this image?");
  cJSON_AddItemToArray(q, chat_msg("user", IMG("exif6_96x64.jpg"), "And this one?"));
  vlm_prompt_opts o = test_prompt_opts();
  vlm_prompt p;
  CHECK(vlm_prompt_build(m, q, &o, &p) == QVL_OK, "prompt: %s", qvl_last_error());
  gen_params g = greedy(8);
  images_seen cnt = {0};
  engine_request rq = {.messages = q, .prompt = test_prompt_opts(), .gen = g, .on_done = on_done_images, .user = &cnt,
                       .count_only = true};
  uint64_t id = 99;
  CHECK(engine_submit(e, &rq, &id) == QVL_OK, "count: %s", qvl_last_error());
  CHECK(cnt.j.done && cnt.j.n_done_calls == 1 && id == 0, "count_only: answered within engine_submit, no id");
  CHECK(cnt.j.res.status == QVL_OK && cnt.j.res.prompt_tokens == p.n && cnt.j.res.image_tokens == p.n_img &&
            cnt.j.res.completion_tokens == 0,
        "count_only: %lld prompt tokens (%lld built), %lld image tokens, nothing generated",
        (long long)cnt.j.res.prompt_tokens, (long long)p.n, (long long)cnt.j.res.image_tokens);
  CHECK(cnt.n == 2 && cnt.first.width == 333 && cnt.first.height == 250 && cnt.first.message_index == 0 &&
            cnt.last.width == 64 && cnt.last.height == 96 && cnt.last.message_index == 1,
        "images: %d, %dx%d (msg %d), %dx%d (msg %d): the EXIF-6 96x64 file shows 64x96", cnt.n, cnt.first.width,
        cnt.first.height, cnt.first.message_index, cnt.last.width, cnt.last.height, cnt.last.message_index);
  vlm_prompt_free(&p);
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK(st.requests_done == 0 && st.queued == 0, "a count is no request of the engine");

  /* the greedy answer, then again with its 4th byte (and a string that never comes) as stop strings */
  job free_run = {0};
  g.ignore_eos = false;
  CHECK(submit(e, q, &g, &free_run, NULL) == QVL_OK && wait_done(&free_run, 60), "free run");
  CHECK(free_run.res.stop_match == 0, "no stop string: stop_match 0");
  if (strlen(free_run.text) >= 4) {
    char at[2] = {free_run.text[3], 0};
    const char *stops[] = {"\x01never", at};
    gen_params gs = g;
    gs.stop = stops;
    gs.n_stop = 2;
    job stopped = {0};
    CHECK(submit(e, q, &gs, &stopped, NULL) == QVL_OK && wait_done(&stopped, 60), "stopped run");
    CHECK(stopped.res.stop_match == 2 && strlen(stopped.text) <= 3, "stop_match names the second string (%d), text '%s'",
          stopped.res.stop_match, stopped.text);
    job_free(&stopped);
  }
  engine_stop(e, true);
  job_free(&free_run);
  job_free(&cnt.j);
  cJSON_Delete(q);
}

/* known_image for the test: announces what *user says (a real image's key, or a wrong one). */
static bool known_as(void *user, uint64_t bytes_key, vlm_known_image *out) {
  (void)bytes_key;
  *out = *(const vlm_known_image *)user;
  return true;
}

/* A file the caller already holds is not decoded at submit; decoding its kept bytes later gives the
 * same pixels as the normal path, and bytes that do not match what was announced are refused. */
static void test_known_image(const vlm *m) {
  cJSON *q = conv1(IMG("rgb_333x250.png"), "What is in this image?");
  vlm_prompt_opts o = test_prompt_opts();
  o.defer_vision = true;
  vlm_prompt ref = {0}, p = {0}, bad = {0};
  CHECK(vlm_prompt_build(m, q, &o, &ref) == QVL_OK && ref.n_images == 1, "normal build: %s", qvl_last_error());
  vlm_image *ri = &ref.images[0];
  CHECK(ri->bytes_key != 0 && ri->patches.pixel_values && !ri->encoded, "normal build decodes, keeps no bytes");
  vlm_known_image k = {ri->hash, ri->grid_t, ri->grid_h, ri->grid_w, ri->n_tokens};
  o.known_image = known_as;
  o.known_user = &k;
  CHECK(vlm_prompt_build(m, q, &o, &p) == QVL_OK && p.n_images == 1, "known build: %s", qvl_last_error());
  vlm_image *pi = &p.images[0];
  CHECK(!pi->patches.pixel_values && pi->encoded && pi->hash == ri->hash && pi->bytes_key == ri->bytes_key &&
            p.n == ref.n && memcmp(p.ids, ref.ids, sizeof *p.ids * (size_t)p.n) == 0,
        "known build: no decode, bytes kept, same prompt");
  CHECK(prompt_image_decode_deferred(&o, pi, 0) == QVL_OK && pi->patches.pixel_values && !pi->encoded,
        "deferred decode: %s", qvl_last_error());
  size_t n = (size_t)ri->patches.n_patches * IMAGE_PATCH_DIM;
  CHECK(pi->patches.n_patches == ri->patches.n_patches &&
            memcmp(pi->patches.pixel_values, ri->patches.pixel_values, n * sizeof(float)) == 0,
        "deferred decode gives the same pixel values");
  k.hash ^= 1; /* a key that lies */
  CHECK(vlm_prompt_build(m, q, &o, &bad) == QVL_OK, "build: %s", qvl_last_error());
  CHECK(prompt_image_decode_deferred(&o, &bad.images[0], 0) != QVL_OK && !bad.images[0].patches.pixel_values,
        "bytes of another image than announced: refused");
  vlm_prompt_free(&ref);
  vlm_prompt_free(&p);
  vlm_prompt_free(&bad);
  cJSON_Delete(q);
}

static void test_prefix_cache(const vlm *m) {
  engine_config c = small_config();
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  cJSON *t1 = conv1(IMG("rgb_333x250.png"), "Describe this picture in detail, please.");
  gen_params g = greedy(20);
  g.ignore_eos = false;
  job a = {0}, b = {0};
  CHECK(submit(e, t1, &g, &a, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&a, 60), "turn 1 done");
  CHECK(a.res.cached_prompt_tokens == 0, "turn 1: nothing cached (%lld)", (long long)a.res.cached_prompt_tokens);
  /* Turn 2: the conversation so far + the answer + a new question. */
  cJSON *t2 = cJSON_Duplicate(t1, true);
  cJSON_AddItemToArray(t2, chat_msg("assistant", NULL, a.text ? a.text : ""));
  cJSON_AddItemToArray(t2, chat_msg("user", NULL, "And what colour is the top left corner?"));
  CHECK(submit(e, t2, &g, &b, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&b, 60), "turn 2 done");
  CHECK(b.res.cached_prompt_tokens > 0 && b.res.cached_prompt_tokens < b.res.prompt_tokens,
        "turn 2: %lld of %lld prompt tokens from the prefix cache", (long long)b.res.cached_prompt_tokens,
        (long long)b.res.prompt_tokens);
  /* All of it, not rounded down to whole blocks: the rows after them come from the block or tail
   * that follows. */
  CHECK(b.res.cached_prompt_tokens >= a.res.prompt_tokens,
        "turn 2 reuses at least turn 1's whole prompt (%lld cached, turn 1 prompt %lld)",
        (long long)b.res.cached_prompt_tokens, (long long)a.res.prompt_tokens);
  CHECK(b.res.image_cache_hits + b.res.image_cache_misses == 0 && b.res.t.vision_ms == 0,
        "turn 2: the image lies in the reused prefix, no vision at all");
  gen_result ref;
  if (solo(m, t2, &g, &ref)) {
    check_same("follow-up turn with prefix cache", &b, &ref);
    /* Two sequences at once on the same cached prefix (shared blocks where the shape allows). */
    job b2 = {0}, b3 = {0};
    CHECK(submit(e, t2, &g, &b2, NULL) == QVL_OK && submit(e, t2, &g, &b3, NULL) == QVL_OK, "submit: %s",
          qvl_last_error());
    CHECK(wait_done(&b2, 60) && wait_done(&b3, 60), "concurrent follow-ups done");
    CHECK(b2.res.cached_prompt_tokens >= b.res.cached_prompt_tokens &&
              b3.res.cached_prompt_tokens >= b.res.cached_prompt_tokens,
          "concurrent follow-ups both reuse the prefix (%lld, %lld)", (long long)b2.res.cached_prompt_tokens,
          (long long)b3.res.cached_prompt_tokens);
    check_same("concurrent follow-up 1 on a shared prefix", &b2, &ref);
    check_same("concurrent follow-up 2 on a shared prefix", &b3, &ref);
    job_free(&b2);
    job_free(&b3);
    gen_result_free(&ref);
  }
  /* The same text with another image must not reuse the image part. */
  cJSON *t3 = conv1(IMG("scene_64x128.png"), "Describe this picture in detail, please.");
  job d = {0};
  CHECK(submit(e, t3, &g, &d, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&d, 60), "other image done");
  int64_t img_first = -1;
  {
    vlm_prompt_opts o = test_prompt_opts();
    vlm_prompt p;
    if (vlm_prompt_build(m, t3, &o, &p) == QVL_OK) {
      img_first = p.img_idx[0];
      vlm_prompt_free(&p);
    }
  }
  CHECK(d.res.cached_prompt_tokens <= img_first, "another image: reuse stops before the image (%lld > %lld)",
        (long long)d.res.cached_prompt_tokens, (long long)img_first);
  gen_result ref3;
  if (solo(m, t3, &g, &ref3)) {
    check_same("same text, other image", &d, &ref3);
    gen_result_free(&ref3);
  }
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK(st.prefix_cache_hits >= 1 && st.prefix_cache_bytes > 0, "stats: prefix cache %llu hits, %lld bytes",
        (unsigned long long)st.prefix_cache_hits, (long long)st.prefix_cache_bytes);
  engine_stop(e, true);
  job_free(&a);
  job_free(&b);
  job_free(&d);
  cJSON_Delete(t1);
  cJSON_Delete(t2);
  cJSON_Delete(t3);
}

static void test_backpressure(const vlm *m) {
  engine_config c = small_config();
  c.max_batch_size = 1;
  c.queue_capacity = 2;
  c.max_wait_ms = 0;
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  cJSON *q = conv1(NULL, "Tell me a long story.");
  gen_params g = greedy(3000);
  enum { N = 6 };
  job jobs[N];
  memset(jobs, 0, sizeof jobs);
  uint64_t ids[N] = {0};
  int busy = 0, ok = 0;
  double worst = 0;
  for (int i = 0; i < N; i++) {
    double t0 = time_now_s();
    qvl_status s = submit(e, q, &g, &jobs[i], &ids[i]);
    double dt = time_now_s() - t0;
    if (s == QVL_ERR_BUSY) {
      busy++;
      if (dt > worst)
        worst = dt;
    } else if (s == QVL_OK) {
      ok++;
    }
    if (i == 0) /* let the first one start running: then 2 fit in the queue */
      while (pieces_of(&jobs[0]) == 0 && !jobs[0].done) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
      }
  }
  CHECK(ok == 3 && busy == N - 3, "1 running + 2 queued accepted, the rest busy (ok %d, busy %d)", ok, busy);
  CHECK(worst < 0.05, "QVL_ERR_BUSY came promptly (%.1f ms)", worst * 1e3);
  /* Cancel the running one: its slot and memory are free at once and the next starts. */
  double t0 = time_now_s();
  engine_cancel(e, ids[0]);
  CHECK(wait_done(&jobs[0], 10), "cancelled request finished");
  CHECK(jobs[0].res.status == QVL_ERR_CANCELLED && jobs[0].res.finish_reason == QVL_FINISH_CANCELLED &&
            jobs[0].res.completion_tokens < g.max_tokens,
        "cancel: status %s, reason %s, %lld tokens", qvl_status_text(jobs[0].res.status), qvl_finish_name(jobs[0].res.finish_reason),
        (long long)jobs[0].res.completion_tokens);
  CHECK(time_now_s() - t0 < 2.0, "cancel took effect within a step (%.0f ms)", (time_now_s() - t0) * 1e3);
  while (pieces_of(&jobs[1]) == 0 && !jobs[1].done) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(pieces_of(&jobs[1]) > 0, "the next request runs after the cancel");
  /* A client that goes away (on_text returns false) ends its request too. */
  pthread_mutex_lock(&g_mu);
  jobs[1].stop_streaming = true;
  pthread_mutex_unlock(&g_mu);
  CHECK(wait_done(&jobs[1], 10), "disconnected request finished");
  CHECK(jobs[1].res.status == QVL_ERR_CANCELLED, "disconnect: status %s", qvl_status_text(jobs[1].res.status));
  /* Cancelling a queued request: on_done with "cancelled" and no tokens. */
  engine_cancel(e, ids[2]);
  engine_cancel(e, 987654321); /* unknown ids are ignored */
  CHECK(wait_done(&jobs[2], 10), "queued request cancelled");
  CHECK(jobs[2].res.status == QVL_ERR_CANCELLED, "cancelled request status %s", qvl_status_text(jobs[2].res.status));
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK(st.kv_used_bytes == 0 && st.running == 0 && st.queued == 0, "all memory back (kv %lld, running %d, queued %d)",
        (long long)st.kv_used_bytes, st.running, st.queued);
  CHECK(st.requests_failed == 3, "three requests counted as failed (%llu)", (unsigned long long)st.requests_failed);
  /* Requests that can never run are refused at submit. */
  gen_params big = greedy(5000);
  job x = {0};
  CHECK(submit(e, q, &big, &x, NULL) == QVL_ERR_CONTEXT_OVERFLOW, "max_tokens beyond n_ctx: context overflow");
  gen_params zero = greedy(0);
  CHECK(submit(e, q, &zero, &x, NULL) == QVL_ERR_INVALID_ARG, "max_tokens 0: invalid");
  engine_stop(e, true);
  for (int i = 0; i < N; i++)
    job_free(&jobs[i]);

  /* A KV budget too small for the request: ERR_TOO_LARGE with the sizes in the message (an f32
   * cache: 3000 tokens of it exceed 1 MiB for this model). */
  c = small_config();
  c.kv_cache_mb = 1;
  c.kv_type = KV_TYPE_F32;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  gen_params g2 = greedy(3000);
  qvl_status s = submit(e, q, &g2, &x, NULL);
  CHECK(s == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "kv_cache_mb"), "too large for the budget: %s (%s)",
        qvl_status_text(s), qvl_last_error());
  engine_stop(e, true);
  /* The F16 cache charges half the KV bytes: the admission charge (decoder_seq_bytes) of f32 and
   * f16 differs by exactly the f16 KV size, i.e. half of the f32 KV. */
  {
    decoder_seq_params p32 = {.n_ctx = 3000 + 8, .n_batch = 24, .kv_type = KV_TYPE_F32};
    decoder_seq_params p16 = {.n_ctx = 3000 + 8, .n_batch = 24, .kv_type = KV_TYPE_F16};
    const decoder_hparams *hp = &m->text->hp;
    uint64_t kv16 = kv_cache_bytes_type(hp->n_layer, 3008, hp->n_head_kv * hp->head_dim, KV_TYPE_F16);
    CHECK(decoder_seq_bytes(m->text, &p32) - decoder_seq_bytes(m->text, &p16) == kv16,
          "f16 admission charge: %llu vs %llu (f16 KV %llu)", (unsigned long long)decoder_seq_bytes(m->text, &p32),
          (unsigned long long)decoder_seq_bytes(m->text, &p16), (unsigned long long)kv16);
  }

  /* A prompt over max_prompt_tokens: ERR_TOO_LARGE naming the limit. */
  c = small_config();
  c.max_prompt_tokens = 3;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  gen_params g3 = greedy(4);
  s = submit(e, q, &g3, &x, NULL);
  CHECK(s == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "at most 3"), "prompt over max_prompt_tokens: %s (%s)",
        qvl_status_text(s), qvl_last_error());
  engine_stop(e, true);
  cJSON_Delete(q);
}

static void test_timeout_and_stop(const vlm *m) {
  engine_config c = small_config();
  c.request_timeout_ms = 150;
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  cJSON *q = conv1(NULL, "Tell me a long story.");
  gen_params g = greedy(4000);
  job a = {0};
  double t0 = time_now_s();
  CHECK(submit(e, q, &g, &a, NULL) == QVL_OK, "submit: %s", qvl_last_error());
  CHECK(wait_done(&a, 30), "timed-out request finished");
  double dt = time_now_s() - t0;
  CHECK(a.res.status == QVL_ERR_TIMEOUT && a.res.completion_tokens < g.max_tokens,
        "timeout: status %s after %.0f ms with %lld tokens", qvl_status_text(a.res.status), dt * 1e3,
        (long long)a.res.completion_tokens);
  engine_stop(e, true);
  job_free(&a);

  /* Drain: everything accepted before the stop completes normally. */
  c = small_config();
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  enum { N = 4 };
  job jobs[N];
  memset(jobs, 0, sizeof jobs);
  gen_params g2 = greedy(15);
  for (int i = 0; i < N; i++)
    CHECK(submit(e, q, &g2, &jobs[i], NULL) == QVL_OK, "submit: %s", qvl_last_error());
  engine_stop(e, true);
  for (int i = 0; i < N; i++)
    CHECK(jobs[i].done && jobs[i].n_done_calls == 1 && jobs[i].res.status == QVL_OK &&
              jobs[i].res.completion_tokens == 15,
          "drain: request %d completed (%s, %lld tokens)", i, qvl_status_text(jobs[i].res.status),
          (long long)jobs[i].res.completion_tokens);
  for (int i = 0; i < N; i++)
    job_free(&jobs[i]);

  /* Stop without drain: everything ends "cancelled", each on_done exactly once. */
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  gen_params g3 = greedy(3000);
  for (int i = 0; i < N; i++)
    CHECK(submit(e, q, &g3, &jobs[i], NULL) == QVL_OK, "submit: %s", qvl_last_error());
  while (pieces_of(&jobs[0]) == 0) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  engine_stop(e, false);
  for (int i = 0; i < N; i++)
    CHECK(jobs[i].done && jobs[i].n_done_calls == 1 && jobs[i].res.status == QVL_ERR_CANCELLED,
          "abort: request %d cancelled (%s)", i, qvl_status_text(jobs[i].res.status));
  for (int i = 0; i < N; i++)
    job_free(&jobs[i]);
  cJSON_Delete(q);
}

/* Cache data structures alone: LRU bounds and collisions. */
/* Whether rows [0, rows) of every layer of two f32 caches (layer_elems elements apart) are equal. */
static bool kv_rows_equal(const kv_cache *a, const kv_cache *b, int n_layer, int64_t rows, int64_t layer_elems) {
  for (int l = 0; l < n_layer; l++)
    for (int64_t i = 0; i < rows * a->row; i++) {
      int64_t o = (int64_t)l * layer_elems + i;
      if (a->k[o] != b->k[o] || a->v[o] != b->v[o])
        return false;
    }
  return true;
}

static void test_caches_unit(void) {
  image_cache *ic;
  int64_t d = 4, nt = 8;
  int64_t entry = (int64_t)(nt * d * 2 * sizeof(float)) + 256;
  CHECK(image_cache_init(2 * (entry - 256) + 200, &ic) == QVL_OK, "image cache init");
  float a[64], b[64], out[64];
  for (int i = 0; i < 64; i++)
    a[i] = (float)i, b[i] = (float)-i;
  image_cache_put(ic, 1, 1, 4, 8, nt, d, 1, a, a + 32, 32);
  image_cache_put(ic, 2, 1, 4, 8, nt, d, 1, b, b + 32, 32);
  CHECK(image_cache_get(ic, 1, 1, 4, 8, nt, d, 1, out, out + 32, 32) && memcmp(out, a, sizeof a) == 0, "hit 1");
  CHECK(!image_cache_get(ic, 1, 1, 8, 4, nt, d, 1, out, out + 32, 32), "another grid misses");
  image_cache_put(ic, 3, 1, 4, 8, nt, d, 1, a, a + 32, 32); /* evicts 2, the least recently used */
  CHECK(!image_cache_get(ic, 2, 1, 4, 8, nt, d, 1, out, out + 32, 32), "LRU evicted");
  CHECK(image_cache_get(ic, 1, 1, 4, 8, nt, d, 1, out, out + 32, 32), "recently used kept");
  CHECK(image_cache_bytes(ic) <= 2 * (entry - 256) + 200, "within the cap");
  /* files by their encoded bytes: known once noted for a cached image, forgotten with it */
  uint64_t fh = 0;
  int gt = 0, gh = 0, gw = 0;
  int64_t fnt = 0;
  CHECK(!image_cache_find_encoded(ic, 77, &fh, &gt, &gh, &gw, &fnt), "unknown file");
  image_cache_note_encoded(ic, 1, 77);
  CHECK(image_cache_find_encoded(ic, 77, &fh, &gt, &gh, &gw, &fnt) && fh == 1 && gt == 1 && gh == 4 && gw == 8 &&
            fnt == nt,
        "file known after note (hash %llu grid %d %d %d nt %lld)", (unsigned long long)fh, gt, gh, gw, (long long)fnt);
  image_cache_note_encoded(ic, 2, 78); /* image 2 was evicted: nothing to attach the file to */
  CHECK(!image_cache_find_encoded(ic, 78, &fh, &gt, &gh, &gw, &fnt), "file of an uncached image unknown");
  image_cache_put(ic, 4, 1, 4, 8, nt, d, 1, a, a + 32, 32); /* evicts 3 */
  image_cache_put(ic, 5, 1, 4, 8, nt, d, 1, a, a + 32, 32); /* evicts 1 */
  CHECK(!image_cache_find_encoded(ic, 77, &fh, &gt, &gh, &gw, &fnt), "an evicted image forgets its files");
  image_cache_free(ic);

  prefix_cache *pc;
  kv_cache kv;
  CHECK(kv_cache_init(&kv, 2, 4 * PREFIX_BLOCK, 3) == QVL_OK, "kv");
  for (int64_t i = 0; i < 2 * 4 * PREFIX_BLOCK * 3; i++)
    kv.k[i] = (float)i, kv.v[i] = (float)(i * 2);
  kv.n = 3 * PREFIX_BLOCK;
  uint64_t keys[4 * PREFIX_BLOCK];
  for (int i = 0; i < 4 * PREFIX_BLOCK; i++)
    keys[i] = (uint64_t)i;
  int64_t np[4 * PREFIX_BLOCK]; /* the position state after each row */
  for (int i = 0; i < 4 * PREFIX_BLOCK; i++)
    np[i] = i + 1;
  CHECK(prefix_cache_init(1 << 20, 2, 3, &pc) == QVL_OK, "prefix cache init");
  prefix_cache_store(pc, keys, 3 * PREFIX_BLOCK, &kv, np);
  kv_cache kv2;
  CHECK(kv_cache_init(&kv2, 2, 4 * PREFIX_BLOCK, 3) == QVL_OK, "kv");
  int64_t next = -1;
  int64_t got = prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next);
  CHECK(got == 3 * PREFIX_BLOCK && next == 48, "restored %lld tokens, next_pos %lld", (long long)got, (long long)next);
  bool same = true;
  for (int l = 0; l < 2; l++)
    for (int64_t i = 0; i < 3 * PREFIX_BLOCK * 3; i++) {
      int64_t o = (int64_t)l * 4 * PREFIX_BLOCK * 3 + i;
      if (kv2.k[o] != kv.k[o] || kv2.v[o] != kv.v[o])
        same = false;
    }
  CHECK(same, "restored rows equal the stored ones");
  keys[PREFIX_BLOCK + 3] = 999; /* differs inside block 1: block 0 and block 1's first 3 rows match */
  got = prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next);
  CHECK(got == PREFIX_BLOCK + 3 && next == PREFIX_BLOCK + 3, "divergent prefix: %lld tokens, next %lld", (long long)got,
        (long long)next);
  CHECK(kv_rows_equal(&kv2, &kv, 2, PREFIX_BLOCK + 3, 4 * PREFIX_BLOCK * 3), "the partly matching block's rows");
  keys[0] = prefix_image_key(42, 0); /* differs in block 0: nothing */
  CHECK(prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next) == 0, "no match");
  keys[0] = 0;
  keys[PREFIX_BLOCK + 3] = PREFIX_BLOCK + 3;
  /* A restore stops where it is told to (the last prompt token is always computed), mid-block too. */
  got = prefix_cache_restore(pc, keys, 2 * PREFIX_BLOCK + 7, &kv2, &next);
  CHECK(got == 2 * PREFIX_BLOCK + 7 && next == got, "bounded restore: %lld tokens", (long long)got);
  CHECK(prefix_cache_match(pc, keys, 2 * PREFIX_BLOCK + 7) == got, "match agrees with restore");
  /* A sequence's last rows after its whole blocks are kept as a tail: asking again restores all
   * but the last token, and a longer prompt the whole tail; other keys only what they share. */
  kv.n = 3 * PREFIX_BLOCK + 5;
  prefix_cache_store(pc, keys, kv.n, &kv, np);
  got = prefix_cache_restore(pc, keys, kv.n - 1, &kv2, &next);
  CHECK(got == kv.n - 1 && next == got && kv_rows_equal(&kv2, &kv, 2, got, 4 * PREFIX_BLOCK * 3),
        "tail: %lld of %lld tokens", (long long)got, (long long)kv.n);
  got = prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next);
  CHECK(got == kv.n && next == got, "whole tail: %lld", (long long)got);
  keys[3 * PREFIX_BLOCK + 2] = 777;
  got = prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next);
  CHECK(got == 3 * PREFIX_BLOCK + 2 && next == got, "tail up to the first other key: %lld", (long long)got);
  keys[3 * PREFIX_BLOCK + 2] = 3 * PREFIX_BLOCK + 2;
  kv.n = 3 * PREFIX_BLOCK;
  CHECK(prefix_image_key(42, 0) != prefix_image_key(43, 0) && prefix_image_key(42, 0) > UINT32_MAX,
        "image keys differ per image and never equal a token id");
  prefix_cache_free(pc);
  /* A cap of two blocks keeps the chain's start. */
  CHECK(prefix_cache_init(2 * (int64_t)(kv_cache_bytes(2, PREFIX_BLOCK, 3) + 512), 2, 3, &pc) == QVL_OK, "init");
  for (int i = 0; i < 4 * PREFIX_BLOCK; i++)
    keys[i] = (uint64_t)i;
  prefix_cache_store(pc, keys, 3 * PREFIX_BLOCK, &kv, np);
  got = prefix_cache_restore(pc, keys, 4 * PREFIX_BLOCK, &kv2, &next);
  CHECK(got == 2 * PREFIX_BLOCK, "bounded: the first two blocks kept (%lld)", (long long)got);
  CHECK(prefix_cache_bytes(pc) <= 2 * (int64_t)(kv_cache_bytes(2, PREFIX_BLOCK, 3) + 512), "within the cap");
  prefix_cache_free(pc);
  /* F16 caches: blocks hold half the bytes, restore bit for bit, and never mix with f32 caches. */
  kv_cache h, h2;
  CHECK(kv_cache_init_type(&h, 2, 4 * PREFIX_BLOCK, 3, KV_TYPE_F16) == QVL_OK && h.kh && !h.k, "f16 kv");
  CHECK(kv_cache_init_type(&h2, 2, 4 * PREFIX_BLOCK, 3, KV_TYPE_F16) == QVL_OK, "f16 kv");
  CHECK(kv_cache_bytes_type(2, 4 * PREFIX_BLOCK, 3, KV_TYPE_F16) * 2 == kv_cache_bytes(2, 4 * PREFIX_BLOCK, 3),
        "f16 halves the bytes");
  for (int64_t i = 0; i < 2 * 4 * PREFIX_BLOCK * 3; i++)
    h.kh[i] = (uint16_t)(i * 7), h.vh[i] = (uint16_t)(i * 13 + 1);
  h.n = 3 * PREFIX_BLOCK;
  prefix_cache *p16, *p32;
  CHECK(prefix_cache_init_type(1 << 20, 2, 3, KV_TYPE_F16, &p16) == QVL_OK, "f16 prefix cache");
  CHECK(prefix_cache_init(1 << 20, 2, 3, &p32) == QVL_OK, "f32 prefix cache");
  CHECK(prefix_cache_block_bytes(p16) < prefix_cache_block_bytes(p32) &&
            prefix_cache_block_bytes(p16) - (prefix_cache_block_bytes(p32) - (int64_t)kv_cache_bytes(2, PREFIX_BLOCK, 3)) ==
                (int64_t)kv_cache_bytes(2, PREFIX_BLOCK, 3) / 2,
        "f16 block bytes: %lld vs %lld", (long long)prefix_cache_block_bytes(p16),
        (long long)prefix_cache_block_bytes(p32));
  prefix_cache_store(p16, keys, 3 * PREFIX_BLOCK, &h, np);
  prefix_cache_store(p32, keys, 3 * PREFIX_BLOCK, &h, np); /* another type: not stored */
  CHECK(prefix_cache_bytes(p32) == 0, "an f16 sequence is not stored in an f32 prefix cache");
  CHECK(prefix_cache_restore(p16, keys, 4 * PREFIX_BLOCK, &kv2, &next) == 0,
        "f16 blocks are not restored into an f32 cache");
  got = prefix_cache_restore(p16, keys, 4 * PREFIX_BLOCK, &h2, &next);
  CHECK(got == 3 * PREFIX_BLOCK && next == 48, "f16 restored %lld tokens", (long long)got);
  same = true;
  for (int l = 0; l < 2; l++)
    for (int64_t i = 0; i < 3 * PREFIX_BLOCK * 3; i++) {
      int64_t o = (int64_t)l * 4 * PREFIX_BLOCK * 3 + i;
      if (h2.kh[o] != h.kh[o] || h2.vh[o] != h.vh[o])
        same = false;
    }
  CHECK(same, "restored f16 rows equal the stored ones");
  prefix_cache_free(p16);
  prefix_cache_free(p32);
  kv_cache_free(&h);
  kv_cache_free(&h2);
  kv_cache_free(&kv);
  kv_cache_free(&kv2);
}

/* The fixture model's KV rows (16 f16) are not whole pages, so its prefix cache copies; the tiny
 * random model's (2 heads of 64) are, so the same follow-up test runs on shared, mapped blocks. */
static void test_prefix_cache_shared(void) {
  char dir[] = "/tmp/qvl_test_engine_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "temp dir");
  char text[96], mmproj[96];
  snprintf(text, sizeof text, "%s/text.gguf", dir);
  snprintf(mmproj, sizeof mmproj, "%s/mmproj.gguf", dir);
  qvl_random_opts ro = {.tokenizer_from = E2E_MODEL, .out_text = text, .out_mmproj = mmproj, .seed = 7, .tiny = true};
  vlm *m = NULL;
  vlm_paths paths = {.model = text, .mmproj = mmproj};
  if (qvl_make_random(&ro) == QVL_OK && vlm_load(&paths, &m) == QVL_OK) {
    const decoder_hparams *hp = &m->text->hp;
    CHECK(kv_block_mappable(hp->n_head_kv * hp->head_dim, KV_TYPE_DEFAULT), "the tiny model's KV blocks are pages");
    test_prefix_cache(m);
  } else {
    CHECK(false, "tiny random model: %s", qvl_last_error());
  }
  vlm_free(m);
  remove(text);
  remove(mmproj);
  rmdir(dir);
}

int main(void) {
  if (kernels_init(NULL, 0) != QVL_OK) {
    fprintf(stderr, "kernels_init: %s\n", qvl_last_error());
    return 1;
  }
  test_caches_unit();
  vlm *m = test_load_vlm(E2E_MODEL, E2E_MMPROJ);
  if (m) {
    test_decoder_batch(m, KV_TYPE_F32);
    test_decoder_batch(m, KV_TYPE_F16);
    test_decoder_work(m);
    test_concurrent_equals_solo(m);
    test_image_cache(m);
    test_known_image(m);
    test_prefix_cache(m);
    test_backpressure(m);
    test_timeout_and_stop(m);
    test_count_stop_images(m);
  }
  vlm_free(m);
  test_prefix_cache_shared();
  return TEST_SUMMARY("test_engine");
}
