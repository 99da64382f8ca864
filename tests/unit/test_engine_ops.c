/* Engine behaviour operators rely on (issue 13): dynamic batching (max_wait_ms gathers requests
 * that arrive close together into one step) and the context policy (prompt/history.h: trimming
 * old turns, the default max_tokens), with the e2e fixture model. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/timing.h"
#include "engine/engine.h"
#include "prompt/history.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_model.h"
#include "chat_msg.h"

#define IMG "tests/fixtures/images/rgb_333x250.png"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct job {
  bool done;
  engine_result res; /* text and ids pointers are not kept */
} job;

static void on_done(void *user, const engine_result *r) {
  job *j = user;
  pthread_mutex_lock(&g_mu);
  j->res = *r;
  j->res.text = NULL;
  j->res.ids = NULL;
  j->done = true;
  pthread_mutex_unlock(&g_mu);
}

static bool wait_done(job *j, double timeout_s) {
  double end = time_now_s() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    bool d = j->done;
    pthread_mutex_unlock(&g_mu);
    if (d || time_now_s() > end)
      return d;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static engine_request request(const cJSON *msgs, int64_t max_tokens, job *j) {
  engine_request rq;
  memset(&rq, 0, sizeof rq);
  rq.messages = msgs;
  vlm_prompt_opts_default(&rq.prompt);
  rq.prompt.source.allow_files = true;
  rq.gen = gen_params_default();
  rq.gen.sampling.temperature = 0;
  rq.gen.max_tokens = max_tokens;
  rq.gen.ignore_eos = true;
  rq.on_done = on_done;
  rq.user = j;
  return rq;
}

/* Two requests 20 ms apart: with max_wait_ms 100 the engine waits for the second and admits both
 * in the same step; with max_wait_ms 0 the first starts alone (the control that shows the check
 * can fail). */
static void test_dynamic_batching(const vlm *m) {
  for (int wait = 0; wait < 2; wait++) {
    engine_config c;
    engine_config_default(&c);
    c.max_batch_size = 4;
    c.max_wait_ms = wait ? 100 : 0;
    c.kv_cache_mb = 256;
    engine *e = NULL;
    CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
    if (!e)
      return;
    cJSON *a = cJSON_CreateArray(), *b = cJSON_CreateArray();
    cJSON_AddItemToArray(a, chat_msg("user", NULL, "first request"));
    cJSON_AddItemToArray(b, chat_msg("user", NULL, "second request, a little later"));
    job ja = {0}, jb = {0};
    engine_request ra = request(a, 8, &ja), rb = request(b, 8, &jb);
    uint64_t id;
    double t0 = time_now_s();
    CHECK(engine_submit(e, &ra, &id) == QVL_OK, "submit a: %s", qvl_last_error());
    /* the control leaves the engine ample time to start the first one alone, even on a loaded
     * machine */
    sleep_ms(wait ? 20 : 200);
    double t1 = time_now_s();
    CHECK(engine_submit(e, &rb, &id) == QVL_OK, "submit b: %s", qvl_last_error());
    CHECK(wait_done(&ja, 60) && wait_done(&jb, 60), "both finish");
    CHECK(ja.res.status == QVL_OK && jb.res.status == QVL_OK, "both ok");
    CHECK(ja.res.admitted_step > 0 && jb.res.admitted_step > 0, "admission steps recorded");
    if (wait) {
      CHECK(ja.res.admitted_step == jb.res.admitted_step,
            "max_wait_ms 100: requests %.0f ms apart start in the same step (%llu vs %llu)", (t1 - t0) * 1e3,
            (unsigned long long)ja.res.admitted_step, (unsigned long long)jb.res.admitted_step);
      CHECK(ja.res.t.queue_ms >= 15, "the first one waited for company (%.1f ms)", ja.res.t.queue_ms);
    } else {
      CHECK(ja.res.admitted_step < jb.res.admitted_step,
            "max_wait_ms 0: the first starts alone (%llu vs %llu)", (unsigned long long)ja.res.admitted_step,
            (unsigned long long)jb.res.admitted_step);
    }
    engine_stop(e, true);
    cJSON_Delete(a);
    cJSON_Delete(b);
  }
}

static void test_turns(void) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, chat_msg("assistant", NULL, "greeting before any question"));
  cJSON_AddItemToArray(a, chat_msg("system", NULL, "sys"));
  cJSON_AddItemToArray(a, chat_msg("user", NULL, "q1"));
  cJSON_AddItemToArray(a, chat_msg("assistant", NULL, "a1"));
  cJSON_AddItemToArray(a, chat_msg("tool", NULL, "t1"));
  cJSON_AddItemToArray(a, chat_msg("user", NULL, "q2"));
  int turn_of[6];
  int n = history_turns(a, turn_of);
  CHECK(n == 3, "3 turns (leading answer, q1, q2), got %d", n);
  int want[6] = {0, -1, 1, 1, 1, 2};
  CHECK(!memcmp(turn_of, want, sizeof want), "turn of each message");
  int dropped = 0;
  cJSON *kept = history_without_turns(a, turn_of, 2, &dropped);
  CHECK(kept && cJSON_GetArraySize(kept) == 2 && dropped == 4, "dropping 2 turns keeps system + q2");
  const cJSON *r0 = cJSON_GetObjectItem(cJSON_GetArrayItem(kept, 0), "role");
  CHECK(r0 && !strcmp(r0->valuestring, "system"), "the system message first");
  cJSON_Delete(kept);
  cJSON_Delete(a);
  history_mode md;
  CHECK(history_mode_parse("trim", &md) && md == HISTORY_TRIM && history_mode_parse("error", &md) &&
            md == HISTORY_ERROR && !history_mode_parse("Trim", &md) && !history_mode_parse(NULL, &md),
        "mode names");
}

