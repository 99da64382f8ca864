#include "model/hub.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/relpath.h"
#include "base/status.h"
#include "model/verify.h"

#define HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define HUB_TREE_NAME "qvl-tree.json"
#define HUB_LOCK_NAME ".qvl-lock"
/* Caps on what the hub may send us: a listing page, an error body, the whole listing. */
#define HUB_MAX_JSON_BYTES (64u << 20)
#define HUB_MAX_ERROR_BODY 4096
#define HUB_MAX_PAGES 1000
#define HUB_MAX_FILES 100000
#define HUB_MAX_INDEX_BYTES (64u << 20)

/* ---- small helpers ---- */

static qvl_status nomem(void) { return qvl_errorf(QVL_ERR_NOMEM, "hub: out of memory"); }

static char *strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strfmt(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

static int ends_with_ci(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcasecmp(s + n - m, suffix);
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int env_true(const char *name) {
  const char *v = getenv(name);
  return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

/* mkdir -p; EEXIST on each level is fine. */
static qvl_status mkdirs(const char *path) {
  char *p = strdup(path);
  if (!p)
    return nomem();
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == 0) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        qvl_status st = qvl_errorf(QVL_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
        free(p);
        return st;
      }
      *s = c;
      if (!c)
        break;
    }
  }
  free(p);
  return QVL_OK;
}

static int name_char_ok(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

/* Revisions are branch names, tags or commit ids; '/' occurs in refs like "refs/pr/1". */
static int revision_is_safe(const char *r) {
  if (!*r || strlen(r) > 200 || !relpath_is_safe(r))
    return 0;
  for (const char *s = r; *s; s++)
    if (!name_char_ok(*s) && *s != '/')
      return 0;
  return 1;
}

/* Percent-encodes everything but unreserved characters (and '/' when keep_slash). */
static char *url_escape(const char *s, int keep_slash) {
  size_t n = strlen(s);
  char *o = malloc(3 * n + 1);
  if (!o)
    return NULL;
  char *d = o;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      *d++ = (char)c;
    else {
      static const char hex[] = "0123456789ABCDEF";
      *d++ = '%';
      *d++ = hex[c >> 4];
      *d++ = hex[c & 15];
    }
  }
  *d = 0;
  return o;
}

static void human_bytes(double b, char *out, size_t n) {
  if (b >= 1e9)
    snprintf(out, n, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    snprintf(out, n, "%.1f MB", b / 1e6);
  else if (b >= 1e3)
    snprintf(out, n, "%.1f kB", b / 1e3);
  else
    snprintf(out, n, "%.0f B", b);
}

/* git's blob id: sha1("blob <size>\0" + content); the hub lists it as "oid" for non-LFS files. */
static qvl_status git_blob_sha1(const char *path, char hex[41]) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return qvl_errorf(QVL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return qvl_errorf(QVL_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  }
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  qvl_status s = QVL_OK;
  char head[64];
  int hn = snprintf(head, sizeof head, "blob %lld", (long long)st.st_size);
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) != 1 || EVP_DigestUpdate(ctx, head, (size_t)hn + 1) != 1)
    s = qvl_errorf(QVL_ERR_INTERNAL, "sha1: cannot initialise the OpenSSL digest");
  unsigned char b[65536];
  size_t n;
  while (s == QVL_OK && (n = fread(b, 1, sizeof b, f)) > 0)
    if (EVP_DigestUpdate(ctx, b, n) != 1)
      s = qvl_errorf(QVL_ERR_INTERNAL, "sha1: digest update failed");
  if (s == QVL_OK && ferror(f))
    s = qvl_errorf(QVL_ERR_IO, "%s: read error", path);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  if (s == QVL_OK && (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 20))
    s = qvl_errorf(QVL_ERR_INTERNAL, "sha1: digest final failed");
  if (s == QVL_OK)
    for (unsigned i = 0; i < 20; i++)
      snprintf(hex + 2 * i, 3, "%02x", md[i]);
  EVP_MD_CTX_free(ctx);
  fclose(f);
  return s;
}

static int is_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i]))
      return 0;
  return s[n] == 0;
}

/* ---- spec, settings ---- */

qvl_status hub_parse_spec(const char *spec, char **repo, char **quant) {
  *repo = *quant = NULL;
  if (!spec || !*spec)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "--hf: empty model name (expected OWNER/NAME[:QUANT])");
  const char *colon = strchr(spec, ':');
  size_t rn = colon ? (size_t)(colon - spec) : strlen(spec);
  int slashes = 0, ok = rn > 0 && rn <= 200;
  for (size_t i = 0; ok && i < rn; i++) {
    if (spec[i] == '/')
      slashes++;
    else if (!name_char_ok(spec[i]))
      ok = 0;
  }
  const char *sl = memchr(spec, '/', rn);
  if (!ok || slashes != 1 || sl == spec || sl == spec + rn - 1 || spec[0] == '.' || sl[1] == '.' ||
      memmem(spec, rn, "..", 2))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "--hf '%.200s': expected OWNER/NAME[:QUANT] (letters, digits, '-', '_', '.'; e.g. "
                      "Qwen/Qwen3-VL-2B-Instruct-GGUF:Q8_0)",
                      spec);
  if (colon) {
    const char *q = colon + 1;
    size_t qn = strlen(q);
    int qok = qn > 0 && qn <= 32;
    for (size_t i = 0; qok && i < qn; i++)
      qok = isalnum((unsigned char)q[i]) || q[i] == '_' || q[i] == '-' || q[i] == '.';
    if (!qok)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "--hf '%.200s': bad quantization '%.40s' (expected e.g. Q8_0, Q4_K_M, F16)",
                        spec, q);
  }
  *repo = strndup(spec, rn);
  *quant = colon ? strdup(colon + 1) : NULL;
  if (!*repo || (colon && !*quant)) {
    free(*repo);
    free(*quant);
    *repo = *quant = NULL;
    return nomem();
  }
  return QVL_OK;
}

qvl_status hub_cache_root(const hub_opts *o, char **out) {
  const char *v = o && o->cache_dir ? o->cache_dir : getenv("QVL_CACHE");
  if (v && *v)
    *out = strdup(v);
  else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/')
    *out = strfmt("%s/qvl", v);
  else if ((v = getenv("HOME")) && *v)
    *out = strfmt("%s/.cache/qvl", v);
  else
    return qvl_errorf(QVL_ERR_INVALID_ARG, "no cache directory: set QVL_CACHE (or HOME / XDG_CACHE_HOME)");
  if (!*out)
    return nomem();
  size_t n = strlen(*out);
  while (n > 1 && (*out)[n - 1] == '/')
    (*out)[--n] = 0;
  return QVL_OK;
}

/* ---- the listing ---- */

typedef struct entry {
  char *path;
  uint64_t size;
  char sha256[65]; /* LFS files */
  char git_oid[41]; /* non-LFS files: git blob sha1 */
} entry;

typedef struct listing {
  entry *e;
  size_t n, cap;
} listing;

static void listing_free(listing *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->e[i].path);
  free(l->e);
  memset(l, 0, sizeof *l);
}

static const entry *listing_find(const listing *l, const char *path) {
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->e[i].path, path))
      return &l->e[i];
  return NULL;
}

static int json_size(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 9007199254740992.0 ||
      j->valuedouble != (double)(uint64_t)j->valuedouble)
    return 0;
  *out = (uint64_t)j->valuedouble;
  return 1;
}

