/* Ollama's API translated to and from the chat path (see ollama.h). */
#include "server/dialects/ollama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/finish.h"
#include "server/openai/json_print.h"
#include "server/openai/json_raw.h"

typedef struct ollama_state {
  bool generate;    /* /api/generate ("response") rather than /api/chat ("message") */
  char model[160];  /* the name the client used */
  bool hold_tools;  /* tools may be called: text that may begin a call is held (compat_hold) */
  compat_hold hold;
  buf sent;         /* the text streamed so far */
  bool logprobs;    /* "logprobs": true: the answer carries them (on the last line of a stream) */
} ollama_state;

static void state_free(void *p) {
  ollama_state *st = p;
  if (!st)
    return;
  compat_hold_free(&st->hold);
  buf_free(&st->sent);
  free(st);
}

/* Ollama's timestamps: RFC 3339 with nanoseconds, UTC. */
static void now_rfc3339(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, cap - n, ".%09ldZ", ts.tv_nsec);
}

static void unix_rfc3339(int64_t t, char *out, size_t cap) {
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static char *error_body(const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "error", msg);
  return json_print_take(o);
}

static bool bad(api_error *e, const char *param, const char *msg) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param, "%s: %s", param, msg);
  return false;
}

/* ---- request translation --------------------------------------------------------------------- */

/* A base64 image as Ollama sends it (no data: prefix) -> an image_url part. The type comes from the
 * first bytes; the decoder looks at the content anyway. */
static cJSON *image_part(const char *b64) {
  const char *mime = !strncmp(b64, "/9j/", 4)     ? "image/jpeg"
                     : !strncmp(b64, "UklGR", 5)  ? "image/webp"
                     : !strncmp(b64, "R0lGOD", 6) ? "image/gif"
                                                  : "image/png";
  bool is_url = !strncmp(b64, "data:", 5);
  size_t n = strlen(b64) + 40;
  char *url = malloc(n);
  if (!url)
    return NULL;
  if (is_url)
    snprintf(url, n, "%s", b64);
  else
    snprintf(url, n, "data:%s;base64,%s", mime, b64);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "type", "image_url");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "image_url"), "url", url);
  free(url);
  return p;
}

/* A chat message from role, text and an Ollama `images` array. */
static bool add_message(cJSON *msgs, const char *role, const char *text, const cJSON *images, const char *param,
                        api_error *e) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddItemToArray(msgs, m);
  cJSON_AddStringToObject(m, "role", role);
  if (!images || cJSON_IsNull(images) || (cJSON_IsArray(images) && !images->child)) {
    cJSON_AddStringToObject(m, "content", text);
    return true;
  }
  if (!cJSON_IsArray(images) || cJSON_GetArraySize(images) > OLLAMA_MAX_IMAGES_PER_MESSAGE)
    return bad(e, param, "'images' must be an array of base64 strings");
  cJSON *parts = cJSON_AddArrayToObject(m, "content");
  for (const cJSON *im = images->child; im; im = im->next) {
    if (!cJSON_IsString(im) || !im->valuestring[0])
      return bad(e, param, "'images' must be an array of base64 strings");
    cJSON *p = image_part(im->valuestring);
    if (!p) {
      api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
      return false;
    }
    cJSON_AddItemToArray(parts, p);
  }
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "type", "text");
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddItemToArray(parts, t);
  return true;
}

