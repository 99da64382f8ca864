/* OpenAI's legacy completions translated to and from the chat path (see completions.h). */
#include "server/dialects/completions.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/finish.h"
#include "server/openai/json_print.h"

typedef struct cmpl_state {
  char id[48];
  char model[128];
  int64_t created;
  bool include_usage, stream_usage;
  char *echo;      /* the prompt to put first (echo: true), malloc'd; NULL: none */
  size_t echo_len;
} cmpl_state;

static void state_free(void *p) {
  cmpl_state *st = p;
  if (st)
    free(st->echo);
  free(st);
}

static bool bad(api_error *e, const char *param, const char *msg) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "'%s' %s", param, msg);
  return false;
}

/* A token-id array into out->raw_ids. */
static bool take_ids(const cJSON *a, compat_request *out, api_error *e) {
  int n = cJSON_GetArraySize(a);
  if (n == 0 || n > COMPLETIONS_MAX_PROMPT_IDS) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "prompt",
                  "a token-id prompt needs 1..%d ids, got %d", COMPLETIONS_MAX_PROMPT_IDS, n);
    return false;
  }
  out->raw_ids = malloc(sizeof *out->raw_ids * (size_t)n);
  if (!out->raw_ids) {
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
    return false;
  }
  int i = 0;
  for (const cJSON *t = a->child; t; t = t->next, i++) {
    if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
        t->valuedouble > 2147483647.0)
      return bad(e, "prompt", "must be a string, an array of token ids (integers >= 0), or an array of one of those");
    out->raw_ids[i] = (int32_t)t->valuedouble;
  }
  out->n_raw_ids = n;
  return true;
}

static bool take_prompt(const cJSON *p, compat_request *out, api_error *e) {
  if (cJSON_IsString(p)) {
    out->raw_len = strlen(p->valuestring);
    if (!(out->raw_text = strdup(p->valuestring))) {
      api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
      return false;
    }
    if (!out->raw_len) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "prompt", "'prompt' is empty");
      return false;
    }
    return true;
  }
  if (cJSON_IsArray(p) && cJSON_IsNumber(p->child))
    return take_ids(p, out, e);
  if (cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child))) {
    if (cJSON_GetArraySize(p) != 1) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "prompt",
                    "'prompt' holds %d prompts; this server answers one prompt per request (send them separately)",
                    cJSON_GetArraySize(p));
      return false;
    }
    if (cJSON_IsArray(p->child) && !cJSON_IsNumber(p->child->child))
      return bad(e, "prompt", "must be a string, an array of token ids, or an array of one of those");
    return take_prompt(p->child, out, e);
  }
  if (!p || cJSON_IsNull(p)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "prompt", "'prompt' is required");
    return false;
  }
  return bad(e, "prompt", "must be a string, an array of token ids, or an array of one of those");
}

static const char *const passed[] = {"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
                                     "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
                                     "stop", "n", "logit_bias", "logprobs"};

bool completions_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e) {
  cmpl_state *st = compat_request_start(out, &completions_format, sizeof *st, e);
  if (!st)
    return false;
  api_random_id("cmpl-", st->id, sizeof st->id);
  snprintf(out->id, sizeof out->id, "%s", st->id);
  snprintf(st->model, sizeof st->model, "%s", ctx->model_id ? ctx->model_id : "qvl");
  st->created = ctx->created;
  st->stream_usage = ctx->stream_usage;
  cJSON *root = compat_parse_body(body, len, e);
  if (!root)
    return false;
  cJSON *chat = cJSON_CreateObject();
  bool ok = false;
  if (!compat_refuse_field(root, "suffix", true, "no fill-in-the-middle", e))
    goto done;
  const cJSON *bo = cJSON_GetObjectItemCaseSensitive(root, "best_of");
  if (bo && !cJSON_IsNull(bo) && !(cJSON_IsNumber(bo) && bo->valuedouble == 1)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "best_of", "'best_of' must be 1");
    goto done;
  }
  /* legacy logprobs is an integer (top-n); 0 asks for none */
  const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
  if (lp && !cJSON_IsNull(lp) && !(cJSON_IsNumber(lp) && lp->valuedouble == 0) && !cJSON_IsFalse(lp)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "logprobs",
                  "'logprobs' is not supported on /v1/completions yet");
    goto done;
  }
  bool echo = false;
  if (!api_get_bool(root, "echo", NULL, &echo, e))
    goto done;
  if (!take_prompt(cJSON_GetObjectItemCaseSensitive(root, "prompt"), out, e))
    goto done;
  out->raw = true;
  if (echo) {
    if (!out->raw_text) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "echo",
                    "'echo' works with a text prompt only (not token ids)");
      goto done;
    }
    st->echo = strdup(out->raw_text);
    st->echo_len = out->raw_len;
  }
  for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
    if (strcmp(passed[i], "logprobs"))
      compat_copy_field(chat, passed[i], root, passed[i]);
  if (!cJSON_GetObjectItemCaseSensitive(chat, "max_tokens"))
    cJSON_AddNumberToObject(chat, "max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS);
  const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
  if (cJSON_IsObject(so) && !api_get_bool(so, "include_usage", "stream_options.include_usage", &st->include_usage, e))
    goto done;
  /* The chat parser wants messages: a placeholder, never rendered (the engine takes the raw prompt). */
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddStringToObject(m, "content", "");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(chat, "messages"), m);
  ok = true;