/*
 * Adds the file entries of one tree page (or of our cached qvl-tree.json, which uses the same
 * shape). Directories are skipped; a malformed entry or an unsafe path is an error naming it.
 */
static qvl_status listing_add_json(listing *l, const cJSON *arr, const char *what) {
  if (!cJSON_IsArray(arr))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: expected a JSON array of files", what);
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "file") != 0)
      continue;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "path");
    const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(it, "lfs");
    const cJSON *oid = cJSON_GetObjectItemCaseSensitive(it, "oid");
    entry e = {0};
    if (!cJSON_IsString(p) || !json_size(cJSON_GetObjectItemCaseSensitive(it, "size"), &e.size))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: file entry without a string \"path\" and a numeric \"size\"", what);
    if (!relpath_is_safe(p->valuestring))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: refusing file path '%.200s' (absolute, '..' or control characters)",
                        what, p->valuestring);
    if (cJSON_IsObject(lfs)) {
      const cJSON *lo = cJSON_GetObjectItemCaseSensitive(lfs, "oid");
      uint64_t lsize;
      if (!cJSON_IsString(lo) || !verify_is_sha256(lo->valuestring))
        return qvl_errorf(QVL_ERR_FORMAT, "%s: '%s': lfs.oid is not a sha256 (64 hex digits)", what, p->valuestring);
      if (json_size(cJSON_GetObjectItemCaseSensitive(lfs, "size"), &lsize))
        e.size = lsize;
      memcpy(e.sha256, lo->valuestring, 65);
      for (char *c = e.sha256; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    } else if (cJSON_IsString(oid) && strlen(oid->valuestring) == 40 && is_hex(oid->valuestring, 40)) {
      memcpy(e.git_oid, oid->valuestring, 41);
      for (char *c = e.git_oid; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    }
    if (listing_find(l, p->valuestring))
      continue;
    if (l->n >= HUB_MAX_FILES)
      return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: more than %d files", what, HUB_MAX_FILES);
    if (l->n == l->cap) {
      size_t cap = l->cap ? l->cap * 2 : 64;
      entry *ne = realloc(l->e, cap * sizeof *ne);
      if (!ne)
        return nomem();
      l->e = ne;
      l->cap = cap;
    }
    if (!(e.path = strdup(p->valuestring)))
      return nomem();
    l->e[l->n++] = e;
  }
  return QVL_OK;
}

static cJSON *listing_to_json(const listing *l, const char *repo, const char *revision) {
  cJSON *root = cJSON_CreateObject();
  cJSON *files = root ? cJSON_AddArrayToObject(root, "files") : NULL;
  if (!files || !cJSON_AddStringToObject(root, "repo", repo) || !cJSON_AddStringToObject(root, "revision", revision)) {
    cJSON_Delete(root);
    return NULL;
  }
  for (size_t i = 0; i < l->n; i++) {
    const entry *e = &l->e[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(files, o) || !cJSON_AddStringToObject(o, "type", "file") ||
        !cJSON_AddStringToObject(o, "path", e->path) || !cJSON_AddNumberToObject(o, "size", (double)e->size) ||
        (e->git_oid[0] && !cJSON_AddStringToObject(o, "oid", e->git_oid))) {
      cJSON_Delete(root);
      return NULL;
    }
    if (e->sha256[0]) {
      cJSON *lfs = cJSON_AddObjectToObject(o, "lfs");
      if (!lfs || !cJSON_AddStringToObject(lfs, "oid", e->sha256) ||
          !cJSON_AddNumberToObject(lfs, "size", (double)e->size)) {
        cJSON_Delete(root);
        return NULL;
      }
    }
  }
  return root;
}

/* ---- selection ---- */

/* quant occurs in name as a whole token: preceded by start/'-'/'_'/'.', followed by '.'/'-' or end. */
static int has_quant_token(const char *name, const char *quant) {
  size_t qn = strlen(quant), n = strlen(name);
  for (size_t i = 0; i + qn <= n; i++) {
    if (strncasecmp(name + i, quant, qn) != 0)
      continue;
    char before = i ? name[i - 1] : '-';
    char after = name[i + qn];
    if ((before == '-' || before == '_' || before == '.') && (after == '.' || after == '-' || after == 0))
      return 1;
  }
  return 0;
}

/* "<stem>-00001-of-00003.gguf": returns 1 and the part number, the count and the stem length. */
static int split_part(const char *name, int *part, int *count, size_t *stem_len) {
  size_t n = strlen(name);
  static const char tail[] = "-00000-of-00000.gguf";
  size_t tn = sizeof tail - 1;
  if (n <= tn)
    return 0;
  const char *t = name + n - tn;
  for (size_t i = 0; i < tn; i++) {
    if (tail[i] == '0' ? !isdigit((unsigned char)t[i]) : tolower((unsigned char)t[i]) != tail[i])
      return 0;
  }
  /* Both fields are exactly five digits (checked above), so strtol cannot overflow. */
  *part = (int)strtol(t + 1, NULL, 10);
  *count = (int)strtol(t + 10, NULL, 10);
  *stem_len = n - tn;
  return *part >= 1 && *count >= 1 && *part <= *count;
}

static int is_mmproj(const char *path) {
  const char *b = base_name(path);
  return strncasecmp(b, "mmproj", 6) == 0 || strcasestr(b, "-mmproj") || strcasestr(b, "_mmproj");
}

typedef struct sel {
  size_t *idx;
  hub_role *role;
  size_t n, cap;
} sel;

static qvl_status sel_add(sel *s, size_t i, hub_role r) {
  for (size_t k = 0; k < s->n; k++)
    if (s->idx[k] == i)
      return QVL_OK;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    size_t *ni = realloc(s->idx, cap * sizeof *ni);
    if (ni)
      s->idx = ni;
    hub_role *nr = realloc(s->role, cap * sizeof *nr);
    if (nr)
      s->role = nr;
    if (!ni || !nr)
      return nomem();
    s->cap = cap;
  }
  s->idx[s->n] = i;
  s->role[s->n] = r;
  s->n++;
  return QVL_OK;
}

/* Names of the candidates, for "available: ..." in error messages. */
static void list_names(const char *const *paths, size_t n, int want_mmproj, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (size_t i = 0; i < n && len + 1 < cap; i++) {
    if (!ends_with_ci(paths[i], ".gguf") || is_mmproj(paths[i]) != want_mmproj)
      continue;
    int part, count;
    size_t stem;
    if (split_part(base_name(paths[i]), &part, &count, &stem) && part != 1)
      continue;
    int w = snprintf(out + len, cap - len, "%s%s", len ? ", " : "", paths[i]);
    if (w < 0)
      break;
    len += (size_t)w;
  }
  if (len >= cap && cap > 4)
    memcpy(out + cap - 4, "...", 4); /* the list was cut: mark it, keeping the NUL */
  if (!out[0])
    snprintf(out, cap, "none");
}

/*
 * Text model candidates for a quant: whole files, or split sets counted once by their first part.
 * Returns the number of distinct models; *first is the index of one of them.
 */
static size_t gguf_models(const char *const *paths, size_t n, const char *quant, size_t *first) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (!ends_with_ci(paths[i], ".gguf") || is_mmproj(paths[i]))
      continue;
    if (quant && !has_quant_token(base_name(paths[i]), quant))
      continue;
    int part, cnt;
    size_t stem;
    if (split_part(base_name(paths[i]), &part, &cnt, &stem) && part != 1)
      continue;
    if (count++ == 0)
      *first = i;
  }
  return count;
}

