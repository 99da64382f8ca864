/* Sampler and stop conditions against hand-computed expectations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "test.h"
#include "text/sampler.h"
#include "text/stop.h"

static sampler *make(sampler_params p, int64_t n_vocab) {
  sampler *s = NULL;
  qvl_status st = sampler_init(&p, n_vocab, &s);
  CHECK(st == QVL_OK, "sampler_init: %s", qvl_last_error());
  return s;
}

static void test_greedy(void) {
  sampler *s = make(sampler_default_params(), 4);
  float a[4] = {1, 3, 3, 2};
  CHECK(sampler_sample(s, a) == 1, "tie: lowest id");
  float b[4] = {NAN, 0.5f, NAN, -1};
  CHECK(sampler_sample(s, b) == 1, "NaN never wins");
  float c[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  CHECK(sampler_sample(s, c) == 0, "all -inf gives 0");
  float d[4] = {-5, -4, -3, -3.5f};
  CHECK(sampler_sample(s, d) == 2, "negative logits");
  sampler_free(s);
}

static void test_repetition_penalty(void) {
  sampler_params p = sampler_default_params();
  p.repetition_penalty = 2.0f;
  sampler *s = make(p, 4);
  int32_t prompt[3] = {0, 1, 0};
  CHECK(sampler_add_prompt(s, prompt, 3) == QVL_OK, "prompt");
  float l[4] = {2.0f, -1.0f, 1.5f, 0.5f};
  /* HF: 2.0 / 2 = 1.0 (positive: divided), -1.0 * 2 = -2.0 (negative: multiplied) -> argmax 2. */
  CHECK(sampler_sample(s, l) == 2, "penalised argmax");
  CHECK(l[0] == 1.0f && l[1] == -2.0f && l[2] == 1.5f && l[3] == 0.5f, "values %g %g %g %g", l[0], l[1], l[2],
        l[3]);
  /* Generated tokens count too; a token seen twice is penalised once. */
  CHECK(sampler_accept(s, 2) == QVL_OK && sampler_accept(s, 2) == QVL_OK, "accept");
  float m[4] = {2.0f, -1.0f, 1.5f, 0.5f};
  CHECK(sampler_sample(s, m) == 0 && m[2] == 0.75f, "output token penalised once: %g", m[2]);
  CHECK(sampler_add_prompt(s, (int32_t[]){4}, 1) == QVL_ERR_INVALID_ARG, "id out of range");
  CHECK(sampler_accept(s, -1) == QVL_ERR_INVALID_ARG, "negative id");
  /* Reset forgets the history. */
  sampler_reset(s);
  float r[4] = {2.0f, -1.0f, 1.5f, 0.5f};
  CHECK(sampler_sample(s, r) == 0 && r[0] == 2.0f, "after reset");
  sampler_free(s);
}

static void test_presence_frequency(void) {
  sampler_params p = sampler_default_params();
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  sampler *s = make(p, 5);
  sampler_add_prompt(s, (int32_t[]){0, 0, 1}, 3); /* prompt tokens do not count */
  sampler_accept(s, 2);
  sampler_accept(s, 2);
  sampler_accept(s, 3);
  float l[5] = {1, 1, 3, 2, 1.5f};
  /* 2: 3 - (0.5*2 + 0.25) = 1.75; 3: 2 - (0.5 + 0.25) = 1.25; 0, 1, 4 unchanged -> argmax 2 (1.75). */
  CHECK(sampler_sample(s, l) == 2, "argmax");
  CHECK(l[0] == 1 && l[1] == 1 && l[2] == 1.75f && l[3] == 1.25f && l[4] == 1.5f, "values %g %g %g %g %g", l[0],
        l[1], l[2], l[3], l[4]);
  sampler_free(s);
}

static void test_order(void) {
  /* Repetition penalty before temperature: [2, 1] -> [1, 1] -> / 0.5 -> [2, 2]. */
  sampler_params p = sampler_default_params();
  p.repetition_penalty = 2.0f;
  p.temperature = 0.5f;
  sampler *s = make(p, 2);
  sampler_add_prompt(s, (int32_t[]){0}, 1);
  float l[2] = {2, 1};
  int32_t t = sampler_sample(s, l);
  CHECK(t == 0 || t == 1, "token %d", t);
  CHECK(l[0] == 2.0f && l[1] == 2.0f, "penalty then temperature: %g %g", l[0], l[1]);
  sampler_free(s);
}