/* options -> chat sampling fields. */
static const char *const mapped_options[][2] = {
    {"temperature", "temperature"}, {"top_p", "top_p"},           {"top_k", "top_k"},
    {"min_p", "min_p"},             {"seed", "seed"},             {"stop", "stop"},
    {"repeat_penalty", "repetition_penalty"}, {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
};
/* Runtime settings of Ollama's llama.cpp runner: they change how it runs, not what it answers. */
static const char *const runtime_options[] = {"num_ctx",   "num_thread", "num_gpu",  "main_gpu",   "num_batch",
                                              "low_vram",  "use_mmap",   "use_mlock", "numa",      "num_keep",
                                              "vocab_only", "f16_kv",    "logits_all", "embedding_only"};
/* Sampling options qvl lacks, with the value that means "off". */
static const struct {
  const char *name;
  double neutral;
} neutral_options[] = {{"mirostat", 0}, {"mirostat_tau", 5}, {"mirostat_eta", 0.1}, {"typical_p", 1},
                       {"tfs_z", 1},    {"repeat_last_n", -1}, {"penalize_newline", 0}};

static bool translate_options(const cJSON *root, cJSON *chat, api_error *e) {
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(root, "options");
  if (!opts || cJSON_IsNull(opts))
    return true;
  if (!cJSON_IsObject(opts))
    return bad(e, "options", "'options' must be an object");
  for (const cJSON *o = opts->child; o; o = o->next) {
    const char *k = o->string;
    bool done = false;
    for (size_t i = 0; i < sizeof mapped_options / sizeof mapped_options[0] && !done; i++)
      if (!strcmp(k, mapped_options[i][0])) {
        compat_copy_field(chat, mapped_options[i][1], opts, k);
        done = true;
      }
    if (!done && !strcmp(k, "num_predict")) {
      /* -1: until the end (the server's cap), -2: fill the context (the same here) */
      if (!cJSON_IsNumber(o) || o->valuedouble != floor(o->valuedouble) || o->valuedouble < -2 || o->valuedouble == 0)
        return bad(e, "options.num_predict", "must be an integer >= 1, or -1 / -2");
      if (o->valuedouble > 0)
        compat_copy_field(chat, "max_tokens", opts, k);
      done = true;
    }
    for (size_t i = 0; i < sizeof runtime_options / sizeof runtime_options[0] && !done; i++)
      done = !strcmp(k, runtime_options[i]);
    for (size_t i = 0; i < sizeof neutral_options / sizeof neutral_options[0] && !done; i++)
      if (!strcmp(k, neutral_options[i].name)) {
        double v = cJSON_IsBool(o) ? (double)cJSON_IsTrue(o) : cJSON_IsNumber(o) ? o->valuedouble : NAN;
        if (!cJSON_IsNull(o) && v != neutral_options[i].neutral) {
          api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "options",
                        "options.%s is not supported (only its neutral value %g)", k, neutral_options[i].neutral);
          return false;
        }
        done = true;
      }
    if (!done) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "options", "options.%s is not supported",
                    k);
      return false;
    }
  }
  return true;
}

/* What /api/chat and /api/generate share: model, stream, options, format, keep_alive, think. */
/* "logprobs": true and "top_logprobs": 0..20 (alternatives per token; only with logprobs, as Ollama
 * has it) -> the chat's logprobs / top_logprobs. */
static bool translate_logprobs(const cJSON *root, cJSON *chat, ollama_state *st, api_error *e) {
  const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs"),
              *top = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
  if (lp && !cJSON_IsNull(lp) && !cJSON_IsBool(lp))
    return bad(e, "logprobs", "'logprobs' must be a boolean");
  if (top && !cJSON_IsNull(top) &&
      (!cJSON_IsNumber(top) || top->valuedouble != floor(top->valuedouble) || top->valuedouble < 0 || top->valuedouble > 20))
    return bad(e, "top_logprobs", "'top_logprobs' must be an integer from 0 to 20");
  if (!cJSON_IsTrue(lp))
    return true;
  st->logprobs = true;
  cJSON_AddBoolToObject(chat, "logprobs", true);
  if (cJSON_IsNumber(top) && top->valuedouble > 0)
    cJSON_AddNumberToObject(chat, "top_logprobs", top->valuedouble);
  return true;
}

