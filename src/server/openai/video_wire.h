/*
 * Videos on the chat wire (issue 23; called from api_chat_parse):
 *
 *   - content parts: {"type":"video_url","video_url":{"url":URL}} (vLLM, SGLang; a URL string works
 *     too), {"type":"video","video":URL} (the chat template's own item), and llama-server's
 *     {"type":"input_video","input_video":{"data":BASE64,"format":"mp4"}} (or {"url":URL}), which is
 *     rewritten in place into a video_url part with a data: URL. URLs follow the image rules
 *     (data: URLs, allow-listed http(s), no local files).
 *   - sampling: {"video": {"fps": F | "num_frames": N, "max_frames": M, "min_pixels": P,
 *     "max_pixels": Q}} (ours), or vLLM's "mm_processor_kwargs": {"fps": F} and
 *     "media_io_kwargs": {"video": {"num_frames": N}}; unset fields take HF's defaults (fps 2,
 *     4..768 frames, 131072..786432 pixels) with max_frames lowered to the server's
 *     --video-max-frames. Above a server cap (--video-max-frames, --video-max-pixels) it is a 400
 *     naming the field.
 */
#ifndef QVL_SERVER_OPENAI_VIDEO_WIRE_H
#define QVL_SERVER_OPENAI_VIDEO_WIRE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "server/openai/chat_wire.h"
#include "video/sample.h"

/* Whether a part type is a video part. */
bool api_is_video_part(const char *type);
/* Checks a video part (rewriting input_video into video_url). */
bool api_video_part_check(cJSON *part, const char *type, const char *param, api_error *e);
/* The request's video sampling under the limits. */
bool api_video_parse(const cJSON *root, const api_limits *lim, video_sampling *out, api_error *e);

#endif
