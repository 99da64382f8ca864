/*
 * The serving engine: many requests, one model, one engine thread.
 *
 * Requests enter a bounded queue (engine_submit answers QVL_ERR_BUSY at once when it is full, so the
 * HTTP layer can send 503 + Retry-After). engine_submit builds the prompt (template, tokens, image
 * decode + resize) on the caller's thread. The engine thread runs a continuous-batching loop: every
 * running sequence advances by one token per step, and new requests' prompts are prefilled in pieces
 * (prefill_chunk rows per step), all in ONE decoder forward per step; images are encoded by the
 * vision tower in slices of blocks between steps, so running streams keep flowing. Admission
 * reserves each request's whole KV (prompt + max_tokens, per-sequence contiguous caches) and work
 * memory from one budget (kv_cache_mb), so the process never runs out of memory mid-stream.
 * See docs/ENGINE.md.
 *
 * Caches: image embeddings keyed by a hash of the decoded pixels + preprocessing settings (LRU,
 * bounded in MB); prefix KV blocks keyed by a rolling hash of token ids and image content (LRU,
 * bounded in MB) so a follow-up turn reuses the conversation's KV.
 *
 * Determinism: a request's output does not depend on what else is in its batch (per-sequence
 * sampling state, batch-invariant kernels).
 *
 * Thread safety: engine_submit, engine_cancel and engine_stats may be called from any thread.
 * Callbacks run on the engine thread: they must be quick (copy the text, signal your own thread)
 * and must not call back into the engine except engine_cancel.
 */
#ifndef QVL_ENGINE_ENGINE_H
#define QVL_ENGINE_ENGINE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine_request.h"
#include "engine/generate.h"
#include "prompt/history.h"
#include "engine/vlm.h"
#include "qvl.h"

typedef struct engine engine;

typedef struct engine_config {
  int max_batch_size;        /* sequences decoded together (default 8) */
  int max_wait_ms;           /* how long the loop waits to gather new requests into a batch (default 5) */
  int queue_capacity;        /* waiting requests beyond the running ones (default 64) */
  int64_t n_ctx;             /* max tokens per sequence, prompt + output (default 8192) */
  int64_t max_prompt_tokens; /* cap on a request's prompt tokens, images included (0 = n_ctx only) */
  int64_t kv_cache_mb;       /* KV memory shared by all sequences (default: from free RAM, capped) */
  kv_type kv_type;           /* KV element type of every sequence (default: the process's, f16) */
  int64_t image_cache_mb;    /* image-embedding cache (default 256; 0 = off) */
  int64_t prefix_cache_mb;   /* reusable prefix KV blocks (default 512; 0 = off) */
  int prefill_chunk;         /* prompt tokens per engine step while others decode (default 256) */
  int vision_layers_per_step;/* vision tower blocks per engine step while others decode (default 2;
                              * <= 0: a whole image in one step) */
  int64_t request_timeout_ms;/* 0 = none */
} engine_config;

void engine_config_default(engine_config *c);

typedef struct engine_timings {
  double queue_ms;           /* submit -> first engine work */
  double preprocess_ms;      /* image fetch/decode/resize */
  double vision_ms;          /* vision tower (0 on an image-cache hit) */
  double prefill_ms;
  double ttft_ms;            /* submit -> first token */
  double decode_ms;
  double prefill_tok_s, decode_tok_s;
  double prompt_ms;          /* submit: chat template, tokenizer, image fetch/decode (preprocess_ms is part) */
  double setup_ms;           /* engine: sequence, sampler, prefix-cache restore before the first step */
} engine_timings;

/* An image of a request's prompt, for answers that point into it (boxes): a copy of its
 * prompt_image's size and message. */
typedef struct engine_image {
  int width, height;         /* as displayed (EXIF orientation applied; a video's frame size) */
  int message_index;         /* the message that holds it */
} engine_image;

