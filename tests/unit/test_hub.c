/*
 * Hub downloads against a fake Hugging Face hub on 127.0.0.1 (libmicrohttpd, in this process):
 * the tree API with pages, resolve URLs that redirect LFS files to a "CDN" path (with
 * X-Linked-Etag), Range requests, and injected faults: a connection cut halfway, wrong bytes, a
 * 404, a token check, a gated repo. The fake hub serves the fixture files; their sha256s come from
 * tests/fixtures/manifest.json, not from the code under test. Nothing leaves loopback; an alarm
 * bounds the whole run.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "hub/hub.h"
#include "model/verify.h"
#include "test.h"

/* ---- fake hub content ---- */

typedef struct fake_file {
  char path[128];
  unsigned char *data;
  size_t size;
  char sha256[65]; /* LFS files: from the fixture manifest (or computed here for made-up files) */
  char git_oid[41];
  int lfs;
} fake_file;

typedef struct fake_repo {
  const char *name;
  fake_file files[12];
  int n;
} fake_repo;

static fake_repo repos[3];
static int n_repos;
static cJSON *fixture_manifest;

/* Faults and counters; the server thread reads them under the lock. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char cut_path[128];
static size_t cut_at;
static int cut_times;
static char corrupt_path[128];
static char missing_path[128];
static char require_token[64];
static int gated;
static int page_size = 2;
static int n_tree_requests, n_data_requests, n_range_requests;
static long long last_range_start = -1;
static unsigned short port;

static void hex(const unsigned char *md, unsigned n, char *out) {
  for (unsigned i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Independent digests (OpenSSL one-shot), to build the fake hub's metadata. */
static void sha256_hex(const void *d, size_t n, char out[65]) {
  unsigned char md[32];
  unsigned len = 0;
  EVP_Digest(d, n, md, &len, EVP_sha256(), NULL);
  hex(md, 32, out);
}

static void git_oid_hex(const void *d, size_t n, char out[41]) {
  char head[64];
  int hn = snprintf(head, sizeof head, "blob %zu", n);
  unsigned char *b = malloc((size_t)hn + 1 + n + 1);
  memcpy(b, head, (size_t)hn + 1);
  memcpy(b + hn + 1, d, n);
  unsigned char md[20];
  unsigned len = 0;
  EVP_Digest(b, (size_t)hn + 1 + n, md, &len, EVP_sha1(), NULL);
  hex(md, 20, out);
  free(b);
}

static const char *manifest_sha(const char *fixture_path) {
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(fixture_manifest, "files")) {
    if (!strcmp(cJSON_GetObjectItem(e, "path")->valuestring, fixture_path))
      return cJSON_GetObjectItem(e, "sha256")->valuestring;
  }
  return NULL;
}

static void add_mem(fake_repo *r, const char *path, const void *data, size_t size, int lfs) {
  fake_file *f = &r->files[r->n++];
  snprintf(f->path, sizeof f->path, "%s", path);
  f->data = malloc(size ? size : 1);
  memcpy(f->data, data, size);
  f->size = size;
  f->lfs = lfs;
  if (lfs)
    sha256_hex(data, size, f->sha256);
  git_oid_hex(data, size, f->git_oid);
}

/* A fixture file; its sha256 is the one tests/fixtures/manifest.json records. */
static int add_fixture(fake_repo *r, const char *dir, const char *name, int lfs) {
  char p[256], rel[256];
  snprintf(p, sizeof p, "tests/fixtures/%s/%s", dir, name);
  snprintf(rel, sizeof rel, "%s/%s", dir, name);
  buf b = {0};
  if (buf_read_file(p, 64u << 20, &b) != QVL_OK)
    return 0;
  add_mem(r, name, b.data, b.len, lfs);
  buf_free(&b);
  const char *sha = manifest_sha(rel);
  if (!sha)
    return 0;
  fake_file *f = &r->files[r->n - 1];
  if (lfs)
    snprintf(f->sha256, sizeof f->sha256, "%s", sha);
  return 1;
}

static fake_repo *find_repo(const char *owner_name, size_t len) {
  for (int i = 0; i < n_repos; i++)
    if (strlen(repos[i].name) == len && !strncmp(repos[i].name, owner_name, len))
      return &repos[i];
  return NULL;
}

static fake_file *find_file(fake_repo *r, const char *path) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->files[i].path, path))
      return &r->files[i];
  return NULL;
}

/* ---- fake hub server ---- */

typedef struct body_ctx {
  const fake_file *f;
  size_t start, len;
  size_t cut;     /* absolute offset where the connection is dropped; SIZE_MAX: never */
  int corrupt;    /* flip the middle byte */
} body_ctx;

