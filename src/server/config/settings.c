/* Settings of `qvl serve` from defaults, a YAML file, the environment and flags (see config.h). */
#include "server/config/settings.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/buf.h"
#include "base/status.h"
#include "image/preprocess.h"
#include "server/config/config_files.h"

typedef enum setting_kind { SETTING_STR, SETTING_INT, SETTING_BOOL, SETTING_LIST } setting_kind;

typedef struct setting {
  const char *key;   /* YAML key; flag = "--" + key with '-' for '_'; env = "QVL_" + KEY */
  const char *short_flag;
  setting_kind kind;
  size_t off;        /* field in server_config */
  size_t count_off;  /* SETTING_LIST: the int count field */
  int64_t min, max;  /* SETTING_INT */
  const char *help;
} setting;

#define S_STR(key, field, shortf, help) {key, shortf, SETTING_STR, offsetof(server_config, field), 0, 0, 0, help}
#define S_INT(key, field, mn, mx, help) {key, NULL, SETTING_INT, offsetof(server_config, field), 0, mn, mx, help}
#define S_BOOL(key, field, help) {key, NULL, SETTING_BOOL, offsetof(server_config, field), 0, 0, 0, help}
#define S_LIST(key, field, help) \
  {key, NULL, SETTING_LIST, offsetof(server_config, field), offsetof(server_config, n_##field), 0, 0, help}

static const setting settings[] = {
    S_STR("config", config, NULL, "YAML file with any of these settings (keys as below, '_' for '-')"),
    S_STR("host", host, NULL, "address to listen on"),
    S_INT("port", port, 0, 65535, "TCP port (0: any free port)"),
    S_INT("max_connections", max_connections, 1, 4096, "concurrent HTTP connections"),
    S_STR("model", model, "-m", "text model GGUF, or a Hugging Face model directory"),
    S_STR("mmproj", mmproj, NULL, "vision projector GGUF (without it: text only)"),
    S_STR("hf", hf, NULL, "REPO[:QUANT] from Hugging Face instead of -m/--mmproj"),
    S_BOOL("offline", offline, "with --hf: use the download cache only"),
    S_STR("alias", alias, NULL, "model id in /v1/models (default: the model file name)"),
    S_STR("dtype", dtype, NULL, "re-encode the weights at load: f32 bf16 f16 q8_0 q4_0 q4_k (default: as stored)"),
    {"threads", "-t", SETTING_INT, offsetof(server_config, threads), 0, 0, 1024, "compute threads (0: physical cores)"},
    S_INT("max_batch_size", max_batch_size, 1, 64, "sequences decoded together"), /* the engine's limit */
    S_INT("max_wait_ms", max_wait_ms, 0, 10000, "wait to gather new requests into a batch"),
    S_INT("queue", queue, 0, 100000, "waiting requests beyond the running ones (then 503)"),
    S_INT("ctx", ctx, 64, 262144, "tokens per sequence, prompt + output"),
    S_INT("kv_cache_mb", kv_cache_mb, 0, 1 << 24, "KV cache shared by all sequences (0: from free memory)"),
    S_INT("image_cache_mb", image_cache_mb, 0, 1 << 24, "image-embedding cache (0: off)"),
    S_INT("prefix_cache_mb", prefix_cache_mb, 0, 1 << 24, "prefix KV cache (0: off)"),
    S_STR("kv_type", kv_type, NULL, "KV cache element type: f16 (half the memory per token) or f32 (exact)"),
    S_INT("timeout_s", timeout_s, 0, 86400 * 7, "request time limit, queue included (0: none)"),
    S_INT("max_body_mb", max_body_mb, 1, 4096, "request body size (413 above)"),
    S_INT("max_images", max_images, 0, 1024, "images per request"),
    S_INT("max_image_mb", max_image_mb, 1, 1024, "encoded size of one image (413 above)"),
    S_INT("max_videos", max_videos, 0, 64, "videos per request"),
    S_INT("max_video_mb", max_video_mb, 1, 4096, "encoded size of one video (413 above)"),
    S_INT("video_max_frames", video_max_frames, 2, 768,
          "frames sampled from the videos of a request, all together (the fps rule stops there; more asked: 400)"),
    S_INT("video_max_pixels", video_max_pixels, 1024, 64 << 20,
          "largest video max_pixels (sampled frames x height x width) a request may ask for"),
    S_INT("video_max_seconds", video_max_seconds, 1, 86400, "longest video accepted (413 above)"),
    S_INT("max_pixels", max_pixels, 1024, IMAGE_HF_MAX_PIXELS, "largest max_pixels a request may ask for"),
    S_INT("default_max_pixels", default_max_pixels, 1024, IMAGE_HF_MAX_PIXELS,
          "resize target when a request gives no max_pixels (at most --max-pixels)"),
    S_INT("max_tokens", max_tokens, 1, 1 << 24, "generated tokens: cap and default"),
    S_INT("reasoning_budget", reasoning_budget, -1, 1 << 24,
          "a reasoning model's thinking tokens when a request does not say (-1: unbounded, 0: no thinking)"),
    S_INT("max_prompt_tokens", max_prompt_tokens, 0, 1 << 24, "prompt tokens per request, images included (0: ctx only)"),
    S_LIST("api_key", api_keys, "accepted API key (repeatable); none: no authentication"),
    S_STR("api_key_file", api_key_file, NULL, "file with one API key per line"),
    S_LIST("allow_image_url", allow_image_url, "http(s) URL prefix images may be fetched from (repeatable)"),
    S_INT("image_fetch_timeout_s", image_fetch_timeout_s, 1, 3600, "time limit of one image download"),
    S_LIST("cors_origin", cors_origin, "origin a browser page may call from, e.g. https://app.example.com or * (repeatable)"),
    S_BOOL("stream_usage", stream_usage, "usage on the last chunk of every chat stream, even without include_usage"),
    S_BOOL("boxes", boxes, "grounding boxes/points of every answer in image pixels (message.boxes) unless a request says \"boxes\": false"),
    S_INT("job_ttl_s", job_ttl_s, 1, 86400 * 30, "how long finished jobs are kept"),
    S_INT("max_jobs", max_jobs, 1, 1000000, "stored jobs, finished or not"),
    /* operations (issue 13) */
    S_STR("history", history, NULL, "context policy when a conversation does not fit: error or trim (oldest turns)"),
    S_INT("max_history_turns", max_history_turns, -1, 100000, "earlier turns kept per request (-1: no cap)"),
    S_STR("cpu_affinity", cpu_affinity, NULL, "CPUs to run on, e.g. 0-3,8 (workers pinned one per CPU)"),
    S_INT("nice", nice, -20, 19, "process priority (negative needs CAP_SYS_NICE)"),
    S_STR("log_file", log_file, NULL, "append logs to this file; reopened on SIGHUP (logrotate)"),
    S_STR("log_format", log_format, NULL, "log lines as logfmt or json"),
    S_BOOL("print_config", print_config, "print the effective settings as YAML and exit"),
    /* scale-out (docs/DEPLOY.md) */
    S_STR("jobs_db", jobs_db, NULL, "SQLite file that keeps jobs across restarts (default: in memory)"),
    S_STR("replica_id", replica_id, NULL, "this replica's name in job ids, [a-z0-9-] (default: host-port)"),
    /* hostile load (docs/RELIABILITY.md) */
    S_INT("max_image_pixels", max_image_pixels, 1024, 1000000000, "decoded pixels of one image (413 above, from its header)"),
    S_INT("max_request_pixels", max_request_pixels, 1024, 1000000000, "decoded pixels of all images of a request (413 above)"),
    S_INT("image_memory_mb", image_memory_mb, 16, 1 << 20, "memory for images being decoded at once, server-wide (others wait)"),
    S_INT("max_decodes", max_decodes, 1, 256, "image decodes running at once (others wait)"),
    S_INT("header_timeout_s", header_timeout_s, 1, 3600, "time to send the request headers (408 after)"),
    S_INT("body_timeout_s", body_timeout_s, 1, 86400, "time to send the request body (408 after)"),
    S_INT("max_connections_per_client", max_connections_per_client, 0, 4096,
          "connections from one client address (429 above; 0: no cap, e.g. behind a proxy)"),
    S_INT("drain_timeout_s", drain_timeout_s, 0, 86400, "SIGTERM: time for accepted requests to finish before they are cancelled"),
    S_INT("write_timeout_s", write_timeout_s, 0, 86400,
          "a stream whose client reads nothing this long is cancelled and its batch slot freed (0: never)"),
    S_BOOL("content_special_tokens", content_special_tokens,
           "parse special-token text typed in user/tool content (<|im_start|>...) as control tokens, as transformers does "
           "(default: plain text, so content cannot forge a turn)"),
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

void server_config_init(server_config *c) {
  memset(c, 0, sizeof *c);
  c->host = strdup("127.0.0.1");
  c->port = 8080;
  c->max_connections = 64;
  c->stream_usage = true;
  c->max_batch_size = 8;
  c->max_wait_ms = 5;
  c->queue = 32;
  c->ctx = 8192;
  c->image_cache_mb = 256;
  c->prefix_cache_mb = 512;
  c->kv_type = strdup("f16");
  c->timeout_s = 600;
  c->max_body_mb = 48; /* a 32 MiB image is ~43 MiB of base64 */
  c->max_images = 8;
  c->max_image_mb = 32;
  c->max_videos = 2;
  c->max_video_mb = 32;
  c->video_max_frames = 64;        /* 32 temporal patches: a 32 s clip at 2 fps */
  c->video_max_pixels = 786432;    /* HF's default video budget (768 tokens per video) */
  c->video_max_seconds = 600;
  c->max_pixels = 4 << 20;
  c->default_max_pixels = IMAGE_CPU_DEFAULT_MAX_PIXELS;
  c->max_tokens = 2048;
  c->reasoning_budget = -1;
  c->image_fetch_timeout_s = 10;
  c->job_ttl_s = 3600;
  c->max_jobs = 1024;
  c->history = strdup("error");
  c->max_history_turns = -1;
  c->log_format = strdup("logfmt");
  c->max_image_pixels = 24000000;   /* a 24-megapixel photo (6000x4000) */
  c->max_request_pixels = 48000000;
  c->image_memory_mb = 1024;
  c->max_decodes = 4;
  c->header_timeout_s = 10;
  c->body_timeout_s = 60;
  c->max_connections_per_client = 32;
  c->drain_timeout_s = 30;
  c->write_timeout_s = 30;
}

static void list_clear(char ***items, int *n) {
  for (int i = 0; i < *n; i++)
    free((*items)[i]);
  free(*items);
  *items = NULL;
  *n = 0;
}

void server_config_free(server_config *c) {
  if (!c)
    return;
  for (size_t i = 0; i < N_SETTINGS; i++) {
    char *base = (char *)c;
    if (settings[i].kind == SETTING_STR) {
      free(*(char **)(base + settings[i].off));
    } else if (settings[i].kind == SETTING_LIST) {
      list_clear((char ***)(base + settings[i].off), (int *)(base + settings[i].count_off));
    }
  }
  memset(c, 0, sizeof *c);
}

static const setting *find_key(const char *key) {
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (!strcmp(settings[i].key, key))
      return &settings[i];
  return NULL;
}

/* "--max-batch-size" for "max_batch_size". */
static void flag_name(const setting *s, char *out, size_t cap) {
  snprintf(out, cap, "--%s", s->key);
  for (char *p = out + 2; *p; p++)
    if (*p == '_')
      *p = '-';
}

static void env_name(const setting *s, char *out, size_t cap) {
  snprintf(out, cap, "QVL_%s", s->key);
  for (char *p = out; *p; p++)
    *p = (char)toupper((unsigned char)*p);
}

static qvl_status list_add(server_config *c, const setting *s, const char *v, const char *where) {
  char ***items = (char ***)((char *)c + s->off);
  int *n = (int *)((char *)c + s->count_off);
  if (!*v)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: empty value", where, s->key);
  if (*n >= 256)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: more than 256 values", where, s->key);
  char **grown = realloc(*items, (size_t)(*n + 1) * sizeof *grown);
  if (!grown)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  *items = grown;
  if (!(grown[*n] = strdup(v)))
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  (*n)++;
  return QVL_OK;
}

/* Sets one value given as text. `where` names the source for messages ("--port", "QVL_PORT",
 * "serve.yaml:3"). For lists the caller clears the list first when a new source takes over. */
static qvl_status set_value(server_config *c, const setting *s, const char *v, const char *where) {
  char *base = (char *)c;
  switch (s->kind) {
  case SETTING_STR: {
    char **field = (char **)(base + s->off);
    char *copy = strdup(v);
    if (!copy)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    free(*field);
    *field = copy;
    return QVL_OK;
  }
  case SETTING_INT: {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    while (*end == ' ')
      end++;
    if (errno || end == v || *end || x < s->min || x > s->max)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s expects an integer in [%lld, %lld], got '%s'", where, s->key,
                        (long long)s->min, (long long)s->max, v);
    *(int64_t *)(base + s->off) = x;
    return QVL_OK;
  }
  case SETTING_BOOL: {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
      if (!strcasecmp(v, yes[i])) {
        *(bool *)(base + s->off) = true;
        return QVL_OK;
      }
      if (!strcasecmp(v, no[i])) {
        *(bool *)(base + s->off) = false;
        return QVL_OK;
      }
    }
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s expects true or false, got '%s'", where, s->key, v);
  }
  case SETTING_LIST:
    return list_add(c, s, v, where);
  }
  return QVL_ERR_INTERNAL;
}

static void list_reset(server_config *c, const setting *s) {
  list_clear((char ***)((char *)c + s->off), (int *)((char *)c + s->count_off));
}

/* ---- YAML ---------------------------------------------------------------------------------- */

static const char *yaml_event_name(yaml_event_type_t t) {
  switch (t) {
  case YAML_SEQUENCE_START_EVENT:
    return "a list";
  case YAML_MAPPING_START_EVENT:
    return "a mapping";
  case YAML_SCALAR_EVENT:
    return "a value";
  case YAML_ALIAS_EVENT:
    return "an alias";
  default:
    return "something else";
  }
}

static qvl_status apply_flat_yaml(server_config *c, const char *text, size_t len, const char *name) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return qvl_errorf(QVL_ERR_NOMEM, "%s: cannot initialise the YAML parser", name);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  qvl_status st = QVL_OK;
  /* state: 0 before the top mapping, 1 expecting a key, 2 expecting a value, 3 inside a list
   * value, 4 after the top mapping */
  int state = 0;
  const setting *cur = NULL;
  char where[512];
  for (bool done = false; !done && st == QVL_OK;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s:%zu: YAML syntax error: %s", name, p.problem_mark.line + 1,
                      p.problem ? p.problem : "unknown");
      break;
    }
    size_t line = ev.start_mark.line + 1;
    snprintf(where, sizeof where, "%s:%zu", name, line);
    switch (ev.type) {
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
      break;
    case YAML_STREAM_END_EVENT:
      done = true;
      break;
    case YAML_MAPPING_START_EVENT:
      if (state == 0)
        state = 1;
      else
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s%s%s: expected a plain value, found a mapping", where,
                        cur ? "'" : "", cur ? cur->key : "", cur ? "'" : "");
      break;
    case YAML_MAPPING_END_EVENT:
      state = 4;
      break;
    case YAML_SEQUENCE_START_EVENT:
      if (state == 2 && cur->kind == SETTING_LIST) {
        list_reset(c, cur);
        state = 3;
      } else {
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s%s: expected %s, found a list", where,
                        state == 2 ? cur->key : "the top level",
                        state == 2 ? "" : " of the file", state == 2 ? "a single value" : "a mapping of settings");
      }
      break;
    case YAML_SEQUENCE_END_EVENT:
      state = 1;
      break;
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)ev.data.scalar.value;
      if (state == 1) {
        cur = find_key(v);
        if (!cur || !strcmp(v, "config")) {
          buf known = {0};
          for (size_t i = 1; i < N_SETTINGS; i++)
            buf_printf(&known, "%s%s", i > 1 ? ", " : "", settings[i].key);
          st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: unknown setting '%s' (known: %s)", where, v,
                          known.data ? known.data : "");
          buf_free(&known);
        } else {
          state = 2;
        }
      } else if (state == 2) {
        if (cur->kind == SETTING_LIST)
          list_reset(c, cur);
        if (!*v && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
          st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s has no value", where, cur->key);
        else
          st = set_value(c, cur, v, where);
        state = 1;
      } else if (state == 3) {
        st = set_value(c, cur, v, where);
      } else {
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: expected a mapping of settings (key: value lines), found '%s'",
                        where, v);
      }
      break;
    }
    default:
      st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: %s is not supported here", where,
                      cur && state >= 2 ? cur->key : "config", yaml_event_name(ev.type));
      break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  return st;
}

