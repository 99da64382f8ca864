/* Engine requests: defaults and the one place their rules are checked (engine_request.h). */
#include "engine/engine_request.h"

#include <string.h>

#include "base/status.h"
#include "text/stop.h"

void engine_request_init(engine_request *r) {
  memset(r, 0, sizeof *r);
  prompt_opts_default(&r->prompt);
  r->gen = gen_params_default();
}

qvl_status engine_request_check(const engine_request *r, int64_t n_ctx) {
  if (!r || !(r->messages || r->raw_text || r->raw_ids) || !r->on_done)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "engine: a request needs messages and an on_done callback");
  const gen_params *g = &r->gen;
  if (g->max_tokens <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "max_tokens must be positive, found %lld", (long long)g->max_tokens);
  if (g->n_stop < 0 || g->n_stop > STOP_MAX_STRINGS)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%d stop strings; at most %d are allowed", g->n_stop, STOP_MAX_STRINGS);
  for (int i = 0; i < g->n_stop; i++) {
    size_t n = g->stop[i] ? strlen(g->stop[i]) : 0;
    if (n == 0 || n > STOP_MAX_STRING_BYTES)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "stop string %d: expected 1..%d bytes, found %zu", i,
                        STOP_MAX_STRING_BYTES, n);
  }
  QVL_TRY(sampler_check_params(&g->sampling));
  if (r->logprobs && (r->top_logprobs < 0 || r->top_logprobs > ENGINE_MAX_TOP_LOGPROBS))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "top_logprobs %d: expected 0..%d", r->top_logprobs,
                      ENGINE_MAX_TOP_LOGPROBS);
  if (g->max_tokens > n_ctx)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "max_tokens %lld exceeds the context of %lld tokens",
                      (long long)g->max_tokens, (long long)n_ctx);
  return QVL_OK;
}
