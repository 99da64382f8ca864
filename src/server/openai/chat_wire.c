/* The OpenAI chat API as JSON (see chat_wire.h). */
#include "server/openai/chat_wire.h"
#include "server/openai/json_field.h"
#include "server/openai/video_wire.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/status.h"
#include "engine/model_sampling.h"
#include "server/openai/client_fields.h"
#include "server/openai/history_field.h"
#include "server/openai/json_print.h"
#include "server/openai/reasoning_field.h"
#include "text/sampler.h"
#include "text/unicode.h"

/* ---- request parsing ------------------------------------------------------------------------- */

static int json_depth(const cJSON *j, int depth) {
  int worst = depth;
  for (const cJSON *c = j->child; c; c = c->next) {
    int d = json_depth(c, depth + 1);
    if (d > worst)
      worst = d;
    if (worst > API_MAX_JSON_DEPTH)
      break;
  }
  return worst;
}

static bool bad_type(api_error *e, const char *param, const char *expected, const cJSON *found) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "'%s' must be %s, got %s", param, expected,
                json_type_name(found));
  return false;
}

/* Present and not null (OpenAI clients send null for "not set"). */
static const cJSON *field(const cJSON *root, const char *name) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  return j && !cJSON_IsNull(j) ? j : NULL;
}

/* *out = field(root, name); false (e filled) when it is there but not of the type `is` checks. */
static bool typed_field(const cJSON *root, const char *name, cJSON_bool (*is)(const cJSON *), const char *expected,
                        const cJSON **out, api_error *e) {
  *out = field(root, name);
  return !*out || is(*out) || bad_type(e, name, expected, *out);
}

static bool get_number(const cJSON *root, const char *name, double lo, double hi, double *out, api_error *e) {
  const cJSON *j = field(root, name);
  if (!j)
    return true;
  if (!cJSON_IsNumber(j))
    return bad_type(e, name, "a number", j);
  double v = j->valuedouble;
  if (!isfinite(v) || v < lo || v > hi) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", name, "'%s' is %g; expected a number in [%g, %g]",
                  name, v, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

static bool get_int(const cJSON *root, const char *name, double lo, double hi, int64_t *out, api_error *e) {
  const cJSON *j = field(root, name);
  if (!j)
    return true;
  if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble))
    return bad_type(e, name, "an integer", j);
  double v = j->valuedouble;
  if (v < lo || v > hi) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", name, "'%s' is %.17g; expected an integer in [%.17g, %.17g]",
                  name, v, lo, hi);
    return false;
  }
  *out = (int64_t)v;
  return true;
}

static bool get_bool(const cJSON *root, const char *name, bool *out, api_error *e) {
  return api_get_bool(root, name, NULL, out, e);
}

/* item[key], where item must be an object and item[key] a string; NULL with e filled (naming param)
 * otherwise. */
static const cJSON *string_member(const cJSON *item, const char *param, const char *key, api_error *e) {
  if (!cJSON_IsObject(item)) {
    bad_type(e, param, "an object", item);
    return NULL;
  }
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, key);
  if (!cJSON_IsString(v)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "%s: '%s' must be a string", param, key);
    return NULL;
  }
  return v;
}

static bool check_content_part(const cJSON *part, int mi, int pi, int *n_images, int *n_videos, api_error *e) {
  char param[64];
  snprintf(param, sizeof param, "messages[%d].content[%d]", mi, pi);
  const cJSON *type = string_member(part, param, "type", e);
  if (!type)
    return false;
  if (!strcmp(type->valuestring, "text")) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(t)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "%s: a text part needs 'text' as a string",
                    param);
      return false;
    }
    return true;
  }
  if (!strcmp(type->valuestring, "image_url") || !strcmp(type->valuestring, "image")) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, type->valuestring);
    const cJSON *url = cJSON_IsObject(iu) ? cJSON_GetObjectItemCaseSensitive(iu, "url") : iu;
    if (!cJSON_IsString(url) || !url->valuestring[0]) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param,
                    "%s: an image_url part needs 'image_url' as {\"url\": \"data:image/png;base64,...\"} or a "
                    "URL string",
                    param);
      return false;
    }
    if (cJSON_IsObject(iu)) {
      const cJSON *detail = cJSON_GetObjectItemCaseSensitive(iu, "detail");
      if (detail && !cJSON_IsNull(detail) && !cJSON_IsString(detail)) {
        api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "%s: 'detail' must be a string", param);
        return false;
      }
    }
    (*n_images)++;
    return true;
  }
  if (api_is_video_part(type->valuestring)) { /* video_wire.h */
    if (!api_video_part_check((cJSON *)part, type->valuestring, param, e))
      return false;
    (*n_videos)++;
    return true;
  }
  if (!strcmp(type->valuestring, "file")) { /* LlamaIndex's image part (client_fields.h) */
    if (!api_file_part_to_image((cJSON *)part, param, e))
      return false;
    (*n_images)++;
    return true;
  }
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                "%s: unsupported content part type '%s' (supported: text, image_url, video_url)", param, type->valuestring);
  return false;
}