static ssize_t body_reader(void *cls, uint64_t pos, char *out, size_t max) {
  body_ctx *b = cls;
  size_t abs = b->start + (size_t)pos;
  if (pos >= b->len)
    return MHD_CONTENT_READER_END_OF_STREAM;
  if (abs >= b->cut)
    return MHD_CONTENT_READER_END_WITH_ERROR;
  size_t n = b->len - (size_t)pos;
  if (n > max)
    n = max;
  if (b->cut != SIZE_MAX && abs + n > b->cut)
    n = b->cut - abs;
  memcpy(out, b->f->data + abs, n);
  size_t mid = b->f->size / 2;
  if (b->corrupt && mid >= abs && mid < abs + n)
    out[mid - abs] ^= 0x5a;
  return (ssize_t)n;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *text, const char *err_code) {
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
  if (err_code)
    MHD_add_response_header(r, "X-Error-Code", err_code);
  enum MHD_Result ret = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result serve_tree(struct MHD_Connection *c, fake_repo *r, const char *rev) {
  if (strcmp(rev, "main") != 0)
    return reply(c, 404, "{\"error\":\"Invalid rev id\"}", "RevisionNotFound");
  const char *cur = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cursor");
  int start = cur ? atoi(cur) : 0;
  pthread_mutex_lock(&mu);
  int ps = page_size;
  n_tree_requests++;
  pthread_mutex_unlock(&mu);
  cJSON *arr = cJSON_CreateArray();
  /* A directory entry first, as the real hub lists them: it must be skipped. */
  if (start == 0) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", "directory");
    cJSON_AddStringToObject(d, "oid", "0000000000000000000000000000000000000000");
    cJSON_AddNumberToObject(d, "size", 0);
    cJSON_AddStringToObject(d, "path", "docs");
    cJSON_AddItemToArray(arr, d);
  }
  int end = start + ps < r->n ? start + ps : r->n;
  for (int i = start; i < end; i++) {
    const fake_file *f = &r->files[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "file");
    cJSON_AddStringToObject(o, "oid", f->git_oid);
    cJSON_AddNumberToObject(o, "size", (double)f->size);
    cJSON_AddStringToObject(o, "path", f->path);
    if (f->lfs) {
      cJSON *l = cJSON_AddObjectToObject(o, "lfs");
      cJSON_AddStringToObject(l, "oid", f->sha256);
      cJSON_AddNumberToObject(l, "size", (double)f->size);
      cJSON_AddNumberToObject(l, "pointerSize", 134);
    }
    cJSON_AddItemToArray(arr, o);
  }
  char *text = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
  struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(resp, "Content-Type", "application/json");
  if (end < r->n) {
    char link[512];
    snprintf(link, sizeof link, "<http://127.0.0.1:%u/api/models/%s/tree/main?recursive=true&cursor=%d>; rel=\"next\"",
             port, r->name, end);
    MHD_add_response_header(resp, "Link", link);
  }
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result serve_bytes(struct MHD_Connection *c, fake_repo *r, const fake_file *f) {
  const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
  size_t start = 0;
  int partial = 0;
  if (range && !strncmp(range, "bytes=", 6)) {
    start = strtoull(range + 6, NULL, 10);
    partial = 1;
  }
  pthread_mutex_lock(&mu);
  n_data_requests++;
  if (partial) {
    n_range_requests++;
    last_range_start = (long long)start;
  }
  body_ctx *b = calloc(1, sizeof *b);
  b->f = f;
  b->cut = SIZE_MAX;
  if (cut_times > 0 && !strcmp(cut_path, f->path)) {
    cut_times--;
    b->cut = cut_at;
  }
  b->corrupt = !strcmp(corrupt_path, f->path);
  pthread_mutex_unlock(&mu);
  if (partial && start >= f->size) {
    free(b);
    char cr[64];
    snprintf(cr, sizeof cr, "bytes */%zu", f->size);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Range", cr);
    enum MHD_Result ret = MHD_queue_response(c, 416, resp);
    MHD_destroy_response(resp);
    return ret;
  }
  b->start = start;
  b->len = f->size - start;
  struct MHD_Response *resp = MHD_create_response_from_callback(b->len, 32 * 1024, body_reader, b, free);
  if (partial) {
    char cr[96];
    snprintf(cr, sizeof cr, "bytes %zu-%zu/%zu", start, f->size - 1, f->size);
    MHD_add_response_header(resp, "Content-Range", cr);
  }
  char etag[80];
  snprintf(etag, sizeof etag, "\"%s\"", f->lfs ? f->sha256 : f->git_oid);
  MHD_add_response_header(resp, "ETag", etag);
  (void)r;
  enum MHD_Result ret = MHD_queue_response(c, partial ? 206 : 200, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)cls;
  (void)version;
  (void)upload;
  (void)upload_size;
  (void)con_cls;
  if (strcmp(method, "GET") != 0)
    return reply(c, 405, "GET only", NULL);
  pthread_mutex_lock(&mu);
  char tok[80];
  snprintf(tok, sizeof tok, "Bearer %s", require_token);
  int need_token = require_token[0] != 0, is_gated = gated;
  pthread_mutex_unlock(&mu);
  if (need_token) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!auth || strcmp(auth, tok) != 0)
      return reply(c, 401, "Invalid credentials", "RepoNotFound");
  }
  if (is_gated && strncmp(url, "/cdn/", 5) != 0) {
    struct MHD_Response *r = MHD_create_response_from_buffer(5, (void *)"gated", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "X-Error-Code", "GatedRepo");
    MHD_add_response_header(r, "X-Error-Message", "Access to this model is restricted");
    enum MHD_Result ret = MHD_queue_response(c, 403, r);
    MHD_destroy_response(r);
    return ret;
  }
  /* /api/models/<owner>/<name>/tree/<rev> */
  if (!strncmp(url, "/api/models/", 12)) {
    const char *on = url + 12;
    const char *t = strstr(on, "/tree/");
    fake_repo *r = t ? find_repo(on, (size_t)(t - on)) : NULL;
    if (!r)
      return reply(c, 404, "{\"error\":\"Repository not found\"}", "RepoNotFound");
    return serve_tree(c, r, t + 6);
  }
  /* /cdn/<owner>/<name>/<path>: where LFS resolve URLs redirect */
  int cdn = !strncmp(url, "/cdn/", 5);
  const char *on = cdn ? url + 5 : url + 1;
  const char *s1 = strchr(on, '/');
  const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
  fake_repo *r = s2 ? find_repo(on, (size_t)(s2 - on)) : NULL;
  if (!r)
    return reply(c, 404, "Repository not found", "RepoNotFound");
  const char *path;
  if (cdn) {
    path = s2 + 1;
  } else {
    if (strncmp(s2, "/resolve/main/", 14) != 0)
      return reply(c, 404, "Revision not found", "RevisionNotFound");
    path = s2 + 14;
  }
  fake_file *f = find_file(r, path);
  pthread_mutex_lock(&mu);
  int missing = !strcmp(missing_path, path);
  pthread_mutex_unlock(&mu);
  if (!f || missing)
    return reply(c, 404, "Entry not found", "EntryNotFound");
  if (!cdn && f->lfs) {
    char loc[512], size[32];
    snprintf(loc, sizeof loc, "http://127.0.0.1:%u/cdn/%s/%s", port, r->name, f->path);
    snprintf(size, sizeof size, "%zu", f->size);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Location", loc);
    char etag[80];
    snprintf(etag, sizeof etag, "\"%s\"", f->sha256);
    MHD_add_response_header(resp, "X-Linked-Etag", etag);
    MHD_add_response_header(resp, "X-Linked-Size", size);
    enum MHD_Result ret = MHD_queue_response(c, 302, resp);
    MHD_destroy_response(resp);
    return ret;
  }
  return serve_bytes(c, r, f);
}

static void set_fault(char *dst, const char *v) {
  pthread_mutex_lock(&mu);
  snprintf(dst, 128, "%s", v ? v : "");
  pthread_mutex_unlock(&mu);
}

/* ---- helpers ---- */