/* Nested, transformers-style files are first rewritten onto the flat keys (config_ops.c). */
qvl_status server_config_apply_yaml(server_config *c, const char *text, size_t len, const char *name) {
  buf flat = {0};
  bool rewritten = false;
  qvl_status st = config_yaml_normalize(text, len, name, &flat, &rewritten, NULL);
  if (st == QVL_OK)
    st = rewritten ? apply_flat_yaml(c, flat.data, flat.len, name) : apply_flat_yaml(c, text, len, name);
  buf_free(&flat);
  return st;
}

/* ---- environment ----------------------------------------------------------------------------- */

qvl_status server_config_apply_env(server_config *c, server_config_getenv_fn env) {
  if (!env)
    return QVL_OK;
  char name[96];
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const setting *s = &settings[i];
    if (!strcmp(s->key, "config"))
      continue; /* chooses the file; read before the file */
    env_name(s, name, sizeof name);
    const char *v = env(name);
    if (!v || !*v)
      continue;
    if (s->kind == SETTING_LIST) {
      /* comma-separated: QVL_API_KEY=key1,key2 */
      list_reset(c, s);
      char *copy = strdup(v), *save = NULL;
      if (!copy)
        return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
      qvl_status st = QVL_OK;
      for (char *t = strtok_r(copy, ",", &save); t && st == QVL_OK; t = strtok_r(NULL, ",", &save))
        st = set_value(c, s, t, name);
      free(copy);
      QVL_TRY(st);
    } else {
      QVL_TRY(set_value(c, s, v, name));
    }
  }
  return QVL_OK;
}

