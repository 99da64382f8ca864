/* Several engines at once (issue 31): two engines on one model, and engines on two models, each
 * answering its own greedy requests again and again from its own thread, give exactly the ids the
 * same requests get one after another. The kernels' scratch and activation buffers belong to the
 * calling thread, so a second caller (which runs its loops serially while the first holds the
 * worker pool) never shares them. `make test` also runs this program under ThreadSanitizer.
 * Settings per model and engine (issue 32): one process holds an exact and a fast tower of the
 * same files, and engines with f16 and f32 KV caches, side by side. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "capi/api_impl.h"
#include "kernels/kernels.h"
#include "qvl.h"
#include "test.h"

#define E2E "tests/fixtures/models/e2e/gguf/"
#define MICRO_B "tests/fixtures/models/micro-b/gguf/"
#define MICRO_A "tests/fixtures/models/micro-a/gguf/"
#define IMAGE "tests/fixtures/images/scene_64x128.png"
#define N_PROMPTS 4
#define MAX_IDS 12

typedef struct answer {
  int32_t ids[MAX_IDS];
  int64_t n;
  qvl_status status;
} answer;

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  answer *out;
} waiter;

static void on_done(void *user, const qvl_result *res) {
  waiter *w = user;
  pthread_mutex_lock(&w->mu);
  int64_t n = 0;
  const int32_t *ids = qvl_result_ids(res, &n);
  w->out->n = n < MAX_IDS ? n : MAX_IDS;
  if (ids && w->out->n > 0)
    memcpy(w->out->ids, ids, (size_t)w->out->n * sizeof *ids);
  w->out->status = qvl_result_status(res);
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Prompt k of an engine: text questions, and an image question when the model has a tower (the
 * tower's attention and F16 matmuls use the kernels' scratch too). */
static qvl_status ask(qvl_engine *e, bool vision, int k, answer *out) {
  static const char *const q[N_PROMPTS] = {"What is the capital of France?", "Count from one to five.",
                                           "Describe this picture in detail.", "Name three colours."};
  memset(out, 0, sizeof *out);
  waiter w = {.out = out};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  qvl_request *rq = NULL;
  qvl_status s = qvl_request_new(&rq);
  if (s == QVL_OK && vision && k == 2)
    s = qvl_request_add_image_file(rq, IMAGE);
  if (s == QVL_OK)
    s = qvl_request_add_message(rq, "user", q[k]);
  if (s == QVL_OK) {
    qvl_sampling sp;
    qvl_request_get_sampling(rq, &sp);
    sp.temperature = 0; /* greedy */
    qvl_request_set_sampling(rq, &sp);
    qvl_request_set_max_tokens(rq, MAX_IDS);
    qvl_request_set_callbacks(rq, NULL, on_done, &w);
    s = qvl_engine_submit(e, rq, NULL);
  }
  qvl_request_free(rq);
  pthread_mutex_lock(&w.mu);
  while (s == QVL_OK && !w.done)
    pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return s == QVL_OK ? out->status : s;
}

typedef struct side {
  const char *name;
  qvl_engine *e;
  bool vision;
  int rounds;
  answer want[N_PROMPTS]; /* asked one after another */
  int asked, differ, failed;
} side;

static void *run_side(void *arg) {
  side *s = arg;
  for (int r = 0; r < s->rounds; r++)
    for (int k = 0; k < N_PROMPTS; k++) {
      answer a;
      s->asked++;
      if (ask(s->e, s->vision, k, &a) != QVL_OK)
        s->failed++;
      else if (a.n != s->want[k].n || memcmp(a.ids, s->want[k].ids, (size_t)a.n * sizeof *a.ids))
        s->differ++;
    }
  return NULL;
}

static qvl_model *load_prec(const char *text, const char *mmproj, const char *precision) {
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.threads = 2;
  mp.precision = precision;
  qvl_model *m = NULL;
  CHECK(qvl_model_load(text, mmproj, &mp, &m) == QVL_OK, "load %s: %s", text, qvl_last_error());
  return m;
}
static qvl_model *load(const char *text, const char *mmproj) { return load_prec(text, mmproj, NULL); }

/* Engines on the models ma, mb (the same one twice, or two): sequential answers first, then both
 * engines at once. */
