/* Settings of `qvl serve` from defaults, a YAML file, the environment and flags (see settings.h). */
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
#include "qvl_options.h"
#include "server/config/config_files.h"

/* The settings in --help order: qvl serve's own, declared here, and the shared ones
 * (qvl_options.h), each with the server_config field it fills. One line per setting: the X-macro
 * is expanded once for the declarations of serve's own options and once for the bindings. */
#define SERVE_SETTINGS(STR, INT, BOOL, LIST, SHARED)                                                                 \
  STR(host, NULL, "address to listen on")                                                                            \
  INT(port, 0, 65535, "TCP port (0: any free port)")                                                                 \
  INT(max_connections, 1, 4096, "concurrent HTTP connections")                                                       \
  SHARED(model, NULL)                                                                                                \
  SHARED(mmproj, NULL)                                                                                               \
  SHARED(hf, NULL)                                                                                                   \
  SHARED(offline, NULL)                                                                                              \
  STR(alias, NULL, "model id in /v1/models (default: the model file name)")                                          \
  SHARED(dtype, NULL)                                                                                                \
  SHARED(threads, NULL)                                                                                              \
  SHARED(precision, NULL)                                                                                            \
  SHARED(max_batch_size, NULL)                                                                                       \
  INT(max_wait_ms, 0, 10000, "wait to gather new requests into a batch")                                             \
  INT(queue, 0, 100000, "waiting requests beyond the running ones (then 503)")                                       \
  SHARED(ctx, NULL)                                                                                                  \
  INT(kv_cache_mb, 0, 1 << 24, "KV cache shared by all sequences (0: from free memory)")                             \
  INT(image_cache_mb, 0, 1 << 24, "image-embedding cache (0: off)")                                                  \
  INT(prefix_cache_mb, 0, 1 << 24, "prefix KV cache (0: off)")                                                       \
  SHARED(kv_type, NULL)                                                                                              \
  INT(timeout_s, 0, 86400 * 7, "request time limit, queue included (0: none)")                                       \
  INT(max_body_mb, 1, 4096, "request body size (413 above)")                                                         \
  INT(max_images, 0, 1024, "images per request")                                                                     \
  INT(max_image_mb, 1, 1024, "encoded size of one image (413 above)")                                                \
  INT(max_videos, 0, 64, "videos per request")                                                                       \
  INT(max_video_mb, 1, 4096, "encoded size of one video (413 above)")                                                \
  INT(video_max_frames, 2, 768,                                                                                      \
      "frames sampled from the videos of a request, all together (the fps rule stops there; more asked: 400)")       \
  SHARED(video_max_pixels, "largest video max_pixels (sampled frames x height x width) a request may ask for")       \
  INT(video_max_seconds, 1, 86400, "longest video accepted (413 above)")                                             \
  SHARED(max_pixels, "largest max_pixels a request may ask for")                                                     \
  INT(default_max_pixels, 1024, IMAGE_HF_MAX_PIXELS, "resize target when a request gives no max_pixels (at most --max-pixels)") \
  SHARED(max_tokens, "generated tokens: the cap, and the default of a request that gives none")                     \
  SHARED(reasoning_budget, "a reasoning model's thinking tokens when a request does not say (-1: unbounded, 0: no thinking)") \
  INT(max_prompt_tokens, 0, 1 << 24, "prompt tokens per request, images included (0: ctx only)")                     \
  LIST(api_key, api_keys, "accepted API key (repeatable); none: no authentication")                                   \
  STR(api_key_file, "FILE", "file with one API key per line")                                                        \
  LIST(allow_image_url, allow_image_url, "http(s) URL prefix images may be fetched from (repeatable)")               \
  INT(image_fetch_timeout_s, 1, 3600, "time limit of one image download")                                            \
  LIST(cors_origin, cors_origin, "origin a browser page may call from, e.g. https://app.example.com or * (repeatable)") \
  BOOL(stream_usage, "usage on the last chunk of every chat stream, even without include_usage (on by default; "  \
                     "--stream-usage=false: only when a request asks)")                                              \
  BOOL(boxes, "grounding boxes/points of every answer in image pixels (message.boxes) unless a request says \"boxes\": false") \
  INT(job_ttl_s, 1, 86400 * 30, "how long finished jobs are kept")                                                   \
  INT(max_jobs, 1, 1000000, "stored jobs, finished or not")                                                          \
  /* operations (issue 13) */                                                                                        \
  STR(history, NULL, "context policy when a conversation does not fit: error or trim (oldest turns)")                \
  INT(max_history_turns, -1, 100000, "earlier turns kept per request (-1: no cap)")                                  \
  STR(cpu_affinity, "LIST", "CPUs to run on, e.g. 0-3,8 (workers pinned one per CPU)")                               \
  INT(nice, -20, 19, "process priority (negative needs CAP_SYS_NICE)")                                               \
  STR(log_file, "FILE", "append logs to this file; reopened on SIGHUP (logrotate)")                                  \
  STR(log_format, NULL, "log lines as logfmt or json")                                                               \
  BOOL(print_config, "print the effective settings as YAML and exit")                                                \
  /* scale-out (docs/DEPLOY.md) */                                                                                   \
  STR(jobs_db, "FILE", "SQLite file that keeps jobs across restarts (default: in memory)")                           \
  STR(replica_id, NULL, "this replica's name in job ids, [a-z0-9-] (default: host-port)")                            \
  /* hostile load (docs/RELIABILITY.md) */                                                                           \
  INT(max_image_pixels, 1024, 1000000000, "decoded pixels of one image (413 above, from its header)")                \
  INT(max_request_pixels, 1024, 1000000000, "decoded pixels of all images of a request (413 above)")                 \
  INT(image_memory_mb, 16, 1 << 20, "memory for images being decoded at once, server-wide (others wait)")            \
  INT(max_decodes, 1, 256, "image decodes running at once (others wait)")                                            \
  INT(header_timeout_s, 1, 3600, "time to send the request headers (408 after)")                                     \
  INT(body_timeout_s, 1, 86400, "time to send the request body (408 after)")                                         \
  INT(max_connections_per_client, 0, 4096,                                                                           \
      "connections from one client address (429 above; 0: no cap, e.g. behind a proxy)")                            \
  INT(drain_timeout_s, 0, 86400, "SIGTERM: time for accepted requests to finish before they are cancelled")          \
  INT(write_timeout_s, 0, 86400,                                                                                     \
      "a stream whose client reads nothing this long is cancelled and its batch slot freed (0: never)")              \
  BOOL(content_special_tokens,                                                                                       \
       "parse special-token text typed in user/tool content (<|im_start|>...) as control tokens, as transformers does " \
       "(default: plain text, so content cannot forge a turn)")