static bool translate_common(const cJSON *root, const compat_ctx *ctx, cJSON *chat, ollama_state *st, api_error *e) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (cJSON_IsString(model)) {
    snprintf(st->model, sizeof st->model, "%s", model->valuestring);
    /* Ollama names carry a tag; ":latest" is what a bare name means */
    size_t n = strlen(model->valuestring);
    char name[160];
    snprintf(name, sizeof name, "%s", model->valuestring);
    if (n > 7 && n < sizeof name && !strcmp(name + n - 7, ":latest"))
      name[n - 7] = '\0';
    cJSON_AddStringToObject(chat, "model", name);
  } else if (model && !cJSON_IsNull(model)) {
    return bad(e, "model", "'model' must be a string");
  } else {
    snprintf(st->model, sizeof st->model, "%s", ctx->model_id ? ctx->model_id : "qvl");
  }
  bool stream = true; /* Ollama streams unless told not to */
  if (!api_get_bool(root, "stream", NULL, &stream, e))
    return false;
  cJSON_AddBoolToObject(chat, "stream", stream);
  /* think: false -> no reasoning (budget 0), true -> the default, "low" / "medium" / "high" -> the
   * chat's reasoning_effort (so it is not a plain boolean field; its type is checked first, alike
   * for every model). A model that does not reason refuses anything but false. */
  const cJSON *think = cJSON_GetObjectItemCaseSensitive(root, "think");
  bool think_level = cJSON_IsString(think) && (!strcmp(think->valuestring, "low") ||
                                               !strcmp(think->valuestring, "medium") ||
                                               !strcmp(think->valuestring, "high"));
  if (think && !cJSON_IsNull(think) && !cJSON_IsBool(think) && !think_level)
    return bad(e, "think", "'think' must be a boolean or one of \"low\", \"medium\", \"high\"");
  if (think && !cJSON_IsNull(think) && !cJSON_IsFalse(think) && !ctx->reasoning_model) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "think",
                  "'think' is not supported: the model does not think aloud");
    return false;
  }
  if (ctx->reasoning_model && think && !cJSON_IsNull(think)) {
    if (cJSON_IsFalse(think))
      cJSON_AddNumberToObject(chat, "max_reasoning_tokens", 0);
    else if (think_level)
      cJSON_AddStringToObject(chat, "reasoning_effort", think->valuestring);
  }
  const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (cJSON_IsString(format) && !strcmp(format->valuestring, "json")) {
    cJSON_AddStringToObject(cJSON_AddObjectToObject(chat, "response_format"), "type", "json_object");
  } else if (cJSON_IsObject(format)) {
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "format");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(format, true));
  } else if (format && !cJSON_IsNull(format) && !(cJSON_IsString(format) && !format->valuestring[0])) {
    return bad(e, "format", "'format' must be \"json\" or a JSON schema object");
  }
  return translate_logprobs(root, chat, st, e) && translate_options(root, chat, e); /* keep_alive: accepted */
}

/* An assistant message's Ollama tool_calls [{function: {name, arguments: {...}}}] -> the chat's
 * [{id, type, function: {name, arguments}}] (the arguments stay an object: the template renders them
 * as it would Ollama's). */
static bool translate_tool_calls(const cJSON *tc, int msg, cJSON *m, const char *param, api_error *e) {
  if (!cJSON_IsArray(tc))
    return bad(e, param, "'tool_calls' must be an array of {\"function\": {\"name\", \"arguments\"}}");
  cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
  int i = 0;
  for (const cJSON *c = tc->child; c; c = c->next, i++) {
    char what[96];
    snprintf(what, sizeof what, "tool_calls[%d]", i);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name"), *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (!cJSON_IsObject(c) || !cJSON_IsObject(f) || !cJSON_IsString(name) || !name->valuestring[0]) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                    "%s: %s must be {\"function\": {\"name\": \"...\", \"arguments\": {...}}}", param, what);
      return false;
    }
    if (args && !cJSON_IsNull(args) && !cJSON_IsObject(args)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param,
                    "%s: %s.function.arguments must be a JSON object", param, what);
      return false;
    }
    if (id && !cJSON_IsNull(id) && !cJSON_IsString(id)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param, "%s: %s.id must be a string", param, what);
      return false;
    }
    cJSON *out = cJSON_CreateObject();
    char gen[48];
    snprintf(gen, sizeof gen, "call_%d_%d", msg, i); /* Ollama's calls need no id; the chat's do */
    cJSON_AddStringToObject(out, "id", cJSON_IsString(id) && id->valuestring[0] ? id->valuestring : gen);
    cJSON_AddStringToObject(out, "type", "function");
    cJSON *of = cJSON_AddObjectToObject(out, "function");
    cJSON_AddStringToObject(of, "name", name->valuestring);
    cJSON_AddItemToObject(of, "arguments", cJSON_IsObject(args) ? cJSON_Duplicate(args, true) : cJSON_CreateObject());
    cJSON_AddItemToArray(calls, out);
  }
  if (!calls->child)
    cJSON_DeleteItemFromObjectCaseSensitive(m, "tool_calls");
  return true;
}