done:
  return compat_finish(root, chat, ok, out, e);
}

static cJSON *base(const cmpl_state *st) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", st->id);
  cJSON_AddStringToObject(o, "object", "text_completion");
  cJSON_AddNumberToObject(o, "created", (double)st->created);
  cJSON_AddStringToObject(o, "model", st->model);
  cJSON_AddStringToObject(o, "system_fingerprint", "qvl-" QVL_VERSION);
  return o;
}

static void add_choice(cJSON *o, cJSON *text, const char *finish) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToObject(c, "text", text);
  cJSON_AddNumberToObject(c, "index", 0);
  cJSON_AddNullToObject(c, "logprobs");
  if (finish)
    cJSON_AddStringToObject(c, "finish_reason", finish);
  else
    cJSON_AddNullToObject(c, "finish_reason");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
}

static void add_usage(cJSON *o, const api_result *r) {
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", (double)r->completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", (double)(r->prompt_tokens + r->completion_tokens));
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                          (double)r->cached_prompt_tokens);
}

static char *result_json(void *state, const api_result *r) {
  cmpl_state *st = state;
  cJSON *o = base(st);
  buf b = {0};
  if (st->echo)
    buf_append(&b, st->echo, st->echo_len);
  buf_append(&b, r->text.data ? r->text.data : "", r->text.len);
  const char *fr = finish_openai(r->finish_reason);
  add_choice(o, api_text_json(b.data, b.len), fr ? fr : "stop");
  buf_free(&b);
  add_usage(o, r);
  return json_print_take(o);
}

static char *error_json(void *state, const api_error *e) {
  (void)state;
  return api_error_json(e);
}

static void append_chunk(buf *out, cJSON *o) {
  char *s = json_print_take(o);
  if (s)
    sse_append(out, s);
  free(s);
}

static void stream_text(void *state, buf *out, const char *text, size_t len) {
  cmpl_state *st = state;
  if (st->echo) { /* the prompt first, as its own chunk */
    cJSON *o = base(st);
    add_choice(o, api_text_json(st->echo, st->echo_len), NULL);
    append_chunk(out, o);
    free(st->echo);
    st->echo = NULL;
  }
  cJSON *o = base(st);
  add_choice(o, api_text_json(text, len), NULL);
  append_chunk(out, o);
}

static void stream_end(void *state, buf *out, const api_result *r) {
  cmpl_state *st = state;
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    char *j = api_error_json(&e);
    if (j)
      sse_append(out, j);
    free(j);
    sse_append_done(out);
    return;
  }
  if (st->echo)
    stream_text(state, out, "", 0);
  cJSON *o = base(st);
  const char *fr = finish_openai(r->finish_reason);
  add_choice(o, cJSON_CreateString(""), fr ? fr : "stop");
  if (!st->include_usage && st->stream_usage)
    add_usage(o, r);
  append_chunk(out, o);
  if (st->include_usage) {
    o = base(st);
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, r);
    append_chunk(out, o);
  }
  sse_append_done(out);
}

const compat_format completions_format = {
    .stream_content_type = "text/event-stream",
    .result_json = result_json,
    .error_json = error_json,
    .stream_text = stream_text,
    .stream_end = stream_end,
    .free_state = state_free,
};