static void test_top_k(void) {
  sampler_params p = sampler_default_params();
  p.temperature = 1.0f;
  p.top_k = 2;
  p.seed = 7;
  sampler *s = make(p, 5);
  int n4 = 0, other = 0;
  const int N = 20000;
  for (int i = 0; i < N; i++) {
    float l[5] = {1, 2, 3, 4, 5};
    int32_t t = sampler_sample(s, l);
    if (i == 0)
      CHECK(l[0] == -INFINITY && l[1] == -INFINITY && l[2] == -INFINITY && l[3] == 4 && l[4] == 5,
            "filtered logits");
    n4 += t == 3;
    other += t < 3;
  }
  /* P(3) = e^4 / (e^4 + e^5) = 0.2689; the standard error over 20000 draws is 0.0031. */
  double f = (double)n4 / N;
  CHECK(other == 0, "%d draws outside the top 2", other);
  CHECK(fabs(f - 0.26894) < 0.015, "frequency of id 3: %g", f);
  sampler_free(s);

  /* Ties at the k-th value are all kept (HF keeps logit >= k-th largest). */
  p.top_k = 1;
  s = make(p, 4);
  float l[4] = {1, 3, 3, 2};
  sampler_sample(s, l);
  CHECK(l[1] == 3 && l[2] == 3 && l[0] == -INFINITY && l[3] == -INFINITY, "ties kept");
  sampler_free(s);
}

static void test_top_p_min_p(void) {
  const double pr[4] = {0.5, 0.3, 0.15, 0.05};
  sampler_params p = sampler_default_params();
  p.temperature = 1.0f;
  p.top_p = 0.75f;
  sampler *s = make(p, 4);
  float l[4];
  for (int i = 0; i < 4; i++)
    l[i] = (float)log(pr[i]);
  /* HF: ascending cumsum 0.05, 0.2, 0.5, 1.0; remove cum <= 0.25 -> ids 3 and 2 go. */
  int32_t t = sampler_sample(s, l);
  CHECK(t == 0 || t == 1, "top-p token %d", t);
  CHECK(l[2] == -INFINITY && l[3] == -INFINITY && l[0] > -INFINITY && l[1] > -INFINITY, "top-p set");
  sampler_free(s);

  /* top_p = 0 keeps only the top token. */
  p.top_p = 0.0f;
  s = make(p, 4);
  for (int i = 0; i < 4; i++)
    l[i] = (float)log(pr[i]);
  CHECK(sampler_sample(s, l) == 0 && l[1] == -INFINITY, "top_p 0");
  sampler_free(s);

  /* min_p 0.2: drop p < 0.2 * 0.5 = 0.1, i.e. only id 3. */
  p.top_p = 1.0f;
  p.min_p = 0.2f;
  s = make(p, 4);
  for (int i = 0; i < 4; i++)
    l[i] = (float)log(pr[i]);
  t = sampler_sample(s, l);
  CHECK(t != 3, "min-p token %d", t);
  CHECK(l[3] == -INFINITY && l[2] > -INFINITY, "min-p set");
  sampler_free(s);
}

static void test_large_vocab(void) {
  enum { V = 5000 };
  static float l[V];
  sampler_params p = sampler_default_params();
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  sampler *s = make(p, V);
  /* Uniform: the mass above id i is i / 5000, kept while < 0.5: ids 0..2499 (ties in id order). */
  for (int i = 0; i < V; i++)
    l[(i * 7919) % V] = 0.0f;
  int32_t t = sampler_sample(s, l);
  int kept = 0, in_order = 1;
  for (int i = 0; i < V; i++) {
    kept += l[i] > -INFINITY;
    if ((l[i] > -INFINITY) != (i < 2500))
      in_order = 0;
  }
  CHECK(kept == 2500 && in_order && t < 2500, "uniform top-p: kept %d, in order %d, token %d", kept, in_order, t);
  sampler_free(s);

  /* Geometric, ids shuffled: the cut falls inside the first quickselect window. */
  p.top_p = 0.9f;
  s = make(p, V);
  for (int i = 0; i < V; i++)
    l[(i * 7919) % V] = -0.1f * (float)i; /* rank i holds id (i * 7919) % V */
  double total = 0, above = 0;
  for (int i = 0; i < V; i++)
    total += exp((double)(-0.1f * (float)i));
  int want = 0;
  while (want < V && (want == 0 || above / total < 0.9)) {
    above += exp((double)(-0.1f * (float)want));
    want++;
  }
  sampler_sample(s, l);
  kept = 0;
  int ok = 1;
  for (int i = 0; i < V; i++) {
    int id = (i * 7919) % V;
    kept += l[id] > -INFINITY;
    if ((l[id] > -INFINITY) != (i < want))
      ok = 0;
  }
  CHECK(want == 24 && kept == want && ok, "geometric top-p: kept %d, expected %d", kept, want);
  sampler_free(s);

  /* Tiny temperature: logits / T reach 3e4, no overflow, the top token always wins. */
  p.top_p = 1.0f;
  p.temperature = 0.001f;
  s = make(p, V);
  int wins = 0;
  for (int r = 0; r < 20; r++) {
    for (int i = 0; i < V; i++)
      l[i] = (float)(i % 31);
    l[4321] = 31.0f;
    wins += sampler_sample(s, l) == 4321;
  }
  CHECK(wins == 20, "tiny temperature: %d of 20", wins);
  sampler_free(s);
}

