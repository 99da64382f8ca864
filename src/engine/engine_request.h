/*
 * One engine request: what the server (src/server/http/call.c) and the C API (src/capi) build, and
 * the rules every request meets, checked in one place (engine_request_check, called by
 * engine_submit; the wire parsers only check the shapes of their own formats and report the same
 * limits, read from here).
 *
 *     engine_request r;
 *     engine_request_init(&r);               // the prompt layer's and the sampler's defaults
 *     r.messages = ...; r.gen.max_tokens = ...; r.on_done = ...;
 *     engine_submit(e, &r, &id);             // check -> prompt -> admit -> enqueue
 *
 * Thread safety: plain data; the check is a pure function.
 */
#ifndef QVL_ENGINE_ENGINE_REQUEST_H
#define QVL_ENGINE_ENGINE_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/generate.h"
#include "engine/vlm.h"
#include "prompt/history.h"
#include "qvl.h"

struct engine_result;
struct grammar;

typedef struct engine_request {
  const cJSON *messages;     /* copied at submit */
  /* A raw prompt instead of messages (legacy completions; no chat template, no images): text, or
   * token ids when raw_ids is set (both copied at submit). */
  const char *raw_text;
  size_t raw_len;
  const int32_t *raw_ids;
  int64_t n_raw_ids;
  vlm_prompt_opts prompt;    /* min/max pixels, image source rules (trace unused) */
  gen_params gen;            /* sampling, max tokens, stop strings (copied at submit) */
  /* Streaming: called with each piece of final text. Return false to cancel the request. */
  bool (*on_text)(void *user, const char *text, size_t len);
  /* A thinking model's reasoning pieces (before any answer text; NULL: only in the result). The
   * budget is gen.reasoning_budget: < 0 unbounded, 0 no reasoning (the prompt closes an empty think
   * block), N: the engine closes the block after N tokens. Raw prompts have no think block. */
  bool (*on_reasoning)(void *user, const char *text, size_t len);
  /* Called exactly once when the request ends (success, error, cancel, timeout). */
  void (*on_done)(void *user, const struct engine_result *r);
  void *user;
  /* Context policy (prompt/history.h), applied at submit; NULL: the prompt as given and
   * gen.max_tokens as given. history_out (may be NULL) receives its report before engine_submit
   * returns, for response headers. */
  const history_policy *history;
  history_report *history_out;
  /* Constrained decoding (text/grammar.h): only tokens that keep the output in the grammar's
   * language are sampled, and EOS only where it is complete. Owned by the engine from the call to
   * engine_submit on (freed on failure too); NULL = free text. */
  struct grammar *grammar;
  bool logprobs;             /* report log-probabilities (engine_result.logprobs) */
  int top_logprobs;          /* 0..ENGINE_MAX_TOP_LOGPROBS alternatives per token */
  /* Only count: the prompt is built and checked as for generation (template, images, limits), then
   * on_done reports its prompt_tokens / image_tokens, called from engine_submit itself, and nothing
   * is queued (*id is 0). */
  bool count_only;
} engine_request;

#define ENGINE_MAX_TOP_LOGPROBS 20

/* Zeroes r and sets the defaults: prompt_opts_default (generation prompt, min/max pixels, decode
 * caps) and gen_params_default. */
void engine_request_init(engine_request *r);

/* The request's rules: a prompt (messages, raw text or raw ids) and on_done; max_tokens in
 * 1..n_ctx; stop strings (count <= STOP_MAX_STRINGS, each 1..STOP_MAX_STRING_BYTES bytes); the
 * sampling parameters (sampler_check_params); top_logprobs 0..ENGINE_MAX_TOP_LOGPROBS. The first
 * broken rule's status and a message naming it. */
qvl_status engine_request_check(const engine_request *r, int64_t n_ctx);

#endif
