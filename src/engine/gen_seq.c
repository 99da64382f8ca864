#include "engine/gen_seq.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/timing.h"
#include "text/logprobs.h"

struct gen_seq {
  const tokenizer *tok;
  int64_t n_vocab, max_tokens;
  const int32_t *eos_ids;
  int n_eos;
  sampler *smp;
  stop_state *stp;
  float *work;               /* [n_vocab] logits copy the sampler and the mask modify */
  int32_t *ids;              /* [max_tokens] */
  int64_t n;
  size_t sent;               /* text bytes streamed */
  double t_first;
  const grammar *gram;
  grammar_state *gst;        /* the output so far in the grammar */
  token_mask_walker *walker;
  uint64_t *mask;            /* [token_mask_words] allowed next tokens */
  bool logprobs;
  int n_top;
  float *lp;                 /* [max_tokens] */
  int32_t *top_ids;          /* [max_tokens][n_top] */
  float *top_lp;             /* [max_tokens][n_top] */
};

/* Bytes a token contributes to the visible text: control tokens are skipped, as transformers'
 * decode(skip_special_tokens=True) does. */
static const char *visible_bytes(const tokenizer *t, int32_t id, size_t *len) {
  *len = 0;
  if (tokenizer_is_special(t, id))
    return "";
  const char *b = tokenizer_token_bytes(t, id, len);
  if (!b) {
    *len = 0;
    return "";
  }
  return b;
}

void gen_seq_free(gen_seq *g) {
  if (!g)
    return;
  sampler_free(g->smp);
  stop_free(g->stp);
  free(g->work);
  free(g->ids);
  free(g->gst);
  token_mask_walker_free(g->walker);
  free(g->mask);
  free(g->lp);
  free(g->top_ids);
  free(g->top_lp);
  free(g);
}

static qvl_status init(const gen_seq_config *c, gen_seq *g) {
  if (c->max_tokens <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "max_tokens must be positive");
  if (c->gram && !c->trie)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "constrained decoding needs the vocabulary trie");
  g->tok = c->tok;
  g->n_vocab = c->n_vocab;
  g->max_tokens = c->max_tokens;
  g->eos_ids = c->eos_ids;
  g->n_eos = c->n_eos;
  QVL_TRY(sampler_init(c->sampling, c->n_vocab, &g->smp));
  QVL_TRY(sampler_add_prompt(g->smp, c->prompt, c->n_prompt));
  stop_params sp = {.eos_ids = c->ignore_eos ? NULL : c->eos_ids,
                    .n_eos = c->ignore_eos ? 0 : c->n_eos,
                    .strings = c->stop,
                    .n_strings = c->n_stop,
                    .max_tokens = c->max_tokens};
  QVL_TRY(stop_init(&sp, &g->stp));
  g->work = malloc(sizeof *g->work * (size_t)c->n_vocab);
  g->ids = malloc(sizeof *g->ids * (size_t)c->max_tokens);
  if (!g->work || !g->ids)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (c->gram) {
    g->gram = c->gram;
    QVL_TRY(token_mask_walker_init(c->trie, &g->walker));
    token_mask_walker_set_poll(g->walker, c->poll, c->poll_user);
    g->mask = malloc(sizeof *g->mask * (size_t)token_mask_words(c->trie));
    g->gst = malloc(sizeof *g->gst);
    if (!g->mask || !g->gst)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory for constrained decoding");
    grammar_start(g->gram, g->gst);
  }
  if (c->logprobs) {
    g->logprobs = true;
    g->n_top = c->n_top;
    size_t n = (size_t)c->max_tokens, k = (size_t)(c->n_top > 0 ? c->n_top : 1);
    g->lp = malloc(sizeof *g->lp * n);
    g->top_ids = malloc(sizeof *g->top_ids * n * k);
    g->top_lp = malloc(sizeof *g->top_lp * n * k);
    if (!g->lp || !g->top_ids || !g->top_lp)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory for logprobs");
  }
  return QVL_OK;
}

qvl_status gen_seq_init(const gen_seq_config *c, gen_seq **out) {
  *out = NULL;
  gen_seq *g = calloc(1, sizeof *g);
  if (!g)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  qvl_status s = init(c, g);
  if (s != QVL_OK) {
    gen_seq_free(g);
    return s;
  }
  *out = g;
  return QVL_OK;
}

qvl_status gen_seq_next(gen_seq *g, const float *logits, gen_stream_fn stream, void *user, int32_t *id_out,
                        bool *done) {
  *done = false;
  *id_out = -1;
  if (g->n >= g->max_tokens || stop_reason_of(g->stp) != STOP_NONE) {
    *done = true; /* already stopped */
    return QVL_OK;
  }
  int64_t V = g->n_vocab;
  memcpy(g->work, logits, sizeof *g->work * (size_t)V);
  if (g->gram) {
    /* The sequence's own state only: batch-invariant, and independent of other sequences. */
    int64_t allowed;
    QVL_TRY(token_mask_fill(g->walker, g->gram, g->gst, g->eos_ids, g->n_eos, g->mask, &allowed));
    /* grammar_finalize refuses schemas without a finite value and the automaton only accepts bytes
     * that can be completed, so this is a bug, not a property of the request. */
    if (allowed == 0)
      return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: no token can continue the output");
    token_mask_apply(g->mask, V, g->work);
  }
  int32_t id = sampler_sample(g->smp, g->work);
  if (g->logprobs)
    logprobs_compute(g->work, V, id, g->n_top, &g->lp[g->n], g->top_ids + g->n * g->n_top,
                     g->top_lp + g->n * g->n_top);
  size_t nb;
  const char *bytes = visible_bytes(g->tok, id, &nb);
  if (g->gram) {
    if (!(g->mask[id / 64] >> (id % 64) & 1))
      return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: the sampler chose a masked token");
    if (nb && !grammar_feed(g->gram, g->gst, bytes, nb))
      return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: the grammar refused an allowed token");
  }
  if (g->n == 0)
    g->t_first = time_now_s();
  g->ids[g->n++] = id;
  *id_out = id;
  QVL_TRY(sampler_accept(g->smp, id));
  stop_reason why = stop_push(g->stp, id, bytes, nb);
  QVL_TRY(stop_error(g->stp));
  size_t len, ready = stop_ready(g->stp);
  const char *text = stop_text(g->stp, &len);
  if (stream && ready > g->sent && !stream(user, text + g->sent, ready - g->sent)) {
    g->sent = ready;
    return qvl_errorf(QVL_ERR_CANCELLED, "generation cancelled");
  }
  g->sent = ready;
  *done = why != STOP_NONE;
  return QVL_OK;
}

const char *gen_seq_text(const gen_seq *g, size_t *len) { return stop_text(g->stp, len); }

const int32_t *gen_seq_ids(const gen_seq *g, int64_t *n) {
  *n = g->n;
  return g->ids;
}

stop_reason gen_seq_reason(const gen_seq *g) { return stop_reason_of(g->stp); }

double gen_seq_t_first(const gen_seq *g) { return g->t_first; }

void gen_seq_logprobs(const gen_seq *g, const float **lp, const int32_t **top_ids, const float **top_lp) {
  *lp = g->lp;
  *top_ids = g->top_ids;
  *top_lp = g->top_lp;
}