static char tmp_root[256];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static int file_equals(const char *path, const fake_file *f) {
  buf b = {0};
  if (buf_read_file(path, 64u << 20, &b) != QVL_OK)
    return 0;
  int eq = b.len == f->size && !memcmp(b.data, f->data, f->size);
  buf_free(&b);
  return eq;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static long long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

static hub_opts opts_for(const char *cache, char *endpoint) {
  hub_opts o = {0};
  o.endpoint = endpoint;
  o.cache_dir = cache;
  o.token = ""; /* whatever HF_TOKEN the environment has, the fake hub gets none unless a test says so */
  o.progress = -1;
  o.retry_base_ms = 10;
  o.connect_timeout_s = 5;
  o.low_speed_time_s = 5;
  o.max_retries = -1;
  return o;
}

static unsigned short closed_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(s, (struct sockaddr *)&a, sizeof a);
  socklen_t l = sizeof a;
  getsockname(s, (struct sockaddr *)&a, &l);
  close(s);
  return ntohs(a.sin_port);
}

static const char *local_of(const hub_files *h, const char *path) {
  for (size_t i = 0; i < h->n_files; i++)
    if (!strcmp(h->files[i].path, path))
      return h->files[i].local;
  return NULL;
}

/* ---- tests ---- */

static void test_parse_spec(void) {
  char *r, *q;
  CHECK(hub_parse_spec("Qwen/Qwen3-VL-2B-Instruct-GGUF:Q8_0", &r, &q) == QVL_OK, "%s", qvl_last_error());
  CHECK(r && !strcmp(r, "Qwen/Qwen3-VL-2B-Instruct-GGUF"), "repo %s", r);
  CHECK(q && !strcmp(q, "Q8_0"), "quant %s", q);
  free(r);
  free(q);
  CHECK(hub_parse_spec("Qwen/Qwen3-VL-2B-Instruct", &r, &q) == QVL_OK && q == NULL, "no quant");
  free(r);
  free(q);
  const char *bad[] = {"", "Qwen", "a/b/c", "../x", "a/..", "/a", "a/", "a/b:", "a/b:Q8 0", "a b/c", "a/.hidden"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK(hub_parse_spec(bad[i], &r, &q) == QVL_ERR_INVALID_ARG, "'%s' accepted", bad[i]);
    CHECK(r == NULL && q == NULL, "'%s' left output", bad[i]);
  }
}

static int selected(const char *const *paths, const size_t *idx, size_t n, const char *want) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(paths[idx[i]], want))
      return 1;
  return 0;
}

static void test_select(void) {
  /* The published Qwen3-VL GGUF repo layout. */
  const char *qwen[] = {".gitattributes", "README.md", "Qwen3VL-2B-Instruct-F16.gguf", "Qwen3VL-2B-Instruct-Q4_K_M.gguf",
                        "Qwen3VL-2B-Instruct-Q8_0.gguf", "mmproj-Qwen3VL-2B-Instruct-F16.gguf",
                        "mmproj-Qwen3VL-2B-Instruct-Q8_0.gguf"};
  size_t n = sizeof qwen / sizeof *qwen, *idx, ns;
  hub_role *roles;
  int gg;
  CHECK(hub_select(qwen, n, "q8_0", "Qwen/x", &idx, &roles, &ns, &gg) == QVL_OK, "%s", qvl_last_error());
  CHECK(gg && ns == 2 && !strcmp(qwen[idx[0]], "Qwen3VL-2B-Instruct-Q8_0.gguf") && roles[0] == HUB_ROLE_MODEL &&
            !strcmp(qwen[idx[1]], "mmproj-Qwen3VL-2B-Instruct-Q8_0.gguf") && roles[1] == HUB_ROLE_MMPROJ,
        "Q8_0 pick: n=%zu", ns);
  free(idx);
  free(roles);
  /* Q4_K_M has no mmproj of its own: F16 is preferred. */
  CHECK(hub_select(qwen, n, "Q4_K_M", "Qwen/x", &idx, &roles, &ns, &gg) == QVL_OK, "%s", qvl_last_error());
  CHECK(ns == 2 && !strcmp(qwen[idx[0]], "Qwen3VL-2B-Instruct-Q4_K_M.gguf") &&
            !strcmp(qwen[idx[1]], "mmproj-Qwen3VL-2B-Instruct-F16.gguf"),
        "Q4_K_M pick");
  free(idx);
  free(roles);
  /* No quant: Q8_0 by default. */
  CHECK(hub_select(qwen, n, NULL, "Qwen/x", &idx, &roles, &ns, &gg) == QVL_OK && ns == 2 &&
            !strcmp(qwen[idx[0]], "Qwen3VL-2B-Instruct-Q8_0.gguf"),
        "default pick");
  free(idx);
  free(roles);
  /* Q4_K must not match Q4_K_M; the error lists what exists. */
  CHECK(hub_select(qwen, n, "Q4_K", "Qwen/x", &idx, &roles, &ns, &gg) == QVL_ERR_NOT_FOUND, "Q4_K matched");
  CHECK(strstr(qvl_last_error(), "Qwen3VL-2B-Instruct-Q4_K_M.gguf") && strstr(qvl_last_error(), "Q4_K"), "msg: %s",
        qvl_last_error());
  const char *microb[] = {"micro-b-Q4_K.gguf", "micro-b-Q4_K_M.gguf", "micro-b-Q6_K.gguf", "mmproj-micro-b-F16.gguf",
                          "mmproj-micro-b-Q8_0.gguf"};
  CHECK(hub_select(microb, 5, "Q4_K", "t/m", &idx, &roles, &ns, &gg) == QVL_OK && ns == 2 &&
            !strcmp(microb[idx[0]], "micro-b-Q4_K.gguf") && !strcmp(microb[idx[1]], "mmproj-micro-b-F16.gguf"),
        "Q4_K exact token");
  free(idx);
  free(roles);
  /* No Q8_0 among several: the user must choose. */
  CHECK(hub_select(microb, 5, NULL, "t/m", &idx, &roles, &ns, &gg) == QVL_ERR_NOT_FOUND &&
            strstr(qvl_last_error(), "choose one"),
        "ambiguous default: %s", qvl_last_error());
  /* Split GGUF: all parts, in order. */
  const char *split[] = {"Q8_0/m-Q8_0-00002-of-00003.gguf", "Q8_0/m-Q8_0-00001-of-00003.gguf",
                         "Q8_0/m-Q8_0-00003-of-00003.gguf", "m-F16.gguf", "mmproj-m-f16.gguf"};
  CHECK(hub_select(split, 5, "Q8_0", "t/s", &idx, &roles, &ns, &gg) == QVL_OK && ns == 4 &&
            !strcmp(split[idx[0]], "Q8_0/m-Q8_0-00001-of-00003.gguf") &&
            !strcmp(split[idx[2]], "Q8_0/m-Q8_0-00003-of-00003.gguf") && roles[3] == HUB_ROLE_MMPROJ,
        "split pick n=%zu", ns);
  free(idx);
  free(roles);
  CHECK(hub_select(split + 1, 4, "Q8_0", "t/s", &idx, &roles, &ns, &gg) != QVL_OK && strstr(qvl_last_error(), "part 2"),
        "missing part accepted: %s", qvl_last_error());
  /* safetensors checkpoint */
  const char *st[] = {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                      "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                      "chat_template.json", "preprocessor_config.json", "generation_config.json", "vocab.json",
                      "README.md"};
  CHECK(hub_select(st, 11, NULL, "Qwen/Qwen3-VL-2B-Instruct", &idx, &roles, &ns, &gg) == QVL_OK, "%s",
        qvl_last_error());
  CHECK(!gg && ns == 7 && selected(st, idx, ns, "model.safetensors.index.json") && selected(st, idx, ns, "config.json") &&
            selected(st, idx, ns, "chat_template.json") && selected(st, idx, ns, "generation_config.json") &&
            !selected(st, idx, ns, "vocab.json"),
        "safetensors pick n=%zu", ns);
  free(idx);
  free(roles);
  CHECK(hub_select(st, 11, "Q8_0", "Qwen/Qwen3-VL-2B-Instruct", &idx, &roles, &ns, &gg) == QVL_ERR_INVALID_ARG,
        "quant on a safetensors repo");
  CHECK(hub_select(st + 1, 10, NULL, "r/x", &idx, &roles, &ns, &gg) == QVL_ERR_NOT_FOUND &&
            strstr(qvl_last_error(), "config.json"),
        "missing config: %s", qvl_last_error());
  CHECK(hub_select(st + 9, 2, NULL, "r/x", &idx, &roles, &ns, &gg) == QVL_ERR_NOT_FOUND, "no weights");
}