static void side_by_side(const char *what, const qvl_model *ma, const qvl_model *mb, const char *const kv[2],
                         int rounds) {
  side s[2] = {{.name = "first"}, {.name = "second"}};
  const qvl_model *m[2] = {ma, mb};
  for (int i = 0; i < 2; i++) {
    qvl_engine_params ep;
    qvl_engine_params_default(&ep);
    ep.kv_type = kv ? kv[i] : NULL;
    CHECK(qvl_engine_start(m[i], &ep, &s[i].e) == QVL_OK, "%s: start: %s", what, qvl_last_error());
    if (s[i].e && kv && kv[i])
      CHECK(engine_kv_type(s[i].e->e) == (strcmp(kv[i], "f32") ? KV_TYPE_F16 : KV_TYPE_F32), "%s: KV %s", what, kv[i]);
    s[i].vision = qvl_model_has_vision(m[i]);
    s[i].rounds = rounds;
  }
  if (!s[0].e || !s[1].e)
    goto out;
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < N_PROMPTS; k++)
      CHECK(ask(s[i].e, s[i].vision, k, &s[i].want[k]) == QVL_OK && s[i].want[k].n > 0, "%s: %s engine, prompt %d alone",
            what, s[i].name, k);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, run_side, &s[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    CHECK(s[i].asked == rounds * N_PROMPTS && s[i].failed == 0 && s[i].differ == 0,
          "%s: %s engine: %d of %d answers differ from the sequential ones, %d failed", what, s[i].name, s[i].differ,
          s[i].asked, s[i].failed);
out:
  for (int i = 0; i < 2; i++)
    qvl_engine_stop(s[i].e, true);
}

int main(int argc, char **argv) {
  /* ThreadSanitizer runs are ~10x slower: fewer rounds (tests/run.sh passes none). */
  int rounds = argc > 1 ? atoi(argv[1]) : 4;
  if (rounds < 1)
    rounds = 1;
  qvl_model *a = load(E2E "e2e-Q8_0.gguf", E2E "mmproj-e2e-F16.gguf");
  qvl_model *b = load(MICRO_B "micro-b-Q8_0.gguf", MICRO_B "mmproj-micro-b-Q8_0.gguf");
  if (a)
    side_by_side("two engines on one model", a, a, NULL, rounds);
  if (a && b)
    side_by_side("engines on two models", a, b, NULL, rounds);
  static const char *const kv[2] = {"f32", "f16"};
  if (a)
    side_by_side("engines with f32 and f16 caches", a, a, kv, 1);
  qvl_model_free(a);
  qvl_model_free(b);
  /* An exact and a fast tower of the same files in one process: each keeps its tier, and where the
   * fast tier rounds (bf16 dot products, or int8 blocks), their image answers may differ while each
   * equals itself when asked again beside the other. */
  qvl_model *ex = load_prec(MICRO_A "micro-a-F16.gguf", MICRO_A "mmproj-micro-a-F16.gguf", "exact");
  qvl_model *fa = load_prec(MICRO_A "micro-a-F16.gguf", MICRO_A "mmproj-micro-a-F16.gguf", "fast");
  qvl_model *bad = NULL;
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.precision = "slow";
  CHECK(qvl_model_load(MICRO_A "micro-a-F16.gguf", NULL, &mp, &bad) == QVL_ERR_INVALID_ARG && !bad &&
            strstr(qvl_last_error(), "precision 'slow'"),
        "a bad precision: %s", qvl_last_error());
  qvl_engine_params ep;
  qvl_engine_params_default(&ep);
  ep.kv_type = "f8";
  qvl_engine *be = NULL;
  CHECK(ex && qvl_engine_start(ex, &ep, &be) == QVL_ERR_INVALID_ARG && !be && strstr(qvl_last_error(), "kv_type 'f8'"),
        "a bad kv_type: %s", qvl_last_error());
  if (ex && fa) {
    CHECK(ex->v->vision->precision == KN_PREC_EXACT && fa->v->vision->precision == KN_PREC_FAST,
          "each model keeps its tier");
    side_by_side("an exact and a fast model", ex, fa, NULL, rounds);
  }
  qvl_model_free(ex);
  qvl_model_free(fa);
  return TEST_SUMMARY("test_engines_concurrent");
}
