/*
 * Hugging Face hub downloads: `--hf REPO[:QUANT]`.
 *
 * hub_resolve lists the repo with the hub's HTTP API
 *   GET {endpoint}/api/models/{repo}/tree/{revision}?recursive=true   (JSON array; pages follow
 *       the Link: <...>; rel="next" header; LFS entries carry lfs.oid = sha256 and lfs.size)
 * picks the files the engine needs, and downloads each from
 *   GET {endpoint}/{repo}/resolve/{revision}/{path}                   (redirects followed)
 * into the cache: <cache>/<owner>--<name>/<revision>/<path>. Each file is written to <path>.part,
 * resumed with a Range request after an interruption, checked against the hub's sha256 (LFS files)
 * or size (small git files) and renamed into place only when it matches; the result is recorded in
 * qvl-manifest.json next to the files (see verify.h). The listing is kept as qvl-tree.json so the
 * same selection works offline.
 *
 * Environment (each overridden by a non-NULL/non-zero hub_opts field):
 *   QVL_HF_ENDPOINT  hub base URL (else HF_ENDPOINT, else https://huggingface.co)
 *   HF_TOKEN         sent as "Authorization: Bearer ..." (gated or private repos)
 *   QVL_CACHE        cache directory; else $XDG_CACHE_HOME/qvl; else ~/.cache/qvl
 *   QVL_OFFLINE=1    use the cache only (HF_HUB_OFFLINE=1 works too)
 *
 * Thread safety: hub_resolve may run on several threads (each uses its own curl handle); two
 * processes downloading the same file are kept apart by a lock on the .part file.
 */
#ifndef QVL_HUB_HUB_H
#define QVL_HUB_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

typedef struct hub_opts {
  const char *endpoint;  /* NULL: $QVL_HF_ENDPOINT, $HF_ENDPOINT, https://huggingface.co */
  const char *token;     /* NULL: $HF_TOKEN (empty string: send none) */
  const char *cache_dir; /* NULL: $QVL_CACHE, $XDG_CACHE_HOME/qvl, ~/.cache/qvl */
  const char *revision;  /* NULL: "main" */
  int offline;           /* 1: cache only; 0: $QVL_OFFLINE decides */
  const char *cache_only; /* offline by nature, not by the user's choice: the caller, named in messages
                           * ("qvl verify checks"); NULL: offline is --offline or the environment */
  int progress;          /* 0: bar if stderr is a terminal, else sparse log lines; -1: silent */
  int max_retries;       /* attempts after the first one on network errors; 0: default (4); <0: none */
  int retry_base_ms;     /* first backoff, doubled per retry; 0: default 1000 */
  int connect_timeout_s; /* 0: default 30 */
  int low_speed_time_s;  /* abort when under 1 KB/s for this long; 0: default 60 */
} hub_opts;

typedef enum hub_role {
  HUB_ROLE_MODEL = 0, /* the text model GGUF, or model.safetensors / a shard / the index */
  HUB_ROLE_MMPROJ,    /* the vision projector GGUF */
  HUB_ROLE_CONFIG,    /* config.json, tokenizer*.json, ... of a safetensors repo */
} hub_role;

typedef struct hub_file {
  char *path;     /* path inside the repo ("Qwen3VL-2B-Instruct-Q8_0.gguf") */
  char *local;    /* path in the cache once resolved */
  uint64_t size;  /* bytes, from the listing */
  char sha256[65]; /* lowercase hex from lfs.oid; "" for non-LFS files (checked by size) */
  hub_role role;
} hub_file;

typedef struct hub_files {
  char *repo;     /* "Qwen/Qwen3-VL-2B-Instruct-GGUF" */
  char *quant;    /* "Q8_0", or NULL for a safetensors repo */
  char *revision; /* "main" */
  char *dir;      /* local snapshot directory holding the files */
  char *model;    /* GGUF repo: local text GGUF; safetensors repo: == dir */
  char *mmproj;   /* GGUF repo: local mmproj GGUF, NULL if the repo has none */
  int is_gguf;
  hub_file *files;
  size_t n_files;
} hub_files;

/*
 * Resolves spec "REPO[:QUANT]" to local files, downloading what the cache lacks.
 *  - GGUF repo (it lists *.gguf files): the text model is the non-mmproj GGUF whose name carries
 *    QUANT as a whole token, case-insensitive ("Q4_K" does not match "...-Q4_K_M.gguf"); with no
 *    QUANT, Q8_0 if present, else the only one. Split models (-00001-of-00003.gguf) bring all parts.
 *    The projector is the mmproj*.gguf carrying QUANT, else F16, else any mmproj*.gguf.
 *  - safetensors repo: config.json, model.safetensors or model.safetensors.index.json + the shards
 *    it names, tokenizer.json, tokenizer_config.json, and where present chat_template.json,
 *    preprocessor_config.json, generation_config.json.
 * On failure *out is empty and the message says what went wrong: repo/file not found (404),
 * gated (401/403: set HF_TOKEN), network unreachable, disk full, checksum mismatch (the corrupt
 * download is deleted), or, offline, which files the cache lacks. Where the hub cannot be reached
 * or the cache lacks the files, it also says what to do next: the cache when it holds the model
 * (--offline), else serving local files (the exact command) or a mirror (QVL_HF_ENDPOINT).
 */
qvl_status hub_resolve(const hub_opts *o, const char *spec, hub_files *out);
void hub_files_free(hub_files *f);

/* Splits "owner/name[:QUANT]"; checks the repo name (letters, digits, '-', '_', '.', one '/').
 * repo and quant are malloc'd; *quant is NULL without ":QUANT". */
qvl_status hub_parse_spec(const char *spec, char **repo, char **quant);

/* The cache directory that would be used (malloc'd). */
qvl_status hub_cache_root(const hub_opts *o, char **out);

/*
 * The selection rule above as a pure function, for tests and for listing choices: given the
 * repo's file paths, returns in *idx (malloc'd, *n entries) the indices of the files to fetch and
 * their roles in *roles (malloc'd). sizes/is_present are not needed: only names matter.
 * For a safetensors repo with an index, the shard names come from the index, so this returns
 * the index only; hub_resolve adds the shards after reading it.
 */
qvl_status hub_select(const char *const *paths, size_t n, const char *quant, const char *repo,
                      size_t **idx, hub_role **roles, size_t *n_sel, int *is_gguf);

/*
 * Parses one page of the hub's tree listing (a JSON array of {"type","path","size","oid","lfs"})
 * with the same checks as hub_resolve (sizes, sha256s, paths that stay inside the cache) and runs
 * the selection on it. *paths receives the selected repo paths (malloc'd array of malloc'd
 * strings; free with hub_paths_free). For tests and the fuzzer.
 */
qvl_status hub_select_listing(const char *json, size_t len, const char *quant, char ***paths, size_t *n);
void hub_paths_free(char **paths, size_t n);

#endif
