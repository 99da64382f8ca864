/*
 * Video decoding from memory through libavformat / libavcodec / libswscale (no subprocess), for the
 * frames Qwen3-VL samples (video/sample.h).
 *
 * What is accepted: an allow-list of demuxers (Matroska/WebM, MP4/MOV, GIF) and decoders (H.264,
 * H.265, VP8, VP9, AV1, FFV1, GIF); anything else is QVL_ERR_UNSUPPORTED, named. The input is read
 * through our own AVIOContext over the caller's buffer: libavformat opens nothing else (no
 * protocols, no external references), and probing is bounded (probesize, analyzeduration).
 *
 * Frame count and rate, the rule (tests/fixtures/README.md "Video"):
 *   - total frames = the video packets of the stream, counted by one demux pass over the whole
 *     input (no decoding; Matroska stores no frame count, and a header's nb_frames may lie);
 *     packets flagged discard (MP4 edit lists) and empty packets are not frames;
 *   - fps = the stream's avg_frame_rate when it is a rate in [0.01, 1000] (ERR_FORMAT, "absurd",
 *     when it is declared outside); without one (variable rate, missing metadata): frames over their
 *     timestamp span, (last pts - first pts) * n / (n - 1), which must lie in the same range
 *     (ERR_FORMAT when every frame has the same timestamp: a zero rate); without timestamps at all
 *     (or a single frame): 24 fps, HF's own fallback. info.fps_rule says which rule applied.
 *   - frame i = the i-th frame in presentation order (packets sorted by pts); streams without
 *     usable pts (missing or repeated) are read in output order without seeking.
 *
 * Streaming: only the requested frames are converted to RGB and handed to the caller; the others
 * are decoded (inter frames need them) and dropped. When the next wanted frame lies beyond a key
 * frame that is far ahead (more than seek_gap frames), the reader seeks to that key frame instead
 * of decoding everything in between, so a long clip costs about one GOP per sampled frame.
 *
 * Caps (video_limits, checked before the pixels they guard): encoded bytes, frame size (from the
 * stream header, and again on every decoded frame: a header that lies about its size is refused),
 * frames in the stream, duration, packet size, and the decoded frames a request may cost.
 *
 * Thread safety: a video_reader is used by one thread at a time; distinct readers are independent.
 */
#ifndef QVL_VIDEO_DECODE_H
#define QVL_VIDEO_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/stop.h"
#include "image/decode.h"
#include "qvl.h"

typedef struct video_limits {
  size_t max_bytes;         /* encoded input */
  int64_t max_frame_pixels; /* width * height of one frame */
  int max_dim;              /* largest side */
  int64_t max_frames;       /* frames in the stream */
  double max_seconds;       /* duration (frames / fps) */
  int64_t max_decoded;      /* frames one read may decode (sampled + the ones in between) */
  int64_t max_decoded_pixels; /* the same frames x width x height: the CPU a read may cost */
} video_limits;

/* 256 MiB, 4096x2304 per frame (4K UHD fits, 8K does not), 8192 px a side, 36000 frames (20 min at
 * 30 fps), 1200 s, 40000 decoded frames per read, and 80 gigapixels decoded per read: at the ~2.4
 * gigapixels per CPU second that H.264 decoding took on the issue-31 Xeon (36,000 frames of 4096x2304
 * in ~140 s), about 33 s of CPU, which still lets a 20-minute 1080p clip be read frame by frame
 * (75 gigapixels); that 4K clip (340) is refused before anything is decoded. */
#define VIDEO_DEFAULT_MAX_BYTES ((size_t)256 << 20)
#define VIDEO_DEFAULT_MAX_FRAME_PIXELS ((int64_t)4096 * 2304)
#define VIDEO_DEFAULT_MAX_DIM 8192
#define VIDEO_DEFAULT_MAX_FRAMES ((int64_t)36000)
#define VIDEO_DEFAULT_MAX_SECONDS 1200.0
#define VIDEO_DEFAULT_MAX_DECODED ((int64_t)40000)
#define VIDEO_DEFAULT_MAX_DECODED_PIXELS ((int64_t)80000000000)

void video_limits_default(video_limits *l);

/* Frame rates accepted (declared or measured) */
#define VIDEO_MIN_FPS 0.01
#define VIDEO_MAX_FPS 1000.0

typedef enum video_fps_rule {
  VIDEO_FPS_AVG_FRAME_RATE = 0, /* the stream's avg_frame_rate */
  VIDEO_FPS_FROM_TIMESTAMPS,    /* frames / timestamp span (variable rate, no average) */
  VIDEO_FPS_FALLBACK,           /* 24, as HF */
} video_fps_rule;

typedef struct video_info {
  char container[32]; /* demuxer name ("matroska,webm" -> "matroska", "mov,mp4,..." -> "mp4", "gif") */
  char codec[32];     /* decoder name ("h264", "ffv1", ...) */
  int width, height;  /* from the stream header (checked against every decoded frame) */
  int64_t total_frames;
  double fps;
  video_fps_rule fps_rule;
  int fps_num, fps_den; /* avg_frame_rate as stored (0/0 when absent) */
  double duration_s;    /* total_frames / fps */
} video_info;

typedef struct video_reader video_reader;

/* Opens data (not copied: it must outlive the reader), checks the container and codec against the
 * allow-lists and the limits against the header, counts the frames. lim NULL: the defaults.
 * Errors: ERR_FORMAT (not a video, truncated, corrupt, no video stream: "audio only"),
 * ERR_UNSUPPORTED (container or codec outside the allow-list), ERR_TOO_LARGE (a cap),
 * ERR_CANCELLED from stop. */
qvl_status video_reader_open(const void *data, size_t size, const video_limits *lim, qvl_stop_fn stop,
                             void *stop_user, video_reader **out);
const video_info *video_reader_info(const video_reader *r);
/* Frames further ahead than this (in presentation order) are reached by seeking to their key frame;
 * default 48; 0 seeks whenever a key frame lies between (tests force it). */
void video_reader_set_seek_gap(video_reader *r, int64_t frames);
/* Key-frame seeks done so far (for tests). */
int64_t video_reader_seeks(const video_reader *r);
void video_reader_close(video_reader *r);

/* Called with each wanted frame, in ascending index order (rgb is only valid during the call);
 * a non-OK return stops the read and is returned. */
typedef qvl_status (*video_frame_fn)(void *user, int k, int64_t index, const image_rgb *rgb);

/* Decodes the frames idx[0..n) (strictly ascending presentation indices < total_frames) and hands
 * each one, converted to RGB, to fn (k = its position in idx). Every frame must have the header's
 * size (ERR_FORMAT otherwise); a wanted frame that never comes is ERR_FORMAT (truncated stream). */
qvl_status video_reader_read(video_reader *r, const int64_t *idx, int n, video_frame_fn fn, void *user);
/* What reading the frames idx[0..n) (ascending) will decode at most, from the key frames and the
 * seek rule, before anything is decoded: ERR_TOO_LARGE naming the estimate when it exceeds
 * max_decoded or max_decoded_pixels (video_reader_read checks it first too, and counts the frames
 * really decoded against both as it goes). *frames_out (may be NULL): the estimate. */
qvl_status video_reader_plan(const video_reader *r, const int64_t *idx, int n, int64_t *frames_out);

#endif