static ollama_state *new_state(compat_request *out, bool generate, api_error *e) {
  ollama_state *st = compat_request_start(out, &ollama_format, sizeof *st, e);
  if (!st)
    return NULL;
  st->generate = generate;
  api_random_id("ollama-", out->id, sizeof out->id);
  return st;
}

/* /api/chat's own fields into chat. */
static bool chat_fields(const cJSON *root, cJSON *chat, ollama_state *st, api_error *e) {
  compat_copy_field(chat, "tools", root, "tools");
  compat_copy_field(chat, "tool_choice", root, "tool_choice"); /* a qvl extension: Ollama has none */
  st->hold_tools = compat_tools_callable(chat);
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
  if (!cJSON_IsArray(msgs) || !msgs->child) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "missing_required_parameter", "messages",
                  "'messages' must be a non-empty array");
    return false;
  }
  cJSON *out_msgs = cJSON_AddArrayToObject(chat, "messages");
  int i = 0;
  for (const cJSON *m = msgs->child; m; m = m->next, i++) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d]", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role)) {
      bad(e, param, "'role' must be a string");
      return false;
    }
    if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
      bad(e, param, "'content' must be a string");
      return false;
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"),
                *tool_name = cJSON_GetObjectItemCaseSensitive(m, "tool_name"),
                *tcid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
    bool has_calls = tc && !cJSON_IsNull(tc) && !(cJSON_IsArray(tc) && !tc->child); /* [] on any role: none */
    if (has_calls && strcmp(role->valuestring, "assistant")) {
      bad(e, param, "only assistant messages carry 'tool_calls'");
      return false;
    }
    if ((tool_name && !cJSON_IsNull(tool_name) && !cJSON_IsString(tool_name)) ||
        (tcid && !cJSON_IsNull(tcid) && !cJSON_IsString(tcid))) {
      bad(e, param, "'tool_name' and 'tool_call_id' must be strings");
      return false;
    }
    if (!add_message(out_msgs, role->valuestring, cJSON_IsString(content) ? content->valuestring : "",
                     cJSON_GetObjectItemCaseSensitive(m, "images"), param, e))
      return false;
    cJSON *added = cJSON_GetArrayItem(out_msgs, i);
    const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(m, "thinking");
    if (cJSON_IsString(thinking) && !strcmp(role->valuestring, "assistant")) /* an earlier answer's reasoning */
      cJSON_AddStringToObject(added, "reasoning_content", thinking->valuestring);
    if (has_calls && !translate_tool_calls(tc, i, added, param, e))
      return false;
    if (!strcmp(role->valuestring, "tool") && cJSON_IsString(tcid))
      cJSON_AddStringToObject(added, "tool_call_id", tcid->valuestring);
  }
  return true;
}

