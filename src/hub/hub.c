/* The download cache: model specs, the cache root, one snapshot directory per repo and revision
 * (locked while filled), the manifest of checked files, and hub_resolve, which ties it together. */
#include "hub/hub_impl.h"

#include <ctype.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/free_each.h"
#include "base/relpath.h"
#include "model/verify.h"

#define HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define HUB_TREE_NAME "qvl-tree.json"
#define HUB_LOCK_NAME ".qvl-lock"
/* Cap on a safetensors shard index we read. */
#define HUB_MAX_INDEX_BYTES (64u << 20)

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

/* ---- downloading one file ---- */

typedef struct resolve_state {
  hub_http c;
  char *dir; /* snapshot directory */
  int offline;
  const char *cache_only; /* hub_opts.cache_only */
  const char *offline_by; /* what made it offline, as set: "QVL_OFFLINE=1", "--offline", ... */
  const char *go_online;  /* how the user undoes that: "unset QVL_OFFLINE", ... */
  const char *quant;      /* the spec's ":QUANT", or NULL */
} resolve_state;

/* ---- what to do next ---- */

/* What works without the hub: model files one has already, with the exact command (`make serve`
 * is the first thing a newcomer runs), and the fixture models the README starts in one command. */
#define HUB_LOCAL_FILES_ADVICE                                                                                   \
  "To serve model files you already have: ./qvl serve -m MODEL.gguf --mmproj MMPROJ.gguf (with make: make serve " \
  "SERVE_ARGS='-m MODEL.gguf --mmproj MMPROJ.gguf'); to try the page and the API without a download, see "      \
  "README.md, \"Without a download\""

