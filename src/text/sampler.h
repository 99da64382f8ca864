/*
 * Next-token selection with the logits processors of transformers' generate(), in its order:
 *
 *   1. repetition penalty (HF RepetitionPenaltyLogitsProcessor): every distinct token seen in the
 *      prompt or the output so far: logit / p if logit > 0, else logit * p;
 *   2. presence / frequency penalties (OpenAI semantics, as vLLM applies them): over the tokens
 *      generated so far only (not the prompt): logit -= frequency * count + presence * (count > 0);
 *   3. greedy (temperature <= 0): argmax, the lowest id on exact ties; nothing below applies;
 *   4. temperature: logit / T;
 *   5. top-k: keep the tokens whose logit is >= the k-th largest (ties at the boundary are kept, as HF);
 *   6. top-p: in descending order keep a token while the probability mass strictly above it is < p
 *      (HF TopPLogitsWarper; at least one token);
 *   7. min-p: drop tokens whose probability is < min_p * the top probability (HF MinPLogitsWarper);
 *   8. draw from the softmax of what remains with the sampler's own PRNG (xoshiro256**, seeded with
 *      splitmix64(seed)): the same seed and inputs give the same tokens on every machine.
 * HF's multinomial draw (torch's RNG) cannot be reproduced; greedy output is exact.
 *
 * Thread safety: a sampler belongs to one sequence / thread. Memory is allocated once in
 * sampler_init (O(n_vocab)); sampling and accepting tokens allocate nothing.
 */
#ifndef QVL_TEXT_SAMPLER_H
#define QVL_TEXT_SAMPLER_H

#include <stdint.h>

#include "qvl.h"

#define SAMPLER_MAX_BIAS 300 /* logit_bias entries */

typedef struct sampler_params {
  float temperature;        /* <= 0: greedy */
  int32_t top_k;            /* <= 0: off */
  float top_p;              /* in (0, 1]; 1: off */
  float min_p;              /* in [0, 1]; 0: off */
  float repetition_penalty; /* > 0; 1: off */
  float presence_penalty;   /* in [-2, 2]; 0: off */
  float frequency_penalty;  /* in [-2, 2]; 0: off */
  uint64_t seed;
  /* logit_bias: bias[i] is added to the logit of bias_ids[i] before everything else */
  int32_t n_bias;
  int32_t bias_ids[SAMPLER_MAX_BIAS];
  float bias[SAMPLER_MAX_BIAS];
} sampler_params;

/* Greedy, every filter and penalty off, seed 0. */
sampler_params sampler_default_params(void);

/* Checks the ranges above; QVL_ERR_INVALID_ARG naming the parameter, its value and the range. */
qvl_status sampler_check_params(const sampler_params *p);

typedef struct sampler sampler;

qvl_status sampler_init(const sampler_params *p, int64_t n_vocab, sampler **out);
void sampler_free(sampler *s);
/* Forgets the prompt and output history and restarts the PRNG from the seed. */
void sampler_reset(sampler *s);

/* Records prompt tokens (they count for the repetition penalty only). Ids outside the vocabulary
 * give QVL_ERR_INVALID_ARG. */
qvl_status sampler_add_prompt(sampler *s, const int32_t *ids, int64_t n);
/* Records a generated token (counts for every penalty). Call it with each token appended. */
qvl_status sampler_accept(sampler *s, int32_t id);

/* Picks the next token from logits[n_vocab], which are modified in place (penalties, temperature,
 * filtered tokens set to -INFINITY). Does not record the token (call sampler_accept). NaN logits
 * never win; if every logit is NaN or -inf the result is the lowest id, 0. */
int32_t sampler_sample(sampler *s, float *logits);

/* The PRNG on its own (tests, reproducibility): uniform double in [0, 1). */
double sampler_uniform(sampler *s);

#endif