static bool check_messages(const cJSON *msgs, int *n_images, int *n_videos, api_error *e) {
  if (!msgs) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "messages",
                  "'messages' is required");
    return false;
  }
  if (!cJSON_IsArray(msgs))
    return bad_type(e, "messages", "an array", msgs);
  if (cJSON_GetArraySize(msgs) == 0) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "messages", "'messages' is empty");
    return false;
  }
  int mi = 0;
  for (const cJSON *m = msgs->child; m; m = m->next, mi++) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", mi);
    const cJSON *role = string_member(m, param, "role", e);
    if (!role)
      return false;
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    bool known = false;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
      known |= !strcmp(role->valuestring, roles[i]);
    if (!known) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                    "%s: unknown role '%s' (expected system, user, assistant or tool)", param, role->valuestring);
      return false;
    }
    /* OpenAI's newer name for system instructions; the Qwen template knows only "system" */
    if (!strcmp(role->valuestring, "developer") && !cJSON_SetValuestring((cJSON *)role, "system")) {
      api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
      return false;
    }
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    snprintf(param, sizeof param, "messages[%d].content", mi);
    if (!content || cJSON_IsNull(content)) {
      if (strcmp(role->valuestring, "assistant")) {
        api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", param,
                      "%s is required for the %s role", param, role->valuestring);
        return false;
      }
    } else if (cJSON_IsArray(content)) {
      int pi = 0;
      for (const cJSON *part = content->child; part; part = part->next, pi++)
        if (!check_content_part(part, mi, pi, n_images, n_videos, e))
          return false;
    } else if (!cJSON_IsString(content)) {
      return bad_type(e, param, "a string or an array of content parts", content);
    }
  }
  return true;
}

static uint64_t random_u64(void) {
  uint64_t x = 0;
  if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
  }
  return x;
}

