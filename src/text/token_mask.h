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
 * Thread safety: a trie is read-only once built and may be shared; a token_mask_walker (scratch
 * memory) belongs to one thread. Computing a mask allocates nothing.
 */
#ifndef QVL_TEXT_TOKEN_MASK_H
#define QVL_TEXT_TOKEN_MASK_H

#include <stdint.h>

#include "text/grammar.h"
#include "text/tokenizer.h"

typedef struct token_trie token_trie;
typedef struct token_mask_walker token_mask_walker;

/* n_vocab: rows of the logits (>= the tokenizer's vocabulary). */
qvl_status token_trie_build(const tokenizer *t, int64_t n_vocab, token_trie **out);
void token_trie_free(token_trie *tt);
int64_t token_trie_vocab(const token_trie *tt);
/* Words of a mask: (n_vocab + 63) / 64. */
int64_t token_mask_words(const token_trie *tt);

qvl_status token_mask_walker_init(const token_trie *tt, token_mask_walker **out);
void token_mask_walker_free(token_mask_walker *w);

/* Fills mask (token_mask_words words; bit i of word i/64 = token i allowed) for the state st;
 * eos[0..n_eos) are allowed when the grammar can end. Returns how many tokens are allowed. */
int64_t token_mask_compute(token_mask_walker *w, const grammar *g, const grammar_state *st, const int32_t *eos,
                           int n_eos, uint64_t *mask);

/* Sets logits[i] = -INFINITY for every token not in mask. */
void token_mask_apply(const uint64_t *mask, int64_t n_vocab, float *logits);

#endif