/* Top-p against a plain sort-and-walk, on random logits with many ties. */
typedef struct ref_cand {
  float l;
  int id;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
  const ref_cand *x = a, *y = b;
  if (x->l != y->l)
    return x->l > y->l ? -1 : 1;
  return x->id - y->id;
}

static void test_top_p_random(void) {
  enum { V = 3000 };
  static float l[V];
  static ref_cand r[V];
  unsigned rng = 99;
  int bad = 0;
  for (int round = 0; round < 40; round++) {
    sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    rng = rng * 1664525u + 1013904223u;
    p.top_p = (float)((rng >> 8) % 1000) / 1000.0f;
    sampler *s = make(p, V);
    int levels = 2 + round * 5; /* few distinct values: many ties at the cut */
    for (int i = 0; i < V; i++) {
      rng = rng * 1664525u + 1013904223u;
      l[i] = (float)((rng >> 8) % (unsigned)levels) * 0.37f;
      r[i] = (ref_cand){l[i], i};
    }
    qsort(r, V, sizeof r[0], ref_cmp);
    double total = 0, above = 0;
    for (int i = 0; i < V; i++)
      total += exp((double)r[i].l - (double)r[0].l);
    int keep = 0;
    while (keep < V && (keep == 0 || above / total < p.top_p)) {
      above += exp((double)r[keep].l - (double)r[0].l);
      keep++;
    }
    sampler_sample(s, l);
    for (int i = 0; i < V; i++)
      if ((l[r[i].id] > -INFINITY) != (i < keep)) {
        bad++;
        break;
      }
    sampler_free(s);
  }
  CHECK(bad == 0, "top-p kept set differs from sort-and-walk in %d of 40 rounds", bad);
}

static void test_seed(void) {
  sampler_params p = sampler_default_params();
  p.temperature = 1.0f;
  p.seed = 12345;
  sampler *a = make(p, 16), *b = make(p, 16);
  p.seed = 54321;
  sampler *c = make(p, 16);
  int same_ab = 1, same_ac = 1;
  for (int i = 0; i < 64; i++) {
    float la[16], lb[16], lc[16];
    for (int k = 0; k < 16; k++)
      la[k] = lb[k] = lc[k] = (float)(k % 5) * 0.3f;
    int32_t ta = sampler_sample(a, la), tb = sampler_sample(b, lb), tc = sampler_sample(c, lc);
    same_ab &= ta == tb;
    same_ac &= ta == tc;
  }
  CHECK(same_ab, "same seed, different tokens");
  CHECK(!same_ac, "different seeds gave 64 identical draws");
  /* Uniform draws lie in [0, 1). */
  for (int i = 0; i < 1000; i++) {
    double u = sampler_uniform(a);
    if (!(u >= 0.0 && u < 1.0)) {
      CHECK(0, "uniform out of range: %g", u);
      break;
    }
  }
  sampler_reset(a);
  sampler_reset(b);
  CHECK(sampler_uniform(a) == sampler_uniform(b), "reset restarts the stream");
  sampler_free(a);
  sampler_free(b);
  sampler_free(c);
}

static void test_params(void) {
  sampler_params p = sampler_default_params();
  CHECK(sampler_check_params(&p) == QVL_OK, "defaults");
  p.temperature = -1;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "temperature"), "temp");
  p = sampler_default_params();
  p.top_p = 1.5f;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "top_p"), "top_p");
  p = sampler_default_params();
  p.min_p = -0.1f;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "min_p");
  p = sampler_default_params();
  p.repetition_penalty = 0;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "repetition_penalty");
  p = sampler_default_params();
  p.presence_penalty = 3;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "presence");
  p = sampler_default_params();
  p.top_k = -2;
  CHECK(sampler_check_params(&p) == QVL_ERR_INVALID_ARG, "top_k");
  sampler *s = NULL;
  p = sampler_default_params();
  CHECK(sampler_init(&p, 0, &s) == QVL_ERR_INVALID_ARG && !s, "empty vocabulary");
}

/* ---- stop conditions ---- */

static stop_state *make_stop(const int32_t *eos, int n_eos, const char *const *strs, int n_strs, int64_t max) {
  stop_params p = {.eos_ids = eos, .n_eos = n_eos, .strings = strs, .n_strings = n_strs, .max_tokens = max};
  stop_state *s = NULL;
  CHECK(stop_init(&p, &s) == QVL_OK, "stop_init: %s", qvl_last_error());
  return s;
}

