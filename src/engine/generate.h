/*
 * One request, one sequence: prefill the prompt, then gen_seq_next / decoder_step until a stop
 * condition, streaming the text. The engine runs the same gen_seq per request in its batches.
 */
#ifndef QVL_ENGINE_GENERATE_H
#define QVL_ENGINE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/gen_seq.h"
#include "engine/vlm.h"
#include "text/sampler.h"
#include "text/stop.h"

typedef struct gen_params {
  sampler_params sampling;
  int64_t max_tokens;        /* > 0 */
  const char *const *stop;   /* stop strings */
  int n_stop;
  bool ignore_eos;           /* keep going past <|im_end|> (benchmarks, dumps) */
  int64_t n_ctx;             /* KV capacity; <= 0: prompt + max_tokens */
  bool reasoning;            /* the prompt ends inside an open think block (gen_seq.h) */
  int64_t reasoning_budget;  /* with reasoning: < 0 unbounded (the default), else reasoning tokens
                              * before the engine closes the block itself */
} gen_params;

typedef struct gen_result {
  buf text;                  /* generated text (specials skipped, stop string removed) */
  int32_t *ids;              /* [n_ids] every generated id, EOS included */
  int64_t n_ids;
  int64_t n_prompt;
  qvl_finish reason;
  double prefill_ms;         /* prompt through the decoder (vision not included) */
  double decode_ms;          /* after the first token */
  double ttft_ms;            /* prefill + the first sampled token */
} gen_result;

gen_params gen_params_default(void);
/* The generation state's settings for a request of m with these parameters and prompt ids
 * (free text, no logprobs; the engine adds its grammar and logprobs). */
gen_seq_config gen_seq_config_of(const vlm *m, const gen_params *gp, const int32_t *prompt, int64_t n_prompt);
/* stream (gen_seq.h) is called with each piece of final text; when it returns false generate
 * returns QVL_ERR_CANCELLED with what was generated so far in the result. */
qvl_status generate(const vlm *m, const vlm_prompt *p, const gen_params *gp, gen_stream_fn stream,
                    void *user, gen_result *out);
void gen_result_free(gen_result *r);

#endif
