/* Finished requests as the server keeps them (see result.h). */
#include "server/openai/result.h"

#include <stdio.h>
#include <string.h>

bool api_result_copy(api_result *d, const engine_result *r) {
  memset(d, 0, sizeof *d);
  d->status = r->status;
  snprintf(d->error, sizeof d->error, "%s", r->error);
  d->finish_reason = r->finish_reason;
  d->prompt_tokens = r->prompt_tokens;
  d->completion_tokens = r->completion_tokens;
  d->image_tokens = r->image_tokens;
  d->cached_prompt_tokens = r->cached_prompt_tokens;
  d->image_cache_hits = r->image_cache_hits;
  d->image_cache_misses = r->image_cache_misses;
  d->t = r->t;
  d->history = r->history;
  if (buf_append(&d->text, r->text ? r->text : "", r->text ? r->text_len : 0) != QVL_OK)
    return false;
  if (!api_logprobs_copy(&d->lp, r))
    return false;
  return true;
}

void api_result_free(api_result *r) {
  if (!r)
    return;
  buf_free(&r->text);
  api_logprobs_free(&r->lp);
}
