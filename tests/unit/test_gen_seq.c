/*
 * The generation sequence (engine/gen_seq.h) on its own, driven with one-hot logits so that the
 * greedy sampler picks the tokens the test chooses:
 *  - a UTF-8 character split over two byte tokens is streamed only when complete;
 *  - a partial stop string is held back, released when the next token rules it out, and a full
 *    match ends the generation with the stop string and what follows removed;
 *  - control tokens add no visible text; EOS stops (or not, with ignore_eos);
 *  - max_tokens stops with QVL_FINISH_LENGTH; a stream that says stop cancels with the token recorded;
 *  - logprobs of a one-hot distribution: the chosen token ~ 0, its first alternative far below.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gen_seq.h"
#include "engine/generate.h"
#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_model.h"


typedef struct capture {
  char text[512];
  size_t len;
  int calls;
  int stop_after; /* > 0: return false on this call */
  bool bad_utf8;  /* a piece ended inside a UTF-8 sequence */
} capture;

static bool utf8_complete(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + k > n)
      return false;
    i += k;
  }
  return true;
}

static bool on_text(void *user, const char *text, size_t len) {
  capture *c = user;
  if (!utf8_complete(text, len))
    c->bad_utf8 = true;
  if (c->len + len < sizeof c->text) {
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = 0;
  }
  c->calls++;
  return !(c->stop_after > 0 && c->calls >= c->stop_after);
}

static int32_t id_of(const vlm *m, const char *bytes) {
  int32_t id = tokenizer_find_bytes(m->tok, bytes, strlen(bytes));
  CHECK(id >= 0, "the vocabulary has a token for '%s'", bytes);
  return id;
}

/* Feeds token id as the argmax of otherwise flat logits. */
static qvl_status push(gen_seq *g, float *logits, int64_t V, int32_t id, capture *c, bool *done) {
  for (int64_t i = 0; i < V; i++)
    logits[i] = 0.0f;
  logits[id] = 50.0f;
  int32_t got = -1;
  qvl_status s = gen_seq_next(g, logits, on_text, c, &got, done);
  CHECK(s != QVL_OK || got == id, "sampled %d, expected %d", got, id);
  return s;
}

static gen_seq *make(const vlm *m, gen_params *gp, bool logprobs) {
  int32_t prompt[1] = {id_of(m, "a")};
  gen_seq_config gc = gen_seq_config_of(m, gp, prompt, 1);
  gc.logprobs = logprobs;
  gc.n_top = logprobs ? 2 : 0;
  gen_seq *g = NULL;
  CHECK(gen_seq_init(&gc, &g) == QVL_OK, "gen_seq_init: %s", qvl_last_error());
  return g;
}

static void test_split_utf8(const vlm *m, float *lg, int64_t V) {
  gen_params gp = gen_params_default();
  gp.max_tokens = 16;
  gen_seq *g = make(m, &gp, false);
  if (!g)
    return;
  capture c = {0};
  bool done = false;
  /* "é" is C3 A9: two byte tokens. */
  int32_t b0 = id_of(m, "\xC3"), b1 = id_of(m, "\xA9"), x = id_of(m, "x");
  CHECK(push(g, lg, V, x, &c, &done) == QVL_OK && !done, "x");
  CHECK(c.len == 1 && strcmp(c.text, "x") == 0, "x streamed at once (got '%s')", c.text);
  CHECK(push(g, lg, V, b0, &c, &done) == QVL_OK && !done, "first byte");
  CHECK(c.len == 1, "half a character is held back (%zu bytes streamed)", c.len);
  CHECK(push(g, lg, V, b1, &c, &done) == QVL_OK && !done, "second byte");
  CHECK(strcmp(c.text, "x\xC3\xA9") == 0, "the whole character streams once complete (got '%s')", c.text);
  CHECK(!c.bad_utf8, "no piece ends inside a UTF-8 sequence");
  size_t len;
  CHECK(strcmp(gen_seq_text(g, &len), "x\xC3\xA9") == 0 && len == 3, "text");
  gen_seq_free(g);
}