/* Appends what to do next to this thread's message, which says what failed. */
static qvl_status add_advice(qvl_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static qvl_status add_advice(qvl_status s, const char *fmt, ...) {
  char failed[1024], next[1024];
  snprintf(failed, sizeof failed, "%s", qvl_last_error());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(next, sizeof next, fmt, ap);
  va_end(ap);
  return qvl_errorf(s, "%s. %s", failed, next);
}

/* Why the cache only, named as the user set it, so that the way back names that setting and no
 * other (an unset QVL_OFFLINE is no advice to someone who passed --offline). */
static void offline_reason(const hub_opts *o, resolve_state *rs) {
  rs->cache_only = o->offline > 0 ? o->cache_only : NULL;
  if (env_true("QVL_OFFLINE"))
    rs->offline_by = "QVL_OFFLINE=1", rs->go_online = "unset QVL_OFFLINE";
  else if (env_true("HF_HUB_OFFLINE"))
    rs->offline_by = "HF_HUB_OFFLINE=1", rs->go_online = "unset HF_HUB_OFFLINE";
  else
    rs->offline_by = "--offline", rs->go_online = "leave out --offline";
}

/* The cache lacks what an offline resolution needs: how to get it, and what works meanwhile. */
static qvl_status cache_lacks_advice(const resolve_state *rs, qvl_status s) {
  if (rs->cache_only)
    return add_advice(s, "%s: a command with --hf downloads it first (./qvl serve --hf %s%s%s)", rs->cache_only,
                      rs->c.repo, rs->quant ? ":" : "", rs->quant ? rs->quant : "");
  return add_advice(s,
                    "It is offline because of %s: to download, %s with the hub reachable, or with QVL_HF_ENDPOINT "
                    "set to a mirror of it. " HUB_LOCAL_FILES_ADVICE,
                    rs->offline_by, rs->go_online);
}

/* Confirms a complete file against the listing: sha256 (LFS), else git blob id, else size. */
static qvl_status check_content(const char *path, const hub_entry *e, char sha256_out[65]) {
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

/* A complete and checked .part takes its real name and is recorded in the manifest. */
static qvl_status put_in_place(resolve_state *rs, const hub_entry *e, const char *part, const char *local,
                               const char sha[65]) {
  if (rename(part, local) != 0)
    return qvl_errorf(QVL_ERR_IO, "cannot move %s into place: %s", part, strerror(errno));
  return verify_manifest_put(rs->dir, rs->c.repo, rs->c.revision, e->path, e->size, sha);
}

static qvl_status download(resolve_state *rs, const hub_entry *e, const char *local) {
  char *part = strfmt("%s.part", local);
  if (!part)
    return nomem();
  int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    qvl_status s = qvl_errorf(QVL_ERR_IO, "cannot create %s: %s", part, strerror(errno));
    free(part);
    return s;
  }
  qvl_status s = QVL_OK;
  int fresh_retry_done = 0, attempt = 0;
  for (;;) {
    uint64_t had = 0;
    if ((s = hub_http_fetch_part(&rs->c, e, fd, part, rs->dir, &attempt, &had)) != QVL_OK)
      break;
    /* Complete: check before the file takes its real name. */
    if (fsync(fd) != 0) {
      s = qvl_errorf(QVL_ERR_IO, "%s: fsync failed: %s", part, strerror(errno));
      break;
    }
    char sha[65];
    s = check_content(part, e, sha);
    if (s == QVL_ERR_MISMATCH) {
      if (ftruncate(fd, 0) != 0) {
      }
      /* A .part left by an earlier run may belong to an older version of the file: one fresh try. */
      if (had > 0 && !fresh_retry_done) {
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
                     e->path, rs->c.repo, msg);
    }
    if (s == QVL_OK)
      s = put_in_place(rs, e, part, local, sha);
    break;
  }
  /* An empty .part helps no later run; a non-empty one is kept for resuming. */
  struct stat pst;
  if (s != QVL_OK && fstat(fd, &pst) == 0 && S_ISREG(pst.st_mode) && pst.st_size == 0)
    unlink(part);
  close(fd);
  free(part);
  return s;
}

/* ---- resolve ---- */

static qvl_status write_listing(const resolve_state *rs, const hub_listing *l) {
  cJSON *j = hub_listing_to_json(l, rs->c.repo, rs->c.revision);
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

static qvl_status read_listing(const resolve_state *rs, const char *root, hub_listing *l) {
  char *p = strfmt("%s/%s", rs->dir, HUB_TREE_NAME);
  if (!p)
    return nomem();
  buf b = {0};
  qvl_status s = buf_read_file(p, HUB_MAX_JSON_BYTES, &b);
  if (s == QVL_ERR_NOT_FOUND)
    s = cache_lacks_advice(rs, qvl_errorf(QVL_ERR_NOT_FOUND,
                                          "offline mode: repo '%s' (revision '%s') is not in the cache %s (no %s)",
                                          rs->c.repo, rs->c.revision, root, p));
  cJSON *j = NULL;
  if (s == QVL_OK && !(j = cJSON_ParseWithLength(b.data, b.len)))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: not JSON (delete it and run once online)", p);
  if (s == QVL_OK)
    s = hub_listing_add_json(l, cJSON_GetObjectItemCaseSensitive(j, "files"), p);
  cJSON_Delete(j);
  buf_free(&b);
  free(p);
  return s;
}

/* Output under construction; files are appended as they are resolved. */
static qvl_status out_add(hub_files *out, const hub_entry *e, const char *local, hub_role role) {
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
static qvl_status ensure_file(resolve_state *rs, const hub_entry *e, hub_role role, hub_files *out, buf *missing) {
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
static qvl_status index_shards(const char *index_path, const hub_listing *l, const char *repo, const hub_entry ***shards,
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
    const hub_entry *e = hub_listing_find(l, it->valuestring);
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
    const hub_entry **ns = realloc(*shards, (*n + 1) * sizeof *ns);
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
  for (size_t i = 0; i < f->n_files; i++)
    FREE_EACH(f->files[i].path, f->files[i].local);
  FREE_EACH(f->files, f->repo, f->quant, f->revision, f->dir, f->model, f->mmproj);
  memset(f, 0, sizeof *f);
}

static qvl_status resolve_locked(resolve_state *rs, const char *root, const char *quant, hub_files *out) {
  hub_listing l = {0};
  qvl_status s = rs->offline ? read_listing(rs, root, &l) : hub_http_fetch_listing(&rs->c, &l);
  if (s == QVL_OK && !rs->offline)
    s = write_listing(rs, &l);
  const char **paths = NULL;
  hub_selection sl = {0};
  const char *quant_used = NULL;
  buf missing = {0};
  if (s == QVL_OK && !(paths = malloc((l.n ? l.n : 1) * sizeof *paths)))
    s = nomem();
  if (s == QVL_OK) {
    for (size_t i = 0; i < l.n; i++)
      paths[i] = l.e[i].path;
    s = hub_listing_select(paths, l.n, quant, rs->c.repo, &sl, &out->is_gguf, &quant_used);
  }
  if (s == QVL_OK && quant_used && !(out->quant = strdup(quant_used)))
    s = nomem();
  for (size_t k = 0; k < sl.n && s == QVL_OK; k++) {
    const hub_entry *e = &l.e[sl.idx[k]];
    size_t before = out->n_files;
    s = ensure_file(rs, e, sl.role[k], out, &missing);
    if (s != QVL_OK || out->n_files == before || strcmp(base_name(e->path), "model.safetensors.index.json") != 0)
      continue;
    const hub_entry **shards;
    size_t ns;
    s = index_shards(out->files[before].local, &l, rs->c.repo, &shards, &ns);
    for (size_t i = 0; i < ns && s == QVL_OK; i++)
      s = ensure_file(rs, shards[i], HUB_ROLE_MODEL, out, &missing);
    free(shards);
  }
  if (s == QVL_OK && missing.len)
    s = cache_lacks_advice(rs, qvl_errorf(QVL_ERR_NOT_FOUND, "offline mode: the cache %s lacks %s for '%s%s%s'",
                                          rs->dir, missing.data, rs->c.repo, out->quant ? ":" : "",
                                          out->quant ? out->quant : ""));
  buf_free(&missing);
  free(paths);
  free(sl.idx);
  free(sl.role);
  hub_listing_free(&l);
  return s;
}

/*
 * The hub could not be reached (s, with its message): says what works without it. When the cache
 * holds the whole model (an offline resolution succeeds) that is the cache; otherwise a mirror or
 * local files, never the cache, which would only fail again. Called with the snapshot locked.
 */
static qvl_status unreachable_advice(resolve_state *rs, const char *root, qvl_status s) {
  char failed[1024];
  snprintf(failed, sizeof failed, "%s", qvl_last_error());
  hub_files probe;
  memset(&probe, 0, sizeof probe);
  int was_offline = rs->offline;
  rs->offline = 1;
  int cached = resolve_locked(rs, root, rs->quant, &probe) == QVL_OK;
  rs->offline = was_offline;
  hub_files_free(&probe);
  qvl_errorf(s, "%s", failed);
  if (cached)
    return add_advice(s, "The cache %s holds this model already: set QVL_OFFLINE=1 (or pass --offline) to use it "
                      "without the hub", rs->dir);
  return add_advice(s, "To download through a mirror of the hub, set QVL_HF_ENDPOINT to its URL. " HUB_LOCAL_FILES_ADVICE);
}

qvl_status hub_resolve(const hub_opts *o, const char *spec, hub_files *out) {
  static const hub_opts defaults = {0};
  if (!o)
    o = &defaults;
  memset(out, 0, sizeof *out);
  char *repo, *quant, *root = NULL;
  QVL_TRY(hub_parse_spec(spec, &repo, &quant));
  resolve_state rs = {0};
  hub_http *c = &rs.c;
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
  offline_reason(o, &rs);
  rs.quant = quant;
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
    s = hub_http_open(c);
  if (s == QVL_OK) {
    s = resolve_locked(&rs, root, quant, out);
    if (s != QVL_OK && c->unreachable) {
      hub_files_free(out);
      s = unreachable_advice(&rs, root, s);
    }
  }
  if (lock_fd >= 0)
    close(lock_fd); /* releases the flock */
  hub_http_close(c);
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
