/*
 * One generation's token-by-token sequence, the same for `qvl run` (generate.c) and the serving
 * engine: from a position's logits to the next token and the text a client may see.
 *
 *   mask (grammar) -> sample -> logprobs -> grammar feed -> record -> sampler accept -> stop check
 *   -> stream the newly final visible text
 *
 * Visible text is each token's bytes with control tokens (<|im_start|>, ...) skipped, as
 * transformers' decode(skip_special_tokens=True); text that could still become a stop string, or
 * that ends inside a UTF-8 sequence, is held back (stop.h), so a stream never shows what is later cut.
 *
 * Reasoning (a thinking model whose prompt ends in an open <think> block): the output is reasoning
 * up to "</think>", then the answer. The two are separate channels: reasoning goes to
 * reasoning_stream and gen_seq_reasoning, the answer to stream and gen_seq_text. Newlines around
 * the think block are trimmed as the chat template trims them. Stop strings, the grammar and tool
 * calls (parsed from the text by the server) see the answer only; EOS and max_tokens count every
 * token. With a budget, after that many reasoning tokens the close ("\n</think>\n\n" as token ids)
 * is forced and the answer follows.
 *
 *   gen_seq *g;
 *   QVL_TRY(gen_seq_init(&cfg, &g));
 *   for (;;) {
 *     int32_t id; bool done;
 *     s = gen_seq_next(g, logits, stream, user, &id, &done);   // QVL_ERR_CANCELLED: stream said stop
 *     if (s != QVL_OK || done) break;
 *     decoder_step(seq, id, &logits);
 *   }
 *   gen_seq_text(g, &len); gen_seq_reason(g); gen_seq_free(g);
 *
 * Thread safety: a gen_seq belongs to one thread; the tokenizer, grammar and trie it reads are
 * shared read-only. Memory is allocated in gen_seq_init (O(n_vocab + max_tokens)); gen_seq_next
 * allocates only as the text grows.
 */
#ifndef QVL_ENGINE_GEN_SEQ_H
#define QVL_ENGINE_GEN_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"
#include "text/grammar.h"
#include "text/sampler.h"
#include "text/stop.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"

/* Called with each piece of final text; return false to cancel. */
typedef bool (*gen_stream_fn)(void *user, const char *text, size_t len);

typedef struct gen_seq_config {
  const tokenizer *tok;
  int64_t n_vocab;              /* rows of the logits */
  const sampler_params *sampling;
  const int32_t *prompt;        /* [n_prompt] for the repetition penalty */
  int64_t n_prompt;
  const int32_t *eos_ids;       /* [n_eos] the model's end ids: stop tokens (unless ignore_eos) and */
  int n_eos;                    /* the ids a grammar allows where the output may end */
  bool ignore_eos;              /* EOS does not stop (benchmarks, dumps) */
  const char *const *stop;      /* [n_stop] stop strings (copied) */
  int n_stop;
  int64_t max_tokens;           /* > 0 */
  const grammar *gram;          /* constrained decoding (not owned; NULL = free text) */
  const token_trie *trie;       /* with gram: the vocabulary trie of tok */
  token_mask_poll_fn poll;      /* with gram: asked during each mask, true = stop (NULL: never) */
  void *poll_user;
  bool logprobs;                /* record log-probabilities (gen_seq_logprobs) */
  int n_top;                    /* with logprobs: alternatives per token */
  bool reasoning;               /* the output starts inside a think block */
  int64_t reasoning_budget;     /* with reasoning: < 0 unbounded, else the reasoning tokens before the
                                 * close is forced (0: at once) */
  const int32_t *think_close;   /* [n_think_close] the forced close (copied); needed with a budget */
  int n_think_close;
  gen_stream_fn reasoning_stream; /* reasoning pieces (same user as the answer's stream); may be NULL */
} gen_seq_config;

#define GEN_SEQ_MAX_THINK_CLOSE 8

typedef struct gen_seq gen_seq;

/* Errors: sampling parameters out of range, bad stop strings, ids outside the vocabulary in the
 * prompt, a grammar without a trie, out of memory. */
qvl_status gen_seq_init(const gen_seq_config *c, gen_seq **out);
void gen_seq_free(gen_seq *g);

/*
 * Chooses the next token from logits[n_vocab] (not modified) and streams the text it makes final.
 * *id = the token (to feed to the decoder unless *done); *done = a stop condition holds (reason
 * in gen_seq_reason; the text is then all final and streamed). Errors: QVL_ERR_CANCELLED when
 * stream returned false (the token is recorded) or the poll stopped the mask (no token recorded),
 * QVL_ERR_UNSUPPORTED when a mask went over its work budget, QVL_ERR_INTERNAL when constrained
 * decoding cannot go on ("constrained decoding: ..."; no token recorded), QVL_ERR_NOMEM.
 */
qvl_status gen_seq_next(gen_seq *g, const float *logits, gen_stream_fn stream, void *user, int32_t *id,
                        bool *done);

/* The visible text so far (stop string and what follows removed), NUL-terminated. */
const char *gen_seq_text(const gen_seq *g, size_t *len);
/* The reasoning so far, NUL-terminated ("" without reasoning). */
const char *gen_seq_reasoning(const gen_seq *g, size_t *len);
/* Tokens generated inside the think block (the close included). */
int64_t gen_seq_reasoning_tokens(const gen_seq *g);
/* Every generated id, EOS included: [*n]. */
const int32_t *gen_seq_ids(const gen_seq *g, int64_t *n);
qvl_finish gen_seq_reason(const gen_seq *g);
/* 1 + the index of the stop string that ended it (stop_matched); 0: none did. */
int gen_seq_stop_matched(const gen_seq *g);
/* time_now_s() when the first token was sampled (0 before). */
double gen_seq_t_first(const gen_seq *g);
/* With logprobs: [n] chosen log-probs, [n][n_top] alternatives (see text/logprobs.h). */
void gen_seq_logprobs(const gen_seq *g, const float **lp, const int32_t **top_ids, const float **top_lp);

#endif