static void test_stop(void) {
  int32_t eos[2] = {151645, 151643};
  const char *strs[2] = {"\n\nUser", "###"};
  stop_state *s = make_stop(eos, 2, strs, 2, 0);
  size_t len;
  CHECK(stop_push(s, 1, "Hello", 5) == QVL_FINISH_NONE && stop_ready(s) == 5, "plain");
  CHECK(stop_push(s, 2, "\n", 1) == QVL_FINISH_NONE && stop_ready(s) == 5, "held: could start a stop string");
  CHECK(stop_push(s, 3, "\nUs", 3) == QVL_FINISH_NONE && stop_ready(s) == 5, "still held");
  CHECK(stop_push(s, 4, "er: x", 5) == QVL_FINISH_STOP_STRING, "match across tokens");
  CHECK(strcmp(stop_text(s, &len), "Hello") == 0 && len == 5 && stop_ready(s) == 5, "cut before the stop string");
  CHECK(stop_push(s, 5, "more", 4) == QVL_FINISH_STOP_STRING && stop_n_tokens(s) == 4, "ignored after stop");

  stop_reset(s);
  CHECK(stop_push(s, 1, "a\n", 2) == QVL_FINISH_NONE && stop_ready(s) == 1, "reset");
  CHECK(stop_push(s, 2, "b", 1) == QVL_FINISH_NONE && stop_ready(s) == 3, "prefix broken: released");
  CHECK(stop_push(s, 151645, "<|im_end|>", 10) == QVL_FINISH_EOS, "eos");
  CHECK(strcmp(stop_text(s, NULL), "a\nb") == 0 && stop_ready(s) == 3, "eos bytes not in text");
  CHECK(strcmp(qvl_finish_name(stop_reason_of(s)), "eos") == 0, "name");
  stop_free(s);

  /* The earliest match wins, also when a longer string starts first. */
  const char *two[2] = {"bc", "abcd"};
  s = make_stop(NULL, 0, two, 2, 0);
  CHECK(stop_push(s, 1, "xabcdy", 6) == QVL_FINISH_STOP_STRING && strcmp(stop_text(s, NULL), "x") == 0, "earliest: %s",
        stop_text(s, NULL));
  stop_free(s);

  /* Token limit; everything is ready once stopped. */
  const char *z[1] = {"zz"};
  s = make_stop(NULL, 0, z, 1, 3);
  CHECK(stop_push(s, 1, "a", 1) == QVL_FINISH_NONE && stop_push(s, 2, "z", 1) == QVL_FINISH_NONE && stop_ready(s) == 1, "hold z");
  CHECK(stop_push(s, 3, "", 0) == QVL_FINISH_LENGTH && stop_ready(s) == 2, "max tokens flushes");
  stop_free(s);

  /* Incomplete UTF-8 is held back (e with acute = C3 A9; a 4-byte emoji F0 9F 98 80). */
  s = make_stop(NULL, 0, NULL, 0, 0);
  CHECK(stop_push(s, 1, "\xC3", 1) == QVL_FINISH_NONE && stop_ready(s) == 0, "lead byte held");
  CHECK(stop_push(s, 2, "\xA9", 1) == QVL_FINISH_NONE && stop_ready(s) == 2, "complete");
  CHECK(stop_push(s, 3, "\xF0\x9F", 2) == QVL_FINISH_NONE && stop_ready(s) == 2, "partial 4-byte held");
  CHECK(stop_push(s, 4, "\x98\x80", 2) == QVL_FINISH_NONE && stop_ready(s) == 6, "4-byte complete");
  stop_free(s);

  /* A stop string inside one token, with bytes of the token before it kept. */
  const char *nl[1] = {"END"};
  s = make_stop(NULL, 0, nl, 1, 0);
  CHECK(stop_push(s, 1, "abcENDdef", 9) == QVL_FINISH_STOP_STRING && strcmp(stop_text(s, NULL), "abc") == 0, "inside token");
  stop_free(s);

  /* Invalid conditions. */
  stop_state *bad = NULL;
  const char *empty[1] = {""};
  stop_params p = {.strings = empty, .n_strings = 1};
  CHECK(stop_init(&p, &bad) == QVL_ERR_INVALID_ARG && !bad, "empty stop string");
  p.n_strings = STOP_MAX_STRINGS + 1;
  CHECK(stop_init(&p, &bad) == QVL_ERR_INVALID_ARG, "too many strings");
}

int main(void) {
  test_greedy();
  test_repetition_penalty();
  test_presence_frequency();
  test_order();
  test_top_k();
  test_top_p_min_p();
  test_large_vocab();
  test_top_p_random();
  test_seed();
  test_params();
  test_stop();
  return TEST_SUMMARY("test_sampler");
}
