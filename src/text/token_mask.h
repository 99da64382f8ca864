/*
 * Which tokens may come next under a grammar: a trie over the vocabulary's byte strings, built
 * once per tokenizer, walked depth-first with the automaton state; a subtree whose prefix the
 * automaton rejects is skipped whole. Inside a free string (the common case in extraction) the
 * tokens made only of plain string bytes (printable ASCII but '"' and '\', and complete UTF-8
 * sequences) are allowed as a block from a precomputed bitmap, and only the other tokens are
 * walked, in a second trie.
 *
 * Control tokens (<|im_end|> ...) are not text and never in the trie; the end-of-output ids are
 * allowed exactly when the grammar accepts the end. Rows past the tokenizer's vocabulary (padding
 * of the embedding matrix) are never allowed.
 *
 * Bounded work: every mask has a budget of TOKEN_MASK_WORK_PER_NODE automaton steps per node of the
 * trie it walks (a plain JSON mask takes about one or two; grammar_finalize bounds a schema's
 * anyOf expansion, so a compiled schema stays far below it). Past the budget the mask fails instead
 * of stalling the thread. A poll callback, asked every TOKEN_MASK_POLL_NODES trie nodes, lets the
 * caller stop a mask midway (client gone, deadline, shutdown).
 *
 * Thread safety: a trie is read-only once built and may be shared; a token_mask_walker (scratch
 * memory) belongs to one thread. Computing a mask allocates nothing.
 */
#ifndef QVL_TEXT_TOKEN_MASK_H
#define QVL_TEXT_TOKEN_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "text/grammar.h"
#include "text/tokenizer.h"

#define TOKEN_MASK_WORK_PER_NODE 64
#define TOKEN_MASK_POLL_NODES 4096

typedef struct token_trie token_trie;
/* Returns true when the mask should stop (it then fails with QVL_ERR_CANCELLED). */
typedef bool (*token_mask_poll_fn)(void *user);
typedef struct token_mask_walker token_mask_walker;

/* n_vocab: rows of the logits (>= the tokenizer's vocabulary). */
qvl_status token_trie_build(const tokenizer *t, int64_t n_vocab, token_trie **out);
void token_trie_free(token_trie *tt);
int64_t token_trie_vocab(const token_trie *tt);
/* Words of a mask: (n_vocab + 63) / 64. */
int64_t token_mask_words(const token_trie *tt);

qvl_status token_mask_walker_init(const token_trie *tt, token_mask_walker **out);
void token_mask_walker_free(token_mask_walker *w);

/* The poll callback of later masks (NULL: none). */
void token_mask_walker_set_poll(token_mask_walker *w, token_mask_poll_fn poll, void *user);

/* Fills mask (token_mask_words words; bit i of word i/64 = token i allowed) for the state st;
 * eos[0..n_eos) are allowed when the grammar can end; *allowed = how many tokens are allowed.
 * Errors: QVL_ERR_CANCELLED (the poll said stop), QVL_ERR_UNSUPPORTED (over the work budget); the
 * mask is then all zero. */
qvl_status token_mask_fill(token_mask_walker *w, const grammar *g, const grammar_state *st, const int32_t *eos,
                           int n_eos, uint64_t *mask, int64_t *allowed);
/* token_mask_fill returning the count, 0 on an error. */
int64_t token_mask_compute(token_mask_walker *w, const grammar *g, const grammar_state *st, const int32_t *eos,
                           int n_eos, uint64_t *mask);
/* Automaton steps of the last mask, and its budget (for tests and the fuzz target). */
uint64_t token_mask_last_work(const token_mask_walker *w);
uint64_t token_mask_last_budget(const token_mask_walker *w);

/* Sets logits[i] = -INFINITY for every token not in mask. */
void token_mask_apply(const uint64_t *mask, int64_t n_vocab, float *logits);

#endif
