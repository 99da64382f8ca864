#include "engine/gen_seq.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/free_each.h"
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
  /* reasoning */
  bool reasoning;            /* the output started inside a think block */
  bool in_think;             /* still inside the think block */
  bool answer_started;       /* a visible answer byte was kept (leading newlines are trimmed) */
  int64_t budget, n_think;   /* budget (< 0: none), tokens generated inside the block */
  int32_t close[GEN_SEQ_MAX_THINK_CLOSE];
  int n_close, forced;       /* the close sequence; how much of it is forced (-1: not forcing) */
  buf think;                 /* reasoning text (leading newlines trimmed) */
  size_t think_sent;
  gen_stream_fn think_stream;
};

static const char THINK_END[] = "</think>";
#define THINK_END_LEN (sizeof THINK_END - 1)

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
  token_mask_walker_free(g->walker);
  buf_free(&g->think);
  FREE_EACH(g->work, g->ids, g->gst, g->mask, g->lp, g->top_ids, g->top_lp, g);
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
  g->forced = -1;
  g->budget = -1;
  QVL_TRY(buf_append(&g->think, "", 0));
  if (c->reasoning) {
    g->in_think = g->reasoning = true;
    g->budget = c->reasoning_budget;
    g->think_stream = c->reasoning_stream;
    if (g->budget >= 0 && (c->n_think_close <= 0 || c->n_think_close > GEN_SEQ_MAX_THINK_CLOSE))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "a reasoning budget needs the think-close tokens (1..%d)",
                        GEN_SEQ_MAX_THINK_CLOSE);
    for (int i = 0; g->budget >= 0 && i < c->n_think_close; i++) {
      if (c->think_close[i] < 0 || c->think_close[i] >= c->n_vocab)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "think-close token %d is outside the vocabulary", c->think_close[i]);
      g->close[g->n_close++] = c->think_close[i];
    }
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

/* How much of the reasoning text is final: a tail that may be the start of "</think>", trailing
 * newlines (trimmed if the block closes next) and an incomplete UTF-8 sequence wait. */
static size_t think_ready(const buf *t) {
  size_t n = t->len;
  for (size_t k = THINK_END_LEN - 1; k > 0; k--)
    if (n >= k && !memcmp(t->data + n - k, THINK_END, k)) {
      n -= k;
      break;
    }
  while (n && t->data[n - 1] == '\n')
    n--;
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char c = (unsigned char)t->data[n - back];
    if ((c & 0xC0) == 0x80)
      continue; /* a continuation byte: look further back for the lead */
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back)
      n -= back;
    break;
  }
  return n;
}

static bool stream_think(gen_seq *g, size_t upto, void *user) {
  bool go = true;
  if (g->think_stream && upto > g->think_sent)
    go = g->think_stream(user, g->think.data + g->think_sent, upto - g->think_sent);
  if (upto > g->think_sent)
    g->think_sent = upto;
  return go;
}

/* Takes a token's bytes while inside the think block. Returns the bytes that belong to the answer
 * (after "</think>", in the same token), *closed when the block ended. */
static qvl_status think_take(gen_seq *g, const char *bytes, size_t nb, const char **rest, size_t *n_rest,
                             bool *closed) {
  *rest = NULL;
  *n_rest = 0;
  *closed = false;
  if (g->think.len == 0)
    while (nb && *bytes == '\n')
      bytes++, nb--;
  size_t from = g->think.len >= THINK_END_LEN - 1 ? g->think.len - (THINK_END_LEN - 1) : 0;
  QVL_TRY(buf_append(&g->think, bytes, nb));
  const char *hit = NULL;
  for (size_t i = from; i + THINK_END_LEN <= g->think.len && !hit; i++)
    if (!memcmp(g->think.data + i, THINK_END, THINK_END_LEN))
      hit = g->think.data + i;
  if (!hit)
    return QVL_OK;
  size_t end = (size_t)(hit - g->think.data);
  size_t after = end + THINK_END_LEN;
  /* The answer part of this token: what follows the tag (it lies inside bytes). */
  size_t tail = g->think.len - after;
  *rest = bytes + nb - tail;
  *n_rest = tail;
  while (end && g->think.data[end - 1] == '\n')
    end--;
  g->think.len = end;
  g->think.data[end] = 0;
  if (g->think_sent > end)
    g->think_sent = end;
  g->in_think = false;
  *closed = true;
  return QVL_OK;
}

