/*
 * Settings of `qvl serve`: one table of settings (its own and the options every command shares,
 * qvl_options.h), each reachable as a YAML key (max_batch_size), a flag (--max-batch-size) and an
 * environment variable (QVL_MAX_BATCH_SIZE). Precedence:
 * flags > environment > config file > defaults. List settings (api_key, allow_image_url) are
 * replaced as a whole by a higher source, never merged.
 *
 *     server_config c;
 *     server_config_init(&c);
 *     if (server_config_load(&c, argc, argv, 2, getenv) != QVL_OK) -> print qvl_last_error(), exit 2
 *     ...
 *     server_config_free(&c);
 *
 * Thread safety: a loaded config is read-only; nothing here keeps global state.
 */
#ifndef QVL_SERVER_CONFIG_SETTINGS_H
#define QVL_SERVER_CONFIG_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qvl.h"

typedef struct server_config {
  /* listener */
  char *host;              /* default 127.0.0.1 */
  int64_t port;            /* default 8080; 0 = any free port (printed at start) */
  int64_t max_connections; /* concurrent HTTP connections (one thread each) */
  /* model */
  char *model, *mmproj;    /* GGUF paths */
  char *hf;                /* REPO[:QUANT] instead of model/mmproj */
  bool offline;            /* --hf: use the cache only */
  char *alias;             /* model id served in /v1/models (default: the model file name) */
  char *dtype;             /* re-encode the weight matrices at load (vlm_load_opts.dtype); NULL: as stored */
  int64_t threads;         /* 0 = physical cores */
  char *precision;         /* vision tower arithmetic, "exact" | "fast" (NULL: the default, fast) */
  /* engine */
  int64_t max_batch_size, max_wait_ms, queue, ctx;
  int64_t kv_cache_mb;     /* 0 = the engine's choice from free memory */
  int64_t image_cache_mb, prefix_cache_mb;
  int64_t timeout_s;       /* per request, queue included; 0 = none */
  /* request caps */
  int64_t max_body_mb;
  int64_t max_images;      /* images per request */
  int64_t max_image_mb;    /* encoded bytes of one image */
  int64_t max_videos;      /* videos per request */
  int64_t max_video_mb;    /* encoded bytes of one video */
  int64_t video_max_frames; /* sampled frames of all videos of a request */
  int64_t video_max_pixels; /* cap on a request's video max_pixels */
  int64_t video_max_seconds; /* longest video */
  int64_t max_pixels;      /* cap on a request's max_pixels (the resize target) */
  int64_t default_max_pixels; /* resize target when a request does not say (<= max_pixels) */
  int64_t max_tokens;      /* cap on generated tokens; also the default when a request gives none */
  int64_t max_prompt_tokens; /* cap on prompt tokens, images included; 0 = only ctx limits it */
  int64_t reasoning_budget;  /* a reasoning model's default budget (-1 unbounded, 0 no thinking) */
  /* access */
  char **api_keys;         /* [n_api_keys]; none = no authentication */
  int n_api_keys;
  char *api_key_file;      /* one key per line; read by server_config_load */
  char **allow_image_url;  /* [n_allow_image_url] URL prefixes that may be fetched */
  int n_allow_image_url;
  int64_t image_fetch_timeout_s;
  char **cors_origin;      /* [n_cors_origin] origins browsers may call from ("*": any); none: no CORS */
  int n_cors_origin;
  bool stream_usage;       /* usage on the last chunk of every chat stream, asked for or not (default true) */
  bool boxes;              /* "boxes" of requests that do not say (boxes.h; default false) */
  /* jobs */
  int64_t job_ttl_s, max_jobs;
  /* operations (issue 13): context policy, CPU placement, logging */
  char *history;             /* "error" | "trim": default context policy of chat requests */
  int64_t max_history_turns; /* earlier turns kept at most (-1: no cap) */
  char *cpu_affinity;        /* CPU list "0-3,8" the process and its workers run on (NULL: any) */
  int64_t nice;              /* scheduling priority, -20..19 (lowering it needs CAP_SYS_NICE) */
  char *log_file;            /* append logs here, reopened on SIGHUP (NULL: stderr) */
  char *log_format;          /* "logfmt" | "json" */
  char *kv_type;             /* "f16" | "f32": KV cache element type */
  bool print_config;         /* --print-config: print the effective settings as YAML and exit */
  char *jobs_db;           /* SQLite file of the job store (NULL: in memory) */
  char *replica_id;        /* the replica's name in job ids (NULL: from the host name and port) */
  /* hostile load (docs/RELIABILITY.md) */
  int64_t max_image_pixels;   /* decoded pixels of one image (checked from its header) */
  int64_t max_request_pixels; /* decoded pixels of all images of one request */
  int64_t image_memory_mb;    /* server-wide memory for images being decoded at once */
  int64_t max_decodes;        /* image decodes running at once */
  int64_t header_timeout_s, body_timeout_s; /* deadlines for a request's headers and body */
  int64_t max_connections_per_client;       /* per client address (0 = no cap) */
  int64_t drain_timeout_s;    /* SIGTERM: how long accepted requests may take before they are cancelled */
  int64_t write_timeout_s;    /* a stream whose client reads nothing this long is cancelled (0: never) */
  bool content_special_tokens; /* parse "<|im_start|>" etc. typed in user/tool content as control
                                * tokens (HF's behaviour); default false: plain text */
  /* the config file that was read (NULL = none) */
  char *config;
} server_config;

/* Defaults that serve well on a CPU. */
void server_config_init(server_config *c);
void server_config_free(server_config *c);

/* Looks up environment variables (getenv, or a fake in tests). */
typedef const char *(*server_config_getenv_fn)(const char *name);

/* Full precedence: picks the config file from --config or QVL_CONFIG, reads it, then the
 * environment, then argv[first..argc). Unknown flags, unknown YAML keys (with the line number),
 * wrong types and out-of-range values fail with QVL_ERR_INVALID_ARG and a message. Also reads
 * api_key_file and checks the settings against each other. --help is not handled here. */
qvl_status server_config_load(server_config *c, int argc, char **argv, int first, server_config_getenv_fn env);

/* The steps on their own (tests). `name` is used in messages ("config.yaml:12: ..."). */
qvl_status server_config_apply_yaml(server_config *c, const char *text, size_t len, const char *name);
qvl_status server_config_apply_env(server_config *c, server_config_getenv_fn env);
qvl_status server_config_check(server_config *c);

/* The effective settings as YAML a config file can hold (API keys redacted), for
 * `qvl serve --print-config`. */
void server_config_print_yaml(const server_config *c, FILE *f);

/* The flag list with defaults, for `qvl serve --help`. */
void server_config_usage(FILE *f);

#endif