static void test_stop_strings(const vlm *m, float *lg, int64_t V) {
  gen_params gp = gen_params_default();
  gp.max_tokens = 32;
  const char *stops[1] = {"END"};
  gp.stop = stops;
  gp.n_stop = 1;
  gen_seq *g = make(m, &gp, false);
  if (!g)
    return;
  capture c = {0};
  bool done = false;
  int32_t a = id_of(m, "a"), E = id_of(m, "E"), N = id_of(m, "N"), D = id_of(m, "D"), x = id_of(m, "x");
  push(g, lg, V, a, &c, &done);
  push(g, lg, V, E, &c, &done);
  CHECK(strcmp(c.text, "a") == 0, "a partial stop string is held back (streamed '%s')", c.text);
  push(g, lg, V, x, &c, &done);
  CHECK(!done && strcmp(c.text, "aEx") == 0, "released when the next token rules it out (streamed '%s')", c.text);
  push(g, lg, V, E, &c, &done);
  push(g, lg, V, N, &c, &done);
  CHECK(!done && strcmp(c.text, "aEx") == 0, "'EN' held back (streamed '%s')", c.text);
  CHECK(push(g, lg, V, D, &c, &done) == QVL_OK && done, "'END' stops");
  CHECK(gen_seq_reason(g) == QVL_FINISH_STOP_STRING, "reason stop_string (%s)", qvl_finish_name(gen_seq_reason(g)));
  size_t len;
  CHECK(strcmp(gen_seq_text(g, &len), "aEx") == 0 && strcmp(c.text, "aEx") == 0,
        "the stop string is not in the text or the stream ('%s')", c.text);
  int64_t n;
  gen_seq_ids(g, &n);
  CHECK(n == 6, "every token recorded (%lld)", (long long)n);
  int32_t again = -1;
  CHECK(gen_seq_next(g, lg, on_text, &c, &again, &done) == QVL_OK && done && gen_seq_ids(g, &n) && n == 6,
        "after a stop nothing more is generated");
  gen_seq_free(g);
}

static void test_special_eos_limits(const vlm *m, float *lg, int64_t V) {
  int32_t im_start = tokenizer_find(m->tok, "<|im_start|>"), x = id_of(m, "x");
  CHECK(im_start >= 0 && m->n_eos > 0, "control tokens in the vocabulary");
  /* control tokens add nothing; EOS stops with its bytes left out */
  gen_params gp = gen_params_default();
  gp.max_tokens = 8;
  gen_seq *g = make(m, &gp, false);
  capture c = {0};
  bool done = false;
  if (g) {
    push(g, lg, V, x, &c, &done);
    push(g, lg, V, im_start, &c, &done);
    CHECK(!done && strcmp(c.text, "x") == 0, "a control token is not visible (streamed '%s')", c.text);
    CHECK(push(g, lg, V, m->eos_ids[0], &c, &done) == QVL_OK && done && gen_seq_reason(g) == QVL_FINISH_EOS, "EOS stops");
    size_t len;
    CHECK(strcmp(gen_seq_text(g, &len), "x") == 0, "EOS adds no text");
    gen_seq_free(g);
  }
  /* ignore_eos: EOS goes on; max_tokens stops */
  gp.ignore_eos = true;
  gp.max_tokens = 3;
  g = make(m, &gp, false);
  if (g) {
    memset(&c, 0, sizeof c);
    CHECK(push(g, lg, V, m->eos_ids[0], &c, &done) == QVL_OK && !done, "ignore_eos: EOS does not stop");
    push(g, lg, V, x, &c, &done);
    CHECK(!done, "2 of 3");
    CHECK(push(g, lg, V, x, &c, &done) == QVL_OK && done && gen_seq_reason(g) == QVL_FINISH_LENGTH,
          "max_tokens stops (%s)", qvl_finish_name(gen_seq_reason(g)));
    gen_seq_free(g);
  }
  /* a stream that says stop: cancelled, the token recorded */
  gp = gen_params_default();
  gp.max_tokens = 8;
  g = make(m, &gp, true);
  if (g) {
    memset(&c, 0, sizeof c);
    c.stop_after = 2;
    CHECK(push(g, lg, V, x, &c, &done) == QVL_OK, "first piece");
    CHECK(push(g, lg, V, x, &c, &done) == QVL_ERR_CANCELLED, "the stream's false cancels");
    int64_t n;
    gen_seq_ids(g, &n);
    CHECK(n == 2, "the cancelled token is recorded (%lld)", (long long)n);
    const float *lp, *top_lp;
    const int32_t *top_ids;
    gen_seq_logprobs(g, &lp, &top_ids, &top_lp);
    CHECK(lp && fabsf(lp[0]) < 1e-6f && top_ids[0] == x && top_lp[1] < -40.0f,
          "logprobs of a one-hot choice (%g, top %d, %g)", lp ? (double)lp[0] : 0.0, top_ids ? top_ids[0] : -1,
          top_lp ? (double)top_lp[1] : 0.0);
    gen_seq_free(g);
  }
  /* bad settings are refused */
  gp = gen_params_default();
  gp.max_tokens = 0;
  int32_t prompt[1] = {x};
  gen_seq_config gc = gen_seq_config_of(m, &gp, prompt, 1);
  gen_seq *bad = NULL;
  CHECK(gen_seq_init(&gc, &bad) == QVL_ERR_INVALID_ARG && !bad, "max_tokens 0 is refused");
  gp.max_tokens = 4;
  const char *empty[1] = {""};
  gp.stop = empty;
  gp.n_stop = 1;
  gc = gen_seq_config_of(m, &gp, prompt, 1);
  CHECK(gen_seq_init(&gc, &bad) == QVL_ERR_INVALID_ARG && !bad, "an empty stop string is refused");
}