/* /api/generate's own fields into chat, or (a load request) the answer itself in out->reply_body. */
static bool generate_fields(const cJSON *root, cJSON *chat, ollama_state *st, compat_request *out, api_error *e) {
  const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt"),
              *system = cJSON_GetObjectItemCaseSensitive(root, "system"),
              *images = cJSON_GetObjectItemCaseSensitive(root, "images");
  bool raw = false;
  if (!api_get_bool(root, "raw", NULL, &raw, e))
    return false;
  if ((prompt && !cJSON_IsNull(prompt) && !cJSON_IsString(prompt)) ||
      (system && !cJSON_IsNull(system) && !cJSON_IsString(system))) {
    bad(e, "prompt", "'prompt' and 'system' must be strings");
    return false;
  }
  const char *text = cJSON_IsString(prompt) ? prompt->valuestring : "";
  bool has_images = cJSON_IsArray(images) && images->child;
  if (!*text && !has_images) {
    /* Ollama's idiom for "load the model": nothing to generate, answered at once */
    char ts[48];
    now_rfc3339(ts, sizeof ts);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", st->model);
    cJSON_AddStringToObject(o, "created_at", ts);
    cJSON_AddStringToObject(o, "response", "");
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", "load");
    out->reply_body = cJSON_PrintUnformatted(o);
    out->reply_status = 200;
    cJSON_Delete(o);
    return out->reply_body != NULL;
  }
  if (raw) {
    if (has_images) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "raw",
                    "raw prompts cannot carry images (the template places them)");
      return false;
    }
    out->raw = true;
    out->raw_len = strlen(text);
    if (!(out->raw_text = strdup(text))) {
      api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
      return false;
    }
  }
  cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
  if (cJSON_IsString(system) && system->valuestring[0] && !out->raw)
    add_message(msgs, "system", system->valuestring, NULL, "system", e);
  if (!add_message(msgs, "user", out->raw ? "" : text, out->raw ? NULL : images, "images", e))
    return false;
  return true;
}

/* Fields of Ollama's /api/generate that qvl does not have. */
static const char *const generate_refused[][2] = {{"suffix", "no fill-in-the-middle"},
                                                  {"template", "the model's own chat template is used"},
                                                  {"context", "send the conversation to /api/chat instead"},
                                                  {"tools", "tool calls are answered by /api/chat"}};

static bool translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e,
                      bool generate) {
  ollama_state *st = new_state(out, generate, e);
  if (!st)
    return false;
  cJSON *root = compat_parse_body(body, len, e);
  if (!root)
    return false;
  cJSON *chat = cJSON_CreateObject();
  bool ok;
  if (generate)
    ok = compat_refuse_fields(root, generate_refused, sizeof generate_refused / sizeof generate_refused[0], e) &&
         translate_common(root, ctx, chat, st, e) && generate_fields(root, chat, st, out, e);
  else
    ok = translate_common(root, ctx, chat, st, e) && chat_fields(root, chat, st, e);
  return compat_finish(root, chat, ok, out, e);
}

bool ollama_chat_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out, api_error *e) {
  return translate(body, len, ctx, out, e, false);
}

bool ollama_generate_translate(const char *body, size_t len, const compat_ctx *ctx, compat_request *out,
                               api_error *e) {
  return translate(body, len, ctx, out, e, true);
}

/* ---- answers --------------------------------------------------------------------------------- */

/* An answer line; thinking (may be NULL) is the reasoning, on message.thinking (chat) or thinking
 * (generate) as Ollama puts it. */
static cJSON *answer_with(const ollama_state *st, const char *text, size_t len, const char *thinking, size_t n_thinking,
                          bool done);

static cJSON *answer(const ollama_state *st, const char *text, size_t len, bool done) {
  return answer_with(st, text, len, NULL, 0, done);
}

static cJSON *answer_with(const ollama_state *st, const char *text, size_t len, const char *thinking, size_t n_thinking,
                          bool done) {
  char ts[48];
  now_rfc3339(ts, sizeof ts);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", st->model);
  cJSON_AddStringToObject(o, "created_at", ts);
  if (st->generate) {
    cJSON_AddItemToObject(o, "response", api_text_json(text, len));
    if (thinking)
      cJSON_AddItemToObject(o, "thinking", api_text_json(thinking, n_thinking));
  } else {
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddItemToObject(m, "content", api_text_json(text, len));
    if (thinking)
      cJSON_AddItemToObject(m, "thinking", api_text_json(thinking, n_thinking));
  }
  cJSON_AddBoolToObject(o, "done", done);
  return o;
}