bool api_chat_parse(const char *body, size_t len, const api_limits *lim, api_chat_request *out, api_error *e) {
  memset(out, 0, sizeof *out);
  const char *end = NULL;
  bool nomem = false;
  char *nul_free = api_json_nul_escapes(body, len, &nomem);
  if (nomem) {
    api_error_status(e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
    return false;
  }
  const char *orig = body;
  if (nul_free)
    body = nul_free;
  cJSON *root = len ? cJSON_ParseWithLengthOpts(body, len, &end, false) : NULL;
  if (nul_free && end)
    end = orig + (end - body); /* the position in the caller's bytes */
  free(nul_free);
  body = orig;
  if (!root) {
    size_t at = end ? (size_t)(end - body) : (cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - body) : 0);
    if (at > len)
      at = len;
    if (len)
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL,
                    "the request body is not valid JSON (error near byte %zu)", at);
    else
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body is empty");
    return false;
  }
  out->root = root;
  for (size_t i = (size_t)(end - body); i < len; i++) {
    if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n') {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL,
                    "the request body has extra data after the JSON value (byte %zu)", i);
      goto fail;
    }
  }
  if (!cJSON_IsObject(root)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body must be a JSON object, got %s",
                  json_type_name(root));
    goto fail;
  }
  if (json_depth(root, 0) > API_MAX_JSON_DEPTH) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_json", NULL, "the request body nests deeper than %d levels",
                  API_MAX_JSON_DEPTH);
    goto fail;
  }

  const cJSON *model;
  if (!typed_field(root, "model", cJSON_IsString, "a string", &model, e))
    goto fail;
  if (model) {
    bool ok = false;
    for (int i = 0; i < lim->n_model_ids && !ok; i++)
      ok = !strcmp(model->valuestring, lim->model_ids[i]);
    if (!ok) {
      api_error_status(e, QVL_ERR_NOT_FOUND, "model_not_found", "model",
                    "The model '%s' does not exist; this server serves '%s' (GET /v1/models)", model->valuestring,
                    lim->n_model_ids ? lim->model_ids[0] : "");
      goto fail;
    }
    out->model = model->valuestring;
  }

  out->messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
  if (!check_messages(out->messages, &out->n_images, &out->n_videos, e))
    goto fail;
  if (lim->max_videos > 0 && out->n_videos > lim->max_videos) {
    api_error_status(e, QVL_ERR_TOO_LARGE, "too_many_videos", "messages",
                     "the request has %d videos; this server accepts at most %d per request (--max-videos)",
                     out->n_videos, lim->max_videos);
    goto fail;
  }
  if (!api_video_parse(root, lim, &out->video, e))
    goto fail;
  if (lim->max_images >= 0 && out->n_images > lim->max_images) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "too_many_images", "messages",
                  "the request has %d images; this server accepts at most %d per request", out->n_images,
                  lim->max_images);
    goto fail;
  }

  if (!get_bool(root, "stream", &out->stream, e))
    goto fail;
  const cJSON *so;
  if (!typed_field(root, "stream_options", cJSON_IsObject, "an object", &so, e))
    goto fail;
  if (so) {
    if (!get_bool(so, "include_usage", &out->include_usage, e))
      goto fail;
  }

  int64_t n = 1;
  if (!get_int(root, "n", 1, 128, &n, e))
    goto fail;
  if (n != 1) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "n", "'n' must be 1 (got %lld): one choice per request",
                  (long long)n);
    goto fail;
  }
  /* tools, tool_choice, functions, response_format, logprobs (agents.c) */
  if (!api_agents_parse(root, &out->agent, &out->tools, &out->grammar, e))
    goto fail;
  out->agent.boxes = lim->boxes; /* "boxes": grounding answers in pixels (boxes.h) */
  if (!get_bool(root, "boxes", &out->agent.boxes, e))
    goto fail;

  /* Sampling: absent fields take the model's recommended settings (engine/model_sampling.h). */
  gen_params *g = &out->gen;
  *g = gen_params_default();
  sampler_params *sp = &g->sampling;
  const sampler_params def = lim->sampling ? *lim->sampling : model_sampling_qwen3vl();
  double temperature = def.temperature, top_p = def.top_p, min_p = def.min_p, presence = def.presence_penalty,
         frequency = def.frequency_penalty, repetition = def.repetition_penalty;
  int64_t top_k = def.top_k, seed = 0;
  bool seeded = field(root, "seed") != NULL;
  if (!get_number(root, "temperature", 0, 2, &temperature, e) || !get_number(root, "top_p", 0, 1, &top_p, e) ||
      !get_int(root, "top_k", -1, 1 << 30, &top_k, e) || !get_number(root, "min_p", 0, 1, &min_p, e) ||
      !get_number(root, "presence_penalty", -2, 2, &presence, e) ||
      !get_number(root, "frequency_penalty", -2, 2, &frequency, e) ||
      !get_number(root, "repetition_penalty", 1e-3, 100, &repetition, e) ||
      !get_int(root, "seed", -9223372036854775807.0, 9223372036854775807.0, &seed, e))
    goto fail;
  sp->temperature = (float)temperature;
  sp->top_p = (float)top_p;
  sp->top_k = (int32_t)(top_k < 0 ? 0 : top_k);
  sp->min_p = (float)min_p;
  sp->presence_penalty = (float)presence;
  sp->frequency_penalty = (float)frequency;
  sp->repetition_penalty = (float)repetition;
  sp->seed = seeded ? (uint64_t)seed : random_u64();
  if (!api_parse_logit_bias(root, sp, e) || !api_refuse_unhonoured(root, e))
    goto fail;
  if (!api_reasoning_parse(root, lim->reasoning_model, lim->reasoning_budget, &g->reasoning_budget, e))
    goto fail;
  if (sampler_check_params(sp) != QVL_OK) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", NULL, "%s", qvl_last_error());
    goto fail;
  }

  int64_t max_tokens = lim->max_tokens;
  const char *mt_name = field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!get_int(root, mt_name, 1, 1e15, &max_tokens, e))
    goto fail;
  /* Above the cap: served up to the cap, finish_reason "length" says where it stopped. */
  g->max_tokens = max_tokens < lim->max_tokens ? max_tokens : lim->max_tokens;

  const cJSON *stop = field(root, "stop");
  if (stop) {
    if (cJSON_IsString(stop)) {
      if (stop->valuestring[0])
        out->stops[g->n_stop++] = stop->valuestring;
    } else if (cJSON_IsArray(stop)) {
      if (cJSON_GetArraySize(stop) > API_MAX_STOP) {
        api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "stop", "'stop' has %d strings; at most %d",
                      cJSON_GetArraySize(stop), API_MAX_STOP);
        goto fail;
      }
      for (const cJSON *s = stop->child; s; s = s->next) {
        if (!cJSON_IsString(s)) {
          bad_type(e, "stop", "a string or an array of strings", s);
          goto fail;
        }
        if (s->valuestring[0])
          out->stops[g->n_stop++] = s->valuestring;
      }
    } else {
      bad_type(e, "stop", "a string or an array of strings", stop);
      goto fail;
    }
  }
  g->stop = out->stops;

  /* The vision tower's precision tier: only the loaded one can be served (one prepared weight copy). */
  const cJSON *prec = field(root, "precision");
  if (prec && !cJSON_IsNull(prec)) {
    if (!cJSON_IsString(prec) || (strcmp(prec->valuestring, "exact") && strcmp(prec->valuestring, "fast"))) {
      api_error_set(e, 400, "invalid_request_error", "invalid_value", "precision",
                    "'precision' must be \"exact\" or \"fast\"");
      goto fail;
    }
    if (lim->vision_precision && strcmp(prec->valuestring, lim->vision_precision)) {
      api_error_set(e, 400, "invalid_request_error", "unsupported_value", "precision",
                    "precision \"%s\" is not available: this server's vision tower is loaded in the \"%s\" tier "
                    "(start it with --precision %s to serve that tier)",
                    prec->valuestring, lim->vision_precision, prec->valuestring);
      goto fail;
    }
  }

  out->min_pixels = lim->default_min_pixels;
  out->max_pixels = lim->default_max_pixels;
  if (!get_int(root, "max_pixels", 1024, (double)lim->max_pixels, &out->max_pixels, e) ||
      !get_int(root, "min_pixels", 1024, (double)lim->max_pixels, &out->min_pixels, e))
    goto fail;
  if (out->min_pixels > out->max_pixels) {
    if (field(root, "min_pixels")) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "min_pixels",
                    "min_pixels %lld is larger than max_pixels %lld", (long long)out->min_pixels,
                    (long long)out->max_pixels);
      goto fail;
    }
    out->min_pixels = out->max_pixels; /* a low max_pixels lowers the default minimum */
  }
  return true;
