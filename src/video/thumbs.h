/*
 * Small pictures of the frames a clip samples (video/clip.h), for people to see what the model
 * will see: the web page's frame strip (POST /video/frames). They come from the same plan and the
 * same reader as the model's input, so the frames shown are the frames sampled; each is scaled
 * down from the decoded frame with the image path's bicubic, keeping the source's aspect ratio.
 *
 * Thread safety: as video_clip (one thread at a time).
 */
#ifndef QVL_VIDEO_THUMBS_H
#define QVL_VIDEO_THUMBS_H

#include <stdint.h>

#include "video/clip.h"

typedef struct video_thumbs {
  int n;             /* the clip's sampled frames */
  int width, height; /* of every thumbnail */
  uint8_t *rgb;      /* [n][height][width][3] */
} video_thumbs;

/* The size of a thumbnail of a width x height frame that fits max_width x max_height, aspect kept
 * (never scaled up, at least 1 px a side). */
void video_thumb_size(int width, int height, int max_width, int max_height, int *out_w, int *out_h);

/* Decodes the sampled frames of an opened clip (video_clip_open; the reader is closed afterwards,
 * as by video_clip_decode) into thumbnails that fit max_width x max_height. Errors as
 * video_reader_read. */
qvl_status video_clip_thumbnails(video_clip *c, int max_width, int max_height, video_thumbs *out);
void video_thumbs_free(video_thumbs *t);

#endif