qvl_status gen_seq_next(gen_seq *g, const float *logits, gen_stream_fn stream, void *user, int32_t *id_out,
                        bool *done) {
  *done = false;
  *id_out = -1;
  if (g->n >= g->max_tokens || stop_reason_of(g->stp) != QVL_FINISH_NONE) {
    *done = true; /* already stopped */
    return QVL_OK;
  }
  int64_t V = g->n_vocab;
  memcpy(g->work, logits, sizeof *g->work * (size_t)V);
  /* At the budget the close is forced, token by token (it may outlast the block by its newlines). */
  if (g->in_think && g->forced < 0 && g->budget >= 0 && g->n_think >= g->budget)
    g->forced = 0;
  bool forcing = g->forced >= 0 && g->forced < g->n_close;
  bool masked = g->gram && !g->in_think && !forcing;
  if (masked) {
    /* The sequence's own state only: batch-invariant, and independent of other sequences. */
    int64_t allowed;
    QVL_TRY(token_mask_fill(g->walker, g->gram, g->gst, g->eos_ids, g->n_eos, g->mask, &allowed));
    /* grammar_finalize refuses schemas without a finite value and the automaton only accepts bytes
     * that can be completed, so this is a bug, not a property of the request. */
    if (allowed == 0)
      return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: no token can continue the output");
    token_mask_apply(g->mask, V, g->work);
  }
  int32_t id = forcing ? g->close[g->forced++] : sampler_sample(g->smp, g->work);
  if (g->logprobs)
    logprobs_compute(g->work, V, id, g->n_top, &g->lp[g->n], g->top_ids + g->n * g->n_top,
                     g->top_lp + g->n * g->n_top);
  size_t nb;
  const char *bytes = visible_bytes(g->tok, id, &nb);
  bool was_think = g->in_think, closed = false;
  if (was_think) {
    g->n_think++;
    QVL_TRY(think_take(g, bytes, nb, &bytes, &nb, &closed));
  }
  /* After a think block the answer starts past the newlines that follow </think>, as the template
   * trims them (free text keeps its leading newlines). */
  if (g->reasoning && !g->answer_started && !g->in_think)
    while (nb && *bytes == '\n')
      bytes++, nb--;
  if (nb && !g->in_think)
    g->answer_started = true;
  if (masked) {
    if (!(g->mask[id / 64] >> (id % 64) & 1))
      return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: the sampler chose a masked token");
  }
  if (g->gram && !g->in_think && nb && !grammar_feed(g->gram, g->gst, bytes, nb))
    return qvl_errorf(QVL_ERR_INTERNAL, "constrained decoding: the grammar refused an allowed token");
  if (g->n == 0)
    g->t_first = time_now_s();
  g->ids[g->n++] = id;
  *id_out = id;
  QVL_TRY(sampler_accept(g->smp, id));
  qvl_finish why = stop_push(g->stp, id, g->in_think ? "" : bytes, g->in_think ? 0 : nb);
  QVL_TRY(stop_error(g->stp));
  /* Reasoning: final up to what think_ready allows; all of it once the block closed or we stop. */
  if (was_think) {
    size_t upto = closed || why != QVL_FINISH_NONE ? g->think.len : think_ready(&g->think);
    if (!closed && why != QVL_FINISH_NONE) {
      while (upto && g->think.data[upto - 1] == '\n')
        upto--;
      g->think.len = upto;
      g->think.data[upto] = 0;
    }
    if (!stream_think(g, upto, user))
      return qvl_errorf(QVL_ERR_CANCELLED, "generation cancelled");
  }
  size_t len, ready = stop_ready(g->stp);
  const char *text = stop_text(g->stp, &len);
  if (stream && ready > g->sent && !stream(user, text + g->sent, ready - g->sent)) {
    g->sent = ready;
    return qvl_errorf(QVL_ERR_CANCELLED, "generation cancelled");
  }
  g->sent = ready;
  *done = why != QVL_FINISH_NONE;
  return QVL_OK;
}

const char *gen_seq_reasoning(const gen_seq *g, size_t *len) {
  *len = g->think.len;
  return g->think.data ? g->think.data : "";
}

int64_t gen_seq_reasoning_tokens(const gen_seq *g) { return g->n_think; }

const char *gen_seq_text(const gen_seq *g, size_t *len) { return stop_text(g->stp, len); }

const int32_t *gen_seq_ids(const gen_seq *g, int64_t *n) {
  *n = g->n;
  return g->ids;
}

qvl_finish gen_seq_reason(const gen_seq *g) { return stop_reason_of(g->stp); }

int gen_seq_stop_matched(const gen_seq *g) { return stop_matched(g->stp); }

double gen_seq_t_first(const gen_seq *g) { return g->t_first; }

void gen_seq_logprobs(const gen_seq *g, const float **lp, const int32_t **top_ids, const float **top_lp) {
  *lp = g->lp;
  *top_ids = g->top_ids;
  *top_lp = g->top_lp;
}