static qvl_status add_gguf_model(const char *const *paths, size_t n, size_t first, const char *repo, sel *s) {
  int part, count;
  size_t stem;
  const char *fb = base_name(paths[first]);
  if (!split_part(fb, &part, &count, &stem))
    return sel_add(s, first, HUB_ROLE_MODEL);
  /* Every part of the set must be there: a model with a missing shard cannot load. */
  size_t dir_len = (size_t)(fb - paths[first]);
  for (int p = 1; p <= count; p++) {
    size_t found = SIZE_MAX;
    for (size_t i = 0; i < n && found == SIZE_MAX; i++) {
      const char *b = base_name(paths[i]);
      int pp, cc;
      size_t ss;
      if ((size_t)(b - paths[i]) == dir_len && !strncmp(paths[i], paths[first], dir_len + stem) &&
          split_part(b, &pp, &cc, &ss) && ss == stem && pp == p && cc == count)
        found = i;
    }
    if (found == SIZE_MAX)
      return qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s': split model '%s' lacks part %d of %d", repo, paths[first], p,
                        count);
    QVL_TRY(sel_add(s, found, HUB_ROLE_MODEL));
  }
  return QVL_OK;
}

static size_t find_path(const char *const *paths, size_t n, const char *p) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(paths[i], p))
      return i;
  return SIZE_MAX;
}

static qvl_status select_impl(const char *const *paths, size_t n, const char *quant, const char *repo, sel *s,
                              int *is_gguf, const char **quant_used) {
  *quant_used = quant;
  int any_gguf = 0;
  for (size_t i = 0; i < n; i++)
    any_gguf |= ends_with_ci(paths[i], ".gguf");
  *is_gguf = any_gguf;
  char names[600];
  if (any_gguf) {
    size_t first = 0, count;
    if (quant) {
      count = gguf_models(paths, n, quant, &first);
      if (count == 0) {
        list_names(paths, n, 0, names, sizeof names);
        return qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s' has no GGUF model for quantization '%s' (available: %s)",
                          repo, quant, names);
      }
    } else {
      /* Q8_0 is the default published quantization: near-lossless at half the bf16 size. */
      count = gguf_models(paths, n, "Q8_0", &first);
      if (count > 0) {
        *quant_used = "Q8_0";
      } else if (gguf_models(paths, n, NULL, &first) == 1) {
        count = 1; /* the repo's only model, whatever its type */
      }
      if (count == 0) {
        list_names(paths, n, 0, names, sizeof names);
        return qvl_errorf(QVL_ERR_NOT_FOUND,
                          "repo '%s' has several GGUF models and no Q8_0; choose one with %s:QUANT (available: %s)",
                          repo, repo, names);
      }
    }
    if (count > 1) {
      list_names(paths, n, 0, names, sizeof names);
      return qvl_errorf(QVL_ERR_INVALID_ARG, "repo '%s': quantization '%s' matches %zu models (available: %s)", repo,
                        *quant_used, count, names);
    }
    QVL_TRY(add_gguf_model(paths, n, first, repo, s));
    /* The projector: the same quant, else F16 (what converters publish), else any. */
    const char *prefs[2] = {*quant_used, "F16"};
    size_t pick = SIZE_MAX;
    for (int k = 0; k < 2 && pick == SIZE_MAX; k++)
      for (size_t i = 0; i < n && pick == SIZE_MAX; i++)
        if (prefs[k] && ends_with_ci(paths[i], ".gguf") && is_mmproj(paths[i]) &&
            has_quant_token(base_name(paths[i]), prefs[k]))
          pick = i;
    for (size_t i = 0; i < n && pick == SIZE_MAX; i++)
      if (ends_with_ci(paths[i], ".gguf") && is_mmproj(paths[i]))
        pick = i;
    if (pick != SIZE_MAX)
      QVL_TRY(sel_add(s, pick, HUB_ROLE_MMPROJ));
    return QVL_OK;
  }
  if (quant)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "repo '%s' has no GGUF files, so ':%s' does not apply; drop it to use the safetensors "
                      "checkpoint (quantize on load with --dtype), or use a -GGUF repo",
                      repo, quant);
  size_t w = find_path(paths, n, "model.safetensors.index.json");
  if (w == SIZE_MAX)
    w = find_path(paths, n, "model.safetensors");
  if (w == SIZE_MAX)
    return qvl_errorf(QVL_ERR_NOT_FOUND,
                      "repo '%s' has neither GGUF files nor model.safetensors(.index.json): not a model qvl can load",
                      repo);
  QVL_TRY(sel_add(s, w, HUB_ROLE_MODEL));
  static const char *const required[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
  static const char *const optional[] = {"chat_template.json", "chat_template.jinja", "preprocessor_config.json",
                                         "generation_config.json"};
  char missing[300] = "";
  for (size_t k = 0; k < sizeof required / sizeof *required; k++) {
    size_t i = find_path(paths, n, required[k]);
    if (i == SIZE_MAX)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s", missing[0] ? ", " : "",
               required[k]);
    else
      QVL_TRY(sel_add(s, i, HUB_ROLE_CONFIG));
  }
  if (missing[0])
    return qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s' lacks %s", repo, missing);
  for (size_t k = 0; k < sizeof optional / sizeof *optional; k++) {
    size_t i = find_path(paths, n, optional[k]);
    if (i != SIZE_MAX)
      QVL_TRY(sel_add(s, i, HUB_ROLE_CONFIG));
  }
  return QVL_OK;
}

qvl_status hub_select(const char *const *paths, size_t n, const char *quant, const char *repo, size_t **idx,
                      hub_role **roles, size_t *n_sel, int *is_gguf) {
  sel s = {0};
  const char *qu;
  qvl_status st = select_impl(paths, n, quant, repo ? repo : "?", &s, is_gguf, &qu);
  if (st != QVL_OK) {
    free(s.idx);
    free(s.role);
    *idx = NULL;
    *roles = NULL;
    *n_sel = 0;
    return st;
  }
  *idx = s.idx;
  *roles = s.role;
  *n_sel = s.n;
  return QVL_OK;
}

void hub_paths_free(char **paths, size_t n) {
  for (size_t i = 0; paths && i < n; i++)
    free(paths[i]);
  free(paths);
}

qvl_status hub_select_listing(const char *json, size_t len, const char *quant, char ***paths, size_t *n) {
  *paths = NULL;
  *n = 0;
  cJSON *j = cJSON_ParseWithLength(json, len);
  if (!j)
    return qvl_errorf(QVL_ERR_FORMAT, "listing: not JSON");
  listing l = {0};
  qvl_status s = listing_add_json(&l, j, "listing");
  cJSON_Delete(j);
  const char **names = NULL;
  size_t *idx = NULL, ns = 0;
  hub_role *roles = NULL;
  int is_gguf;
  if (s == QVL_OK && !(names = malloc((l.n ? l.n : 1) * sizeof *names)))
    s = nomem();
  if (s == QVL_OK) {
    for (size_t i = 0; i < l.n; i++)
      names[i] = l.e[i].path;
    s = hub_select(names, l.n, quant, "listing", &idx, &roles, &ns, &is_gguf);
  }
  char **out = NULL;
  if (s == QVL_OK && !(out = calloc(ns ? ns : 1, sizeof *out)))
    s = nomem();
  for (size_t i = 0; s == QVL_OK && i < ns; i++)
    if (!(out[i] = strdup(names[idx[i]])))
      s = nomem();
  if (s == QVL_OK) {
    *paths = out;
    *n = ns;
  } else {
    hub_paths_free(out, ns);
  }
  free(names);
  free(idx);
  free(roles);
  listing_free(&l);
  return s;
}

