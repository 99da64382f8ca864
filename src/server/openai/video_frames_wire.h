/*
 * POST /video/frames on the wire (qvl's own; the web page's frame strip, docs/WEB_UI.md): which
 * frames of a clip a chat request would sample, at which times, and what they look like.
 *
 * Request: one video part of a chat message, as api_video_part_check takes it (video_url or
 * input_video: "video" is the sampling, as at the root of a chat request), plus the chat request's
 * sampling fields (video_wire.h):
 *   {"video_url": {"url": "data:video/mp4;base64,..."},      (or {"type": "input_video", ...})
 *    "video": {"fps": 2},                                      (optional, as in chat)
 *    "thumbnail": {"width": 160, "height": 90}}                (optional: the box each fits in)
 * Reply: the container's facts, the plan of video_clip_open and one thumbnail per sampled frame:
 *   {"object": "video.frames", "container", "codec", "width", "height", "fps", "fps_rule",
 *    "total_frames", "duration_s", "resized_width", "resized_height", "video_grid_thw": [t,h,w],
 *    "video_tokens", "frames": [{"index", "time_s", "group"}],
 *    "groups": [{"time_s", "text": "<0.3 seconds>", "frames": [k, k+1]}],
 *    "thumbnails": {"width", "height", "format": "rgb24", "data": [BASE64 of height*width*3 bytes]}}
 *
 * Thread safety: reentrant.
 */
#ifndef QVL_SERVER_OPENAI_VIDEO_FRAMES_WIRE_H
#define QVL_SERVER_OPENAI_VIDEO_FRAMES_WIRE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/openai/chat_wire.h"
#include "video/clip.h"
#include "video/thumbs.h"

#define VIDEO_FRAMES_THUMB_WIDTH 160 /* default thumbnail box */
#define VIDEO_FRAMES_THUMB_HEIGHT 90
#define VIDEO_FRAMES_THUMB_MAX 320   /* largest thumbnail side a request may ask for */

typedef struct video_frames_request {
  cJSON *root;            /* owns the parsed body */
  const char *url;        /* into root */
  video_sampling sampling;
  int thumb_width, thumb_height;
} video_frames_request;

/* Parses and checks the body under the chat limits (lim: video caps). false with e filled. */
bool video_frames_parse(const char *body, size_t len, const api_limits *lim, video_frames_request *out,
                        api_error *e);
void video_frames_request_free(video_frames_request *r);

/* The reply body, malloc'd (NULL when out of memory). */
char *video_frames_json(const video_clip *c, const video_thumbs *t);

#endif