static char endpoint[64], dead_endpoint[64];

static void test_download_gguf(const char *cache) {
  fake_repo *r = &repos[0];
  hub_opts o = opts_for(cache, endpoint);
  hub_files h;
  int tree0 = n_tree_requests;
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "full download: %s", qvl_last_error());
  if (s != QVL_OK)
    return;
  /* 5 listed files in pages of 2: three pages */
  CHECK(n_tree_requests - tree0 == 3, "tree pages %d", n_tree_requests - tree0);
  CHECK(h.is_gguf && h.quant && !strcmp(h.quant, "Q8_0"), "quant");
  CHECK(h.n_files == 2, "n_files %zu", h.n_files);
  CHECK(h.model && strstr(h.model, "/test--e2e-GGUF/main/e2e-Q8_0.gguf"), "model %s", h.model);
  CHECK(h.mmproj && strstr(h.mmproj, "/test--e2e-GGUF/main/mmproj-e2e-F16.gguf"), "mmproj %s", h.mmproj);
  CHECK(h.model && file_equals(h.model, find_file(r, "e2e-Q8_0.gguf")), "model bytes differ");
  CHECK(h.mmproj && file_equals(h.mmproj, find_file(r, "mmproj-e2e-F16.gguf")), "mmproj bytes differ");
  char p[512];
  snprintf(p, sizeof p, "%s.part", h.model);
  CHECK(!exists(p), ".part left behind");
  /* The manifest records the fixture's sha256. */
  uint64_t size;
  char sha[65];
  CHECK(verify_manifest_get(h.dir, "e2e-Q8_0.gguf", &size, sha) == QVL_OK && size == 11121760 &&
            !strcmp(sha, manifest_sha("models/e2e/gguf/e2e-Q8_0.gguf")),
        "manifest entry");
  CHECK(verify_manifest_get(h.dir, "README.md", &size, sha) == QVL_ERR_NOT_FOUND, "README recorded");
  /* A second run downloads nothing. */
  int data0 = n_data_requests;
  hub_files h2;
  CHECK(hub_resolve(&o, "test/e2e-GGUF", &h2) == QVL_OK, "second run: %s", qvl_last_error());
  CHECK(n_data_requests == data0, "second run downloaded %d files", n_data_requests - data0);
  CHECK(h2.model && !strcmp(h2.model, h.model) && h2.quant && !strcmp(h2.quant, "Q8_0"), "default quant");
  hub_files_free(&h2);
  hub_files_free(&h);
  CHECK(h.model == NULL && h.files == NULL, "free");
}

static void test_download_safetensors(const char *cache) {
  hub_opts o = opts_for(cache, endpoint);
  hub_files h;
  qvl_status s = hub_resolve(&o, "test/e2e", &h);
  CHECK(s == QVL_OK, "safetensors download: %s", qvl_last_error());
  if (s != QVL_OK)
    return;
  CHECK(!h.is_gguf && h.mmproj == NULL && h.model && !strcmp(h.model, h.dir), "layout");
  CHECK(h.n_files == 7, "n_files %zu", h.n_files);
  const char *names[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                         "chat_template.json", "preprocessor_config.json", "generation_config.json"};
  for (size_t i = 0; i < 7; i++) {
    const char *l = local_of(&h, names[i]);
    CHECK(l && file_equals(l, find_file(&repos[1], names[i])), "%s", names[i]);
    /* Every file, LFS or not, has the fixture's sha256 in the manifest. */
    char rel[128], sha[65];
    snprintf(rel, sizeof rel, "models/e2e/hf/%s", names[i]);
    CHECK(verify_manifest_get(h.dir, names[i], NULL, sha) == QVL_OK && !strcmp(sha, manifest_sha(rel)), "sha %s",
          names[i]);
  }
  hub_files_free(&h);
  /* Sharded checkpoint: the shards come from the index. */
  s = hub_resolve(&o, "test/sharded", &h);
  CHECK(s == QVL_OK, "sharded: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(h.n_files == 6 && !local_of(&h, "model-00003-of-00003.safetensors"), "sharded n_files %zu", h.n_files);
    const char *sh1 = local_of(&h, "model-00001-of-00002.safetensors");
    const char *sh2 = local_of(&h, "model-00002-of-00002.safetensors");
    CHECK(sh1 && file_equals(sh1, find_file(&repos[2], "model-00001-of-00002.safetensors")), "shard 1");
    CHECK(sh2 && file_equals(sh2, find_file(&repos[2], "model-00002-of-00002.safetensors")), "shard 2");
    hub_files_free(&h);
  }
}