/* QVL_CONFIG is read before the file, not with the other variables */
static const qvl_opt o_config = {.key = "config", .kind = QVL_OPT_STR, .meta = "FILE", .flags = QVL_OPT_ENV_OWN,
                                 .help = "YAML file with any of these settings (keys as below, '_' for '-')"};
#define DECL_STR(k, m, h) static const qvl_opt o_##k = {.key = #k, .kind = QVL_OPT_STR, .meta = m, .help = h};
#define DECL_INT(k, mn, mx, h) static const qvl_opt o_##k = {.key = #k, .kind = QVL_OPT_INT, .min = mn, .max = mx, .help = h};
#define DECL_BOOL(k, h) static const qvl_opt o_##k = {.key = #k, .kind = QVL_OPT_BOOL, .help = h};
#define DECL_LIST(k, field, h) static const qvl_opt o_##k = {.key = #k, .kind = QVL_OPT_LIST, .max = 256, .help = h};
#define DECL_NONE(k, h)
SERVE_SETTINGS(DECL_STR, DECL_INT, DECL_BOOL, DECL_LIST, DECL_NONE)

#define BIND_STR(k, m, h) QVL_OPT_FIELD(o_##k, server_config, k),
#define BIND_INT(k, mn, mx, h) QVL_OPT_FIELD(o_##k, server_config, k),
#define BIND_BOOL(k, h) QVL_OPT_FIELD(o_##k, server_config, k),
#define BIND_LIST(k, field, h) QVL_OPT_LIST_FIELD(o_##k, server_config, field, n_##field),
#define BIND_SHARED(k, h) QVL_OPT_FIELD_HELP(qvl_opt_##k, server_config, k, h),
static const qvl_opt_bind settings[] = {QVL_OPT_FIELD(o_config, server_config, config), SERVE_SETTINGS(BIND_STR, BIND_INT, BIND_BOOL, BIND_LIST, BIND_SHARED)};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

/* The command: every setting also from its environment variable; copies of every string. */
static const qvl_opt_cmd serve_cmd = {
    .name = "qvl serve",
    .usage = NULL,
    .notes = NULL,
    .opts = settings,
    .n_opts = N_SETTINGS,
    .env = true,
    .own_strings = true,
    .max_args = 0};

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

void server_config_free(server_config *c) {
  if (!c)
    return;
  qvl_opts_free(&serve_cmd, c);
  memset(c, 0, sizeof *c);
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
  const qvl_opt_bind *cur = NULL;
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
                        cur ? "'" : "", cur ? cur->opt->key : "", cur ? "'" : "");
      break;
    case YAML_MAPPING_END_EVENT:
      state = 4;
      break;
    case YAML_SEQUENCE_START_EVENT:
      if (state == 2 && cur->opt->kind == QVL_OPT_LIST) {
        qvl_opts_list_clear(&serve_cmd, cur, c);
        state = 3;
      } else {
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s%s: expected %s, found a list", where,
                        state == 2 ? cur->opt->key : "the top level",
                        state == 2 ? "" : " of the file", state == 2 ? "a single value" : "a mapping of settings");
      }
      break;
    case YAML_SEQUENCE_END_EVENT:
      state = 1;
      break;
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)ev.data.scalar.value;
      if (state == 1) {
        cur = qvl_opts_find(&serve_cmd, v);
        if (!cur || !strcmp(v, "config")) {
          buf known = {0};
          for (size_t i = 1; i < N_SETTINGS; i++)
            buf_printf(&known, "%s%s", i > 1 ? ", " : "", settings[i].opt->key);
          st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: unknown setting '%s' (known: %s)", where, v,
                          known.data ? known.data : "");
          buf_free(&known);
        } else {
          state = 2;
        }
      } else if (state == 2) {
        if (cur->opt->kind == QVL_OPT_LIST)
          qvl_opts_list_clear(&serve_cmd, cur, c);
        if (!*v && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
          st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s has no value", where, cur->opt->key);
        else
          st = qvl_opts_set(&serve_cmd, cur, c, v, where);
        state = 1;
      } else if (state == 3) {
        st = qvl_opts_set(&serve_cmd, cur, c, v, where);
      } else {
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: expected a mapping of settings (key: value lines), found '%s'",
                        where, v);
      }
      break;
    }
    default:
      st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s: %s is not supported here", where,
                      cur && state >= 2 ? cur->opt->key : "config", yaml_event_name(ev.type));
      break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  return st;
}