/* ---- flags ----------------------------------------------------------------------------------- */

/* only_config: apply --config and skip the rest (the first pass); otherwise the reverse. */
static qvl_status apply_args(server_config *c, int argc, char **argv, int first, bool only_config) {
  bool list_seen[N_SETTINGS] = {0};
  char flag[96];
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    const setting *s = NULL;
    const char *v = NULL;
    for (size_t k = 0; k < N_SETTINGS && !s; k++) {
      flag_name(&settings[k], flag, sizeof flag);
      size_t fl = strlen(flag);
      if (!strncmp(a, flag, fl) && a[fl] == '=') {
        s = &settings[k];
        v = a + fl + 1;
      } else if (!strcmp(a, flag) || (settings[k].short_flag && !strcmp(a, settings[k].short_flag))) {
        s = &settings[k];
      }
    }
    if (!s)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown option '%s' (qvl serve --help lists them)", a);
    if (!v) {
      if (s->kind == SETTING_BOOL)
        v = "true";
      else if (i + 1 < argc)
        v = argv[++i];
      else
        return qvl_errorf(QVL_ERR_INVALID_ARG, "%s needs a value", a);
    }
    bool is_config = !strcmp(s->key, "config");
    if (is_config != only_config)
      continue;
    flag_name(s, flag, sizeof flag);
    if (s->kind == SETTING_LIST && !list_seen[s - settings]) {
      list_reset(c, s);
      list_seen[s - settings] = true;
    }
    QVL_TRY(set_value(c, s, v, flag));
  }
  return QVL_OK;
}