/* ---- HTTP ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct ctx {
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
} ctx;

/* What one transfer received: status line, the headers we use, and where the body went. */
typedef struct xfer {
  ctx *c;
  long code;
  char err_code[64];     /* X-Error-Code */
  char err_msg[256];     /* X-Error-Message */
  char link_next[2048];  /* Link: <...>; rel="next" */
  char linked_etag[80];  /* X-Linked-Etag: sha256 of an LFS file */
  uint64_t linked_size;  /* X-Linked-Size */
  uint64_t content_range_total;
  /* memory body (JSON) or error body */
  buf body;
  size_t body_cap;
  /* file body */
  int fd;
  uint64_t start;   /* bytes in the .part before this transfer */
  uint64_t written; /* bytes written by this transfer */
  int positioned;   /* the first body byte decided between append (206) and restart (200) */
  int write_errno;
  int body_to_file;
  /* progress */
  const char *label;
  uint64_t total;
  double t0, last_draw;
  int last_decile;
} xfer;

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\r' || s[n - 1] == '\n' || s[n - 1] == ' '))
    s[--n] = 0;
}

static void header_value(const char *line, size_t len, const char *name, char *out, size_t cap) {
  size_t nn = strlen(name);
  if (len <= nn || strncasecmp(line, name, nn) != 0 || line[nn] != ':')
    return;
  const char *v = line + nn + 1;
  size_t vn = len - nn - 1;
  while (vn && (*v == ' ' || *v == '\t')) {
    v++;
    vn--;
  }
  if (vn >= cap)
    vn = cap - 1;
  memcpy(out, v, vn);
  out[vn] = 0;
  trim(out);
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t len = size * nmemb;
  if (len >= 5 && !strncmp(data, "HTTP/", 5)) {
    /* A new response (after a redirect): its error headers replace the previous ones. The
     * X-Linked-* headers come on the hub's redirect, so they are kept. */
    x->err_code[0] = x->err_msg[0] = x->link_next[0] = 0;
    return len;
  }
  header_value(data, len, "X-Error-Code", x->err_code, sizeof x->err_code);
  header_value(data, len, "X-Error-Message", x->err_msg, sizeof x->err_msg);
  char tmp[2048] = "";
  header_value(data, len, "X-Linked-Etag", tmp, sizeof tmp);
  if (tmp[0]) {
    char *v = tmp;
    if (!strncmp(v, "W/", 2))
      v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
      v[n - 1] = 0;
      v++;
    }
    /* Only a sha256 (64 hex) is of use; anything longer is not one. */
    if (strlen(v) < sizeof x->linked_etag)
      memcpy(x->linked_etag, v, strlen(v) + 1);
  }
  tmp[0] = 0;
  header_value(data, len, "X-Linked-Size", tmp, sizeof tmp);
  if (tmp[0])
    x->linked_size = strtoull(tmp, NULL, 10);
  tmp[0] = 0;
  header_value(data, len, "Content-Range", tmp, sizeof tmp);
  if (tmp[0]) {
    const char *sl = strchr(tmp, '/');
    if (sl && isdigit((unsigned char)sl[1]))
      x->content_range_total = strtoull(sl + 1, NULL, 10);
  }
  tmp[0] = 0;
  header_value(data, len, "Link", tmp, sizeof tmp);
  if (tmp[0]) {
    /* Link: <url>; rel="next"[, <url2>; rel="prev"] */
    for (char *p = tmp; (p = strchr(p, '<'));) {
      char *e = strchr(p, '>');
      if (!e)
        break;
      char *nxt = strchr(e, ',');
      const char *rel = strstr(e, "rel=\"next\"");
      if (rel && (!nxt || rel < nxt)) {
        size_t n = (size_t)(e - p - 1);
        if (n < sizeof x->link_next) {
          memcpy(x->link_next, p + 1, n);
          x->link_next[n] = 0;
        }
        break;
      }
      p = e;
    }
  }
  return len;
}

static void progress_draw(xfer *x, int done) {
  if (x->c->progress < 0 || !x->label)
    return;
  double t = now_s();
  uint64_t have = x->start + x->written;
  double el = t - x->t0;
  /* The first few milliseconds give no useful rate; the final line always gets one. */
  double rate = (el > 0.5 || (done && el > 0)) ? (double)x->written / el : 0;
  int pct = x->total ? (int)(100.0 * (double)have / (double)x->total) : 0;
  char h[32], tot[32];
  human_bytes((double)have, h, sizeof h);
  human_bytes((double)x->total, tot, sizeof tot);
  if (x->c->progress == 1) {
    if (!done && t - x->last_draw < 0.1)
      return;
    x->last_draw = t;
    char eta[32] = "--:--";
    if (rate > 0 && x->total > have) {
      long s = (long)((double)(x->total - have) / rate);
      snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    int width = 24, fill = x->total ? (int)((double)width * (double)have / (double)x->total) : 0;
    char bar[32];
    for (int i = 0; i < width; i++)
      bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\r%-28.28s %3d%% [%s] %s / %s  %.1f MB/s  ETA %s   ", x->label, pct, bar, h, tot, rate / 1e6,
            eta);
    if (done)
      fputc('\n', stderr);
    fflush(stderr);
  } else {
    /* Logs (not a terminal): one line per quarter, so a 4 GB download stays a few lines. */
    int dec = pct / 25;
    if (!done && (dec <= x->last_decile || t - x->last_draw < 2.0))
      return;
    x->last_decile = dec;
    x->last_draw = t;
    fprintf(stderr, "qvl: %s: %s%s / %s (%d%%), %.1f MB/s\n", x->label, done ? "done, " : "", h, tot, pct, rate / 1e6);
  }
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t len = size * nmemb;
  long code = 0;
  curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &code);
  if (!x->body_to_file || (code != 200 && code != 206)) {
    size_t cap = x->body_to_file ? HUB_MAX_ERROR_BODY : x->body_cap;
    if (x->body.len + len > cap) {
      if (x->body_to_file)
        return len; /* an error page: the first few kB are enough */
      x->write_errno = EFBIG;
      return 0;
    }
    return buf_append(&x->body, data, len) == QVL_OK ? len : 0;
  }
  if (!x->positioned) {
    /* 206: the server honoured our Range and continues the .part; 200: it starts over. */
    if (code == 200 && x->start > 0) {
      x->start = 0;
      if (ftruncate(x->fd, 0) != 0) {
        x->write_errno = errno;
        return 0;
      }
    }
    if (lseek(x->fd, (off_t)x->start, SEEK_SET) < 0) {
      x->write_errno = errno;
      return 0;
    }
    x->positioned = 1;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(x->fd, data + off, len - off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      x->write_errno = errno;
      return 0;
    }
    off += (size_t)w;
  }
  x->written += len;
  progress_draw(x, 0);
  return len;
}