/* Reasoning: two channels, the think block's newlines trimmed, "</think>" never shown, stop strings
 * and the answer's leading newlines applied to the answer only, and a budget that forces the close. */
typedef struct two_channels {
  capture answer, reason;
} two_channels;

static bool on_answer2(void *user, const char *t, size_t n) { return on_text(&((two_channels *)user)->answer, t, n); }
static bool on_reason2(void *user, const char *t, size_t n) { return on_text(&((two_channels *)user)->reason, t, n); }

static gen_seq *make_reasoning(const vlm *m, gen_params *gp) {
  int32_t prompt[1] = {id_of(m, "a")};
  gp->reasoning = true;
  gen_seq_config gc = gen_seq_config_of(m, gp, prompt, 1);
  gc.reasoning_stream = on_reason2;
  gen_seq *g = NULL;
  CHECK(gen_seq_init(&gc, &g) == QVL_OK, "gen_seq_init: %s", qvl_last_error());
  return g;
}

static qvl_status push2(gen_seq *g, float *logits, int64_t V, int32_t want, int32_t favour, two_channels *c,
                        bool *done) {
  for (int64_t i = 0; i < V; i++)
    logits[i] = 0.0f;
  logits[favour] = 50.0f;
  int32_t got = -1;
  qvl_status s = gen_seq_next(g, logits, on_answer2, c, &got, done);
  CHECK(s != QVL_OK || got == want, "token %d, expected %d", got, want);
  return s;
}