static void test_policy(const vlm *m) {
  char answer[4096] = "";
  for (int i = 0; i < 80; i++)
    strcat(answer, "a small coloured test pattern, ");
  cJSON *conv = picture_conversation(12, IMG, answer);
  vlm_prompt_opts o;
  vlm_prompt_opts_default(&o);
  o.source.allow_files = true;
  o.defer_vision = true;
  vlm_prompt full, p;
  CHECK(vlm_prompt_build(m, conv, &o, &full) == QVL_OK, "full prompt: %s", qvl_last_error());
  CHECK(full.n > 4096, "the conversation does not fit 4096 (%lld tokens)", (long long)full.n);

  /* trim: the fewest turns dropped, the rest fits with room for max_tokens */
  history_policy pol = history_policy_default();
  pol.mode = HISTORY_TRIM;
  int64_t mt = 64;
  history_report rep;
  CHECK(history_build_prompt(&m->pm, conv, &o, &pol, 4096, 0, &mt, &p, &rep) == QVL_OK, "trim: %s", qvl_last_error());
  CHECK(p.n + 64 <= 4096 && rep.dropped_turns > 0 && rep.kept_turns == 12 - rep.dropped_turns, "fits: %lld + 64",
        (long long)p.n);
  CHECK(rep.dropped_images == rep.dropped_turns && p.n_images == 12 - rep.dropped_turns, "images go with turns");
  CHECK(rep.dropped_tokens == full.n - p.n && mt == 64, "report: %lld tokens", (long long)rep.dropped_tokens);
  int drops = rep.dropped_turns;
  vlm_prompt_free(&p);
  /* one turn fewer dropped would not fit */
  pol.max_turns = 12 - drops; /* = drops - 1 dropped */
  pol.mode = HISTORY_ERROR;
  mt = 64;
  CHECK(history_build_prompt(&m->pm, conv, &o, &pol, 4096, 0, &mt, &p, &rep) == QVL_OK, "max_turns: %s", qvl_last_error());
  CHECK(rep.dropped_turns == drops - 1 && p.n + 64 > 4096, "the fewest drops: %d - 1 leaves %lld tokens", drops,
        (long long)p.n);
  vlm_prompt_free(&p);
  /* error mode leaves the prompt alone; the automatic max_tokens takes the room left */
  pol = history_policy_default();
  pol.auto_max_tokens = true;
  mt = 2048;
  cJSON *small = picture_conversation(1, IMG, "");
  CHECK(history_build_prompt(&m->pm, small, &o, &pol, 4096, 0, &mt, &p, &rep) == QVL_OK, "auto: %s", qvl_last_error());
  CHECK(rep.dropped_turns == 0 && mt == 2048, "plenty of room: the cap (%lld)", (long long)mt);
  int64_t small_n = p.n;
  vlm_prompt_free(&p);
  mt = 2048;
  CHECK(history_build_prompt(&m->pm, small, &o, &pol, small_n + 100, 0, &mt, &p, &rep) == QVL_OK, "auto: %s",
        qvl_last_error());
  CHECK(mt == 100, "auto max_tokens = the room left (%lld)", (long long)mt);
  vlm_prompt_free(&p);
  /* the engine: a 12-turn conversation into ctx 4096 with trim runs; with error it is refused */
  engine_config c;
  engine_config_default(&c);
  c.n_ctx = 4096;
  c.kv_cache_mb = 256;
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  if (e) {
    job j = {0};
    engine_request rq = request(conv, 8, &j);
    history_policy trim = history_policy_default();
    trim.mode = HISTORY_TRIM;
    history_report out;
    memset(&out, 0, sizeof out);
    rq.history = &trim;
    rq.history_out = &out;
    uint64_t id;
    CHECK(engine_submit(e, &rq, &id) == QVL_OK, "trimmed submit: %s", qvl_last_error());
    CHECK(out.applied && out.dropped_turns == drops, "report at submit: %d dropped", out.dropped_turns);
    CHECK(wait_done(&j, 120) && j.res.status == QVL_OK && j.res.history.dropped_turns == drops &&
              j.res.prompt_tokens + 8 <= 4096,
          "trimmed request runs (%s)", j.res.error);
    job j2 = {0};
    engine_request rq2 = request(conv, 8, &j2);
    CHECK(engine_submit(e, &rq2, &id) == QVL_ERR_CONTEXT_OVERFLOW, "untrimmed: context overflow");
    engine_stop(e, true);
  }
  vlm_prompt_free(&full);
  cJSON_Delete(small);
  cJSON_Delete(conv);
}

int main(void) {
  if (kernels_init(NULL, 0) != QVL_OK) {
    fprintf(stderr, "kernels_init: %s\n", qvl_last_error());
    return 1;
  }
  test_turns();
  vlm *m = test_load_vlm(E2E_MODEL, E2E_MMPROJ);
  if (m) {
    test_dynamic_batching(m);
    test_policy(m);
  }
  vlm_free(m);
  return TEST_SUMMARY("test_engine_ops");
}