static qvl_status ctx_open(ctx *c) {
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return qvl_errorf(QVL_ERR_INTERNAL, "libcurl initialisation failed: %s", curl_easy_strerror(curl_init_rc));
  c->curl = curl_easy_init();
  if (!c->curl)
    return qvl_errorf(QVL_ERR_INTERNAL, "libcurl: cannot create a handle");
  c->headers = curl_slist_append(NULL, "User-Agent: qvl/" QVL_VERSION);
  if (c->token && *c->token) {
    char *h = strfmt("Authorization: Bearer %s", c->token);
    struct curl_slist *n = h ? curl_slist_append(c->headers, h) : NULL;
    free(h);
    if (!n)
      return nomem();
    c->headers = n;
  }
  return c->headers ? QVL_OK : nomem();
}

static void ctx_close(ctx *c) {
  if (c->curl)
    curl_easy_cleanup(c->curl);
  curl_slist_free_all(c->headers);
  c->curl = NULL;
  c->headers = NULL;
}

/* One GET; fills x and returns the curl result (HTTP errors are in x->code). */
static CURLcode perform(ctx *c, xfer *x, const char *url, const char *range) {
  CURL *h = c->curl;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  /* Redirects go to a CDN with signed URLs: curl keeps our Authorization header to the original
   * host only (CURLOPT_UNRESTRICTED_AUTH stays off). */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_time_s);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
  if (range)
    curl_easy_setopt(h, CURLOPT_RANGE, range);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->code);
  return rc;
}

static int curl_retryable(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_PARTIAL_FILE:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
    return 1;
  default:
    return 0;
  }
}

static int http_retryable(long code) { return code == 429 || code == 408 || (code >= 500 && code <= 599); }

static long backoff_ms(const ctx *c, int attempt) {
  long ms = c->retry_base_ms;
  for (int i = 0; i < attempt && ms < 60000; i++)
    ms *= 2;
  return ms > 60000 ? 60000 : ms;
}

static qvl_status network_error(const ctx *c, CURLcode rc, const char *what, int attempts) {
  if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY ||
      (rc == CURLE_OPERATION_TIMEDOUT && !strstr(what, "download")))
    return qvl_errorf(QVL_ERR_IO,
                      "cannot reach the hub at %s while %s: %s (%d attempt%s). Check the network, or set "
                      "QVL_OFFLINE=1 to use the cache only",
                      c->endpoint, what, curl_easy_strerror(rc), attempts, attempts == 1 ? "" : "s");
  return qvl_errorf(rc == CURLE_OPERATION_TIMEDOUT ? QVL_ERR_TIMEOUT : QVL_ERR_IO, "%s failed: %s (%d attempt%s)", what,
                    curl_easy_strerror(rc), attempts, attempts == 1 ? "" : "s");
}

/* Turns a final HTTP error status into the message a user can act on. file may be NULL (listing). */
static qvl_status http_error(const ctx *c, const xfer *x, const char *file) {
  const char *em = x->err_msg[0] ? x->err_msg : "";
  const char *sep = x->err_msg[0] ? ": " : "";
  /* The hub answers 401 + RepoNotFound for private and for nonexistent repos alike. */
  if (x->code == 401)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "repo '%s': access denied (HTTP 401)%s%s. It does not exist, or it is private or gated: %s",
                      c->repo, sep, em,
                      c->token ? "the token in HF_TOKEN was rejected or has no access to it"
                               : "check the name, or set HF_TOKEN to an access token of an account that may read it");
  if (x->code == 404) {
    if (!strcmp(x->err_code, "RevisionNotFound"))
      return qvl_errorf(QVL_ERR_NOT_FOUND, "revision '%s' not found in repo '%s' (HTTP %ld)", c->revision, c->repo,
                        x->code);
    if (file && strcmp(x->err_code, "RepoNotFound") != 0)
      return qvl_errorf(QVL_ERR_NOT_FOUND, "file '%s' not found in repo '%s' (HTTP %ld)", file, c->repo, x->code);
    return qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s' not found on %s (HTTP %ld)%s%s; check the name", c->repo,
                      c->endpoint, x->code, sep, em);
  }
  if (x->code == 403 || !strcmp(x->err_code, "GatedRepo"))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "repo '%s' is gated (HTTP %ld)%s%s: accept its terms at %s/%s and set HF_TOKEN to an access "
                      "token of that account",
                      c->repo, x->code, sep, em, c->endpoint, c->repo);
  return qvl_errorf(QVL_ERR_IO, "hub answered HTTP %ld for %s%s%s%s", x->code, file ? file : "the file listing",
                    file ? " " : "", sep, em);
}

/* GET a JSON document with bounded retries. */
static qvl_status get_json(ctx *c, const char *url, const char *what, cJSON **out, char *link_next, size_t ln_cap) {
  *out = NULL;
  for (int attempt = 0;; attempt++) {
    xfer x = {.c = c, .fd = -1, .body_cap = HUB_MAX_JSON_BYTES};
    CURLcode rc = perform(c, &x, url, NULL);
    int retry = (rc != CURLE_OK && curl_retryable(rc)) || (rc == CURLE_OK && http_retryable(x.code));
    if (retry && attempt < c->max_retries) {
      buf_free(&x.body);
      sleep_ms(backoff_ms(c, attempt));
      continue;
    }
    qvl_status s = QVL_OK;
    if (rc == CURLE_WRITE_ERROR && x.write_errno == EFBIG)
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: the hub's answer exceeds %u bytes", what, HUB_MAX_JSON_BYTES);
    else if (rc != CURLE_OK)
      s = network_error(c, rc, what, attempt + 1);
    else if (x.code != 200)
      s = http_error(c, &x, NULL);
    else if (!(*out = cJSON_ParseWithLength(x.body.data ? x.body.data : "", x.body.len)))
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: the hub's answer is not JSON (%zu bytes)", what, x.body.len);
    if (s == QVL_OK && link_next)
      snprintf(link_next, ln_cap, "%s", x.link_next);
    buf_free(&x.body);
    return s;
  }
}

static qvl_status fetch_listing(ctx *c, listing *l) {
  char *rev = url_escape(c->revision, 0);
  char *url = rev ? strfmt("%s/api/models/%s/tree/%s?recursive=true", c->endpoint, c->repo, rev) : NULL;
  free(rev);
  if (!url)
    return nomem();
  char what[300];
  snprintf(what, sizeof what, "listing repo '%s'", c->repo);
  qvl_status s = QVL_OK;
  for (int page = 0; s == QVL_OK; page++) {
    if (page >= HUB_MAX_PAGES) {
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "%s: more than %d pages", what, HUB_MAX_PAGES);
      break;
    }
    cJSON *j;
    char next[2048];
    s = get_json(c, url, what, &j, next, sizeof next);
    if (s == QVL_OK)
      s = listing_add_json(l, j, what);
    cJSON_Delete(j);
    free(url);
    url = NULL;
    if (s != QVL_OK || !next[0])
      break;
    /* Follow pages on the same hub only: the token must not go elsewhere. */
    if (next[0] == '/')
      url = strfmt("%s%s", c->endpoint, next);
    else if (!strncmp(next, c->endpoint, strlen(c->endpoint)) && next[strlen(c->endpoint)] == '/')
      url = strdup(next);
    else
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: next page '%.200s' is not on %s", what, next, c->endpoint);
    if (s == QVL_OK && !url)
      s = nomem();
  }
  free(url);
  return s;
}

/* ---- downloading one file ---- */

typedef struct resolve_state {
  ctx c;
  char *dir; /* snapshot directory */
  int offline;
} resolve_state;