static void test_interrupted(const char *cache) {
  fake_file *f = find_file(&repos[0], "e2e-Q8_0.gguf");
  hub_opts o = opts_for(cache, endpoint);
  hub_files h;
  pthread_mutex_lock(&mu);
  snprintf(cut_path, sizeof cut_path, "%s", f->path);
  cut_at = f->size / 2;
  cut_times = 1;
  pthread_mutex_unlock(&mu);
  int range0 = n_range_requests;
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_IO, "cut download: %d %s", s, qvl_last_error());
  CHECK(strstr(qvl_last_error(), "e2e-Q8_0.gguf") && strstr(qvl_last_error(), "run again to resume"), "msg: %s",
        qvl_last_error());
  char final_path[512], part[600];
  snprintf(final_path, sizeof final_path, "%s/test--e2e-GGUF/main/e2e-Q8_0.gguf", cache);
  snprintf(part, sizeof part, "%s.part", final_path);
  long long have = file_size(part);
  CHECK(!exists(final_path), "cut download put in place");
  CHECK(have > 0 && have <= (long long)f->size / 2, ".part has %lld bytes", have);
  /* The next run resumes where the .part ends and ends verified. */
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "resume: %s", qvl_last_error());
  CHECK(n_range_requests == range0 + 1 && last_range_start == have, "range requests %d, start %lld (part %lld)",
        n_range_requests - range0, last_range_start, have);
  CHECK(file_equals(final_path, f) && !exists(part), "resumed file");
  if (s == QVL_OK)
    hub_files_free(&h);

  /* Within one run: the connection drops and a retry resumes. */
  char cache2[300];
  snprintf(cache2, sizeof cache2, "%s-retry", cache);
  o = opts_for(cache2, endpoint);
  o.max_retries = 2;
  pthread_mutex_lock(&mu);
  cut_at = f->size / 3;
  cut_times = 1;
  pthread_mutex_unlock(&mu);
  range0 = n_range_requests;
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "retry: %s", qvl_last_error());
  CHECK(n_range_requests == range0 + 1 && last_range_start > 0, "retry resumed with Range");
  if (s == QVL_OK) {
    CHECK(file_equals(h.model, f), "retried file");
    hub_files_free(&h);
  }
  /* A stale .part longer than the file: discarded, the download starts over. */
  char cache3[300];
  snprintf(cache3, sizeof cache3, "%s-stale", cache);
  char dir3[400];
  snprintf(dir3, sizeof dir3, "mkdir -p %s/test--e2e-GGUF/main", cache3);
  CHECK(system(dir3) == 0, "mkdir");
  snprintf(part, sizeof part, "%s/test--e2e-GGUF/main/mmproj-e2e-F16.gguf.part", cache3);
  FILE *pf = fopen(part, "wb");
  for (int i = 0; pf && i < 300000; i++)
    fputc('x', pf);
  if (pf)
    fclose(pf);
  /* ... and a .part of the right length but wrong bytes: resumed, mismatched, fetched afresh. */
  snprintf(part, sizeof part, "%s/test--e2e-GGUF/main/e2e-Q8_0.gguf.part", cache3);
  pf = fopen(part, "wb");
  for (size_t i = 0; pf && i < f->size / 2; i++)
    fputc(0, pf);
  if (pf)
    fclose(pf);
  o = opts_for(cache3, endpoint);
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "stale parts: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(file_equals(h.model, f) && file_equals(h.mmproj, find_file(&repos[0], "mmproj-e2e-F16.gguf")),
          "after stale parts");
    hub_files_free(&h);
  }
  set_fault(cut_path, NULL);
}

static void test_corrupt(const char *cache) {
  hub_opts o = opts_for(cache, endpoint);
  o.max_retries = 2;
  hub_files h;
  set_fault(corrupt_path, "mmproj-e2e-F16.gguf");
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  set_fault(corrupt_path, NULL);
  CHECK(s == QVL_ERR_MISMATCH, "corrupt: %d %s", s, qvl_last_error());
  CHECK(strstr(qvl_last_error(), "checksum mismatch") && strstr(qvl_last_error(), "mmproj-e2e-F16.gguf") &&
            strstr(qvl_last_error(), "deleted") &&
            strstr(qvl_last_error(), manifest_sha("models/e2e/gguf/mmproj-e2e-F16.gguf")),
        "msg: %s", qvl_last_error());
  char p[512];
  snprintf(p, sizeof p, "%s/test--e2e-GGUF/main/mmproj-e2e-F16.gguf", cache);
  CHECK(!exists(p), "corrupt file put in place");
  strcat(p, ".part");
  CHECK(!exists(p), "corrupt .part kept");
  uint64_t z;
  snprintf(p, sizeof p, "%s/test--e2e-GGUF/main", cache);
  CHECK(verify_manifest_get(p, "mmproj-e2e-F16.gguf", &z, NULL) == QVL_ERR_NOT_FOUND, "corrupt file recorded");
  CHECK(verify_manifest_get(p, "e2e-Q8_0.gguf", &z, NULL) == QVL_OK, "good file not recorded");
  /* Served correctly, the same cache then completes. */
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "after corrupt: %s", qvl_last_error());
  if (s == QVL_OK)
    hub_files_free(&h);
}

