/*
 * Interleaved multimodal RoPE (M-RoPE) of the Qwen3-VL text decoder, and the position ids of a
 * prompt with images (transformers' Qwen3VLModel.get_rope_index).
 *
 * Every token carries three positions (t, h, w). Frequency slot j (0 <= j < head_dim/2) rotates the
 * pair (j, j + head_dim/2) by angle pos_axis(j) * inv_freq[j], where axis(j) is
 *   h if j % 3 == 1 and j < 3 * sections[1],
 *   w if j % 3 == 2 and j < 3 * sections[2],
 *   t otherwise
 * (HF's apply_interleaved_mrope; llama.cpp differs only for the slots past 3 * sections[0], which it
 * leaves unrotated). Text tokens have t = h = w, which reduces this to ordinary NeoX RoPE.
 *
 * All arithmetic follows HF's float32 recipe so that the tables match its float32 tables:
 * inv_freq[j] = 1.0f / powf(theta, (float)(2j) / (float)head_dim), angle = (float)pos * inv_freq[j].
 */
#ifndef QVL_TEXT_MROPE_H
#define QVL_TEXT_MROPE_H

#include <stdint.h>

#include "qvl.h"

#define MROPE_MAX_HALF 256 /* head_dim up to 512 */

typedef struct mrope {
  int head_dim;                    /* even, <= 2 * MROPE_MAX_HALF */
  float theta;
  int sections[4];                 /* as stored in GGUF rope.dimension_sections; the 4th is unused */
  float inv_freq[MROPE_MAX_HALF];  /* [head_dim/2] */
  uint8_t axis[MROPE_MAX_HALF];    /* [head_dim/2] 0 = t, 1 = h, 2 = w */
} mrope;

/* Validates head_dim (even, 2..512), theta (> 0, finite) and sections (>= 0) and fills the tables. */
qvl_status mrope_init(mrope *m, int head_dim, float theta, const int sections[4]);

/* Tables for n tokens with positions pos[3][n] (row 0 = t, 1 = h, 2 = w; row stride pos_stride):
 * cos[i][d], sin[i][d] for d < head_dim, laid out like HF's emb = cat(freqs, freqs), so both halves
 * hold the same values. */
void mrope_tables(const mrope *m, const int32_t *pos, int64_t pos_stride, int64_t n, float *cos,
                  float *sin);

/* In place on x[n][n_heads][head_dim] (token rows row_stride floats apart):
 *   x'[d] = x[d] * cos[d] - x[d + half] * sin[d]           (d < half)
 *   x'[d + half] = x[d + half] * cos[d + half] + x[d] * sin[d + half]
 * with the tables of mrope_tables. */
void mrope_apply(const mrope *m, float *x, int64_t n, int n_heads, int64_t row_stride,
                 const float *cos, const float *sin);

/* Description of one image in a prompt for mrope_positions: its grid in patches (as HF's
 * image_grid_thw). The prompt holds t * (h / merge) * (w / merge) consecutive image_pad tokens for it. */
typedef struct mrope_image {
  int32_t t, h, w;
} mrope_image;

/*
 * transformers' get_rope_index for one sequence: positions pos[3][n] (t, h, w; row stride n) of
 * every prompt token and rope_delta = max(pos) + 1 - n. Each image starts at the first image_pad of a
 * run following vision_start; its tokens get (st + ti, st + r, st + c) over its merged grid, and the
 * text after it resumes at max + 1. Without images, pos = 0..n-1 on every axis and rope_delta = 0.
 * Fails (QVL_ERR_MISMATCH) if the number of images in ids differs from n_images, if an image's run of
 * image_pad tokens is shorter than its grid says, or a grid is not divisible by merge.
 * Continuing a cached sequence (a later turn appended to the KV cache): compute the positions of the
 * new tokens alone and add decoder_seq_next_pos() to each; that equals get_rope_index over the whole
 * sequence as long as the split is not inside an image.
 */
qvl_status mrope_positions(const int32_t *ids, int64_t n, int32_t image_pad_id,
                           int32_t vision_start_id, const mrope_image *images, int n_images,
                           int merge, int32_t *pos, int64_t *rope_delta);

/* The same over images and videos: a <|video_pad|> run (video_pad_id; -1 = none) is one temporal
 * group of a video, given as a (1, h, w) grid; grids holds one entry per pad run, images and video
 * groups in prompt order (transformers repeats each video grid t times with t = 1, the same). */
qvl_status mrope_positions_mm(const int32_t *ids, int64_t n, int32_t image_pad_id, int32_t video_pad_id,
                              int32_t vision_start_id, const mrope_image *grids, int n_grids, int merge,
                              int32_t *pos, int64_t *rope_delta);

#endif