/* Confirms a complete file against the listing: sha256 (LFS), else git blob id, else size. */
static qvl_status check_content(const char *path, const entry *e, char sha256_out[65]) {
  uint64_t size;
  char got[65];
  QVL_TRY(verify_sha256_file(path, got, &size));
  if (size != e->size)
    return qvl_errorf(QVL_ERR_MISMATCH, "size mismatch: expected %llu bytes, got %llu", (unsigned long long)e->size,
                      (unsigned long long)size);
  if (e->sha256[0] && strcmp(got, e->sha256) != 0)
    return qvl_errorf(QVL_ERR_MISMATCH, "checksum mismatch: expected sha256 %s, got %s", e->sha256, got);
  if (!e->sha256[0] && e->git_oid[0]) {
    char oid[41];
    QVL_TRY(git_blob_sha1(path, oid));
    if (strcmp(oid, e->git_oid) != 0)
      return qvl_errorf(QVL_ERR_MISMATCH, "checksum mismatch: expected git blob id %s, got %s", e->git_oid, oid);
  }
  memcpy(sha256_out, got, 65);
  return QVL_OK;
}

static qvl_status download(resolve_state *rs, const entry *e, const char *local) {
  ctx *c = &rs->c;
  char *part = strfmt("%s.part", local);
  char *rev = url_escape(c->revision, 0), *pe = url_escape(e->path, 1);
  char *url = rev && pe ? strfmt("%s/%s/resolve/%s/%s", c->endpoint, c->repo, rev, pe) : NULL;
  free(rev);
  free(pe);
  if (!part || !url) {
    free(part);
    free(url);
    return nomem();
  }
  qvl_status s = QVL_OK;
  int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    s = qvl_errorf(QVL_ERR_IO, "cannot create %s: %s", part, strerror(errno));
    goto out;
  }
  int fresh_retry_done = 0, attempt = 0;
  for (;;) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      s = qvl_errorf(QVL_ERR_IO, "%s: cannot stat: %s", part, strerror(errno));
      break;
    }
    uint64_t have = (uint64_t)st.st_size;
    if (have > e->size) { /* a .part of some other version of the file */
      if (ftruncate(fd, 0) != 0) {
        s = qvl_errorf(QVL_ERR_IO, "%s: cannot truncate: %s", part, strerror(errno));
        break;
      }
      have = 0;
    }
    if (have < e->size) {
      struct statvfs vfs;
      if (fstatvfs(fd, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < e->size - have) {
        char need[32], free_b[32];
        human_bytes((double)(e->size - have), need, sizeof need);
        human_bytes((double)vfs.f_bavail * (double)vfs.f_frsize, free_b, sizeof free_b);
        s = qvl_errorf(QVL_ERR_IO, "disk full: '%s' needs %s more in %s, only %s free (set QVL_CACHE to another disk)",
                       e->path, need, rs->dir, free_b);
        break;
      }
      xfer x = {.c = c, .fd = fd, .start = have, .body_to_file = 1, .label = e->path, .total = e->size,
                .t0 = now_s()};
      if (c->progress == 0 && attempt == 0) {
        char tot[32];
        human_bytes((double)e->size, tot, sizeof tot);
        fprintf(stderr, "qvl: downloading %s (%s)%s from %s/%s\n", e->path, tot, have ? ", resuming" : "", c->endpoint,
                c->repo);
      }
      char range[48];
      snprintf(range, sizeof range, "%llu-", (unsigned long long)have);
      CURLcode rc = perform(c, &x, url, have ? range : NULL);
      uint64_t now_have = x.start + x.written;
      if (x.written)
        progress_draw(&x, rc == CURLE_OK && now_have == e->size);
      if (c->progress == 1 && x.written && !(rc == CURLE_OK && now_have == e->size))
        fputc('\n', stderr);
      if (x.write_errno) {
        int en = x.write_errno;
        buf_free(&x.body);
        s = qvl_errorf(QVL_ERR_IO, "%s writing %s: %s", en == ENOSPC ? "disk full" : "write error", part, strerror(en));
        break;
      }
      if (rc == CURLE_OK && x.code == 416) {
        /* Our .part does not fit the file the hub has now: start over. */
        buf_free(&x.body);
        if (ftruncate(fd, 0) != 0 || attempt++ >= c->max_retries + 1) {
          s = qvl_errorf(QVL_ERR_IO, "'%s': the hub rejected resuming at byte %llu (HTTP 416)", e->path,
                         (unsigned long long)have);
          break;
        }
        continue;
      }
      if (rc == CURLE_OK && x.code != 200 && x.code != 206) {
        int retry = http_retryable(x.code) && attempt < c->max_retries;
        if (!retry)
          s = http_error(c, &x, e->path);
        buf_free(&x.body);
        if (!retry)
          break;
        sleep_ms(backoff_ms(c, attempt++));
        continue;
      }
      buf_free(&x.body);
      if (x.linked_etag[0] && verify_is_sha256(x.linked_etag) && e->sha256[0] &&
          strcasecmp(x.linked_etag, e->sha256) != 0) {
        s = qvl_errorf(QVL_ERR_MISMATCH,
                       "'%s': the hub's listing says sha256 %s but the download says %s: the repo changed while "
                       "downloading; run again",
                       e->path, e->sha256, x.linked_etag);
        break;
      }
      /* A server that closes early without saying so (chunked, no length) looks like success. */
      if (rc == CURLE_OK && now_have < e->size)
        rc = CURLE_PARTIAL_FILE;
      if (rc != CURLE_OK) {
        if (curl_retryable(rc) && attempt < c->max_retries) {
          sleep_ms(backoff_ms(c, attempt++));
          continue;
        }
        char what[600];
        if (now_have > 0)
          snprintf(what, sizeof what,
                   "download of '%s' from repo '%s' (stopped at %llu of %llu bytes; run again to resume)", e->path,
                   c->repo, (unsigned long long)now_have, (unsigned long long)e->size);
        else
          snprintf(what, sizeof what, "download of '%s' from repo '%s'", e->path, c->repo);
        s = network_error(c, rc, what, attempt + 1);
        break;
      }
      if (now_have > e->size) {
        s = qvl_errorf(QVL_ERR_MISMATCH, "'%s': the hub sent %llu bytes, the listing says %llu", e->path,
                       (unsigned long long)now_have, (unsigned long long)e->size);
        if (ftruncate(fd, 0) != 0) {
        }
        break;
      }
    }
    /* Complete: check before the file takes its real name. */
    if (fsync(fd) != 0) {
      s = qvl_errorf(QVL_ERR_IO, "%s: fsync failed: %s", part, strerror(errno));
      break;
    }
    char sha[65];
    s = check_content(part, e, sha);
    if (s == QVL_ERR_MISMATCH) {
      int resumed = have > 0;
      if (ftruncate(fd, 0) != 0) {
      }
      /* A .part left by an earlier run may belong to an older version of the file: one fresh try. */
      if (resumed && !fresh_retry_done) {
        fresh_retry_done = 1;
        s = QVL_OK;
        continue;
      }
      unlink(part);
      char msg[600];
      snprintf(msg, sizeof msg, "%s", qvl_last_error());
      s = qvl_errorf(QVL_ERR_MISMATCH,
                     "'%s' from repo '%s': %s; the corrupt download was deleted (run again; if it persists, the "
                     "hub or a proxy serves damaged data)",
                     e->path, c->repo, msg);
      break;
    }
    if (s != QVL_OK)
      break;
    if (rename(part, local) != 0) {
      s = qvl_errorf(QVL_ERR_IO, "cannot move %s into place: %s", part, strerror(errno));
      break;
    }
    s = verify_manifest_put(rs->dir, c->repo, c->revision, e->path, e->size, sha);
    break;
  }
  /* An empty .part helps no later run; a non-empty one is kept for resuming. */
  struct stat pst;
  if (s != QVL_OK && fstat(fd, &pst) == 0 && S_ISREG(pst.st_mode) && pst.st_size == 0)
    unlink(part);
  close(fd);
