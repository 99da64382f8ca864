/* The prompt layer (src/prompt): a plan tokenizes per message exactly like the whole text, trimming
 * is arithmetic on the plan, and materializing decodes only the kept media, each once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/timing.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "prompt/history.h"
#include "prompt/plan.h"
#include "test.h"
#include "test_model.h"
#include "chat_msg.h"
#include "text/chat.h"

#define IMG "tests/fixtures/images/rgb_333x250.png"
#define N_TURNS 12

/* N_TURNS turns of one image each, long answers: it does not fit 4096 tokens. */
static cJSON *conversation(void) {
  static char answer[4096];
  answer[0] = 0;
  for (int i = 0; i < 80; i++)
    strcat(answer, "a small coloured test pattern, ");
  return picture_conversation(N_TURNS, IMG, answer);
}

typedef struct decodes {
  pthread_mutex_t mu;
  int count[64];
} decodes;

static void count_decode(void *user, int index) {
  decodes *d = user;
  pthread_mutex_lock(&d->mu);
  if (index >= 0 && index < 64)
    d->count[index]++;
  pthread_mutex_unlock(&d->mu);
}

static prompt_opts opts_with(decodes *d) {
  prompt_opts o;
  prompt_opts_default(&o);
  o.source.allow_files = true;
  o.defer_vision = true;
  o.on_decode = count_decode;
  o.on_decode_user = d;
  return o;
}

/* The ids of the plan's spans, concatenated, are the ids of the whole rendered text. */
static void test_spans_tokenize_like_the_whole(const vlm *m) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, chat_msg("system", NULL, "sys"));
  cJSON_AddItemToArray(a, chat_msg("user", IMG, "q1 with a picture"));
  cJSON_AddItemToArray(a, chat_msg("assistant", NULL, "a1"));
  cJSON_AddItemToArray(a, chat_msg("tool", NULL, "t1"));
  cJSON_AddItemToArray(a, chat_msg("tool", IMG, "t2 with a picture"));
  cJSON_AddItemToArray(a, chat_msg("system", NULL, "a later system message"));
  cJSON_AddItemToArray(a, chat_msg("user", NULL, "q2 \xe2\x80\x94 with <|im_start|> typed in it\n\n"));
  decodes d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  prompt_opts o = opts_with(&d);
  prompt_plan plan;
  CHECK(prompt_plan_build(&m->pm, a, &o, &plan) == QVL_OK, "plan: %s", qvl_last_error());
  int32_t *whole = NULL;
  size_t n_whole = 0;
  /* the whole text as one piece, user and tool content kept plain (chat_prompt.plain): the typed
   * <|im_start|> is text, not a turn marker */
  CHECK(tokenizer_encode_spans(m->tok, plan.text.data, plan.text.len, plan.plain, plan.n_plain, 0, NULL, NULL, &whole,
                               &n_whole) == QVL_OK,
        "encode");
  int32_t *raw = NULL;
  size_t n_raw = 0;
  CHECK(tokenizer_encode(m->tok, plan.text.data, plan.text.len, &raw, &n_raw) == QVL_OK, "encode raw");
  int32_t im_start = tokenizer_find(m->tok, "<|im_start|>");
  int markers = 0, raw_markers = 0;
  for (size_t j = 0; j < n_whole; j++)
    markers += whole[j] == im_start;
  for (size_t j = 0; j < n_raw; j++)
    raw_markers += raw[j] == im_start;
  CHECK(im_start >= 0 && markers + 1 == raw_markers, "the typed <|im_start|> stays text (%d markers, %d without spans)",
        markers, raw_markers);
  free(raw);
  size_t at = 0;
  bool same = true;
  int media = 0;
  for (int k = 0; k < plan.n_spans; k++) {
    const prompt_span *sp = &plan.spans[k];
    same = same && at + sp->n_ids <= n_whole && !memcmp(whole + at, sp->ids, sizeof *whole * sp->n_ids);
    at += sp->n_ids;
    media += sp->n_media;
  }
  CHECK(same && at == n_whole, "span ids concatenated = ids of the whole text (%zu of %zu)", at, n_whole);
  CHECK(plan.n_media == 2 && media == 2 && d.count[0] == 0 && d.count[1] == 0, "2 media planned, none decoded");
  CHECK(plan.n_turns == 2 && plan.spans[0].message_index == -1 && plan.spans[0].turn == -1,
        "the system block is a span of its own that is never dropped");
  /* the tool messages' pieces do not start with <|im_start|>: the two tool messages share a span */
  int tool_span = -1;
  for (int k = 0; k < plan.n_spans; k++)
    if (plan.spans[k].message_index == 3)
      tool_span = k;
  CHECK(tool_span >= 0 && plan.spans[tool_span].n_media == 1 && plan.spans[tool_span + 1].message_index == 6,
        "grouped tool messages: one span holding the second one's image (a later system message renders "
        "nothing in this template)");
  prompt_built p;
  CHECK(prompt_materialize(&m->pm, &plan, a, 0, &o, &p) == QVL_OK, "materialize: %s", qvl_last_error());
  CHECK(p.n == plan.n_tokens && p.n_images == 2 && d.count[0] == 1 && d.count[1] == 1,
        "materialized: %lld tokens as planned, each image decoded once", (long long)p.n);
  prompt_free(&p);
  prompt_plan_free(&plan);
  free(whole);
  cJSON_Delete(a);
}

