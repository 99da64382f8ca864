/* `qvl bench`'s video row (issue 23): a synthetic clip encoded in memory, then the stages a video
 * question goes through: demux + plan, decode of the sampled frames (+ resize + patchify), the
 * vision tower over the temporal groups, prefill, and the time to first token of the whole request. */
#ifndef QVL_COMMANDS_BENCH_VIDEO_H
#define QVL_COMMANDS_BENCH_VIDEO_H

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "engine/vlm.h"

/* A width x height clip of seconds at fps, moving synthetic content, H.264 (libx264) in Matroska, or
 * FFV1 when this libavcodec has no libx264; codec gets the encoder's name. */
qvl_status bench_make_video(int width, int height, int fps, int seconds, buf *out, const char **codec);
/* The row: out.video_* fields. A clip file replaces the synthetic one when path is non-NULL. */
qvl_status bench_video(const vlm *m, const char *path, cJSON *out);

#endif
