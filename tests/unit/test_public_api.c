/* The public API (include/qvl.h): request building (messages JSON, images before the text, stop
 * strings, raw prompts, bad input), data URLs, the standalone tokenizer, and one request through
 * an engine on the e2e fixture model: streamed text = result text = detokenized ids, and the finish
 * reason agrees with the ids. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/request_impl.h"
#include "qvl.h"
#include "qvl_tools.h"
#include "test.h"

#define E2E "tests/fixtures/models/e2e/gguf/"

static void test_request(void) {
  qvl_request *r = NULL;
  CHECK(qvl_request_new(&r) == QVL_OK, "new");
  CHECK(qvl_request_add_message(r, "system", "Be brief.") == QVL_OK, "system");
  CHECK(qvl_request_add_image_file(r, "a.png") == QVL_OK, "image file");
  static const unsigned char jpeg[16] = {0xFF, 0xD8, 0xFF, 0xE0};
  CHECK(qvl_request_add_image_bytes(r, jpeg, sizeof jpeg) == QVL_OK, "image bytes");
  CHECK(qvl_request_add_message(r, "user", "What is it?") == QVL_OK, "user");
  CHECK(qvl_request_add_message(r, "tool", "x") == QVL_ERR_INVALID_ARG, "a role the API does not take");
  char *js = cJSON_PrintUnformatted(r->msgs);
  const char *want = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":["
                     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"a.png\"}},"
                     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/jpeg;base64,/9j/4AAAAAAAAAAAAAAAAA==\"}},"
                     "{\"type\":\"text\",\"text\":\"What is it?\"}]}]";
  CHECK(js && !strcmp(js, want), "messages %s", js ? js : "(null)");
  free(js);
  CHECK(r->po.source.allow_files, "an image file allows local files");
  for (int i = 0; i < 16; i++)
    CHECK(qvl_request_add_stop(r, "END") == QVL_OK, "stop %d", i);
  CHECK(qvl_request_add_stop(r, "END") == QVL_ERR_INVALID_ARG, "a 17th stop string");
  qvl_sampling s;
  qvl_request_get_sampling(r, &s);
  s.temperature = 0.5f, s.top_k = 7, s.seed = 99;
  qvl_request_set_sampling(r, &s);
  qvl_request_set_max_tokens(r, 33);
  engine_request er;
  CHECK(request_to_engine(r, &er) == QVL_OK, "to engine");
  CHECK(er.messages == r->msgs && !er.raw_text, "messages passed");
  CHECK(er.gen.max_tokens == 33 && er.gen.n_stop == 16 && !strcmp(er.gen.stop[15], "END"), "generation settings");
  CHECK(er.gen.sampling.temperature == 0.5f && er.gen.sampling.top_k == 7 && er.gen.sampling.seed == 99, "sampling");
  CHECK(qvl_request_add_image_file(r, "b.png") == QVL_OK, "a trailing image");
  CHECK(request_to_engine(r, &er) == QVL_ERR_INVALID_ARG, "an image with no user message after it is refused");
  CHECK(qvl_request_set_messages(r, "{\"role\":\"user\"}") == QVL_ERR_FORMAT, "messages must be an array");
  CHECK(qvl_request_set_messages(r, "[{\"role\":\"user\",\"content\":\"hi\"}]") == QVL_OK, "messages JSON");
  CHECK(cJSON_GetArraySize(r->msgs) == 1, "replaced");
  CHECK(qvl_request_set_raw_prompt(r, "abc", 3) == QVL_OK, "raw");
  qvl_request_free(r);
  CHECK(qvl_request_new(&r) == QVL_OK, "new");
  CHECK(qvl_request_add_stop(r, "") == QVL_ERR_INVALID_ARG && r->n_stops == 0, "an empty stop string");
  CHECK(qvl_request_set_raw_prompt(r, "abc", 3) == QVL_OK, "raw");
  CHECK(request_to_engine(r, &er) == QVL_OK && er.raw_text && er.raw_len == 3 && !er.messages, "raw prompt");
  qvl_request_free(r);
  qvl_request_free(NULL);
}

static void test_data_url(void) {
  char *u = NULL;
  static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  CHECK(qvl_image_data_url(png, sizeof png, &u) == QVL_OK && !strcmp(u, "data:image/png;base64,iVBORw0KGgo="),
        "png %s", u ? u : "");
  qvl_free(u);
  static const unsigned char webp[16] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  CHECK(qvl_image_data_url(webp, sizeof webp, &u) == QVL_OK && !strncmp(u, "data:image/webp;base64,", 23), "webp");
  qvl_free(u);
}

static void test_tokenizer(void) {
  qvl_tokenizer *t = NULL;
  CHECK(qvl_tokenizer_load(E2E "e2e-Q8_0.gguf", &t) == QVL_OK, "load: %s", qvl_last_error());
  if (!t)
    return;
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(qvl_tokenize(t, "Hello world", 11, &ids, &n) == QVL_OK && n == 2 && ids[0] == 9707 && ids[1] == 1879,
        "Hello world -> %zu ids", n);
  char *text = NULL;
  CHECK(qvl_detokenize(t, ids, n, true, &text) == QVL_OK && !strcmp(text, "Hello world"), "round trip");
  CHECK(qvl_n_vocab(t) > 151645, "vocabulary %d", qvl_n_vocab(t));
  qvl_free(text);
  qvl_free(ids);
  qvl_tokenizer_free(t);
  CHECK(qvl_tokenizer_load("/nonexistent.gguf", &t) != QVL_OK && !t && *qvl_last_error(), "a missing file");
}

typedef struct run {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  char streamed[4096];
  size_t n_streamed;
  char text[4096];
  char reasoning[4096], streamed_reasoning[4096];
  size_t n_streamed_reasoning;
  int n_reasoning_pieces_after_text; /* reasoning streamed after answer text had begun */
  int32_t ids[64];
  int64_t n_ids;
  qvl_status status;
  qvl_finish finish;
  qvl_usage usage;
} run;