/* A template that renders the kept messages otherwise than as their spans (a system message that
 * becomes the first one once the turn before it is dropped): the kept messages' own rendering. */
static void test_render_fallback(const vlm *m) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, chat_msg("user", IMG, "q1"));
  cJSON_AddItemToArray(a, chat_msg("system", NULL, "a system message after the first question"));
  cJSON_AddItemToArray(a, chat_msg("user", IMG, "q2"));
  decodes d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  prompt_opts o = opts_with(&d);
  history_policy pol = history_policy_default();
  pol.max_turns = 0;
  int64_t mt = 16;
  history_report rep;
  prompt_built got, want;
  CHECK(history_build_prompt(&m->pm, a, &o, &pol, 4096, 0, &mt, &got, &rep) == QVL_OK, "trim: %s", qvl_last_error());
  CHECK(d.count[0] == 0 && d.count[1] == 1, "the dropped image never decoded (%d), the kept one once (%d)", d.count[0],
        d.count[1]);
  cJSON *kept = cJSON_CreateArray();
  cJSON_AddItemReferenceToArray(kept, cJSON_GetArrayItem(a, 1));
  cJSON_AddItemReferenceToArray(kept, cJSON_GetArrayItem(a, 2));
  CHECK(prompt_build(&m->pm, kept, &o, &want) == QVL_OK, "kept: %s", qvl_last_error());
  CHECK(rep.dropped_turns == 1 && got.n == want.n && !memcmp(got.ids, want.ids, sizeof *got.ids * (size_t)got.n),
        "the trimmed prompt is the kept messages' own prompt (%lld vs %lld tokens)", (long long)got.n,
        (long long)want.n);
  prompt_free(&got);
  prompt_free(&want);
  cJSON_Delete(kept);
  cJSON_Delete(a);
}

static void ignore_done(void *user, const engine_result *r) {
  (void)user;
  (void)r;
}

/* Trimming a 12-image conversation: each kept image decoded exactly once, no dropped image at all
 * (the policy on its own and through the engine). */
static void test_trim_decodes_kept_once(const vlm *m) {
  cJSON *conv = conversation();
  decodes d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  prompt_opts o = opts_with(&d);
  history_policy pol = history_policy_default();
  pol.mode = HISTORY_TRIM;
  int64_t mt = 64;
  history_report rep;
  prompt_built p;
  CHECK(history_build_prompt(&m->pm, conv, &o, &pol, 4096, 0, &mt, &p, &rep) == QVL_OK, "trim: %s",
        qvl_last_error());
  int drops = rep.dropped_turns;
  CHECK(drops > 0 && drops < N_TURNS && p.n_images == N_TURNS - drops && p.n + 64 <= 4096,
        "%d turns dropped, %d images kept, %lld tokens", drops, p.n_images, (long long)p.n);
  bool ok = true;
  for (int i = 0; i < N_TURNS; i++)
    ok = ok && d.count[i] == (i < drops ? 0 : 1);
  CHECK(ok, "decodes per image: dropped 0, kept exactly 1 (first %d %d, last %d)", d.count[0], d.count[drops],
        d.count[N_TURNS - 1]);
  for (int i = 0; i < p.n_images; i++)
    CHECK(p.images[i].media_index == drops + i, "kept image %d is the request's image %d", i, drops + i);
  prompt_free(&p);

  /* through the engine: its image cache is empty, so every kept image is decoded at submit, once */
  memset(d.count, 0, sizeof d.count);
  engine_config c;
  engine_config_default(&c);
  c.n_ctx = 4096;
  c.kv_cache_mb = 256;
  engine *e = NULL;
  CHECK(engine_start(m, &c, &e) == QVL_OK, "engine_start: %s", qvl_last_error());
  if (e) {
    engine_request rq = {.messages = conv, .prompt = o, .gen = gen_params_default()};
    rq.gen.max_tokens = 4;
    history_policy trim = history_policy_default();
    trim.mode = HISTORY_TRIM;
    history_report out;
    rq.history = &trim;
    rq.history_out = &out;
    uint64_t id;
    rq.on_done = ignore_done; /* required; the result is not looked at here */
    CHECK(engine_submit(e, &rq, &id) == QVL_OK, "submit: %s", qvl_last_error());
    CHECK(out.dropped_turns > 0, "the engine trimmed %d turns", out.dropped_turns);
    engine_stop(e, true);
    ok = true;
    for (int i = 0; i < N_TURNS; i++)
      ok = ok && d.count[i] == (i < out.dropped_turns ? 0 : 1);
    CHECK(ok, "engine: dropped images never decoded, kept ones exactly once");
  }
  cJSON_Delete(conv);
}

int main(void) {
  if (kernels_init(NULL, 0) != QVL_OK) {
    fprintf(stderr, "kernels_init: %s\n", qvl_last_error());
    return 1;
  }
  vlm *m = test_load_vlm(E2E_MODEL, E2E_MMPROJ);
  if (m) {
    test_spans_tokenize_like_the_whole(m);
    test_render_fallback(m);
    test_trim_decodes_kept_once(m);
  }
  vlm_free(m);
  return TEST_SUMMARY("test_prompt");
}