typedef struct engine_result {
  qvl_status status;         /* QVL_OK, or why it failed (message in error) */
  char error[512];
  qvl_finish finish_reason;    /* why it ended (QVL_FINISH_LIST in qvl.h, from gen_seq up) */
  int stop_match;            /* 1 + the index in gen.stop of the stop string that ended it; 0: none */
  int64_t prompt_tokens, completion_tokens, image_tokens;
  int64_t cached_prompt_tokens; /* prompt tokens whose KV came from the prefix cache */
  int image_cache_hits, image_cache_misses; /* images inside the reused prefix need no vision and
                                             * count as neither */
  engine_timings t;
  const char *text;          /* full generated text (valid during the callback); with reasoning, the
                              * answer after the think block */
  size_t text_len;
  const char *reasoning;     /* a thinking model's reasoning ("" otherwise; valid during the callback) */
  size_t reasoning_len;
  int64_t reasoning_tokens;  /* of completion_tokens, those inside the think block */
  const int32_t *ids;        /* [completion_tokens] generated ids, EOS included (valid during the callback) */
  history_report history;    /* what the context policy dropped (engine_request.history) */
  /* The prompt's images and videos as processed (hash, grid, tokens; their encoded bytes with
   * prompt.keep_sources; size as displayed and message, for answers that point into them: boxes),
   * valid during the callback: what a stored conversation keeps. */
  const prompt_image *images;
  int n_images;
  uint64_t admitted_step;    /* the engine-loop iteration that admitted it: requests that start in the
                              * same step share it (dynamic batching, max_wait_ms); 0 = never ran */
  /* With engine_request.logprobs (else NULL / 0), valid during the callback: */
  const float *logprobs;     /* [completion_tokens] log-probability of each generated token */
  const int32_t *top_ids;    /* [completion_tokens][n_top] most likely tokens, best first (-1: none) */
  const float *top_logprobs; /* [completion_tokens][n_top] */
  int n_top;
  /* The bytes of token i (j = 0) and of its alternative j - 1 (j = 1 .. n_top):
   * lp_text[lp_off[i * (1 + n_top) + j] .. lp_off[i * (1 + n_top) + j + 1]) */
  const char *lp_text;
  const uint32_t *lp_off;    /* [completion_tokens * (1 + n_top) + 1] */
} engine_result;


/* Starts the engine thread on a loaded model (not owned). */
qvl_status engine_start(const vlm *m, const engine_config *c, engine **out);
/* Stops accepting work; with drain, finishes running and queued requests first, else cancels them
 * (each gets on_done with "cancelled"). Joins the thread and frees everything. */
void engine_stop(engine *e, bool drain);

/* Queues a request, in four steps: check (engine_request_check, the one place its rules are
 * checked), prompt (the prompt layer, under the context policy), admit (can its memory ever fit),
 * enqueue. QVL_ERR_BUSY when the queue is full; QVL_ERR_INVALID_ARG / ERR_TOO_LARGE /
 * ERR_CONTEXT_OVERFLOW for requests that can never run (checked up front where possible). On
 * success *id identifies it and on_done will be called exactly once. */
qvl_status engine_submit(engine *e, const engine_request *r, uint64_t *id);
/* Cancels a queued or running request (its on_done reports "cancelled", status QVL_ERR_CANCELLED,
 * at the next step boundary, with the slot and memory freed before the callback); unknown ids are
 * ignored. Returning false from on_text does the same. A request that exceeds request_timeout_ms
 * ends with status QVL_ERR_TIMEOUT and finish_reason QVL_FINISH_ERROR (text so far included). */
void engine_cancel(engine *e, uint64_t id);

typedef struct engine_stats {
  int queued, running;
  int64_t kv_used_bytes, kv_total_bytes;
  uint64_t image_cache_hits, image_cache_misses, prefix_cache_hits, prefix_cache_misses;
  int64_t image_cache_bytes, prefix_cache_bytes;
  uint64_t requests_done, requests_failed, tokens_generated, prompt_tokens;
  /* Cumulative histograms (Prometheus style): counts of requests with ttft / latency <= bucket. */
#define ENGINE_HIST_BUCKETS 12
  double hist_bounds_ms[ENGINE_HIST_BUCKETS];
  uint64_t ttft_hist[ENGINE_HIST_BUCKETS + 1], latency_hist[ENGINE_HIST_BUCKETS + 1];
  double ttft_sum_ms, latency_sum_ms;
  /* Per image the tower encoded (image-cache misses): its vision time, same buckets (ms). */
  uint64_t vision_hist[ENGINE_HIST_BUCKETS + 1];
  double vision_sum_ms;
  /* Per image of a finished request (cached or encoded): the LLM tokens it took. */
  double img_tok_bounds[ENGINE_HIST_BUCKETS];
  uint64_t img_tok_hist[ENGINE_HIST_BUCKETS + 1];
  double img_tok_sum;
  double decode_tok_s;       /* recent aggregate decode speed */
} engine_stats;

void engine_get_stats(engine *e, engine_stats *out);
/* The KV element type of every sequence of this engine (its config's, resolved). Any thread. */
kv_type engine_kv_type(const engine *e);

#endif
