/*
 * The video half of prompt building (engine/vlm.c): a video item of the chat is fetched like an
 * image (engine/image_source.h: data: URL, allowed file, allow-listed http), planned from its
 * container (video/clip.h: frames, indices, timestamps, grid, tokens; nothing decoded), then decoded
 * only when the caller does not hold its embeddings already (known_image, keyed by the bytes and the
 * sampling settings). In the prompt its <|video_pad|> becomes, per temporal group,
 * "<t.t seconds>" <|vision_start|> <|video_pad|> x (tokens per group) <|vision_end|>
 * (Qwen3VLProcessor.replace_video_token, newest transformers: the template's own outer
 * <|vision_start|> / <|vision_end|> stay).
 */
#ifndef QVL_ENGINE_VLM_VIDEO_H
#define QVL_ENGINE_VLM_VIDEO_H

#include "engine/vlm.h"
#include "text/chat.h"

/* Fetches video i's bytes into *bytes and plans it into out (is_video, clip, grid, n_tokens,
 * hash/bytes_key). The clip's reader reads *bytes until vlm_video_load: keep them until then. */
qvl_status vlm_video_plan(const vlm *m, const chat_image *cv, int i, const vlm_prompt_opts *o, buf *bytes,
                          vlm_image *out);
/* Decodes a planned video (or, when known_image has its embeddings, keeps the bytes instead: taken
 * from *bytes). */
qvl_status vlm_video_load(const vlm_prompt_opts *o, buf *bytes, vlm_image *im, int i, int message_index);
/* A skipped decode needed after all (embeddings evicted): from im->encoded. */
qvl_status vlm_video_decode_deferred(const vlm_prompt_opts *o, vlm_image *im, int i);
/* The prompt tokens of a planned video: writes them to out when out is non-NULL (capacity cap) and
 * returns their number in *n. */
qvl_status vlm_video_tokens(const vlm *m, const vlm_image *im, int32_t *out, int64_t cap, int64_t *n);
/* Text tokens a video adds besides its pads (timestamps, group markers), an upper bound for caps. */
int64_t vlm_video_extra_tokens_bound(const vlm_image *im);
/* Frees what a video item holds beyond the image fields. */
void vlm_video_free(vlm_image *im);

#endif