out:
  free(part);
  free(url);
  return s;
}

/* ---- resolve ---- */

static qvl_status write_listing(const resolve_state *rs, const listing *l) {
  cJSON *j = listing_to_json(l, rs->c.repo, rs->c.revision);
  char *text = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  char *tmp = strfmt("%s/%s.tmp.%ld", rs->dir, HUB_TREE_NAME, (long)getpid());
  char *fin = strfmt("%s/%s", rs->dir, HUB_TREE_NAME);
  qvl_status s = QVL_OK;
  if (!text || !tmp || !fin) {
    s = nomem();
  } else {
    FILE *f = fopen(tmp, "wb");
    if (!f) {
      s = qvl_errorf(QVL_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    } else {
      size_t n = strlen(text);
      int ok = fwrite(text, 1, n, f) == n;
      int err = errno;
      ok = fclose(f) == 0 && ok;
      if (!ok || rename(tmp, fin) != 0) {
        s = qvl_errorf(QVL_ERR_IO, "cannot write %s: %s", fin, strerror(ok ? errno : err));
        unlink(tmp);
      }
    }
  }
  free(text);
  free(tmp);
  free(fin);
  return s;
}

static qvl_status read_listing(const resolve_state *rs, const char *root, listing *l) {
  char *p = strfmt("%s/%s", rs->dir, HUB_TREE_NAME);
  if (!p)
    return nomem();
  buf b = {0};
  qvl_status s = buf_read_file(p, HUB_MAX_JSON_BYTES, &b);
  if (s == QVL_ERR_NOT_FOUND)
    s = qvl_errorf(QVL_ERR_NOT_FOUND,
                   "offline mode: repo '%s' (revision '%s') is not in the cache %s (no %s); run once with network "
                   "access, or unset QVL_OFFLINE",
                   rs->c.repo, rs->c.revision, root, p);
  cJSON *j = NULL;
  if (s == QVL_OK && !(j = cJSON_ParseWithLength(b.data, b.len)))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: not JSON (delete it and run once online)", p);
  if (s == QVL_OK)
    s = listing_add_json(l, cJSON_GetObjectItemCaseSensitive(j, "files"), p);
  cJSON_Delete(j);
  buf_free(&b);
  free(p);
  return s;
}

/* Output under construction; files are appended as they are resolved. */
static qvl_status out_add(hub_files *out, const entry *e, const char *local, hub_role role) {
  hub_file *nf = realloc(out->files, (out->n_files + 1) * sizeof *nf);
  if (!nf)
    return nomem();
  out->files = nf;
  hub_file *f = &nf[out->n_files];
  memset(f, 0, sizeof *f);
  f->path = strdup(e->path);
  f->local = strdup(local);
  f->size = e->size;
  memcpy(f->sha256, e->sha256, 65);
  f->role = role;
  out->n_files++;
  if (!f->path || !f->local)
    return nomem();
  return QVL_OK;
}

/*
 * Makes one listed file present and verified in the snapshot directory. Offline, a file that is
 * absent (or no longer matches) is appended to *missing instead.
 */
static qvl_status ensure_file(resolve_state *rs, const entry *e, hub_role role, hub_files *out, buf *missing) {
  char *local = strfmt("%s/%s", rs->dir, e->path);
  if (!local)
    return nomem();
  qvl_status s = QVL_OK;
  struct stat st;
  int ok = 0;
  if (stat(local, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == e->size) {
    uint64_t msz;
    char msha[65];
    /* A large file verified at download time is trusted by its record (re-hashing gigabytes on
     * every start is what `qvl verify` is for); small files without a sha256 are re-checked. */
    if (e->sha256[0] && verify_manifest_get(rs->dir, e->path, &msz, msha) == QVL_OK && msz == e->size &&
        !strcmp(msha, e->sha256)) {
      ok = 1;
    } else {
      char sha[65];
      s = check_content(local, e, sha);
      if (s == QVL_OK) {
        ok = 1;
        s = verify_manifest_put(rs->dir, rs->c.repo, rs->c.revision, e->path, e->size, sha);
      } else if (s == QVL_ERR_MISMATCH) {
        s = QVL_OK; /* stale or damaged: fetch it again (online) or report it (offline) */
      }
    }
  }
  qvl_error_clear();
  if (s == QVL_OK && !ok) {
    if (rs->offline) {
      s = buf_printf(missing, "%s%s", missing->len ? ", " : "", e->path);
    } else {
      char *slash = strrchr(local, '/');
      *slash = 0;
      s = mkdirs(local);
      *slash = '/';
      if (s == QVL_OK)
        s = download(rs, e, local);
      ok = s == QVL_OK;
    }
  }
  if (s == QVL_OK && ok)
    s = out_add(out, e, local, role);
  free(local);
  return s;
}

/* The shards a model.safetensors.index.json names (its weight_map values), each once. */
static qvl_status index_shards(const char *index_path, const listing *l, const char *repo, const entry ***shards,
                               size_t *n) {
  *shards = NULL;
  *n = 0;
  buf b = {0};
  QVL_TRY(buf_read_file(index_path, HUB_MAX_INDEX_BYTES, &b));
  cJSON *j = cJSON_ParseWithLength(b.data, b.len);
  buf_free(&b);
  const cJSON *wm = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
  if (!cJSON_IsObject(wm)) {
    cJSON_Delete(j);
    return qvl_errorf(QVL_ERR_FORMAT, "%s: expected a JSON object with a \"weight_map\" object", index_path);
  }
  qvl_status s = QVL_OK;
  const cJSON *it;
  cJSON_ArrayForEach(it, wm) {
    if (!cJSON_IsString(it) || !relpath_is_safe(it->valuestring)) {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: weight_map['%.100s'] is not a safe file name", index_path,
                     it->string ? it->string : "?");
      break;
    }
    const entry *e = listing_find(l, it->valuestring);
    if (!e) {
      s = qvl_errorf(QVL_ERR_NOT_FOUND, "repo '%s': the index names shard '%s', which the repo does not have", repo,
                     it->valuestring);
      break;
    }
    size_t k = 0;
    while (k < *n && (*shards)[k] != e)
      k++;
    if (k < *n)
      continue;
    const entry **ns = realloc(*shards, (*n + 1) * sizeof *ns);
    if (!ns) {
      s = nomem();
      break;
    }
    *shards = ns;
    ns[(*n)++] = e;
  }
  cJSON_Delete(j);
  if (s != QVL_OK) {
    free(*shards);
    *shards = NULL;
    *n = 0;
  }
  return s;
}

void hub_files_free(hub_files *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->n_files; i++) {
    free(f->files[i].path);
    free(f->files[i].local);
  }
  free(f->files);
  free(f->repo);
  free(f->quant);
  free(f->revision);
  free(f->dir);
  free(f->model);
  free(f->mmproj);
  memset(f, 0, sizeof *f);
}

