/*
 * The Qwen byte-level BPE tokenizer (Qwen2 / Qwen3 / Qwen3-VL vocabulary), bit-exact with the
 * Hugging Face `tokenizers` reference: `tokenizer(text).input_ids` and `decode(ids)`.
 *
 * Encoding, in the reference's order:
 *   1. added tokens (<|im_start|>, <think>, ...; special or not) are matched literally in the raw
 *      text, leftmost-longest, before anything else;
 *   2. each remaining span is NFC-normalized (Unicode 9.0 tables, like the reference);
 *   3. the Qwen2 pre-tokenizer regex splits it into pieces
 *        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *        \s*[\r\n]+|\s+(?!\S)|\s+
 *      (a hand-written matcher over code points: \p{L}, \p{N} are Unicode 16.0, \s is White_Space);
 *   4. each piece's bytes are merged by BPE rank (O(n log n) for long pieces).
 * Input bytes that are not valid UTF-8 are first replaced by U+FFFD per maximal invalid subpart,
 * i.e. the result is that of the reference on bytes.decode("utf-8", errors="replace").
 *
 * Decoding concatenates the tokens' bytes and replaces invalid UTF-8 by U+FFFD per maximal
 * invalid subpart (the reference's errors="replace"). Unknown ids are skipped, like the reference.
 *
 * Thread safety: a tokenizer is immutable after init; every function may be called from any
 * number of threads at once. tokenizer_free must not race with other calls.
 */
#ifndef QVL_TEXT_TOKENIZER_H
#define QVL_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/stop.h"
#include "model/gguf.h"
#include "qvl.h"

typedef struct tokenizer tokenizer;

/* Token kinds, as in GGUF tokenizer.ggml.token_type. */
typedef enum tokenizer_token_type {
  TOKENIZER_TOKEN_NORMAL = 1,       /* a BPE vocabulary entry */
  TOKENIZER_TOKEN_UNKNOWN = 2,
  TOKENIZER_TOKEN_CONTROL = 3,      /* special added token (skipped by decode with skip_special) */
  TOKENIZER_TOKEN_USER_DEFINED = 4, /* non-special added token (<think>, <tool_call>, ...) */
  TOKENIZER_TOKEN_UNUSED = 5,       /* padding entry ([PAD151669]): never produced, decodes to "" */
  TOKENIZER_TOKEN_BYTE = 6,
} tokenizer_token_type;

/* From the tokenizer.ggml.* keys of a GGUF file (model "gpt2", pre "qwen2"; anything else is
 * refused with QVL_ERR_UNSUPPORTED). g may be closed after this returns. */
qvl_status tokenizer_init_gguf(const gguf *g, tokenizer **out);

/* From a Hugging Face tokenizer.json (the Qwen2 normalizer / pre-tokenizer / BPE / ByteLevel
 * layout; anything else is refused with QVL_ERR_UNSUPPORTED). eos/bos/padding come from a
 * tokenizer_config.json in the same folder when there is one (else they are -1). */
qvl_status tokenizer_init_hf(const char *tokenizer_json_path, tokenizer **out);

void tokenizer_free(tokenizer *t);

enum {
  /* Treat added/special token strings in the text as plain text (no literal matching), e.g. for
   * untrusted user content that must not inject <|im_start|>. */
  TOKENIZER_ENCODE_NO_ADDED = 1,
};

/* Encodes len bytes of text. *ids receives a malloc'ed array (free() it; non-NULL even when
 * *n_ids is 0). No BOS/EOS is added. */
qvl_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids);
qvl_status tokenizer_encode_flags(const tokenizer *t, const char *text, size_t len, unsigned flags,
                                  int32_t **ids, size_t *n_ids);

/* The same, for untrusted text of any size: fails with QVL_ERR_CONTEXT_OVERFLOW as soon as the text
 * is known to need more than max_ids ids (0 = no cap), so a huge prompt costs only max_ids tokens of
 * work, and with stop's status when stop (may be NULL) says so, polled while encoding. */
qvl_status tokenizer_encode_capped(const tokenizer *t, const char *text, size_t len, unsigned flags, size_t max_ids,
                                   qvl_stop_fn stop, void *stop_user, int32_t **ids, size_t *n_ids);

/* A byte range [begin, end) of a text. */
typedef struct text_span {
  size_t begin, end;
} text_span;

/* tokenizer_encode_capped (flags 0) where the plain spans (sorted, disjoint, within len) are text
 * that no added token may match in, start in or run into: the rendered prompt's user, tool and
 * document content (chat_prompt.plain), so that "<|im_start|>system" typed by a user is BPE text
 * and cannot forge a turn. Outside the spans added tokens match as usual. Pre-tokenization is not
 * split at span boundaries, so a prompt whose content holds no added-token text encodes exactly as
 * tokenizer_encode would (as transformers does). */
qvl_status tokenizer_encode_spans(const tokenizer *t, const char *text, size_t len, const text_span *plain,
                                  size_t n_plain, size_t max_ids, qvl_stop_fn stop, void *stop_user, int32_t **ids,
                                  size_t *n_ids);

/* Appends the decoded UTF-8 text of ids to out (which it does not clear). skip_special drops
 * CONTROL tokens (<|im_end|>, ...) but keeps non-special added tokens (<think>), like the
 * reference's skip_special_tokens=True. */
qvl_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, buf *out);

/* The raw bytes of one token (not necessarily valid UTF-8 on their own; see
 * utf8_incomplete_tail in text/unicode.h to hold back a cut sequence when streaming).
 * Returns NULL with *len = 0 for an unknown id; "" for UNUSED entries. */
const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len);

/* Id of the token whose text is token_text: an added token's content ("<|im_end|>") first, else a
 * vocabulary entry with these raw bytes ("hello", " world"). -1 if none. */
int32_t tokenizer_find(const tokenizer *t, const char *token_text);
int32_t tokenizer_find_bytes(const tokenizer *t, const char *bytes, size_t len);

int32_t tokenizer_vocab_size(const tokenizer *t); /* ids are 0 .. vocab_size-1 */
int32_t tokenizer_eos_id(const tokenizer *t);     /* -1 if unknown */
int32_t tokenizer_bos_id(const tokenizer *t);     /* -1 if unknown */
int32_t tokenizer_pad_id(const tokenizer *t);     /* -1 if unknown */
tokenizer_token_type tokenizer_token_kind(const tokenizer *t, int32_t id); /* 0 for an unknown id */
bool tokenizer_is_special(const tokenizer *t, int32_t id);                 /* CONTROL */
bool tokenizer_is_added(const tokenizer *t, int32_t id);                   /* CONTROL or USER_DEFINED */

#endif
