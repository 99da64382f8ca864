/*
 * qvl — Qwen3-VL on CPUs. Public C API (libqvl.so / libqvl.a). docs/LIBRARY.md says more.
 *
 * Three objects: a qvl_model (weights, tokenizer, vision tower; immutable once loaded), a
 * qvl_engine (one thread that batches the requests of many callers on one model) and a
 * qvl_request (messages + sampling + callbacks, built by the caller and copied at submit).
 *
 *     qvl_model *m;  qvl_engine *e;  qvl_request *rq;
 *     if (qvl_model_load("model.gguf", "mmproj.gguf", NULL, &m) != QVL_OK) -> qvl_last_error()
 *     qvl_engine_start(m, NULL, &e);
 *     qvl_request_new(&rq);
 *     qvl_request_add_image_file(rq, "cat.jpg");         // attached to the next user message
 *     (or qvl_request_add_video_file(rq, "clip.mp4"): a video, sampled at 2 frames per second)
 *     qvl_request_add_message(rq, "user", "What is in this picture?");
 *     qvl_request_set_callbacks(rq, on_text, on_done, &my_state);
 *     qvl_engine_submit(e, rq, NULL);                    // on_text streams, on_done once
 *     ... wait until on_done has run ...
 *     qvl_request_free(rq); qvl_engine_stop(e, true); qvl_model_free(m);
 *
 * Return codes: every fallible function returns a qvl_status; QVL_OK is 0. On failure,
 * qvl_last_error() holds a human-readable message for the calling thread (which file, which
 * tensor, key or image, what was expected and what was found). The library never exits the
 * process, on bad input or out of memory alike.
 *
 * Ownership: objects made by a *_load / *_new / *_start function are freed by the matching
 * *_free / *_stop. Strings and arrays passed in are copied (or only read during the call) unless
 * said otherwise; pointers handed to callbacks are valid during the callback only.
 *
 * Thread safety: qvl_last_error() is per thread; every other function documents its own.
 */
#ifndef QVL_H
#define QVL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden; only what is marked QVL_API is exported. */
#if defined(__GNUC__) || defined(__clang__)
#define QVL_API __attribute__((visibility("default")))
#else
#define QVL_API
#endif

#define QVL_VERSION "0.1.0"

/* X(name, http_status, error type, error code, short description): one list gives the enum, the
 * text and how a server reports the status on the wire (HTTP status, OpenAI error "type" and
 * "code"; NULL = a null code). A server may give a more specific code for one error. */
