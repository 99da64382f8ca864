/*
 * The constrained-decoding row of qvl bench: the same batched decode loop (decoder step, then per
 * sequence: copy the logits, sample greedily, accept) with and without the grammar mask of a
 * realistic nested schema (a receipt: merchant, line items with description / quantity / price,
 * totals, an enum and a nullable field). With the mask each sequence computes its own mask from its
 * own automaton state (as the engine does), and starts a new document when one completes.
 */
#include "commands/bench_constrained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timing.h"
#include "text/json_schema.h"
#include "text/sampler.h"
#include "text/token_mask.h"

static const char receipt_schema[] =
    "{\"type\":\"object\",\"properties\":{\"merchant\":{\"type\":\"string\"},\"date\":{\"type\":\"string\"},"
    "\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"description\":{\"type\":\"string\"},"
    "\"quantity\":{\"type\":\"integer\"},\"unit_price\":{\"type\":\"number\"},\"total\":{\"type\":\"number\"}},"
    "\"required\":[\"description\",\"quantity\",\"unit_price\",\"total\"],\"additionalProperties\":false}},"
    "\"subtotal\":{\"type\":\"number\"},\"tax\":{\"type\":[\"number\",\"null\"]},\"total\":{\"type\":\"number\"},"
    "\"currency\":{\"enum\":[\"EUR\",\"USD\",\"GBP\",\"CHF\"]},\"payment\":{\"anyOf\":[{\"type\":\"object\","
    "\"properties\":{\"card\":{\"type\":\"string\"},\"last4\":{\"type\":\"string\"}},\"required\":[\"card\",\"last4\"],"
    "\"additionalProperties\":false},{\"type\":\"null\"}]}},\"required\":[\"merchant\",\"date\",\"items\",\"subtotal\","
    "\"tax\",\"total\",\"currency\",\"payment\"],\"additionalProperties\":false}";

/* One run: n sequences x steps tokens; masked or not. Fills tok/s and the mask time per token. */
static qvl_status run(const vlm *m, const token_trie *tt, const grammar *g, int n, int steps, bool masked,
                      double *tok_s, double *mask_ms) {
  int64_t V = m->text->hp.n_vocab;
  decoder_seq **seqs = calloc((size_t)n, sizeof *seqs);
  const float **logits = calloc((size_t)n, sizeof *logits);
  int32_t *next = malloc(sizeof *next * (size_t)n);
  float *work = malloc(sizeof *work * (size_t)V);
  uint64_t *mask = malloc(sizeof *mask * (size_t)token_mask_words(tt));
  grammar_state *st = malloc(sizeof *st * (size_t)n);
  sampler **smp = calloc((size_t)n, sizeof *smp);
  token_mask_walker *w = NULL;
  qvl_status s = token_mask_walker_init(tt, &w);
  if (!seqs || !logits || !next || !work || !mask || !st || !smp)
    s = QVL_ERR_NOMEM;
  sampler_params sp = sampler_default_params();
  int32_t prompt[16];
  for (int i = 0; i < 16; i++)
    prompt[i] = 1000 + 37 * i;
  for (int i = 0; s == QVL_OK && i < n; i++) {
    decoder_seq_params dp = {.n_ctx = 16 + steps + 8, .n_batch = 16};
    s = decoder_seq_init(m->text, &dp, &seqs[i]);
    prompt[0] = 500 + i;
    decoder_input in = {.n_tokens = 16, .tokens = prompt};
    if (s == QVL_OK)
      s = decoder_prefill(seqs[i], &in, NULL, &logits[i]);
    if (s == QVL_OK)
      s = sampler_init(&sp, V, &smp[i]);
    grammar_start(g, &st[i]);
  }
  double t_mask = 0, t0 = time_now_s();
  for (int k = 0; s == QVL_OK && k < steps; k++) {
    for (int i = 0; i < n; i++) {
      memcpy(work, logits[i], sizeof *work * (size_t)V);
      if (masked) {
        double tm = time_now_s();
        if (token_mask_compute(w, g, &st[i], m->eos_ids, m->n_eos, mask) == 0)
          grammar_start(g, &st[i]);
        token_mask_apply(mask, V, work);
        t_mask += time_now_s() - tm;
      }
      int32_t id = sampler_sample(smp[i], work);
      sampler_accept(smp[i], id);
      if (masked) {
        double tm = time_now_s();
        size_t len = 0;
        const char *b = tokenizer_is_special(m->tok, id) ? NULL : tokenizer_token_bytes(m->tok, id, &len);
        if (!b || !len || !grammar_feed(g, &st[i], b, len))
          grammar_start(g, &st[i]); /* EOS: the document is complete, start the next */
        t_mask += time_now_s() - tm;
        if (!b || !len)
          id = 1000; /* feed an ordinary token instead of EOS */
      }
      next[i] = id;
    }
    s = decoder_step_batch(seqs, next, n, logits);
  }
  double dt = time_now_s() - t0;
  *tok_s = (double)n * steps / dt;
  *mask_ms = t_mask * 1e3 / ((double)n * steps);
  for (int i = 0; i < n; i++) {
    if (seqs)
      decoder_seq_free(seqs[i]);
    if (smp)
      sampler_free(smp[i]);
  }
  free(seqs), free(logits), free(next), free(work), free(mask), free(st), free(smp);
  token_mask_walker_free(w);
  return s;
}

qvl_status bench_constrained(const vlm *m, const int *sizes, int n_sizes, int steps, cJSON *out) {
  cJSON *sch = cJSON_Parse(receipt_schema);
  grammar *g = NULL;
  token_trie *tt = NULL;
  qvl_status s = json_schema_compile(sch, &g);
  cJSON_Delete(sch);
  double t0 = time_now_s();
  if (s == QVL_OK)
    s = token_trie_build(m->tok, m->text->hp.n_vocab, &tt);
  if (s == QVL_OK)
    cJSON_AddNumberToObject(out, "token_trie_build_ms", (time_now_s() - t0) * 1e3);
  cJSON *c = cJSON_AddObjectToObject(out, "constrained_decode_tok_s");
  cJSON *u = cJSON_AddObjectToObject(out, "unconstrained_decode_tok_s");
  cJSON *r = cJSON_AddObjectToObject(out, "constrained_ratio");
  cJSON *mm = cJSON_AddObjectToObject(out, "mask_ms_per_token");
  for (int b = 0; s == QVL_OK && b < n_sizes; b++) {
    int n = sizes[b];
    fprintf(stderr, "[bench] constrained vs unconstrained decode, %d sequences x %d tokens...\n", n, steps);
    double tu, tc, mu, mc;
    s = run(m, tt, g, n, steps, false, &tu, &mu);
    if (s == QVL_OK)
      s = run(m, tt, g, n, steps, true, &tc, &mc);
    if (s != QVL_OK)
      break;
    char key[16];
    snprintf(key, sizeof key, "%d", n);
    cJSON_AddNumberToObject(c, key, tc);
    cJSON_AddNumberToObject(u, key, tu);
    cJSON_AddNumberToObject(r, key, tc / tu);
    cJSON_AddNumberToObject(mm, key, mc);
  }
  token_trie_free(tt);
  grammar_free(g);
  return s;
}