fail:
  api_chat_request_free(out); /* out->root is root */
  return false;
}

void api_chat_request_free(api_chat_request *r) {
  if (!r)
    return;
  grammar_free(r->grammar);
  cJSON_Delete(r->root);
  memset(r, 0, sizeof *r);
}

/* ---- responses ---------------------------------------------------------------------------------- */

static void add_usage(cJSON *o, const api_result *r) {
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", (double)r->completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", (double)(r->prompt_tokens + r->completion_tokens));
  cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
  cJSON_AddNumberToObject(d, "cached_tokens", (double)r->cached_prompt_tokens);
  if (r->reasoning_tokens > 0)
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "completion_tokens_details"), "reasoning_tokens",
                            (double)r->reasoning_tokens);
  chat_history_add_usage(u, &r->history);
  cJSON *t = cJSON_AddObjectToObject(o, "timings");
  cJSON_AddNumberToObject(t, "ttft_ms", r->t.ttft_ms);
  cJSON_AddNumberToObject(t, "prefill_tok_s", r->t.prefill_tok_s);
  cJSON_AddNumberToObject(t, "decode_tok_s", r->t.decode_tok_s);
  cJSON_AddNumberToObject(t, "image_tokens", (double)r->image_tokens);
  cJSON_AddBoolToObject(t, "image_cache_hit", r->image_cache_hits > 0 && r->image_cache_misses == 0);
  cJSON_AddBoolToObject(t, "prefix_cache_hit", r->cached_prompt_tokens > 0);
  cJSON_AddNumberToObject(t, "cached_prompt_tokens", (double)r->cached_prompt_tokens);
  cJSON_AddNumberToObject(t, "queue_ms", r->t.queue_ms);
  cJSON_AddNumberToObject(t, "prompt_ms", r->t.prompt_ms);
  cJSON_AddNumberToObject(t, "setup_ms", r->t.setup_ms);
  cJSON_AddNumberToObject(t, "preprocess_ms", r->t.preprocess_ms);
  cJSON_AddNumberToObject(t, "vision_ms", r->t.vision_ms);
  cJSON_AddNumberToObject(t, "prefill_ms", r->t.prefill_ms);
  cJSON_AddNumberToObject(t, "decode_ms", r->t.decode_ms);
}