static bool on_text(void *user, const char *text, size_t len) {
  run *r = user;
  if (r->n_streamed + len < sizeof r->streamed) {
    memcpy(r->streamed + r->n_streamed, text, len);
    r->n_streamed += len;
  }
  return true;
}

static bool on_reasoning(void *user, const char *text, size_t len) {
  run *r = user;
  if (r->n_streamed > 0)
    r->n_reasoning_pieces_after_text++;
  if (r->n_streamed_reasoning + len < sizeof r->streamed_reasoning) {
    memcpy(r->streamed_reasoning + r->n_streamed_reasoning, text, len);
    r->n_streamed_reasoning += len;
  }
  return true;
}

static void on_done(void *user, const qvl_result *res) {
  run *r = user;
  pthread_mutex_lock(&r->mu);
  size_t len;
  const char *t = qvl_result_text(res, &len);
  snprintf(r->text, sizeof r->text, "%.*s", (int)len, t);
  t = qvl_result_reasoning(res, &len);
  snprintf(r->reasoning, sizeof r->reasoning, "%.*s", (int)len, t);
  int64_t n;
  const int32_t *ids = qvl_result_ids(res, &n);
  r->n_ids = n < 64 ? n : 64;
  if (ids)
    memcpy(r->ids, ids, (size_t)r->n_ids * sizeof *ids);
  r->status = qvl_result_status(res);
  r->finish = qvl_result_finish(res);
  qvl_result_usage(res, &r->usage);
  r->done = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Submits rq (freed here) and waits for on_done into *r. */
static qvl_status run_one(qvl_engine *e, qvl_request *rq, run *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  qvl_request_set_callbacks(rq, on_text, on_done, r);
  qvl_status s = qvl_engine_submit(e, rq, NULL);
  qvl_request_free(rq);
  pthread_mutex_lock(&r->mu);
  while (s == QVL_OK && !r->done)
    pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  return s;
}

/* The engine reports which condition ended a request (the finish list, from gen_seq up): a stop
 * string found in the greedy answer ends the same request as QVL_FINISH_STOP_STRING, the text cut
 * before it; the answer without it ends as EOS or LENGTH. */
static void test_finish_stop_string(qvl_engine *e) {
  static const char *q = "Count from one to ten in words, separated by spaces.";
  run a, b;
  qvl_request *rq = NULL;
  qvl_request_new(&rq);
  qvl_request_add_message(rq, "user", q);
  qvl_request_set_max_tokens(rq, 16);
  CHECK(run_one(e, rq, &a) == QVL_OK && a.status == QVL_OK, "first run: %s", qvl_last_error());
  CHECK(a.finish == QVL_FINISH_EOS || a.finish == QVL_FINISH_LENGTH, "no stop string: %s", qvl_finish_name(a.finish));
  size_t n = strlen(a.text);
  if (n < 3) {
    CHECK(false, "the greedy answer is too short to cut: '%s'", a.text);
    return;
  }
  char stop[8];
  snprintf(stop, sizeof stop, "%.2s", a.text + n / 2); /* first occurrence at or before n / 2 */
  const char *at = strstr(a.text, stop);
  qvl_request_new(&rq);
  qvl_request_add_message(rq, "user", q);
  qvl_request_set_max_tokens(rq, 16);
  qvl_request_add_stop(rq, stop);
  CHECK(run_one(e, rq, &b) == QVL_OK && b.status == QVL_OK, "second run: %s", qvl_last_error());
  CHECK(b.finish == QVL_FINISH_STOP_STRING, "finish %s, want stop_string (stop '%s' in '%s')", qvl_finish_name(b.finish),
        stop, a.text);
  CHECK(strlen(b.text) == (size_t)(at - a.text) && !strncmp(b.text, a.text, strlen(b.text)), "text cut at the stop: '%s'",
        b.text);
}

static void test_engine(void) {
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.threads = 2;
  qvl_model *m = NULL;
  CHECK(qvl_model_load(E2E "e2e-Q8_0.gguf", NULL, &mp, &m) == QVL_OK, "load: %s", qvl_last_error());
  if (!m)
    return;
  CHECK(!qvl_model_has_vision(m), "text only");
  qvl_engine *e = NULL;
  CHECK(qvl_engine_start(m, NULL, &e) == QVL_OK, "start: %s", qvl_last_error());
  for (int max = 1; e && max <= 24; max += 23) {
    run r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    qvl_request *rq = NULL;
    qvl_request_new(&rq);
    qvl_request_add_message(rq, "user", "What is the capital of France? Answer in one word.");
    qvl_request_set_max_tokens(rq, max);
    qvl_request_set_callbacks(rq, on_text, on_done, &r);
    uint64_t id = 0;
    qvl_status s = qvl_engine_submit(e, rq, &id);
    qvl_request_free(rq); /* copied at submit */
    CHECK(s == QVL_OK, "submit: %s", qvl_last_error());
    pthread_mutex_lock(&r.mu);
    while (s == QVL_OK && !r.done)
      pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    CHECK(r.status == QVL_OK, "status %d", r.status);
    CHECK(r.n_ids >= 1 && r.n_ids <= max && r.usage.completion_tokens == r.n_ids, "%lld ids", (long long)r.n_ids);
    CHECK(r.n_streamed == strlen(r.text) && !memcmp(r.streamed, r.text, r.n_streamed), "streamed = result text");
    char *dt = NULL;
    CHECK(qvl_detokenize(qvl_model_tokenizer(m), r.ids, (size_t)r.n_ids, true, &dt) == QVL_OK && !strcmp(dt, r.text),
          "text = detokenized ids: '%s' vs '%s'", dt ? dt : "", r.text);
    qvl_free(dt);
    bool eos = r.n_ids > 0 && (r.ids[r.n_ids - 1] == 151645 || r.ids[r.n_ids - 1] == 151643);
    CHECK(r.finish == (eos ? QVL_FINISH_EOS : QVL_FINISH_LENGTH), "finish %s, last id %d", qvl_finish_name(r.finish),
          r.n_ids ? r.ids[r.n_ids - 1] : -1);
    CHECK(r.usage.prompt_tokens > 10, "prompt tokens %lld", (long long)r.usage.prompt_tokens);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
  }
  if (e)
    test_finish_stop_string(e);
  /* prompt errors come back from submit, with a message, and no callback runs */
  qvl_request *rq = NULL;
  qvl_request_new(&rq);
  qvl_request_add_image_file(rq, "tests/fixtures/images/scene_64x128.png");
  qvl_request_add_message(rq, "user", "hi");
  qvl_request_set_callbacks(rq, on_text, NULL, NULL);
  CHECK(e && qvl_engine_submit(e, rq, NULL) != QVL_OK && *qvl_last_error(), "an image without a vision tower");
  qvl_request_free(rq);
  qvl_engine_stop(e, true);
  qvl_model_free(m);
  CHECK(qvl_model_load("/nonexistent.gguf", NULL, NULL, &m) != QVL_OK && !m, "a missing model");
  CHECK(strstr(qvl_last_error(), "cannot open") != NULL, "message: %s", qvl_last_error());
}

/* Videos through the public API (issue 23): a file and the same bytes give the video_basic case's
 * greedy continuation on the micro-a model; sampling settings are checked. */
static void test_video(void) {
  qvl_request *rq = NULL;
  qvl_request_new(&rq);
  CHECK(qvl_request_set_video_sampling(rq, 1, 4, 0) == QVL_ERR_INVALID_ARG, "fps and num_frames together");
  CHECK(qvl_request_set_video_sampling(rq, -1, 0, 0) == QVL_ERR_INVALID_ARG, "negative fps");
  qvl_request_free(rq);
  char *url = NULL;
  CHECK(qvl_video_data_url("\x1a\x45\xdf\xa3xxxx", 8, &url) == QVL_OK && !strncmp(url, "data:video/x-matroska;base64,", 29),
        "video data URL: %s", url ? url : "");
  qvl_free(url);
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.threads = 2;
  qvl_model *m = NULL;
  const char *ma = "tests/fixtures/models/micro-a/gguf/";
  char tp[256], vp[256];
  snprintf(tp, sizeof tp, "%smicro-a-F32.gguf", ma);
  snprintf(vp, sizeof vp, "%smmproj-micro-a-F32.gguf", ma);
  CHECK(qvl_model_load(tp, vp, &mp, &m) == QVL_OK, "load micro-a: %s", qvl_last_error());
  if (!m)
    return;
  qvl_engine *e = NULL;
  CHECK(qvl_engine_start(m, NULL, &e) == QVL_OK, "start: %s", qvl_last_error());
  static const int32_t want[8] = {476, 270, 148, 27, 138, 234, 321, 365}; /* video_basic "generated" */
  for (int bytes = 0; e && bytes < 2; bytes++) {
    run r;
    qvl_request_new(&rq);
    const char *clip = "tests/fixtures/videos/clip_96x64_10f_5fps.mkv";
    if (bytes) {
      FILE *f = fopen(clip, "rb");
      static char data[1 << 18];
      size_t n = f ? fread(data, 1, sizeof data, f) : 0;
      if (f)
        fclose(f);
      CHECK(qvl_request_add_video_bytes(rq, data, n) == QVL_OK, "video bytes: %s", qvl_last_error());
    } else {
      CHECK(qvl_request_add_video_file(rq, clip) == QVL_OK, "video file");
    }
    qvl_request_set_video_pixels(rq, 4096, 65536);
    qvl_request_add_message(rq, "user", "Describe this video.");
    qvl_request_set_max_tokens(rq, 8);
    CHECK(run_one(e, rq, &r) == QVL_OK, "submit a video: %s", qvl_last_error());
    CHECK(r.status == QVL_OK && r.n_ids == 8 && !memcmp(r.ids, want, sizeof want) && r.usage.image_tokens == 12,
          "video (%s): the video_basic continuation, 12 video tokens (got %lld ids, %lld image tokens)",
          bytes ? "bytes" : "file", (long long)r.n_ids, (long long)r.usage.image_tokens);
    /* the same prompt again: its KV (video rows included) comes from the prefix cache: no encode */
    CHECK(!bytes || (r.usage.image_cache_misses == 0 && r.usage.cached_prompt_tokens > 0),
          "the same clip again: nothing encoded (%d misses, %lld cached tokens)", r.usage.image_cache_misses,
          (long long)r.usage.cached_prompt_tokens);
    CHECK(bytes || r.usage.image_cache_misses == 1, "the first time: one encode (%d)", r.usage.image_cache_misses);
  }
  qvl_engine_stop(e, true);
  qvl_model_free(m);
}

/* One request through an engine with a reasoning budget; waits for on_done. */
static void run_reasoning(qvl_engine *e, int64_t budget, int64_t max_tokens, run *r) {
  qvl_request *rq = NULL;
  qvl_request_new(&rq);
  qvl_request_add_message(rq, "user", "Why is the sky blue?");
  qvl_request_set_max_tokens(rq, max_tokens);
  qvl_request_set_reasoning_budget(rq, budget);
  qvl_request_set_reasoning_callback(rq, on_reasoning);
  CHECK(run_one(e, rq, r) == QVL_OK, "submit: %s", qvl_last_error());
}

/* A reasoning model: a tiny random GGUF whose tokenizer.chat_template is the real Qwen3-VL Thinking
 * template (qvl make-random --chat-template). Random weights never close the think block on their
 * own, so the budget decides where the answer starts. */
static void test_reasoning(void) {
  char dir[] = "/tmp/qvl-test-think-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char path[128];
  snprintf(path, sizeof path, "%s/think.gguf", dir);
  qvl_random_opts ro = {.tokenizer_from = E2E "e2e-Q8_0.gguf", .out_text = path, .text_type = "q8_0", .seed = 7,
                        .tiny = true, .chat_template = "tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja"};
  CHECK(qvl_make_random(&ro) == QVL_OK, "make-random: %s", qvl_last_error());
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.threads = 2;
  qvl_model *m = NULL, *plain = NULL;
  CHECK(qvl_model_load(path, NULL, &mp, &m) == QVL_OK, "load: %s", qvl_last_error());
  CHECK(qvl_model_load(E2E "e2e-Q8_0.gguf", NULL, &mp, &plain) == QVL_OK, "load: %s", qvl_last_error());
  unlink(path);
  rmdir(dir);
  if (!m || !plain) {
    qvl_model_free(m);
    qvl_model_free(plain);
    return;
  }
  CHECK(qvl_model_is_reasoning(m), "the Thinking template makes a reasoning model");
  CHECK(!qvl_model_is_reasoning(plain), "the Instruct template does not");
  qvl_engine *e = NULL;
  CHECK(qvl_engine_start(m, NULL, &e) == QVL_OK, "start: %s", qvl_last_error());
  run r;
  for (int64_t budget = 2; e && budget <= 5; budget += 3) {
    run_reasoning(e, budget, 16, &r);
    CHECK(r.status == QVL_OK, "status %d", r.status);
    /* budget tokens, then the forced "\n</think>" (the close's last newlines belong to the answer) */
    CHECK(r.usage.reasoning_tokens >= budget + 1 && r.usage.reasoning_tokens <= budget + 3,
          "budget %lld: %lld reasoning tokens", (long long)budget, (long long)r.usage.reasoning_tokens);
    CHECK(r.usage.completion_tokens == 16 || r.finish == QVL_FINISH_EOS, "the answer follows (%lld tokens)",
          (long long)r.usage.completion_tokens);
    CHECK(r.n_streamed_reasoning == strlen(r.reasoning) && !memcmp(r.streamed_reasoning, r.reasoning, r.n_streamed_reasoning),
          "streamed reasoning = result reasoning ('%s' vs '%s')", r.streamed_reasoning, r.reasoning);
    CHECK(r.n_streamed == strlen(r.text) && !memcmp(r.streamed, r.text, r.n_streamed), "streamed = result text");
    CHECK(!strstr(r.text, "</think>") && !strstr(r.reasoning, "</think>"), "the tags are on neither channel");
    CHECK(r.n_reasoning_pieces_after_text == 0, "reasoning comes before the answer");
    CHECK(r.usage.prompt_tokens > 5, "prompt");
  }
  /* Budget 0: the prompt closes an empty think block; everything is answer. */
  run_reasoning(e, 0, 6, &r);
  CHECK(r.status == QVL_OK && r.usage.reasoning_tokens == 0 && r.reasoning[0] == 0 && r.n_streamed_reasoning == 0,
        "budget 0: no reasoning (%lld tokens, '%s')", (long long)r.usage.reasoning_tokens, r.reasoning);
  int64_t prompt0 = r.usage.prompt_tokens;
  run_reasoning(e, -1, 6, &r);
  /* "<think>" "\n"  becomes  "<think>" "\n\n" "</think>" "\n\n": two more prompt tokens */
  CHECK(r.usage.prompt_tokens + 2 == prompt0, "budget 0 closes the empty block in the prompt (%lld vs %lld)",
        (long long)r.usage.prompt_tokens, (long long)prompt0);
  CHECK(r.usage.reasoning_tokens == r.usage.completion_tokens && r.text[0] == 0,
        "unbounded: all reasoning here (%lld of %lld)", (long long)r.usage.reasoning_tokens,
        (long long)r.usage.completion_tokens);
  qvl_engine_stop(e, true);
  qvl_model_free(m);
  qvl_model_free(plain);
}

int main(void) {
  test_video();
  test_request();
  test_data_url();
  test_tokenizer();
  test_engine();
  test_reasoning();
  return TEST_SUMMARY("public_api");
}