/* Nested, transformers-style files are first rewritten onto the flat keys (config_files.c). */
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
  return env ? qvl_opts_apply_env(&serve_cmd, c, env) : QVL_OK;
}

/* ---- flags ----------------------------------------------------------------------------------- */

/* only_config: apply --config and skip the rest (the first pass); otherwise the reverse. */
static qvl_status apply_args(server_config *c, int argc, char **argv, int first, bool only_config) {
  bool list_seen[N_SETTINGS] = {0};
  char flag[96];
  for (int i = first; i < argc; i++) {
    const qvl_opt_bind *s;
    const char *v;
    QVL_TRY(qvl_opts_match(&serve_cmd, argc, argv, &i, &s, &v));
    if (!s && only_config)
      continue; /* reported in the second pass, in its place among the flags (as every command does) */
    if (!s)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown option '%s' (qvl serve --help lists them)", argv[i]);
    if ((s->opt == &o_config) != only_config)
      continue;
    qvl_opt_flag_name(s->opt, flag, sizeof flag);
    if (s->opt->kind == QVL_OPT_LIST && !list_seen[s - settings]) {
      qvl_opts_list_clear(&serve_cmd, s, c);
      list_seen[s - settings] = true;
    }
    QVL_TRY(qvl_opts_set(&serve_cmd, s, c, v ? v : "true", flag));
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
  const qvl_opt_bind *s = qvl_opts_find(&serve_cmd, "api_key");
  char *save = NULL;
  for (char *line = strtok_r(b.data ? b.data : (char *)"", "\r\n", &save); line && st == QVL_OK;
       line = strtok_r(NULL, "\r\n", &save)) {
    while (*line == ' ' || *line == '\t')
      line++;
    size_t n = strlen(line);
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
      line[--n] = '\0';
    if (n && line[0] != '#')
      st = qvl_opts_set(&serve_cmd, s, c, line, c->api_key_file);
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
  /* -m and --hf are one choice: a higher source's replaces a lower one's (config_files.h) */
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
  qvl_opts_usage(&serve_cmd, &d, f);
  server_config_free(&d);
}

/* ---- the effective settings (qvl serve --print-config) -------------------------------------- */

/* A YAML double-quoted string. */
static void print_quoted(FILE *f, const char *v) {
  buf b = {0};
  config_yaml_quote(&b, v);
  if (b.data)
    fwrite(b.data, 1, b.len, f);
  buf_free(&b);
}

void server_config_print_yaml(const server_config *c, FILE *f) {
  fprintf(f, "# qvl serve: effective settings (flags > environment > %s > defaults)\n",
          c->config ? c->config : "config file");
  const char *base = (const char *)c;
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const qvl_opt_bind *s = &settings[i];
    const char *key = s->opt->key;
    if (s->opt == &o_config || s->opt == &o_print_config)
      continue;
    switch (s->opt->kind) {
    case QVL_OPT_STR: {
      const char *v = *(char *const *)(base + s->off);
      if (!v) {
        fprintf(f, "# %s: (not set)\n", key); /* a YAML null would read back as the text "null" */
      } else {
        fprintf(f, "%s: ", key);
        print_quoted(f, v);
        fputc('\n', f);
      }
      break;
    }
    case QVL_OPT_INT:
      fprintf(f, "%s: %lld\n", key, (long long)*(const int64_t *)(base + s->off));
      break;
    case QVL_OPT_BOOL:
      fprintf(f, "%s: %s\n", key, *(const bool *)(base + s->off) ? "true" : "false");
      break;
    case QVL_OPT_LIST: {
      int n = *(const int *)(base + s->count_off);
      char *const *items = *(char **const *)(base + s->off);
      bool secret = s->opt == &o_api_key;
      fprintf(f, "%s: [", key);
      for (int k = 0; k < n; k++) {
        if (k)
          fputs(", ", f);
        print_quoted(f, secret ? "<redacted>" : items[k]);
      }
      fputs("]\n", f);
      break;
    }
    case QVL_OPT_NUM:
    case QVL_OPT_CALL:
      break; /* serve has none */
    }
  }
}
