/*
 * llama-server's prompt tools as JSON, so users can see the exact prompt their messages become:
 *
 *   POST /tokenize        {content, add_special?, parse_special?, with_pieces?}  -> {tokens}
 *                         tokens: ids, or with_pieces [{id, piece}] (piece: the token's text, or
 *                         its bytes as numbers when they are not valid UTF-8 on their own)
 *   POST /detokenize      {tokens}                                               -> {content}
 *   POST /apply-template  a chat completion body (messages, tools, the reasoning fields;
 *                         add_generation_prompt, default true)                   -> {prompt}
 *
 * Qwen3's tokenizer adds no BOS/EOS, so add_special changes nothing; parse_special (default true)
 * matches special-token text such as <|im_start|> as those tokens. The prompt of /apply-template is
 * the chat template's output before images are expanded: one <|image_pad|> per image. No I/O here.
 */
#ifndef QVL_SERVER_OPENAI_TOKENIZE_WIRE_H
#define QVL_SERVER_OPENAI_TOKENIZE_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/vlm.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_wire.h"

#define TOK_WIRE_MAX_TOKENS (1 << 20) /* ids per /tokenize answer and per /detokenize request */

/* Each returns the answer (malloc'd JSON) or NULL with e filled (400 for bad input). */
char *tok_wire_tokenize(const tokenizer *t, const char *body, size_t len, api_error *e);
char *tok_wire_detokenize(const tokenizer *t, const char *body, size_t len, api_error *e);
/* req: the body parsed by api_chat_parse (its reasoning fields decided req->gen.reasoning_budget). */
char *tok_wire_apply_template(const vlm *m, const api_chat_request *req, api_error *e);

#endif