static void test_errors(const char *cache) {
  hub_opts o = opts_for(cache, endpoint);
  hub_files h;
  set_fault(missing_path, "mmproj-e2e-F16.gguf");
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  set_fault(missing_path, NULL);
  CHECK(s == QVL_ERR_NOT_FOUND, "missing file: %d", s);
  CHECK(strstr(qvl_last_error(), "file 'mmproj-e2e-F16.gguf' not found in repo 'test/e2e-GGUF' (HTTP 404)"), "msg: %s",
        qvl_last_error());
  char p[512];
  snprintf(p, sizeof p, "%s/test--e2e-GGUF/main/mmproj-e2e-F16.gguf.part", cache);
  CHECK(!exists(p), "empty .part left after a 404");
  /* Disk full: the .part is a link to /dev/full, so every write fails with ENOSPC. */
  snprintf(p, sizeof p, "%s/test--e2e-GGUF/main/mmproj-e2e-F16.gguf", cache);
  unlink(p);
  strcat(p, ".part");
  if (symlink("/dev/full", p) == 0) {
    s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
    CHECK(s == QVL_ERR_IO && strstr(qvl_last_error(), "disk full") && strstr(qvl_last_error(), "mmproj-e2e-F16.gguf"),
          "disk full: %s", qvl_last_error());
    unlink(p);
  }
  s = hub_resolve(&o, "test/nope", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "repo 'test/nope' not found"), "missing repo: %s",
        qvl_last_error());
  s = hub_resolve(&o, "test/e2e-GGUF:Q4_K_M", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "Q4_K_M") && strstr(qvl_last_error(), "e2e-Q8_0.gguf"),
        "missing quant: %s", qvl_last_error());
  o.revision = "v9";
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "revision 'v9'"), "missing revision: %s", qvl_last_error());
  o.revision = "../x";
  CHECK(hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h) == QVL_ERR_INVALID_ARG, "unsafe revision");
  o.revision = NULL;
  CHECK(hub_resolve(&o, "not a repo", &h) == QVL_ERR_INVALID_ARG, "bad spec");
  /* A private repo: 401 without the token, fine with it. */
  set_fault(require_token, "secret-token");
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "401") && strstr(qvl_last_error(), "HF_TOKEN"),
        "no token: %s", qvl_last_error());
  o.token = "secret-token";
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "token: %s", qvl_last_error());
  if (s == QVL_OK)
    hub_files_free(&h);
  o.token = "";
  set_fault(require_token, NULL);
  pthread_mutex_lock(&mu);
  gated = 1;
  pthread_mutex_unlock(&mu);
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "gated") && strstr(qvl_last_error(), "HF_TOKEN") &&
            strstr(qvl_last_error(), "restricted"),
        "gated: %s", qvl_last_error());
  pthread_mutex_lock(&mu);
  gated = 0;
  pthread_mutex_unlock(&mu);
}

/* The advice that every dead end ends with: files one has, with the exact commands, and the
 * fixture models (README.md, "Without a download"). */
static int has_local_files_advice(const char *msg) {
  return strstr(msg, "./qvl serve -m MODEL.gguf --mmproj MMPROJ.gguf") &&
         strstr(msg, "make serve SERVE_ARGS='-m MODEL.gguf --mmproj MMPROJ.gguf'") &&
         strstr(msg, "\"Without a download\"");
}

/* Nobody listening: what to do next depends on the cache. full holds test/e2e-GGUF:Q8_0 (and its
 * listing); fresh does not exist yet. */
static void test_unreachable(const char *full, const char *fresh) {
  hub_opts o = opts_for(full, dead_endpoint);
  o.max_retries = 1;
  hub_files h;
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  const char *m = qvl_last_error();
  CHECK(s == QVL_ERR_IO && strstr(m, "cannot reach the hub") && strstr(m, "holds this model already") &&
            strstr(m, "QVL_OFFLINE=1") && strstr(m, full),
        "network down, model cached: %s", m);
  /* the listing is cached, but no file of that quantization: the cache is no way out */
  s = hub_resolve(&o, "test/e2e-GGUF:Q4_K_M", &h);
  m = qvl_last_error();
  CHECK(s == QVL_ERR_IO && strstr(m, "cannot reach the hub") && !strstr(m, "OFFLINE") && !strstr(m, "--offline") &&
            strstr(m, "QVL_HF_ENDPOINT") && has_local_files_advice(m),
        "network down, other quantization: %s", m);
  /* an empty cache: never the advice to use it, a mirror or local files instead */
  o = opts_for(fresh, dead_endpoint);
  o.max_retries = 1;
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  m = qvl_last_error();
  CHECK(s == QVL_ERR_IO && strstr(m, "cannot reach the hub") && strstr(m, dead_endpoint) && !strstr(m, "OFFLINE") &&
            !strstr(m, "--offline") && strstr(m, "set QVL_HF_ENDPOINT to its URL") && has_local_files_advice(m),
        "network down, empty cache: %s", m);
}

static void test_offline(const char *cache, const char *empty_cache) {
  hub_opts o = opts_for(cache, dead_endpoint);
  o.offline = 1;
  hub_files h;
  int data0 = n_data_requests, tree0 = n_tree_requests;
  qvl_status s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "offline with cache: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(h.model && strstr(h.model, "e2e-Q8_0.gguf") && h.mmproj && file_equals(h.model, find_file(&repos[0], "e2e-Q8_0.gguf")),
          "offline files");
    hub_files_free(&h);
  }
  CHECK(n_data_requests == data0 && n_tree_requests == tree0, "offline used the network");
  /* QVL_OFFLINE from the environment, the safetensors repo. */
  o.offline = 0;
  setenv("QVL_OFFLINE", "1", 1);
  s = hub_resolve(&o, "test/e2e", &h);
  CHECK(s == QVL_OK && h.n_files == 7, "QVL_OFFLINE=1: %s", qvl_last_error());
  if (s == QVL_OK)
    hub_files_free(&h);
  /* Nothing cached. */
  hub_opts e = opts_for(empty_cache, dead_endpoint);
  s = hub_resolve(&e, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "offline") && strstr(qvl_last_error(), "not in the cache") &&
            strstr(qvl_last_error(), empty_cache) && strstr(qvl_last_error(), "unset QVL_OFFLINE") &&
            !strstr(qvl_last_error(), "--offline") && has_local_files_advice(qvl_last_error()),
        "offline empty: %s", qvl_last_error());
  CHECK(!exists(empty_cache), "offline created the cache");
  unsetenv("QVL_OFFLINE");
  /* the way back names the setting that made it offline, and no other */
  setenv("HF_HUB_OFFLINE", "1", 1);
  s = hub_resolve(&e, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "unset HF_HUB_OFFLINE") &&
            !strstr(qvl_last_error(), "QVL_OFFLINE") && has_local_files_advice(qvl_last_error()),
        "HF_HUB_OFFLINE, empty: %s", qvl_last_error());
  unsetenv("HF_HUB_OFFLINE");
  e.offline = 1;
  s = hub_resolve(&e, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "leave out --offline") &&
            !strstr(qvl_last_error(), "QVL_OFFLINE") && has_local_files_advice(qvl_last_error()),
        "--offline, empty: %s", qvl_last_error());
  /* cache only by nature (qvl verify): how the files get there, nothing about offline settings */
  e.cache_only = "qvl verify checks the cache only";
  s = hub_resolve(&e, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "qvl verify checks the cache only") &&
            strstr(qvl_last_error(), "./qvl serve --hf test/e2e-GGUF:Q8_0") &&
            !strstr(qvl_last_error(), "QVL_OFFLINE") && !strstr(qvl_last_error(), "--offline"),
        "cache only, empty: %s", qvl_last_error());
  CHECK(!exists(empty_cache), "offline created the cache");
  /* Cached listing, file gone: the error names it. */
  char p[512];
  snprintf(p, sizeof p, "%s/test--e2e-GGUF/main/mmproj-e2e-F16.gguf", cache);
  char saved[520];
  snprintf(saved, sizeof saved, "%s.saved", p);
  CHECK(rename(p, saved) == 0, "rename");
  o.offline = 1;
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), "lacks mmproj-e2e-F16.gguf") &&
            strstr(qvl_last_error(), "offline") && strstr(qvl_last_error(), "leave out --offline") &&
            has_local_files_advice(qvl_last_error()),
        "offline partial: %s", qvl_last_error());
  CHECK(rename(saved, p) == 0, "rename back");
}

