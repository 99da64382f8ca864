/*
 * Qwen3-VL image preprocessing, bit-exact with HF's Qwen2VLImageProcessor (slow/PIL path) as
 * described in docs qwen3vl-spec.md section 3:
 *   smart_resize (factor 32, round-half-to-even, floor/ceil rescaling, aspect <= 200)
 *   -> Pillow 9.4 BICUBIC resize (same uint8 output)
 *   -> rescale x/255 (double, then float32) and normalise (x - 0.5) / 0.5 in float32
 *   -> the single frame duplicated (T = 2)
 *   -> 16x16 patches in 2x2 merge-window order, 1536 values per patch in (c, t, py, px) order.
 *
 * Thread safety: all functions are reentrant; they allocate, never keep global state.
 */
#ifndef QVL_IMAGE_PREPROCESS_H
#define QVL_IMAGE_PREPROCESS_H

#include <stdint.h>

#include "image/decode.h"
#include "qvl.h"

#define IMAGE_PATCH_SIZE 16    /* P: pixels per patch side */
#define IMAGE_MERGE_SIZE 2     /* m: patches per merge-window side (4 patches -> 1 LLM token) */
#define IMAGE_TEMPORAL_PATCH 2 /* T: frames per patch; a still image is duplicated */
#define IMAGE_FACTOR (IMAGE_PATCH_SIZE * IMAGE_MERGE_SIZE) /* 32: resized sides are multiples */
#define IMAGE_PATCH_DIM (3 * IMAGE_TEMPORAL_PATCH * IMAGE_PATCH_SIZE * IMAGE_PATCH_SIZE) /* 1536 */
#define IMAGE_MAX_ASPECT 200   /* HF rejects max(h, w) / min(h, w) > 200 */

/* The model's own defaults (preprocessor_config.json): 64 .. 16384 LLM tokens per image. */
#define IMAGE_HF_MIN_PIXELS ((int64_t)65536)
#define IMAGE_HF_MAX_PIXELS ((int64_t)16777216)

/*
 * Default cap for this CPU engine: 1024 x 1024 pixels = at most 1024 LLM tokens (4096 ViT patches)
 * per image, instead of HF's 16384 tokens.
 *
 * Why: vision cost grows a little faster than linearly with the number of patches (24 ViT blocks of
 * width 1024, attention quadratic in patches), and every image token then goes through the 28
 * decoder layers in prefill; at HF's default a 12-Mpixel phone photo becomes ~11750 tokens, minutes
 * of CPU time. One Mpixel keeps a 4032x3024 photo at 1152x864 (972 tokens) and a 300 dpi A4 scan
 * at 832x1216 (988 tokens, ~100 dpi, where 10-12 pt text is still ~14 px high), so OCR and
 * documents stay usable; small images are not affected (the 64-token minimum is HF's). A request can lower it
 * for speed (256-512 tokens is enough for "what is in this photo") or raise it up to
 * IMAGE_HF_MAX_PIXELS for dense documents. docs/IMAGES.md has the trade-off with measurements.
 */
#define IMAGE_CPU_DEFAULT_MAX_PIXELS ((int64_t)1024 * 1024)
#define IMAGE_CPU_DEFAULT_MIN_PIXELS IMAGE_HF_MIN_PIXELS

typedef struct preprocess_opts {
  int64_t min_pixels; /* smart_resize lower bound on h*w (pixels, after resize) */
  int64_t max_pixels; /* smart_resize upper bound on h*w */
} preprocess_opts;

/* Output of image_preprocess. */
typedef struct image_patches {
  image_rgb resized;   /* [grid_h*16][grid_w*16][3] the uint8 image after the resize */
  float *pixel_values; /* [n_patches][IMAGE_PATCH_DIM] merge-window order, (c, t, py, px) inside */
  int n_patches;       /* grid_t * grid_h * grid_w */
  int grid_t, grid_h, grid_w; /* image_grid_thw in patch units (grid_t = 1 for an image) */
  int n_tokens;        /* LLM tokens (<|image_pad|> count) = n_patches / 4 */
} image_patches;

/* CPU defaults: min IMAGE_CPU_DEFAULT_MIN_PIXELS, max IMAGE_CPU_DEFAULT_MAX_PIXELS. */
void preprocess_opts_default(preprocess_opts *o);

/* HF smart_resize: target (h, w), both multiples of factor. Fails with ERR_INVALID_ARG and HF's
 * message ("absolute aspect ratio must be smaller than 200, got 202.0") when the aspect ratio is
 * above 200, and on non-positive sizes or limits. */
qvl_status image_smart_resize(int height, int width, int64_t min_pixels, int64_t max_pixels,
                              int factor, int *out_height, int *out_width);

/* Pillow's Image.resize((out_w, out_h), BICUBIC): separable, horizontal pass first (skipped when
 * the width is unchanged), uint8 intermediate, 22-bit fixed-point taps with antialiased support
 * when shrinking. dst is allocated (free with image_rgb_free). Same size gives a copy. */
qvl_status image_resize_bicubic(const image_rgb *src, int out_width, int out_height, image_rgb *dst);

/* Rescale + normalise one uint8 value exactly as HF: float32((double)v * (1/255)), then
 * (x - 0.5f) / 0.5f in float32. */
float image_normalize_u8(uint8_t v);

/* Patchify an image whose sides are multiples of IMAGE_FACTOR: writes
 * (h/16)*(w/16) rows of IMAGE_PATCH_DIM floats to out (caller-allocated), normalised, frame
 * duplicated, in merge-window order. */
qvl_status image_patchify(const image_rgb *img, float *out);

/* The whole pipeline on a decoded image: smart_resize -> bicubic -> normalise -> patchify.
 * o may be NULL; o's zero fields take the CPU defaults. A min_pixels above max_pixels and an aspect
 * ratio above 200 fail with ERR_INVALID_ARG. On failure *out is zeroed. */
qvl_status image_preprocess(const image_rgb *img, const preprocess_opts *o, image_patches *out);
void image_patches_free(image_patches *p);

#endif
