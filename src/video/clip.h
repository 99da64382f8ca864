/*
 * A clip as the vision tower takes it: decoded (video/decode.h), sampled and sized
 * (video/sample.h), resized with the image path's Pillow bicubic, normalised as the video processor
 * does ((u8 - 127.5) / 127.5 in float32: not the image path's two-step rescale), the frame axis padded
 * with the last frame to a multiple of 2, and cut into patches exactly like images
 * (pixel_values_videos rows (t, bh, bw, mh, mw), values (c, tp, py, px)).
 *
 * Two steps so that a server can count before it pays: video_clip_open reads the container (one
 * demux pass, no decoding) and plans the sampling: frame count, indices, resized size, grid and
 * tokens are known; video_clip_decode then decodes only the sampled frames, resizing each one as it
 * comes (the clip never holds more than the sampled frames at their resized size).
 *
 * Thread safety: a video_clip belongs to one thread at a time.
 */
#ifndef QVL_VIDEO_CLIP_H
#define QVL_VIDEO_CLIP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/stop.h"
#include "video/decode.h"
#include "video/sample.h"

typedef struct video_clip {
  video_reader *reader;  /* open between video_clip_open and the end of video_clip_decode */
  video_info info;
  int n;                 /* sampled frames (before temporal padding) */
  int64_t *indices;      /* [n] frame indices in presentation order */
  double *timestamps;    /* [grid_t] seconds, one per temporal group */
  int height, width;     /* resized frame size, multiples of 32 */
  int grid_t, grid_h, grid_w; /* video_grid_thw in 16-px patches (grid_t = ceil(n / 2)) */
  int64_t n_patches;     /* grid_t * grid_h * grid_w */
  int64_t n_tokens;      /* n_patches / 4: <|video_pad|> tokens (grid_h * grid_w / 4 per group) */
  uint8_t *resized;      /* [n][height][width][3] (after decode; freed by video_clip_drop_frames) */
  float *pixel_values;   /* [n_patches][1536] (after decode) */
  uint8_t *all_rgb;      /* [total_frames][H][W][3]: every frame, only with keep_all (dumps) */
} video_clip;

/* Opens and plans (no pixel decoded). lim / smp NULL: defaults. Errors as video_reader_open, and
 * ERR_INVALID_ARG from the sampling (fewer than 2 frames, bad settings). */
qvl_status video_clip_open(const void *data, size_t size, const video_limits *lim, const video_sampling *smp,
                           qvl_stop_fn stop, void *stop_user, video_clip *out);
/* Decodes the sampled frames, resizes, normalises, patchifies; closes the reader. keep_all also
 * decodes every frame into all_rgb (for `qvl dump`; costs the whole clip). data must be the bytes
 * given to video_clip_open. */
qvl_status video_clip_decode(video_clip *c, bool keep_all);
/* Frees the resized frames (pixel_values stay). */
void video_clip_drop_frames(video_clip *c);
void video_clip_free(video_clip *c);

/* Normalise + pad + patchify n frames [n][h][w][3] (sides multiples of 32) into
 * out [ceil(n/2) * (h/16) * (w/16)][1536]. */
void video_patchify(const uint8_t *frames, int n, int height, int width, float *out);
/* The video processor's normalisation of one byte: float32((v - 127.5) / 127.5). */
float video_normalize_u8(uint8_t v);

#endif