#define QVL_STATUS_LIST(X)                                                                           \
  X(OK, 200, NULL, NULL, "ok")                                                                       \
  X(ERR_INVALID_ARG, 400, "invalid_request_error", NULL, "invalid argument")                         \
  X(ERR_FORMAT, 400, "invalid_request_error", NULL, "malformed input")                               \
  X(ERR_UNSUPPORTED, 400, "invalid_request_error", NULL, "unsupported")                              \
  X(ERR_MISMATCH, 400, "invalid_request_error", NULL, "mismatch")                                    \
  X(ERR_CONTEXT_OVERFLOW, 400, "invalid_request_error", "context_length_exceeded", "context length exceeded") \
  X(ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large", "input too large")             \
  X(ERR_NOT_FOUND, 404, "invalid_request_error", "not_found", "not found")                           \
  X(ERR_IO, 500, "server_error", NULL, "I/O error")                                                  \
  X(ERR_NOMEM, 503, "server_error", "server_busy", "out of memory")                                  \
  X(ERR_BUSY, 503, "server_error", "server_busy", "busy")                                            \
  X(ERR_CANCELLED, 499, "server_error", "cancelled", "cancelled")                                    \
  X(ERR_TIMEOUT, 504, "server_error", "timeout", "timed out")                                        \
  X(ERR_INTERNAL, 500, "server_error", NULL, "internal error")

typedef enum qvl_status {
#define QVL_X_ENUM(name, http, type, code, text) QVL_##name,
  QVL_STATUS_LIST(QVL_X_ENUM)
#undef QVL_X_ENUM
  QVL_STATUS_COUNT
} qvl_status;

/* Short description of a status ("malformed input"). Never NULL. Any thread. */
QVL_API const char *qvl_status_text(qvl_status s);
/* HTTP status that a server should answer with for this status. Any thread. */
QVL_API int qvl_status_http(qvl_status s);
/* The detailed message of the last failure on this thread ("" if none). Valid until the next
 * failing call on this thread. */
QVL_API const char *qvl_last_error(void);
/* Frees memory the library handed out (strings and arrays documented "free with qvl_free").
 * NULL is ignored. Any thread. */
QVL_API void qvl_free(void *p);

/* ---- process-wide settings ------------------------------------------------------------------ */

/* Deprecated: give qvl_model_params.precision and qvl_engine_params.kv_type instead (one process
 * can then hold an exact and a fast model, or engines with f16 and f32 caches). These set the
 * process default that a model or engine whose parameter is NULL takes: the vision tower's "fast"
 * (the default) or "exact", and the KV cache's "f16" (the default) or "f32". QVL_ERR_INVALID_ARG for
 * anything else. Call before loading / starting, from one thread. The library reads no environment
 * variable for them (the qvl commands turn QVL_PRECISION / QVL_KV_TYPE into these parameters). */
QVL_API qvl_status qvl_set_precision(const char *name);
QVL_API qvl_status qvl_set_kv_type(const char *name);
/* The kernel variant in use ("ref", "avx2", "avx512") and the worker threads. Any thread. */
QVL_API const char *qvl_isa(void);
QVL_API int qvl_threads(void);

/* ---- model ----------------------------------------------------------------------------------- */

typedef struct qvl_model qvl_model;

typedef struct qvl_model_params {
  int threads;           /* kernel worker threads (process-wide); 0: QVL_THREADS or physical cores */
  const char *dtype;     /* NULL: weights as stored; else re-encode the matrices at load: "f32",
                          * "bf16", "f16", "q8_0", "q4_0", "q4_k" */
  const char *precision; /* the vision tower's arithmetic: "fast" (bf16 dot products on F16/BF16
                          * mmproj weights) or "exact" (fp32, as transformers); NULL: the process
                          * default ("fast"). Each model keeps its own. */
} qvl_model_params;

/* threads 0, dtype NULL, precision NULL. */
QVL_API void qvl_model_params_default(qvl_model_params *p);
/* true when name is one of the dtype names above. Any thread. */
QVL_API bool qvl_dtype_valid(const char *name);

/* Loads a text GGUF (path) with an optional mmproj GGUF (NULL: text only), or a Hugging Face
 * model directory (path; mmproj must then be NULL: the vision tower is in the checkpoint).
 * params may be NULL (defaults). QVL_ERR_IO / ERR_FORMAT / ERR_MISMATCH / ERR_UNSUPPORTED name
 * the file and what is wrong. Not thread safe with other loads (the kernel setup is global). */
QVL_API qvl_status qvl_model_load(const char *path, const char *mmproj, const qvl_model_params *params,
                                  qvl_model **out);
/* NULL is ignored. Stop every engine on the model first. */
QVL_API void qvl_model_free(qvl_model *m);
/* Whether images can be given (a vision tower is loaded). Any thread. */
QVL_API bool qvl_model_has_vision(const qvl_model *m);
/* Whether the model reasons before it answers: its chat template (GGUF tokenizer.chat_template or
 * the directory's) opens a <think> block in the generation prompt, like Qwen3-VL-*-Thinking's.
 * Its requests then produce reasoning (qvl_request_set_reasoning_callback, qvl_result_reasoning)
 * and an answer (on_text, qvl_result_text). Any thread. */
QVL_API bool qvl_model_is_reasoning(const qvl_model *m);
/* The context length the model was trained for (tokens). Any thread. */
QVL_API int64_t qvl_model_n_ctx_train(const qvl_model *m);

/* Whether path is a Hugging Face model directory (a directory with a config.json). Any thread. */
QVL_API bool qvl_path_is_hf_dir(const char *path);

/* Downloads from the Hugging Face hub (qvl_hf_resolve) are in qvl_tools.h: they need libcurl,
 * which libqvl does not link. */

/* An encoded image (PNG, JPEG or WebP, told by its first bytes) as a data: URL for a message's
 * image_url, NUL-terminated (free with qvl_free). QVL_ERR_NOMEM. Any thread. */
QVL_API qvl_status qvl_image_data_url(const void *data, size_t len, char **url);
/* An encoded video (MP4/MOV, Matroska/WebM, animated GIF; told by its bytes when read) as a data:
 * URL for a message's video_url, NUL-terminated (free with qvl_free). QVL_ERR_NOMEM. Any thread. */
QVL_API qvl_status qvl_video_data_url(const void *data, size_t len, char **url);

/* ---- tokenizer -------------------------------------------------------------------------------
 * A loaded model's tokenizer (qvl_model_tokenizer; owned by the model), or one loaded alone
 * from a GGUF file or an HF directory's tokenizer.json (qvl_tokenizer_load, without weights).
 * Every function is safe from any number of threads. */

typedef struct qvl_tokenizer qvl_tokenizer;

QVL_API const qvl_tokenizer *qvl_model_tokenizer(const qvl_model *m);
/* path: a GGUF file or a Hugging Face model directory. */
QVL_API qvl_status qvl_tokenizer_load(const char *path, qvl_tokenizer **out);
QVL_API void qvl_tokenizer_free(qvl_tokenizer *t);
/* Text (special tokens such as <|im_start|> recognised) -> *ids [*n_ids] (free with qvl_free). */
QVL_API qvl_status qvl_tokenize(const qvl_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids);
/* Ids -> text, NUL-terminated (free with qvl_free); skip_special leaves control tokens out.
 * QVL_ERR_INVALID_ARG for an id outside the vocabulary. */
QVL_API qvl_status qvl_detokenize(const qvl_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                                  char **text);
QVL_API int32_t qvl_n_vocab(const qvl_tokenizer *t);

/* ---- engine ---------------------------------------------------------------------------------- */

typedef struct qvl_engine qvl_engine;

typedef struct qvl_engine_params {
  int max_batch_size;        /* sequences decoded together (default 8) */
  int max_wait_ms;           /* gathering new requests into a batch (default 5) */
  int queue_capacity;        /* waiting requests beyond the running ones (default 64) */
  int64_t n_ctx;             /* tokens per sequence, prompt + output (default 8192) */
  int64_t max_prompt_tokens; /* cap on a prompt, images included (0: n_ctx only) */
  int64_t kv_cache_mb;       /* KV + work memory of all sequences (default: half the free RAM, capped) */
  int64_t image_cache_mb;    /* image-embedding cache (default 256; 0 = off) */
  int64_t prefix_cache_mb;   /* reusable prefix KV (default 512; 0 = off) */
  int64_t request_timeout_ms;/* 0 = none */
  const char *kv_type;       /* the KV cache element type of this engine's sequences and prefix
                              * cache: "f16" (half the memory per token, keys and values rounded once
                              * when stored) or "f32" (exact); NULL: the process default ("f16") */
} qvl_engine_params;

QVL_API void qvl_engine_params_default(qvl_engine_params *p);
/* Starts the engine thread on a loaded model (not owned: it must outlive the engine). params
 * may be NULL. QVL_ERR_INVALID_ARG for settings out of range, ERR_NOMEM. */
QVL_API qvl_status qvl_engine_start(const qvl_model *m, const qvl_engine_params *params, qvl_engine **out);
/* Stops accepting work; with drain, finishes running and queued requests first, else cancels
 * them (each gets on_done with QVL_FINISH_CANCELLED). Joins the thread and frees the engine.
 * NULL is ignored. Call from one thread, never from a callback. */
QVL_API void qvl_engine_stop(qvl_engine *e, bool drain);

typedef struct qvl_engine_stats {
  int queued, running;
  uint64_t requests_done, requests_failed, tokens_generated, prompt_tokens;
  uint64_t image_cache_hits, image_cache_misses, prefix_cache_hits, prefix_cache_misses;
  int64_t kv_used_bytes, kv_total_bytes;
  double decode_tok_s;       /* recent aggregate decode speed */
} qvl_engine_stats;

/* A snapshot of the counters. Any thread. */
QVL_API void qvl_engine_get_stats(qvl_engine *e, qvl_engine_stats *out);

/* ---- request ----------------------------------------------------------------------------------
 * Built and changed by one thread; qvl_engine_submit copies what it needs, so a request may be
 * submitted again, changed or freed right after submit returns. */

typedef struct qvl_request qvl_request;
typedef struct qvl_result qvl_result;

typedef struct qvl_sampling {
  float temperature;         /* <= 0: greedy */
  int32_t top_k;             /* <= 0: off */
  float top_p;               /* (0, 1]; 1: off */
  float min_p;               /* [0, 1]; 0: off */
  float repetition_penalty;  /* > 0; 1: off */
  float presence_penalty;    /* [-2, 2]; 0: off */
  float frequency_penalty;   /* [-2, 2]; 0: off */
  uint64_t seed;
} qvl_sampling;

/* Greedy, every filter and penalty off, seed 0 (what a new request has). */
QVL_API void qvl_sampling_default(qvl_sampling *s);
/* The model's recommended sampling (generation_config.json of a Hugging Face directory, a GGUF's
 * general.sampling.* keys, else Qwen3-VL's published settings), seed 0: what the server uses for
 * the fields a request leaves out. Any thread. */
QVL_API void qvl_model_sampling(const qvl_model *m, qvl_sampling *out);

/* Called on the engine thread with each piece of final text (UTF-8, stop strings removed).
 * Return false to cancel the request. Be quick; do not call into the engine except
 * qvl_engine_cancel. */
typedef bool (*qvl_on_text_fn)(void *user, const char *text, size_t len);
/* Called exactly once per submitted request when it ends (done, error, cancelled, timed out), on
 * the engine thread. The result is valid during the call only. */
typedef void (*qvl_on_done_fn)(void *user, const qvl_result *r);

/* An empty request: no messages, greedy sampling, max_tokens 512, default image sizes, local
 * image files not allowed. QVL_ERR_NOMEM. */
QVL_API qvl_status qvl_request_new(qvl_request **out);
QVL_API void qvl_request_free(qvl_request *r);

/* Replaces the messages with an OpenAI-style messages array, e.g.
 * [{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:..."}},
 *                             {"type":"text","text":"Describe it."}]}].
 * QVL_ERR_FORMAT when it is not a JSON array. Image URLs may be data: URLs, http(s) URLs (fetched
 * by the library only where allowed) or, with qvl_request_allow_files, local paths. */
QVL_API qvl_status qvl_request_set_messages(qvl_request *r, const char *json);
/* Appends a message (role "system", "user" or "assistant"). A user message carries the images
 * added since the previous one, before its text. QVL_ERR_INVALID_ARG for another role. */
QVL_API qvl_status qvl_request_add_message(qvl_request *r, const char *role, const char *text);
/* Queues an image for the next user message: a file (read when the request is submitted;
 * enables local files for this request), or encoded bytes (PNG, JPEG, WebP; copied now). */
QVL_API qvl_status qvl_request_add_image_file(qvl_request *r, const char *path);
QVL_API qvl_status qvl_request_add_image_bytes(qvl_request *r, const void *data, size_t len);
/* Queues a video for the next user message (in order with the images): a file (enables local
 * files for this request) or encoded bytes (copied now). Its frames are sampled at 2 per second
 * (4..768 frames) unless qvl_request_set_video_sampling says otherwise; docs/VIDEO.md. */
QVL_API qvl_status qvl_request_add_video_file(qvl_request *r, const char *path);
QVL_API qvl_status qvl_request_add_video_bytes(qvl_request *r, const void *data, size_t len);
/* Frames sampled from every video of the request: fps (> 0) or an exact num_frames (> 0), not
 * both (0 keeps the current one); max_frames caps the fps rule (0: keep, default 768).
 * QVL_ERR_INVALID_ARG for negative values, both given, or fps above 1000. */
QVL_API qvl_status qvl_request_set_video_sampling(qvl_request *r, double fps, int num_frames, int max_frames);
/* Pixel bounds of a video's sampled frames together (frames x height x width, HF's video
 * min/max_pixels; defaults 131072 / 786432; 0 keeps the current one). */
QVL_API void qvl_request_set_video_pixels(qvl_request *r, int64_t min_pixels, int64_t max_pixels);
/* A raw prompt instead of the messages: the text as is, no chat template, no images (copied). */
QVL_API qvl_status qvl_request_set_raw_prompt(qvl_request *r, const char *text, size_t len);
/* Image URLs that are local paths are read (the caller trusts the messages). */
QVL_API void qvl_request_allow_files(qvl_request *r, bool allow);

QVL_API void qvl_request_get_sampling(const qvl_request *r, qvl_sampling *out);
QVL_API void qvl_request_set_sampling(qvl_request *r, const qvl_sampling *s);
/* Tokens to generate at most (> 0; checked at submit). */
QVL_API void qvl_request_set_max_tokens(qvl_request *r, int64_t n);
/* Adds a stop string (generation ends before it; it is not part of the text). QVL_ERR_INVALID_ARG
 * beyond 16 strings or for an empty one. */
QVL_API qvl_status qvl_request_add_stop(qvl_request *r, const char *stop);
/* The default upper bound of an image's size in pixels (it is resized to fit). */
QVL_API int64_t qvl_default_max_pixels(void);
/* Image size bounds in pixels for every image of the request (0: keep the default). */
QVL_API void qvl_request_set_pixels(qvl_request *r, int64_t min_pixels, int64_t max_pixels);
/* When the conversation does not fit the context, drop its oldest turns instead of failing, and
 * generate up to the room left (at most max_tokens). */
QVL_API void qvl_request_set_trim_history(qvl_request *r, bool trim);
QVL_API void qvl_request_set_callbacks(qvl_request *r, qvl_on_text_fn on_text, qvl_on_done_fn on_done, void *user);
/* A reasoning model's reasoning, streamed like on_text (same user pointer, same rules) before the
 * answer's text; NULL (the default): reasoning is only in the result. */
QVL_API void qvl_request_set_reasoning_callback(qvl_request *r, qvl_on_text_fn on_reasoning);
/* How many tokens a reasoning model may think: < 0 unbounded (the default), 0 no reasoning (the
 * prompt closes an empty think block, as the chat template does for a turn without reasoning),
 * N: after N reasoning tokens the engine closes the block itself and the answer follows. The
 * reasoning counts toward max_tokens. Ignored for other models and raw prompts. */
QVL_API void qvl_request_set_reasoning_budget(qvl_request *r, int64_t n);

/* Queues a request. The prompt (template, tokens, image decode and resize) is built on the
 * caller's thread, so prompt errors come back here: QVL_ERR_INVALID_ARG / ERR_FORMAT (bad
 * messages or images, named), ERR_TOO_LARGE, ERR_CONTEXT_OVERFLOW, ERR_BUSY (queue full or
 * stopping). On QVL_OK on_done will be called exactly once and *id (may be NULL) identifies the
 * request; on failure no callback runs. Any thread, concurrently. */
QVL_API qvl_status qvl_engine_submit(qvl_engine *e, const qvl_request *r, uint64_t *id);
/* Cancels a queued or running request: on_done reports QVL_FINISH_CANCELLED with the text so
 * far. Unknown or finished ids are ignored. Any thread, and from the callbacks. */
QVL_API void qvl_engine_cancel(qvl_engine *e, uint64_t id);

/* ---- result (inside on_done) ------------------------------------------------------------------ */

/* Why a request ended: one list from the generation sequence (src/engine/gen_seq.c) up to every
 * wire format, so no layer guesses a reason back. Per reason: the value (stable: EOS..ERROR are 0..4
 * as in 0.1.0; NONE, "not finished", was added as -1 so none of them moved), qvl_finish_name's word,
 * OpenAI's finish_reason, Ollama's done_reason, the Responses API's status and Anthropic's stop_reason
 * (NULL: that API has no word for it). "tool_calls" / "tool_use" are not finishes: the formatters
 * write them when the answer parsed into tool calls. Cancelled and failed requests carry their status
 * in the error body; the words here are what a formatter writes if it reports them at all. */
#define QVL_FINISH_LIST(X)                                                                            \
  X(NONE, -1, "none", NULL, NULL, NULL, NULL)               /* still running, or never started */    \
  X(EOS, 0, "eos", "stop", "stop", "completed", "end_turn") /* the model ended its answer */          \
  X(STOP_STRING, 1, "stop_string", "stop", "stop", "completed", "stop_sequence") /* a stop string */ \
  X(LENGTH, 2, "length", "length", "length", "incomplete", "max_tokens") /* max_tokens or context */ \
  X(CANCELLED, 3, "cancelled", "stop", "stop", "completed", "end_turn") /* see below */               \
  X(ERROR, 4, "error", "stop", "stop", "failed", "end_turn") /* qvl_result_status says why */

/* CANCELLED: qvl_engine_cancel, on_text returned false, or a stop without drain. ERROR: see
 * qvl_result_status / qvl_result_error (a timeout, too). */
typedef enum qvl_finish {
#define QVL_X_ENUM(id, value, name, openai, ollama, responses, anthropic) QVL_FINISH_##id = value,
  QVL_FINISH_LIST(QVL_X_ENUM)
#undef QVL_X_ENUM
} qvl_finish;

typedef struct qvl_usage {
  int64_t prompt_tokens, completion_tokens, image_tokens;
  int64_t cached_prompt_tokens; /* prompt tokens whose KV came from the prefix cache */
  int image_cache_hits, image_cache_misses;
  int dropped_turns;         /* left out by qvl_request_set_trim_history */
  int64_t reasoning_tokens;  /* of completion_tokens, those spent inside the think block */
} qvl_usage;

typedef struct qvl_timings {
  double queue_ms, preprocess_ms, vision_ms, prefill_ms, ttft_ms, decode_ms;
  double prefill_tok_s, decode_tok_s;
} qvl_timings;

QVL_API qvl_status qvl_result_status(const qvl_result *r);
/* "" on success. */
QVL_API const char *qvl_result_error(const qvl_result *r);
QVL_API qvl_finish qvl_result_finish(const qvl_result *r);
/* The name column of QVL_FINISH_LIST ("eos", "stop_string", "length", "cancelled", "error", "none");
 * "error" for a value not in the list. Any thread. */
QVL_API const char *qvl_finish_name(qvl_finish f);
/* The whole generated text (not NUL-terminated; *len may be NULL). */
QVL_API const char *qvl_result_text(const qvl_result *r, size_t *len);
/* A reasoning model's reasoning ("" otherwise; not NUL-terminated; *len may be NULL). */
QVL_API const char *qvl_result_reasoning(const qvl_result *r, size_t *len);
/* Every generated id, EOS included. */
QVL_API const int32_t *qvl_result_ids(const qvl_result *r, int64_t *n);
QVL_API void qvl_result_usage(const qvl_result *r, qvl_usage *out);
QVL_API void qvl_result_timings(const qvl_result *r, qvl_timings *out);

#ifdef __cplusplus
}
#endif
#endif