static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  if (!f)
    return;
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 1, f);
  fclose(f);
}

static void test_verify(const char *cache) {
  char dir[512], model[600], mmproj[600];
  snprintf(dir, sizeof dir, "%s/test--e2e-GGUF/main", cache);
  snprintf(model, sizeof model, "%s/e2e-Q8_0.gguf", dir);
  snprintf(mmproj, sizeof mmproj, "%s/mmproj-e2e-F16.gguf", dir);
  verify_report r = {0};
  qvl_status s = verify_model(dir, &r);
  CHECK(s == QVL_OK && r.n_files == 2 && r.n_ok == 2, "verify good dir: %s", qvl_last_error());
  r = (verify_report){0};
  CHECK(verify_model(model, &r) == QVL_OK && r.n_ok == 1, "verify good file: %s", qvl_last_error());
  CHECK(verify_quick(model) == QVL_OK, "quick");
  flip_byte(model, 5000000);
  r = (verify_report){0};
  s = verify_model(dir, &r);
  CHECK(s == QVL_ERR_MISMATCH && r.n_bad == 1 && r.n_ok == 1, "verify damaged dir: %d", s);
  CHECK(strstr(qvl_last_error(), "e2e-Q8_0.gguf") && strstr(qvl_last_error(), "sha256 mismatch") &&
            strstr(qvl_last_error(), manifest_sha("models/e2e/gguf/e2e-Q8_0.gguf")),
        "msg: %s", qvl_last_error());
  CHECK(verify_model(model, NULL) == QVL_ERR_MISMATCH, "verify damaged file");
  /* Online, a resolve trusts the record (hashing is verify's job) ... but a truncated copy is
   * caught by size and fetched again. */
  CHECK(truncate(model, 1000) == 0, "truncate");
  CHECK(verify_quick(model) == QVL_ERR_MISMATCH && strstr(qvl_last_error(), "size mismatch"), "quick: %s",
        qvl_last_error());
  r = (verify_report){0};
  CHECK(verify_model(dir, &r) == QVL_ERR_MISMATCH && r.n_bad == 1, "verify truncated");
  unlink(mmproj);
  r = (verify_report){0};
  CHECK(verify_model(dir, &r) == QVL_ERR_MISMATCH && r.n_missing == 1 && strstr(qvl_last_error(), "missing"),
        "verify missing: %s", qvl_last_error());
  hub_opts o = opts_for(cache, endpoint);
  hub_files h;
  s = hub_resolve(&o, "test/e2e-GGUF:Q8_0", &h);
  CHECK(s == QVL_OK, "repair: %s", qvl_last_error());
  if (s == QVL_OK)
    hub_files_free(&h);
  r = (verify_report){0};
  CHECK(verify_model(dir, &r) == QVL_OK && r.n_ok == 2, "verify repaired: %s", qvl_last_error());

  /* A local file with a sha256sum sidecar holding the fixture manifest's hash. */
  char local[512], side[520];
  snprintf(local, sizeof local, "%s/local", tmp_root);
  mkdir(local, 0755);
  snprintf(local, sizeof local, "%s/local/my-mmproj.gguf", tmp_root);
  const fake_file *f = find_file(&repos[0], "mmproj-e2e-F16.gguf");
  FILE *out = fopen(local, "wb");
  fwrite(f->data, 1, f->size, out);
  fclose(out);
  CHECK(verify_model(local, NULL) == QVL_ERR_NOT_FOUND && strstr(qvl_last_error(), ".sha256"), "no sidecar: %s",
        qvl_last_error());
  snprintf(side, sizeof side, "%s.sha256", local);
  out = fopen(side, "w");
  fprintf(out, "%s  mmproj-e2e-F16.gguf\n", manifest_sha("models/e2e/gguf/mmproj-e2e-F16.gguf"));
  fclose(out);
  CHECK(verify_model(local, NULL) == QVL_OK, "sidecar good: %s", qvl_last_error());
  flip_byte(local, 100);
  CHECK(verify_model(local, NULL) == QVL_ERR_MISMATCH && strstr(qvl_last_error(), "my-mmproj.gguf"), "sidecar bad: %s",
        qvl_last_error());
  out = fopen(side, "w");
  fprintf(out, "not a checksum\n");
  fclose(out);
  CHECK(verify_model(local, NULL) == QVL_ERR_FORMAT, "bad sidecar");
  /* A directory with SHA256SUMS. */
  char sums[520];
  snprintf(sums, sizeof sums, "%s/local/SHA256SUMS", tmp_root);
  out = fopen(sums, "w");
  fprintf(out, "%s  my-mmproj.gguf\n", manifest_sha("models/e2e/gguf/mmproj-e2e-F16.gguf"));
  fclose(out);
  snprintf(local, sizeof local, "%s/local", tmp_root);
  r = (verify_report){0};
  CHECK(verify_model(local, &r) == QVL_ERR_MISMATCH && r.n_bad == 1, "SHA256SUMS damaged");
  CHECK(verify_model(tmp_root, NULL) == QVL_ERR_NOT_FOUND, "nothing recorded");
  /* Manifests that name files outside their directory, or are not manifests, are refused. */
  char mf[520];
  snprintf(mf, sizeof mf, "%s/local/%s", tmp_root, VERIFY_MANIFEST_NAME);
  const char *bad[] = {"{\"files\": [{\"path\": \"../x\", \"size\": 1, \"sha256\": \"%s\"}]}",
                       "{\"files\": [{\"path\": \"a/..\", \"size\": 1, \"sha256\": \"%s\"}]}",
                       "{\"files\": [{\"path\": \"my-mmproj.gguf\", \"size\": -1, \"sha256\": \"%s\"}]}",
                       "{\"files\": [{\"path\": \"my-mmproj.gguf\", \"size\": 1, \"sha256\": \"%.60s\"}]}",
                       "{\"files\": 3} %s", "not json %s"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    out = fopen(mf, "w");
    fprintf(out, bad[i], manifest_sha("models/e2e/gguf/mmproj-e2e-F16.gguf"));
    fclose(out);
    CHECK(verify_model(local, NULL) == QVL_ERR_FORMAT && strstr(qvl_last_error(), VERIFY_MANIFEST_NAME),
          "bad manifest %zu: %s", i, qvl_last_error());
  }
}

