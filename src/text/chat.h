/*
 * The Qwen3-VL Instruct and Thinking chat templates, rendered natively (no Jinja engine): OpenAI-style messages in,
 * prompt text out, identical to what transformers' apply_chat_template produces with the template in
 * tests/fixtures/tokenizer/qwen3vl_instruct_chat_template.jinja (qwen3vl_thinking_chat_template.jinja
 * with chat_render_with's thinking).
 *
 * Each image item renders as "<|vision_start|><|image_pad|><|vision_end|>"; the caller expands the
 * pad token to the image's token count after tokenizing. Images are reported in prompt order.
 * A video item (type video / video_url, or a video / video_url key) renders as
 * "<|vision_start|><|video_pad|><|vision_end|>" and is listed with the images (video set).
 * Thread safety: pure functions.
 */
#ifndef QVL_TEXT_CHAT_H
#define QVL_TEXT_CHAT_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "base/buf.h"
#include "qvl.h"
#include "text/tokenizer.h"

typedef struct chat_image {
  const cJSON *item; /* the content item (type image / image_url), owned by the messages JSON */
  const char *url;   /* image_url.url, image_url (string) or image (string); NULL if absent */
  int message_index; /* which message holds it */
  bool video;        /* a video item (type video / video_url): url is its video URL */
} chat_image;

typedef struct chat_prompt {
  buf text;           /* rendered prompt */
  chat_image *images; /* [n_images] images and videos (video set) in prompt order */
  int n_images;
  /* [n_msgs + 1]: where message i's rendering begins in text (a system message rendered in the
   * leading system block, or not at all, has an empty span); msg_off[n_msgs] is where the generation
   * prompt begins. The prompt layer splits the text here to tokenize per message. */
  size_t *msg_off;
  int n_msgs;
  /* The bytes of text that are user or tool content (text parts and string content), sorted and
   * disjoint: tokenizer_encode_spans keeps special-token text there plain, so that a user typing
   * "<|im_start|>system" cannot forge a turn. The template's own markers are never inside. */
  text_span *plain; /* [n_plain] */
  size_t n_plain, cap_plain;
} chat_prompt;

typedef struct chat_render_opts {
  const cJSON *tools;         /* OpenAI tools array or NULL */
  bool add_generation_prompt;
  bool thinking;              /* the Qwen3-VL Thinking template (chat_template_is_thinking) */
  bool skip_thinking;         /* thinking: the generation prompt closes an empty think block, as
                               * the template renders a turn without reasoning (budget 0) */
} chat_render_opts;

/* Renders messages with the Instruct or the Thinking template (identical to transformers with
 * qwen3vl_thinking_chat_template.jinja when o->thinking). */
qvl_status chat_render_with(const cJSON *messages, const chat_render_opts *o, chat_prompt *out);

/* Whether a chat template's text is a reasoning model's: its generation prompt opens <think>. */
bool chat_template_is_thinking(const char *tmpl);

/* Renders messages (a JSON array) and optional tools (JSON array or NULL). Validates the shape of
 * every message; errors name the message index and field. */
qvl_status chat_render(const cJSON *messages, const cJSON *tools, bool add_generation_prompt,
                       chat_prompt *out);
void chat_prompt_free(chat_prompt *p);

/* Serializes JSON like Python's json.dumps(ensure_ascii=False) with default separators, which is
 * what the template's `tojson` filter produces for tools and tool-call arguments. */
qvl_status chat_tojson(const cJSON *value, buf *out);

#endif
