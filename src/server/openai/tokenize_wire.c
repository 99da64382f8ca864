/* /tokenize, /detokenize and /apply-template bodies (see tokenize_wire.h). */
#include "server/openai/tokenize_wire.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/openai/json_print.h"
#include "text/chat.h"
#include "text/unicode.h"

static cJSON *parse_object(const char *body, size_t len, api_error *e) {
  cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body must be a JSON object");
    return NULL;
  }
  return root;
}

/* root[name]: absent/null -> dflt; a boolean; else 400. */
static bool get_flag(const cJSON *root, const char *name, bool dflt, bool *out, api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  *out = dflt;
  if (!j || cJSON_IsNull(j))
    return true;
  if (!cJSON_IsBool(j)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", name, "'%s' must be a boolean", name);
    return false;
  }
  *out = cJSON_IsTrue(j);
  return true;
}

/* A token's text, or its bytes as numbers when they are not valid UTF-8 on their own. */
static cJSON *piece(const tokenizer *t, int32_t id) {
  size_t n = 0;
  const char *b = tokenizer_token_bytes(t, id, &n);
  if (!b)
    b = "", n = 0;
  if (utf8_valid_prefix(b, n) == n && !memchr(b, 0, n)) {
    char *s = strndup(b, n);
    cJSON *j = cJSON_CreateString(s ? s : "");
    free(s);
    return j;
  }
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
  return a;
}

/* The answer object printed (malloc'd; o is taken); NULL with e filled when out of memory. */
static char *print_answer(cJSON *o, api_error *e) {
  char *out = json_print_take(o);
  if (!out)
    api_error_status(e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
  return out;
}

/* A body (a JSON object) and its answer: answer builds it from the body's fields, or fills e and
 * returns NULL. */
typedef cJSON *(*answer_fn)(const tokenizer *t, const cJSON *root, api_error *e);
static char *answer_body(const tokenizer *t, const char *body, size_t len, answer_fn answer, api_error *e) {
  cJSON *root = parse_object(body, len, e);
  if (!root)
    return NULL;
  cJSON *o = answer(t, root, e);
  cJSON_Delete(root);
  return o ? print_answer(o, e) : NULL;
}

static cJSON *tokenize_answer(const tokenizer *t, const cJSON *root, api_error *e) {
  bool add_special, parse_special, with_pieces;
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
  if (!cJSON_IsString(content)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "content", "'content' must be a string");
    return NULL;
  }
  if (!get_flag(root, "add_special", false, &add_special, e) || !get_flag(root, "parse_special", true, &parse_special, e) ||
      !get_flag(root, "with_pieces", false, &with_pieces, e))
    return NULL;
  (void)add_special; /* Qwen3 adds no BOS/EOS */
  int32_t *ids = NULL;
  size_t n = 0;
  qvl_status st = tokenizer_encode_capped(t, content->valuestring, strlen(content->valuestring),
                                          parse_special ? 0 : TOKENIZER_ENCODE_NO_ADDED, TOK_WIRE_MAX_TOKENS, NULL,
                                          NULL, &ids, &n);
  if (st != QVL_OK) {
    api_error_status(e, st == QVL_ERR_CONTEXT_OVERFLOW ? QVL_ERR_TOO_LARGE : st, NULL, "content",
                     "'content' cannot be tokenized: %s", qvl_last_error());
    free(ids);
    return NULL;
  }
  cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens");
  for (size_t i = 0; i < n; i++) {
    if (!with_pieces) {
      cJSON_AddItemToArray(tokens, cJSON_CreateNumber(ids[i]));
      continue;
    }
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "id", ids[i]);
    cJSON_AddItemToObject(p, "piece", piece(t, ids[i]));
    cJSON_AddItemToArray(tokens, p);
  }
  free(ids);
  return o;
}

static cJSON *detokenize_answer(const tokenizer *t, const cJSON *root, api_error *e) {
  cJSON *o = NULL;
  int32_t *ids = NULL;
  buf text = {0};
  const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
  int n = cJSON_GetArraySize(tokens);
  if (!cJSON_IsArray(tokens)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "tokens", "'tokens' must be an array of token ids");
    goto done;
  }
  if (n > TOK_WIRE_MAX_TOKENS) {
    api_error_status(e, QVL_ERR_TOO_LARGE, NULL, "tokens", "'tokens' has %d ids; at most %d", n, TOK_WIRE_MAX_TOKENS);
    goto done;
  }
  ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
  if (!ids) {
    api_error_status(e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
    goto done;
  }
  int i = 0, vocab = tokenizer_vocab_size(t);
  for (const cJSON *j = tokens->child; j; j = j->next, i++) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= 0 && v < vocab) || v != floor(v)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "tokens",
                       "tokens[%d] is not a token id (0 .. %d)", i, vocab - 1);
      goto done;
    }
    ids[i] = (int32_t)v;
  }
  if (buf_append(&text, "", 0) != QVL_OK || tokenizer_decode(t, ids, (size_t)n, false, &text) != QVL_OK) {
    api_error_status(e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
    goto done;
  }
  o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "content", api_text_json(text.data, text.len));
done:
  free(ids);
  buf_free(&text);
  return o;
}

char *tok_wire_tokenize(const tokenizer *t, const char *body, size_t len, api_error *e) {
  return answer_body(t, body, len, tokenize_answer, e);
}

char *tok_wire_detokenize(const tokenizer *t, const char *body, size_t len, api_error *e) {
  return answer_body(t, body, len, detokenize_answer, e);
}

char *tok_wire_apply_template(const vlm *m, const api_chat_request *req, api_error *e) {
  const cJSON *agp = cJSON_GetObjectItemCaseSensitive(req->root, "add_generation_prompt");
  if (agp && !cJSON_IsNull(agp) && !cJSON_IsBool(agp)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "add_generation_prompt",
                     "'add_generation_prompt' must be a boolean");
    return NULL;
  }
  chat_render_opts o = {.tools = req->tools,
                        .add_generation_prompt = !cJSON_IsFalse(agp),
                        .thinking = m->thinking,
                        .skip_thinking = req->gen.reasoning_budget == 0};
  chat_prompt p;
  qvl_status st = chat_render_with(req->messages, &o, &p);
  if (st != QVL_OK) {
    api_error_status(e, st, NULL, "messages", "%s", qvl_last_error());
    return NULL;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddItemToObject(j, "prompt", api_text_json(p.text.data, p.text.len));
  chat_prompt_free(&p);
  return print_answer(j, e);
}