/* The chat's tool calls (id, type, function: {name, arguments as a JSON string}) in Ollama's shape
 * on the answer's message: [{id, function: {index, name, arguments: {...}}}]. */
static void add_tool_calls(cJSON *o, const cJSON *calls) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "message");
  if (!m || !calls)
    return;
  cJSON *out = cJSON_AddArrayToObject(m, "tool_calls");
  int i = 0;
  for (const cJSON *c = calls->child; c; c = c->next, i++) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name"), *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    cJSON *oc = cJSON_CreateObject();
    if (cJSON_IsString(id))
      cJSON_AddStringToObject(oc, "id", id->valuestring);
    cJSON *of = cJSON_AddObjectToObject(oc, "function");
    cJSON_AddNumberToObject(of, "index", i);
    cJSON_AddStringToObject(of, "name", cJSON_IsString(name) ? name->valuestring : "");
    /* The model's JSON as written: no number goes through a double (issue 22). */
    cJSON *raw = cJSON_IsString(args) ? json_raw_value(args->valuestring, strlen(args->valuestring), true) : NULL;
    cJSON_AddItemToObject(of, "arguments", raw ? raw : cJSON_CreateObject());
    cJSON_AddItemToArray(out, oc);
  }
}

/* The counts and durations (nanoseconds) of the last object. */
/* Ollama's done_reason: "length" at num_predict, else "stop" (as Ollama says for a finished turn). */
static const char *done_reason(qvl_finish f) {
  const char *w = finish_ollama(f);
  return w ? w : "stop";
}

static void add_stats(cJSON *o, const api_result *r) {
  cJSON_AddStringToObject(o, "done_reason", done_reason(r->finish_reason));
  const engine_timings *t = &r->t;
  double total_ms = t->queue_ms + t->preprocess_ms + t->vision_ms + t->prefill_ms + t->decode_ms;
  cJSON_AddNumberToObject(o, "total_duration", floor(total_ms * 1e6));
  cJSON_AddNumberToObject(o, "load_duration", 0);
  cJSON_AddNumberToObject(o, "prompt_eval_count", (double)r->prompt_tokens);
  cJSON_AddNumberToObject(o, "prompt_eval_duration", floor((t->preprocess_ms + t->vision_ms + t->prefill_ms) * 1e6));
  cJSON_AddNumberToObject(o, "eval_count", (double)r->completion_tokens);
  cJSON_AddNumberToObject(o, "eval_duration", floor(t->decode_ms * 1e6));
}

/* The chat's logprobs entries ({token, logprob, bytes, top_logprobs}) are Ollama's Logprob shape;
 * top_logprobs is left out when none were asked for, as Ollama omits it. */
static void add_logprobs(cJSON *o, const ollama_state *st, const cJSON *choice) {
  const cJSON *lp = st->logprobs ? compat_choice_logprobs(choice) : NULL;
  if (!lp)
    return;
  cJSON *out = cJSON_AddArrayToObject(o, "logprobs");
  for (const cJSON *t = lp->child; t; t = t->next) {
    cJSON *d = cJSON_Duplicate(t, true);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(d, "top_logprobs");
    if (!cJSON_IsArray(top) || !top->child)
      cJSON_DeleteItemFromObjectCaseSensitive(d, "top_logprobs");
    cJSON_AddItemToArray(out, d);
  }
}

static char *result_json(void *state, const api_result *r) {
  ollama_state *st = state;
  const char *th = r->reasoning.len ? r->reasoning.data : NULL;
  if (!st->hold_tools) {
    cJSON *o = answer_with(st, r->text.data, r->text.len, th, r->reasoning.len, true);
    if (st->logprobs) {
      cJSON *choice = compat_chat_choice(r);
      add_logprobs(o, st, choice);
      cJSON_Delete(choice);
    }
    add_stats(o, r);
    return json_print_take(o);
  }
  /* with tools: the text before the calls as content, the calls as message.tool_calls (Ollama keeps
   * done_reason "stop" for them) */
  cJSON *choice = compat_chat_choice(r);
  const char *text = compat_choice_content(choice);
  cJSON *o = answer_with(st, text, strlen(text), th, r->reasoning.len, true);
  add_tool_calls(o, compat_choice_tool_calls(choice));
  add_logprobs(o, st, choice);
  add_stats(o, r);
  cJSON_Delete(choice);
  return json_print_take(o);
}

