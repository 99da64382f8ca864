/* The options several commands share, declared once (qvl_options.h). Their ranges are the rules of
 * the layers below: a context no longer than Qwen3-VL's trained 262,144 positions, token counts
 * within it, the pixel bounds a server request may ask for, the engine's batch and stop-string
 * limits, and sampling values as the OpenAI API accepts them. */
#include <stdint.h>

#include "image/preprocess.h"
#include "qvl_options.h"
#include "text/stop.h"
#include "video/sample.h"

#define MIN_CTX 64                  /* a chat template and a short answer */
#define MAX_CTX 262144              /* Qwen3-VL's max_position_embeddings */
#define MIN_PIXELS 1024             /* the least a request may ask for (docs/API.md) */
#define MAX_VIDEO_PIXELS (64 << 20) /* sampled frames x height x width */
#define MAX_BATCH 64                /* sequences one engine step decodes */

const char *const qvl_opt_dtype_names[] = {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_k", NULL};
static const char *const precisions[] = {"exact", "fast", NULL};
static const char *const kv_types[] = {"f16", "f32", NULL};

#define STR(k, s, m, h) {.key = k, .short_flag = s, .kind = QVL_OPT_STR, .meta = m, .help = h}
#define INT(k, s, mn, mx, h) {.key = k, .short_flag = s, .kind = QVL_OPT_INT, .min = mn, .max = mx, .help = h}
#define NUM(k, l, u, m, h) {.key = k, .kind = QVL_OPT_NUM, .lo = l, .hi = u, .meta = m, .help = h}
#define BOOL(k, h) {.key = k, .kind = QVL_OPT_BOOL, .help = h}

/* ---- the model ---- */
const qvl_opt qvl_opt_model = STR("model", "-m", NULL, "text model GGUF, or a Hugging Face model directory");
const qvl_opt qvl_opt_mmproj = STR("mmproj", NULL, "FILE", "vision projector GGUF (without it: text only)");
const qvl_opt qvl_opt_hf = STR("hf", NULL, "REPO[:QUANT]",
                               "a Hugging Face repository instead of -m/--mmproj (downloaded into the cache on first use)");
const qvl_opt qvl_opt_offline = BOOL("offline", "with --hf: use the download cache only");
const qvl_opt qvl_opt_dtype = {.key = "dtype", .kind = QVL_OPT_STR, .choices = qvl_opt_dtype_names, .meta = "T",
                               .help = "re-encode the weight matrices at load: f32 bf16 f16 q8_0 q4_0 q4_k "
                                       "(default: as stored)"};
const qvl_opt qvl_opt_threads = INT("threads", "-t", 0, 1024, "compute threads (0: physical cores)");
const qvl_opt qvl_opt_precision = {.key = "precision", .kind = QVL_OPT_STR, .choices = precisions, .meta = "exact|fast",
                                   .help = "vision tower arithmetic (default fast: bf16 dot products on F16/BF16 "
                                           "mmproj weights; exact: fp32 as transformers)",
                                   .flags = QVL_OPT_ENV_ALWAYS};
const qvl_opt qvl_opt_kv_type = {.key = "kv_type", .kind = QVL_OPT_STR, .choices = kv_types, .meta = "f16|f32",
                                 .help = "KV cache element type: f16 (half the memory per token) or f32 (exact)",
                                 .flags = QVL_OPT_ENV_ALWAYS};

/* ---- generation ---- */
const qvl_opt qvl_opt_ctx = INT("ctx", NULL, MIN_CTX, MAX_CTX, "tokens per sequence, prompt + output");
const qvl_opt qvl_opt_max_tokens = INT("max_tokens", "-n", 1, MAX_CTX, "generated tokens at most");
const qvl_opt qvl_opt_reasoning_budget =
    INT("reasoning_budget", NULL, -1, MAX_CTX, "a reasoning model's thinking tokens (-1: unbounded, 0: no thinking)");
const qvl_opt qvl_opt_hide_reasoning =
    BOOL("hide_reasoning", "do not print the reasoning (shown dimmed on a terminal, else on stderr)");
const qvl_opt qvl_opt_stop = {.key = "stop", .kind = QVL_OPT_LIST, .max = STOP_MAX_STRINGS, .meta = "TEXT",
                              .help = "stop string (repeatable)"};
const qvl_opt qvl_opt_temp = NUM("temp", 0, 2, "T", "temperature (0: greedy)");
const qvl_opt qvl_opt_top_k = INT("top_k", NULL, 0, 1 << 30, "sample from the K likeliest tokens (0: all)");
const qvl_opt qvl_opt_top_p = NUM("top_p", 0, 1, "P", "nucleus sampling: the likeliest tokens of total probability P");
const qvl_opt qvl_opt_min_p = NUM("min_p", 0, 1, "P", "drop tokens below P times the likeliest one's probability");
const qvl_opt qvl_opt_seed = INT("seed", NULL, 0, INT64_MAX, "random seed");
const qvl_opt qvl_opt_repeat_penalty = NUM("repeat_penalty", 0.01, 100, "R", "repetition penalty (1: none)");
const qvl_opt qvl_opt_presence_penalty = NUM("presence_penalty", -2, 2, "P", "presence penalty (0: none)");
const qvl_opt qvl_opt_frequency_penalty = NUM("frequency_penalty", -2, 2, "F", "frequency penalty (0: none)");

/* ---- images and videos ---- */
const qvl_opt qvl_opt_min_pixels =
    INT("min_pixels", NULL, MIN_PIXELS, IMAGE_HF_MAX_PIXELS, "an image is resized to at least N pixels");
const qvl_opt qvl_opt_max_pixels =
    INT("max_pixels", NULL, MIN_PIXELS, IMAGE_HF_MAX_PIXELS, "an image is resized to at most N pixels");
const qvl_opt qvl_opt_video_fps = NUM("video_fps", 0.01, 1000, "F", "frames sampled per second of video (default 2)");
const qvl_opt qvl_opt_video_frames =
    INT("video_frames", NULL, 2, VIDEO_HF_MAX_FRAMES, "sample exactly N frames of a video instead");
const qvl_opt qvl_opt_video_min_pixels = INT("video_min_pixels", NULL, MIN_PIXELS, MAX_VIDEO_PIXELS,
                                             "pixels of all sampled frames of a video together, at least");
const qvl_opt qvl_opt_video_max_pixels = INT("video_max_pixels", NULL, MIN_PIXELS, MAX_VIDEO_PIXELS,
                                             "pixels of all sampled frames of a video together, at most");

/* ---- model files written (convert, make-random) ---- */
const qvl_opt qvl_opt_out_text = STR("out_text", NULL, "FILE", "text model GGUF to write (arch qwen3vl)");
const qvl_opt qvl_opt_out_mmproj =
    STR("out_mmproj", NULL, "FILE", "vision projector GGUF to write (arch clip, projector qwen3vl_merger)");

/* ---- the engine and output ---- */
const qvl_opt qvl_opt_max_batch_size = INT("max_batch_size", NULL, 1, MAX_BATCH, "sequences decoded together");
const qvl_opt qvl_opt_json = BOOL("json", "print the results as JSON on stdout");
