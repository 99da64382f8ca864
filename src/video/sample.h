/*
 * Which frames of a clip Qwen3-VL sees, and at what size: transformers' Qwen3VLVideoProcessor
 * (sample_frames, smart_resize of the video processor) and Qwen3VLProcessor._calculate_timestamps,
 * exactly as tests/fixtures/README.md "Video" states them. Pure arithmetic on counts; no decoding.
 *
 * Thread safety: all functions are reentrant.
 */
#ifndef QVL_VIDEO_SAMPLE_H
#define QVL_VIDEO_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl.h"

#define VIDEO_TEMPORAL_PATCH 2 /* frames per temporal patch of the vision tower */
#define VIDEO_FACTOR 32        /* resized sides are multiples of patch 16 x merge 2 */
/* The processor's class defaults (preprocessor_config.json of Qwen3-VL). */
#define VIDEO_HF_FPS 2.0
#define VIDEO_HF_MIN_FRAMES 4
#define VIDEO_HF_MAX_FRAMES 768
#define VIDEO_HF_MIN_PIXELS ((int64_t)128 * 32 * 32) /* size.shortest_edge: t_bar*h*w lower bound */
#define VIDEO_HF_MAX_PIXELS ((int64_t)768 * 32 * 32) /* size.longest_edge: t_bar*h*w upper bound */
/* A clip without a usable frame rate is taken at 24 fps, as HF does (with a warning) */
#define VIDEO_FALLBACK_FPS 24.0

typedef struct video_sampling {
  double fps;      /* frames sampled per second of video; 0 = use num_frames */
  int num_frames;  /* an exact frame count (fps must be 0); 0 = use fps */
  int min_frames;  /* clamp of the fps rule */
  int max_frames;
  int64_t min_pixels; /* t_bar * h * w bounds of the video smart_resize */
  int64_t max_pixels;
} video_sampling;

/* HF's defaults: fps 2, 4..768 frames, 131072..786432 pixels (t_bar*h*w). */
void video_sampling_default(video_sampling *s);

/* sample_frames: how many frames are kept from a clip of total frames at video_fps (<= 0: the
 * fallback 24), then their indices (numpy linspace(0, total-1, n).round(), half to even) written to
 * idx (capacity cap). ERR_INVALID_ARG for fps and num_frames both set, a num_frames above total,
 * or an empty clip; ERR_TOO_LARGE when n exceeds cap. */
qvl_status video_sample_count(int64_t total, double video_fps, const video_sampling *s, int *n_out);
qvl_status video_sample_indices(int64_t total, double video_fps, const video_sampling *s, int64_t *idx,
                                int cap, int *n_out);

/* The video processor's smart_resize for n sampled frames of h x w: (out_h, out_w), multiples of 32.
 * ERR_INVALID_ARG with HF's message for n < 2 ("t:1 must be larger than temporal_factor:2") and for an
 * aspect ratio above 200; non-positive sizes and bounds are refused too. */
qvl_status video_smart_resize(int n, int height, int width, int64_t min_pixels, int64_t max_pixels,
                              int *out_h, int *out_w);

/* Temporal groups of n sampled frames: ceil(n / 2). */
static inline int video_n_groups(int n) { return (n + VIDEO_TEMPORAL_PATCH - 1) / VIDEO_TEMPORAL_PATCH; }

/* One timestamp per temporal group: the index list padded with its last entry to an even count,
 * t = idx / video_fps, the mean of each pair. ts has video_n_groups(n) entries. */
void video_timestamps(const int64_t *idx, int n, double video_fps, double *ts);

/* "<%.1f seconds>" (the C library's correctly rounded %.1f, as Python's f"{t:.1f}"), NUL-terminated;
 * returns the length, or -1 when it does not fit. */
int video_timestamp_text(double t, char *out, int cap);

#endif
