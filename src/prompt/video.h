/*
 * Videos in the prompt layer (issue 23). A video item of the chat is fetched like an image
 * (prompt/image_source.h: data: URL, allowed file, allow-listed http) and planned from its container
 * (video/clip.h: frames, indices, timestamps, grid, tokens; nothing decoded); materializing decodes
 * only its sampled frames, unless the caller already holds its embeddings (known_image, keyed by the
 * bytes and the sampling settings). In the prompt its <|video_pad|> becomes, per temporal group,
 * "<t.t seconds>" <|vision_start|> <|video_pad|> x (tokens per group) <|vision_end|>
 * (Qwen3VLProcessor.replace_video_token of the newest transformers: the template's own outer
 * <|vision_start|> / <|vision_end|> stay).
 */
#ifndef QVL_PROMPT_VIDEO_H
#define QVL_PROMPT_VIDEO_H

#include "prompt/plan.h"
#include "prompt/prompt.h"
#include "text/chat.h"

/* Fetches video i and plans it into md (kind, bytes, clip, grid, n_tokens = its pads, text_tokens,
 * frames, pixels: one source frame, resized_pixels: the sampled frames). */
qvl_status prompt_video_plan(const prompt_model *m, const chat_image *ci, int i, const prompt_opts *o,
                             prompt_media *md);
void prompt_video_plan_free(prompt_media *md);
/* Decodes a planned video into out (or, when the caller holds its embeddings, keeps its bytes). */
qvl_status prompt_video_load(const prompt_media *md, const prompt_opts *o, prompt_image *out);
/* A skipped decode needed after all (embeddings evicted): from im->encoded. */
qvl_status prompt_video_decode_deferred(const prompt_opts *o, prompt_image *im, int i);
/* The prompt tokens of a video (timestamps, markers, pads): written to out when non-NULL (capacity
 * cap); their number in *n. */
qvl_status prompt_video_tokens(const prompt_model *m, const video_clip *c, int32_t *out, int64_t cap, int64_t *n);

#endif