static char *error_json(void *state, const api_error *e) {
  (void)state;
  return error_body(e->message);
}

static void append_line(buf *out, char *json) {
  if (!json)
    return;
  buf_append_str(out, json);
  buf_append_str(out, "\n");
  free(json);
}

static void stream_text(void *state, buf *out, const char *text, size_t len) {
  ollama_state *st = state;
  if (st->hold_tools) {
    compat_hold_push(&st->hold, text, len, &text, &len);
    if (!len)
      return;
    buf_append(&st->sent, text, len);
  }
  append_line(out, json_print_take(answer(st, text, len, false)));
}

static void stream_thinking(void *state, buf *out, const char *text, size_t len) {
  ollama_state *st = state;
  append_line(out, json_print_take(answer_with(st, "", 0, text, len, false)));
}

static void stream_end(void *state, buf *out, const api_result *r) {
  ollama_state *st = state;
  if (r->status != QVL_OK) {
    api_error e;
    api_error_from_status(&e, r->status, r->error);
    append_line(out, error_body(e.message));
    return;
  }
  if (st->hold_tools) {
    /* what the hold kept back, then the calls in a line of their own, as Ollama streams them */
    cJSON *choice = compat_chat_choice(r);
    const char *rest = compat_unsent(compat_choice_content(choice), &st->sent);
    if (*rest)
      append_line(out, json_print_take(answer(st, rest, strlen(rest), false)));
    const cJSON *calls = compat_choice_tool_calls(choice);
    if (calls) {
      cJSON *o = answer(st, "", 0, false);
      add_tool_calls(o, calls);
      append_line(out, json_print_take(o));
    }
    cJSON_Delete(choice);
  }
  cJSON *o = answer(st, "", 0, true);
  if (st->logprobs) { /* known at the end: all of them on the last line */
    cJSON *choice = compat_chat_choice(r);
    add_logprobs(o, st, choice);
    cJSON_Delete(choice);
  }
  add_stats(o, r);
  append_line(out, json_print_take(o));
}

const compat_format ollama_format = {
    .stream_content_type = "application/x-ndjson",
    .result_json = result_json,
    .error_json = error_json,
    .stream_text = stream_text,
    .stream_reasoning = stream_thinking,
    .stream_end = stream_end,
    .free_state = state_free,
};

/* ---- the model endpoints ---------------------------------------------------------------------- */

static cJSON *details(void) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "parent_model", "");
  cJSON_AddStringToObject(d, "format", "gguf");
  cJSON_AddStringToObject(d, "family", "qwen3vl");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "families"), cJSON_CreateString("qwen3vl"));
  cJSON_AddStringToObject(d, "parameter_size", "");
  cJSON_AddStringToObject(d, "quantization_level", "");
  return d;
}

static cJSON *model_entry(const compat_ctx *ctx, bool running) {
  char ts[48];
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "name", ctx->model_id);
  cJSON_AddStringToObject(m, "model", ctx->model_id);
  if (running) {
    /* loaded for the life of the process: expires_at is far away */
    unix_rfc3339(ctx->created + 10 * 365 * 86400LL, ts, sizeof ts);
    cJSON_AddNumberToObject(m, "size", 0);
    cJSON_AddStringToObject(m, "digest", "");
    cJSON_AddItemToObject(m, "details", details());
    cJSON_AddStringToObject(m, "expires_at", ts);
    cJSON_AddNumberToObject(m, "size_vram", 0);
  } else {
    unix_rfc3339(ctx->started, ts, sizeof ts);
    cJSON_AddStringToObject(m, "modified_at", ts);
    cJSON_AddNumberToObject(m, "size", 0);
    cJSON_AddStringToObject(m, "digest", "");
    cJSON_AddItemToObject(m, "details", details());
  }
  return m;
}