static qvl_status resolve_locked(resolve_state *rs, const char *root, const char *quant, hub_files *out) {
  listing l = {0};
  qvl_status s = rs->offline ? read_listing(rs, root, &l) : fetch_listing(&rs->c, &l);
  if (s == QVL_OK && !rs->offline)
    s = write_listing(rs, &l);
  const char **paths = NULL;
  sel sl = {0};
  const char *quant_used = NULL;
  buf missing = {0};
  if (s == QVL_OK && !(paths = malloc((l.n ? l.n : 1) * sizeof *paths)))
    s = nomem();
  if (s == QVL_OK) {
    for (size_t i = 0; i < l.n; i++)
      paths[i] = l.e[i].path;
    s = select_impl(paths, l.n, quant, rs->c.repo, &sl, &out->is_gguf, &quant_used);
  }
  if (s == QVL_OK && quant_used && !(out->quant = strdup(quant_used)))
    s = nomem();
  for (size_t k = 0; k < sl.n && s == QVL_OK; k++) {
    const entry *e = &l.e[sl.idx[k]];
    size_t before = out->n_files;
    s = ensure_file(rs, e, sl.role[k], out, &missing);
    if (s != QVL_OK || out->n_files == before || strcmp(base_name(e->path), "model.safetensors.index.json") != 0)
      continue;
    const entry **shards;
    size_t ns;
    s = index_shards(out->files[before].local, &l, rs->c.repo, &shards, &ns);
    for (size_t i = 0; i < ns && s == QVL_OK; i++)
      s = ensure_file(rs, shards[i], HUB_ROLE_MODEL, out, &missing);
    free(shards);
  }
  if (s == QVL_OK && missing.len)
    s = qvl_errorf(QVL_ERR_NOT_FOUND,
                   "offline mode: the cache %s lacks %s for '%s%s%s'; run once with network access to download %s",
                   rs->dir, missing.data, rs->c.repo, out->quant ? ":" : "", out->quant ? out->quant : "",
                   strchr(missing.data, ',') ? "them" : "it");
  buf_free(&missing);
  free(paths);
  free(sl.idx);
  free(sl.role);
  listing_free(&l);
  return s;
}

qvl_status hub_resolve(const hub_opts *o, const char *spec, hub_files *out) {
  static const hub_opts defaults = {0};
  if (!o)
    o = &defaults;
  memset(out, 0, sizeof *out);
  char *repo, *quant, *root = NULL;
  QVL_TRY(hub_parse_spec(spec, &repo, &quant));
  resolve_state rs = {0};
  ctx *c = &rs.c;
  char *endpoint = NULL;
  qvl_status s = hub_cache_root(o, &root);
  const char *ep = o->endpoint ? o->endpoint : getenv("QVL_HF_ENDPOINT");
  if (!ep || !*ep)
    ep = getenv("HF_ENDPOINT"); /* huggingface_hub's name, so mirrors set up for it work too */
  if (!ep || !*ep)
    ep = HUB_DEFAULT_ENDPOINT;
  if (s == QVL_OK && !(endpoint = strdup(ep)))
    s = nomem();
  if (s == QVL_OK) {
    size_t n = strlen(endpoint);
    while (n && endpoint[n - 1] == '/')
      endpoint[--n] = 0;
    if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0)
      s = qvl_errorf(QVL_ERR_INVALID_ARG, "QVL_HF_ENDPOINT '%.200s': expected an http:// or https:// URL", ep);
  }
  const char *tok = o->token ? o->token : getenv("HF_TOKEN");
  c->endpoint = endpoint;
  c->token = tok && *tok ? tok : NULL;
  c->repo = repo;
  c->revision = o->revision ? o->revision : "main";
  c->progress = o->progress < 0 ? -1 : isatty(STDERR_FILENO) ? 1 : 0;
  c->max_retries = o->max_retries < 0 ? 0 : o->max_retries ? o->max_retries : 4;
  c->retry_base_ms = o->retry_base_ms > 0 ? o->retry_base_ms : 1000;
  c->connect_timeout_s = o->connect_timeout_s > 0 ? o->connect_timeout_s : 30;
  c->low_speed_time_s = o->low_speed_time_s > 0 ? o->low_speed_time_s : 60;
  rs.offline = o->offline > 0 || env_true("QVL_OFFLINE") || env_true("HF_HUB_OFFLINE");
  if (s == QVL_OK && !revision_is_safe(c->revision))
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "revision '%.200s': expected a branch, tag or commit id", c->revision);
  char *rev_dir = NULL, *repo_dir = NULL;
  if (s == QVL_OK) {
    /* "owner/name" -> "owner--name"; "refs/pr/1" -> "refs--pr--1": one directory level each. */
    repo_dir = strdup(repo);
    rev_dir = strdup(c->revision);
    if (!repo_dir || !rev_dir)
      s = nomem();
  }
  buf d = {0};
  if (s == QVL_OK) {
    s = buf_printf(&d, "%s/", root);
    for (const char *p = repo; s == QVL_OK && *p; p++)
      s = *p == '/' ? buf_append_str(&d, "--") : buf_append(&d, p, 1);
    if (s == QVL_OK)
      s = buf_append_str(&d, "/");
    for (const char *p = c->revision; s == QVL_OK && *p; p++)
      s = *p == '/' ? buf_append_str(&d, "--") : buf_append(&d, p, 1);
  }
  free(repo_dir);
  free(rev_dir);
  rs.dir = d.data;
  int lock_fd = -1;
  if (s == QVL_OK && !rs.offline)
    s = mkdirs(rs.dir);
  if (s == QVL_OK) {
    char *lp = strfmt("%s/%s", rs.dir, HUB_LOCK_NAME);
    if (!lp)
      s = nomem();
    else
      lock_fd = open(lp, (rs.offline ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
    /* Offline with no directory: read_listing reports the empty cache. */
    if (lock_fd >= 0 && flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (c->progress >= 0)
        fprintf(stderr, "qvl: waiting for another qvl process that is downloading into %s\n", rs.dir);
      if (flock(lock_fd, LOCK_EX) != 0)
        s = qvl_errorf(QVL_ERR_IO, "cannot lock %s: %s", lp, strerror(errno));
    } else if (lock_fd < 0 && !rs.offline && s == QVL_OK) {
      s = qvl_errorf(QVL_ERR_IO, "cannot create %s: %s", lp, strerror(errno));
    }
    free(lp);
  }
  if (s == QVL_OK && !rs.offline)
    s = ctx_open(c);
  if (s == QVL_OK)
    s = resolve_locked(&rs, root, quant, out);
  if (lock_fd >= 0)
    close(lock_fd); /* releases the flock */
  ctx_close(c);
  if (s == QVL_OK) {
    out->repo = repo;
    out->revision = strdup(c->revision);
    out->dir = rs.dir;
    repo = NULL;
    rs.dir = NULL;
    for (size_t i = 0; i < out->n_files; i++) {
      if (out->files[i].role == HUB_ROLE_MMPROJ && !out->mmproj)
        out->mmproj = strdup(out->files[i].local);
      if (out->files[i].role == HUB_ROLE_MODEL && out->is_gguf && !out->model)
        out->model = strdup(out->files[i].local);
    }
    if (!out->is_gguf)
      out->model = strdup(out->dir);
    if (!out->revision || !out->model)
      s = nomem();
  }
  if (s != QVL_OK)
    hub_files_free(out);
  free(repo);
  free(quant);
  free(root);
  free(endpoint);
  free(rs.dir);
  return s;
}
