/*
 * Log-probabilities of the distribution a token was drawn from: the log-softmax of the logits as
 * the sampler left them (after penalties, the grammar mask and temperature; tokens removed by
 * top-k / top-p / min-p are -inf and have probability 0), so the chosen token's value is exactly
 * the probability it was drawn with. With greedy decoding (no temperature) it is the softmax of
 * the penalised, masked logits at temperature 1.
 *
 * Thread safety: pure function.
 */
#ifndef QVL_TEXT_LOGPROBS_H
#define QVL_TEXT_LOGPROBS_H

#include <stdint.h>

/* logits[n]: the sampler's work array after sampler_sample. Writes the chosen token's log-prob and
 * the n_top best (largest first, ties by lower id; ids -1 and -inf past the finite ones). */
void logprobs_compute(const float *logits, int64_t n, int32_t chosen, int n_top, float *chosen_lp,
                      int32_t *top_ids, float *top_lp);

#endif