static char *fail(int *status, int http, const char *msg) {
  *status = http;
  return error_body(msg);
}

/* The model named in a /api/show body is the loaded one (a bare name or NAME:latest). */
static bool names_our_model(const cJSON *root, const compat_ctx *ctx, char *name, size_t cap) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsString(m))
    m = cJSON_GetObjectItemCaseSensitive(root, "name"); /* the older field */
  snprintf(name, cap, "%s", cJSON_IsString(m) ? m->valuestring : "");
  size_t n = strlen(name);
  if (n > 7 && !strcmp(name + n - 7, ":latest"))
    name[n - 7] = '\0';
  return !strcmp(name, ctx->model_id) || !strcmp(name, "qvl");
}

char *ollama_info(const char *path, const char *method, const char *body, size_t len, const compat_ctx *ctx,
                  int *status, const char **allow) {
  *allow = NULL;
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
  if (!strcmp(path, "/api/version")) {
    if (!get)
      return *allow = "GET, HEAD", fail(status, 405, "method not allowed");
    *status = 200;
    return strdup("{\"version\":\"" OLLAMA_API_VERSION "\"}");
  }
  static const char *const unsupported[] = {"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"};
  for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
    if (!strcmp(path, unsupported[i])) {
      char msg[256];
      snprintf(msg, sizeof msg,
               "%s is not supported: qvl serves the one model it was started with (qvl serve -m MODEL.gguf or --hf REPO)",
               path + 5);
      return fail(status, 501, msg);
    }
  if (!strcmp(path, "/api/embed") || !strcmp(path, "/api/embeddings"))
    return fail(status, 501, "embeddings are not supported: qvl serves a generative model only");
  if (!strncmp(path, "/api/blobs/", 11))
    return fail(status, 501, "blobs are not supported: qvl does not create or import models");
  bool tags = !strcmp(path, "/api/tags"), ps = !strcmp(path, "/api/ps"), show = !strcmp(path, "/api/show");
  bool gen = !strcmp(path, "/api/chat") || !strcmp(path, "/api/generate");
  if (!tags && !ps && !show && !gen)
    return fail(status, qvl_status_http(QVL_ERR_NOT_FOUND), "no such endpoint of the Ollama API");
  if (gen || show ? !post : !get)
    return *allow = gen || show ? "POST" : "GET, HEAD", fail(status, 405, "method not allowed");
  if (!ctx->model_id)
    return fail(status, qvl_status_http(QVL_ERR_BUSY), "the model is still loading; retry in a few seconds");
  if (show) {
    api_error e;
    cJSON *root = compat_parse_body(body, len, &e);
    if (!root)
      return fail(status, qvl_status_http(QVL_ERR_INVALID_ARG), e.message);
    char name[160];
    bool ours = names_our_model(root, ctx, name, sizeof name);
    cJSON_Delete(root);
    if (!ours) {
      char msg[256];
      snprintf(msg, sizeof msg, "model '%s' not found (this server serves '%s')", name, ctx->model_id);
      return fail(status, qvl_status_http(QVL_ERR_NOT_FOUND), msg);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "license", "");
    cJSON_AddStringToObject(o, "modelfile", "");
    cJSON_AddStringToObject(o, "parameters", "");
    cJSON_AddStringToObject(o, "template", "");
    cJSON_AddItemToObject(o, "details", details());
    cJSON *mi = cJSON_AddObjectToObject(o, "model_info");
    cJSON_AddStringToObject(mi, "general.architecture", "qwen3vl");
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("vision"));
    if (ctx->reasoning_model)
      cJSON_AddItemToArray(caps, cJSON_CreateString("thinking"));
    char ts[48];
    unix_rfc3339(ctx->started, ts, sizeof ts);
    cJSON_AddStringToObject(o, "modified_at", ts);
    *status = 200;
    return json_print_take(o);
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), model_entry(ctx, ps));
  *status = 200;
  return json_print_take(o);
}