static int setup_repos(void) {
  buf b = {0};
  if (buf_read_file("tests/fixtures/manifest.json", 16u << 20, &b) != QVL_OK)
    return 0;
  fixture_manifest = cJSON_Parse(b.data);
  buf_free(&b);
  if (!fixture_manifest)
    return 0;
  fake_repo *g = &repos[n_repos++];
  g->name = "test/e2e-GGUF";
  const char *ga = "*.gguf filter=lfs diff=lfs merge=lfs -text\n";
  add_mem(g, ".gitattributes", ga, strlen(ga), 0);
  const char *readme = "# e2e test model\n";
  add_mem(g, "README.md", readme, strlen(readme), 0);
  int ok = add_fixture(g, "models/e2e/gguf", "e2e-Q8_0.gguf", 1) &&
           add_fixture(g, "models/e2e/gguf", "mmproj-e2e-F16.gguf", 1);
  /* Not selected, never fetched: a large file a careless selection would pull. */
  add_mem(g, "docs/notes.txt", "x", 1, 0);
  fake_repo *h = &repos[n_repos++];
  h->name = "test/e2e";
  ok = ok && add_fixture(h, "models/e2e/hf", "config.json", 0) &&
       add_fixture(h, "models/e2e/hf", "model.safetensors", 1) && add_fixture(h, "models/e2e/hf", "tokenizer.json", 1) &&
       add_fixture(h, "models/e2e/hf", "tokenizer_config.json", 0) &&
       add_fixture(h, "models/e2e/hf", "chat_template.json", 0) &&
       add_fixture(h, "models/e2e/hf", "preprocessor_config.json", 0) &&
       add_fixture(h, "models/e2e/hf", "generation_config.json", 0);
  add_mem(h, "README.md", readme, strlen(readme), 0);
  /* A made-up sharded checkpoint (the loader never sees it; only the file set matters). */
  fake_repo *s = &repos[n_repos++];
  s->name = "test/sharded";
  const char *idx = "{\"metadata\": {\"total_size\": 8}, \"weight_map\": {\"a.weight\": "
                    "\"model-00001-of-00002.safetensors\", \"b.weight\": \"model-00002-of-00002.safetensors\", "
                    "\"c.weight\": \"model-00001-of-00002.safetensors\"}}";
  add_mem(s, "config.json", "{}", 2, 0);
  add_mem(s, "model.safetensors.index.json", idx, strlen(idx), 0);
  add_mem(s, "model-00001-of-00002.safetensors", "shard-one", 9, 1);
  add_mem(s, "model-00002-of-00002.safetensors", "shard-two!", 10, 1);
  add_mem(s, "model-00003-of-00003.safetensors", "unused", 6, 1);
  add_mem(s, "tokenizer.json", "{}", 2, 0);
  add_mem(s, "tokenizer_config.json", "{}", 2, 0);
  return ok;
}

int main(void) {
  alarm(180); /* the whole run is bounded, whatever hangs */
  setvbuf(stdout, NULL, _IONBF, 0);
  unsetenv("QVL_OFFLINE");
  unsetenv("HF_HUB_OFFLINE");
  test_parse_spec();
  test_select();
  CHECK(setup_repos(), "fixtures missing (run from the repo root)");
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, NULL,
                                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                          MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  CHECK(d != NULL, "cannot start the fake hub on 127.0.0.1");
  const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
  port = info ? info->port : 0;
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u/", port); /* the trailing '/' must not matter */
  snprintf(dead_endpoint, sizeof dead_endpoint, "http://127.0.0.1:%u", closed_port());
  snprintf(tmp_root, sizeof tmp_root, "%s/qvl-test-hub-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  CHECK(mkdtemp(tmp_root) != NULL, "mkdtemp: %s", strerror(errno));
  if (d && port && test_failed == 0) {
    char c1[300], c2[300], c3[300], c4[300], c5[300], c6[300];
    snprintf(c1, sizeof c1, "%s/full", tmp_root);
    snprintf(c2, sizeof c2, "%s/cut", tmp_root);
    snprintf(c3, sizeof c3, "%s/corrupt", tmp_root);
    snprintf(c4, sizeof c4, "%s/errors", tmp_root);
    snprintf(c5, sizeof c5, "%s/empty", tmp_root);
    snprintf(c6, sizeof c6, "%s/unreached", tmp_root);
    test_download_gguf(c1);
    test_download_safetensors(c1);
    test_interrupted(c2);
    test_corrupt(c3);
    test_errors(c4);
    test_unreachable(c4, c6);
    test_offline(c1, c5);
    test_verify(c1);
  }
  if (d)
    MHD_stop_daemon(d);
  nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  for (int i = 0; i < n_repos; i++)
    for (int k = 0; k < repos[i].n; k++)
      free(repos[i].files[k].data);
  cJSON_Delete(fixture_manifest);
  return TEST_SUMMARY("test_hub");
}