static void test_reasoning(const vlm *m, float *lg, int64_t V) {
  int32_t x = id_of(m, "x"), nl = id_of(m, "\n"), nn = id_of(m, "\n\n"), close = id_of(m, "</think>"),
          lt = id_of(m, "</"), y = id_of(m, "y"), E = id_of(m, "E");
  CHECK(m->n_think_close >= 2 && m->n_think_close <= 8, "the close is tokenized (%d ids)", m->n_think_close);
  gen_params gp = gen_params_default();
  gp.max_tokens = 32;
  const char *stops[1] = {"x"}; /* in the reasoning it must not stop; in the answer it must */
  gp.stop = stops;
  gp.n_stop = 1;
  gen_seq *g = make_reasoning(m, &gp);
  if (!g)
    return;
  two_channels c = {0};
  bool done = false;
  push2(g, lg, V, nl, nl, &c, &done);
  CHECK(c.reason.len == 0, "the block's leading newline is trimmed");
  push2(g, lg, V, x, x, &c, &done);
  CHECK(!done && !strcmp(c.reason.text, "x"), "reasoning streams on its channel, stop strings do not apply ('%s')",
        c.reason.text);
  push2(g, lg, V, lt, lt, &c, &done);
  CHECK(!strcmp(c.reason.text, "x"), "a possible start of </think> is held back ('%s')", c.reason.text);
  push2(g, lg, V, y, y, &c, &done);
  CHECK(!strcmp(c.reason.text, "x</y"), "and released when ruled out ('%s')", c.reason.text);
  push2(g, lg, V, nl, nl, &c, &done);
  push2(g, lg, V, close, close, &c, &done);
  CHECK(!strcmp(c.reason.text, "x</y") && c.answer.len == 0, "the close and the newline before it are not shown "
        "(reasoning '%s', answer '%s')", c.reason.text, c.answer.text);
  push2(g, lg, V, nn, nn, &c, &done);
  CHECK(c.answer.len == 0, "the answer's leading newlines are trimmed ('%s')", c.answer.text);
  push2(g, lg, V, E, E, &c, &done);
  push2(g, lg, V, nl, nl, &c, &done);
  CHECK(!done && !strcmp(c.answer.text, "E\n"), "answer on its channel ('%s')", c.answer.text);
  CHECK(push2(g, lg, V, x, x, &c, &done) == QVL_OK && done && gen_seq_reason(g) == QVL_FINISH_STOP_STRING,
        "a stop string ends the answer");
  size_t len;
  CHECK(!strcmp(gen_seq_reasoning(g, &len), "x</y") && len == 4, "gen_seq_reasoning ('%s')", gen_seq_reasoning(g, &len));
  CHECK(!strcmp(gen_seq_text(g, &len), "E\n"), "gen_seq_text ('%s')", gen_seq_text(g, &len));
  CHECK(gen_seq_reasoning_tokens(g) == 6, "6 tokens inside the block (%lld)", (long long)gen_seq_reasoning_tokens(g));
  gen_seq_free(g);

  /* A budget of 2: after two reasoning tokens the close is forced whatever the logits say. */
  gp = gen_params_default();
  gp.max_tokens = 32;
  gp.reasoning_budget = 2;
  g = make_reasoning(m, &gp);
  if (!g)
    return;
  memset(&c, 0, sizeof c);
  push2(g, lg, V, x, x, &c, &done);
  push2(g, lg, V, y, y, &c, &done);
  for (int i = 0; i < m->n_think_close; i++)
    push2(g, lg, V, m->think_close[i], x, &c, &done);
  CHECK(!strcmp(c.reason.text, "xy") && c.answer.len == 0, "forced close (reasoning '%s', answer '%s')", c.reason.text,
        c.answer.text);
  push2(g, lg, V, x, x, &c, &done);
  CHECK(!strcmp(c.answer.text, "x"), "then the answer is sampled ('%s')", c.answer.text);
  gen_seq_free(g);

  /* EOS inside the block: the reasoning so far, no answer, reason eos. */
  gp = gen_params_default();
  gp.max_tokens = 8;
  g = make_reasoning(m, &gp);
  if (!g)
    return;
  memset(&c, 0, sizeof c);
  push2(g, lg, V, x, x, &c, &done);
  push2(g, lg, V, nl, nl, &c, &done);
  CHECK(push2(g, lg, V, m->eos_ids[0], m->eos_ids[0], &c, &done) == QVL_OK && done && gen_seq_reason(g) == QVL_FINISH_EOS,
        "EOS stops inside the block");
  CHECK(!strcmp(c.reason.text, "x") && !strcmp(gen_seq_reasoning(g, &len), "x") && c.answer.len == 0,
        "reasoning '%s', answer '%s'", c.reason.text, c.answer.text);
  gen_seq_free(g);
}

int main(void) {
  if (kernels_init(NULL, 0) != QVL_OK) {
    fprintf(stderr, "kernels_init: %s\n", qvl_last_error());
    return 1;
  }
  vlm *m = test_load_vlm(E2E_MODEL, NULL);
  if (m) {
    int64_t V = m->text->hp.n_vocab;
    float *lg = malloc(sizeof *lg * (size_t)V);
    if (lg) {
      test_split_utf8(m, lg, V);
      test_stop_strings(m, lg, V);
      test_special_eos_limits(m, lg, V);
      test_reasoning(m, lg, V);
    }
    free(lg);
  }
  vlm_free(m);
  return TEST_SUMMARY("test_gen_seq");
}