/* ---- the whole chain ----------------------------------------------------------------------- */

static qvl_status read_key_file(server_config *c) {
  buf b = {0};
  qvl_status st = buf_read_file(c->api_key_file, 1 << 20, &b);
  if (st != QVL_OK) {
    buf_free(&b);
    return qvl_errorf(st, "api_key_file: %s", qvl_last_error());
  }
  const setting *s = find_key("api_key");
  char *save = NULL;
  for (char *line = strtok_r(b.data ? b.data : (char *)"", "\r\n", &save); line && st == QVL_OK;
       line = strtok_r(NULL, "\r\n", &save)) {
    while (*line == ' ' || *line == '\t')
      line++;
    size_t n = strlen(line);
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
      line[--n] = '\0';
    if (n && line[0] != '#')
      st = list_add(c, s, line, c->api_key_file);
  }
  buf_free(&b);
  return st;
}

qvl_status server_config_check(server_config *c) {
  if (!c->host || !*c->host)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "host: empty address");
  if (c->hf && c->model)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "give either -m MODEL.gguf or --hf REPO[:QUANT], not both");
  if (!c->hf && !c->model)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "-m MODEL.gguf (or --hf REPO[:QUANT]) is required");
  if (c->default_max_pixels > c->max_pixels)
    c->default_max_pixels = c->max_pixels; /* lowering the cap lowers the default with it */
  if (c->max_tokens >= c->ctx)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "max_tokens %lld leaves no room for a prompt in ctx %lld",
                      (long long)c->max_tokens, (long long)c->ctx);
  QVL_TRY(config_ops_check(c));
  for (int i = 0; i < c->n_allow_image_url; i++) {
    const char *u = c->allow_image_url[i];
    if (strncasecmp(u, "http://", 7) && strncasecmp(u, "https://", 8))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "allow_image_url: '%s' must start with http:// or https://", u);
    const char *host = strstr(u, "://") + 3;
    if (!*host || *host == '/')
      return qvl_errorf(QVL_ERR_INVALID_ARG, "allow_image_url: '%s' names no host", u);
  }
  for (int i = 0; i < c->n_cors_origin; i++) { /* a browser's Origin: scheme://host[:port], nothing after */
    const char *o = c->cors_origin[i], *sep = strstr(o, "://");
    if (strcmp(o, "*") && (!sep || sep == o || !sep[3] || strchr(sep + 3, '/') || strlen(o) > 512))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "cors_origin: '%s' must be * or scheme://host[:port] (no path, no '/')", o);
  }
  return QVL_OK;
}

