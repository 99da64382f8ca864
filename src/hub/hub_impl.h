/*
 * Internal to src/hub/hub*.c: the hub client in three parts, each with one concern.
 *   hub_listing.c  the repo's file listing (parse, check) and which files a model needs: pure
 *   hub_http.c     libcurl GETs with bounded retries, readable errors, progress, resumable downloads
 *   hub.c          the cache: spec and cache root, snapshot directory, lock, manifest, hub_resolve
 */
#ifndef QVL_HUB_HUB_IMPL_H
#define QVL_HUB_HUB_IMPL_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "hub/hub.h"

/* The largest JSON document the hub may send us (a listing page) or that we read back. */
#define HUB_MAX_JSON_BYTES (64u << 20)

static inline qvl_status nomem(void) { return qvl_errorf(QVL_ERR_NOMEM, "hub: out of memory"); }

static inline char *strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *strfmt(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

static inline const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* ---- hub_listing.c ---- */

typedef struct hub_entry {
  char *path;
  uint64_t size;
  char sha256[65]; /* LFS files */
  char git_oid[41]; /* non-LFS files: git blob sha1 */
} hub_entry;

typedef struct hub_listing {
  hub_entry *e;
  size_t n, cap;
} hub_listing;

void hub_listing_free(hub_listing *l);
const hub_entry *hub_listing_find(const hub_listing *l, const char *path);
/*
 * Adds the file entries of one tree page (or of our cached qvl-tree.json, which uses the same
 * shape). Directories are skipped; a malformed entry or an unsafe path is an error naming it.
 */
qvl_status hub_listing_add_json(hub_listing *l, const cJSON *arr, const char *what);
/* The files a model needs, as indices into a path list, with their roles. */
typedef struct hub_selection {
  size_t *idx;     /* [n] */
  hub_role *role;  /* [n] */
  size_t n, idx_cap, role_cap;
} hub_selection;

/* hub_select's rules (see hub.h) into *s; *quant_used is the quantization picked (quant or the default). */
qvl_status hub_listing_select(const char *const *paths, size_t n, const char *quant, const char *repo,
                              hub_selection *s, int *is_gguf, const char **quant_used);
/* The cached form of a listing: {"repo", "revision", "files": [...]}. */
cJSON *hub_listing_to_json(const hub_listing *l, const char *repo, const char *revision);

/* ---- hub_http.c ---- */

/* One connection to the hub for one repo and revision. */
typedef struct hub_http {
  const char *endpoint;
  const char *token; /* NULL: none */
  const char *repo;
  const char *revision;
  int progress; /* 1 bar, 0 sparse lines, -1 silent */
  int max_retries;
  int retry_base_ms;
  int connect_timeout_s;
  int low_speed_time_s;
  CURL *curl;
  struct curl_slist *headers;
  int unreachable; /* the last failure was not reaching the hub at all (hub.c adds what to do then) */
} hub_http;

qvl_status hub_http_open(hub_http *c);
void hub_http_close(hub_http *c);
/* Reads every page of the repo's file listing into l. */
qvl_status hub_http_fetch_listing(hub_http *c, hub_listing *l);
/*
 * Brings the .part file open on fd (at path part, in the cache directory dir) to e->size bytes
 * from the hub: resumes at what it holds, restarts one that is longer than the file or that the
 * hub refuses to resume, stops early when the disk cannot hold the rest. *attempt counts retries
 * across calls for the same file. On success every byte is there but unchecked, and *had is what
 * the .part held when the last transfer began (> 0: part of it came from an earlier run).
 */
qvl_status hub_http_fetch_part(hub_http *c, const hub_entry *e, int fd, const char *part, const char *dir,
                               int *attempt, uint64_t *had);

#endif