static cJSON *base_object(const char *id, const char *object, int64_t created, const char *model) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "object", object);
  cJSON_AddNumberToObject(o, "created", (double)created);
  cJSON_AddStringToObject(o, "model", model);
  cJSON_AddStringToObject(o, "system_fingerprint", "qvl-" QVL_VERSION);
  return o;
}

/* Generated text is bytes (byte-level BPE): a random or confused model can produce ill-formed
 * UTF-8, which strict JSON parsers (Python's) reject. Each maximal ill-formed subsequence becomes
 * one U+FFFD, exactly as Python's bytes.decode("utf-8", errors="replace") that transformers uses.
 * NUL also becomes U+FFFD: cJSON strings are NUL-terminated. */
static cJSON *string_n(const char *s, size_t n) {
  buf b = {0};
  utf8_append_lossy_nonul(&b, s, n);
  cJSON *j = cJSON_CreateString(b.data ? b.data : "");
  buf_free(&b);
  return j;
}

/* A JSON string of generated bytes, ill-formed UTF-8 replaced (for the other APIs' formatters). */
cJSON *api_text_json(const char *s, size_t n) { return string_n(s ? s : "", s ? n : 0); }

cJSON *api_completion_object(const char *id, int64_t created, const char *model, const api_result *r) {
  cJSON *o = base_object(id, "chat.completion", created, model);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "index", 0);
  cJSON *m = cJSON_AddObjectToObject(c, "message");
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON_AddItemToObject(m, "content", string_n(r->text.data ? r->text.data : "", r->text.len));
  if (r->reasoning.len)
    cJSON_AddItemToObject(m, "reasoning_content", string_n(r->reasoning.data, r->reasoning.len));
  cJSON_AddNullToObject(m, "refusal");
  cJSON_AddNullToObject(c, "logprobs");
  const char *fr = finish_openai(r->finish_reason);
  cJSON_AddStringToObject(c, "finish_reason", fr ? fr : "stop");
  api_agents_decorate(c, r);
  cJSON_AddItemToArray(choices, c);
  add_usage(o, r);
  return o;
}

char *api_completion_json(const char *id, int64_t created, const char *model, const api_result *r) {
  cJSON *o = api_completion_object(id, created, model, r);
  return json_print_take(o);
}

/* A chunk of one choice whose delta carries text under key (none when text is NULL). */
static char *delta_chunk_json(const char *id, int64_t created, const char *model, bool role, const char *key,
                              const char *text, size_t len, const char *finish_reason) {
  cJSON *o = base_object(id, "chat.completion.chunk", created, model);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "index", 0);
  cJSON *d = cJSON_AddObjectToObject(c, "delta");
  if (role)
    cJSON_AddStringToObject(d, "role", "assistant");
  if (text)
    cJSON_AddItemToObject(d, key, string_n(text, len));
  cJSON_AddNullToObject(c, "logprobs");
  if (finish_reason)
    cJSON_AddStringToObject(c, "finish_reason", finish_reason);
  else
    cJSON_AddNullToObject(c, "finish_reason");
  cJSON_AddItemToArray(choices, c);
  return json_print_take(o);
}

char *api_chunk_json(const char *id, int64_t created, const char *model, bool role, const char *content,
                     size_t content_len, const char *finish_reason) {
  return delta_chunk_json(id, created, model, role, "content", content, content_len, finish_reason);
}

char *api_reasoning_chunk_json(const char *id, int64_t created, const char *model, bool role, const char *text,
                               size_t len) {
  return delta_chunk_json(id, created, model, role, "reasoning_content", text ? text : "", len, NULL);
}

char *api_usage_chunk_json(const char *id, int64_t created, const char *model, const api_result *r) {
  cJSON *o = base_object(id, "chat.completion.chunk", created, model);
  cJSON_AddArrayToObject(o, "choices");
  add_usage(o, r);
  return json_print_take(o);
}

void api_random_id(const char *prefix, char *out, size_t cap) {
  uint64_t a = random_u64(), b = random_u64();
  snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}