qvl_status server_config_load(server_config *c, int argc, char **argv, int first, server_config_getenv_fn env) {
  QVL_TRY(apply_args(c, argc, argv, first, true));
  if (!c->config && env) {
    const char *v = env("QVL_CONFIG");
    if (v && *v && !(c->config = strdup(v)))
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  if (c->config) {
    buf b = {0};
    qvl_status st = buf_read_file(c->config, 1 << 20, &b);
    if (st == QVL_OK)
      st = server_config_apply_yaml(c, b.data ? b.data : "", b.len, c->config);
    else
      st = qvl_errorf(st, "config file: %s", qvl_last_error());
    buf_free(&b);
    QVL_TRY(st);
  }
  /* -m and --hf are one choice: a higher source's replaces a lower one's (config_ops.h) */
  config_ops_model_choice(c, 0, NULL, 0, env);
  QVL_TRY(server_config_apply_env(c, env));
  config_ops_model_choice(c, argc, argv, first, NULL);
  QVL_TRY(apply_args(c, argc, argv, first, false));
  if (c->api_key_file)
    QVL_TRY(read_key_file(c));
  return server_config_check(c);
}

void server_config_usage(FILE *f) {
  server_config d;
  server_config_init(&d);
  char flag[96], env[96], def[64];
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const setting *s = &settings[i];
    flag_name(s, flag, sizeof flag);
    env_name(s, env, sizeof env);
    def[0] = '\0';
    const char *base = (const char *)&d;
    if (s->kind == SETTING_INT)
      snprintf(def, sizeof def, " (default %lld)", (long long)*(const int64_t *)(base + s->off));
    else if (s->kind == SETTING_STR && *(char *const *)(base + s->off))
      snprintf(def, sizeof def, " (default %s)", *(char *const *)(base + s->off));
    char left[128];
    snprintf(left, sizeof left, "%s%s%s%s", s->short_flag ? s->short_flag : "", s->short_flag ? ", " : "", flag,
             s->kind == SETTING_BOOL ? "" : s->kind == SETTING_INT ? " N" : " VALUE");
    fprintf(f, "  %-30s %s%s [%s]\n", left, s->help, def, env);
  }
  server_config_free(&d);
}

/* ---- the effective settings (qvl serve --print-config) -------------------------------------- */

/* A YAML double-quoted string. */
static void print_quoted(FILE *f, const char *v) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

void server_config_print_yaml(const server_config *c, FILE *f) {
  fprintf(f, "# qvl serve: effective settings (flags > environment > %s > defaults)\n",
          c->config ? c->config : "config file");
  const char *base = (const char *)c;
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const setting *s = &settings[i];
    if (!strcmp(s->key, "config") || !strcmp(s->key, "print_config"))
      continue;
    switch (s->kind) {
    case SETTING_STR: {
      const char *v = *(char *const *)(base + s->off);
      if (!v) {
        fprintf(f, "# %s: (not set)\n", s->key); /* a YAML null would read back as the text "null" */
      } else {
        fprintf(f, "%s: ", s->key);
        print_quoted(f, v);
        fputc('\n', f);
      }
      break;
    }
    case SETTING_INT:
      fprintf(f, "%s: %lld\n", s->key, (long long)*(const int64_t *)(base + s->off));
      break;
    case SETTING_BOOL:
      fprintf(f, "%s: %s\n", s->key, *(const bool *)(base + s->off) ? "true" : "false");
      break;
    case SETTING_LIST: {
      int n = *(const int *)(base + s->count_off);
      char *const *items = *(char **const *)(base + s->off);
      bool secret = !strcmp(s->key, "api_key");
      fprintf(f, "%s: [", s->key);
      for (int k = 0; k < n; k++) {
        if (k)
          fputs(", ", f);
        print_quoted(f, secret ? "<redacted>" : items[k]);
      }
      fputs("]\n", f);
      break;
    }
    }
  }
}
