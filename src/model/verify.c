#include "model/verify.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/free_each.h"
#include "base/relpath.h"
#include "base/status.h"

/* A manifest lists a handful of files; anything this large is not one of ours. */
#define VERIFY_MAX_MANIFEST_BYTES (16u << 20)

int verify_is_sha256(const char *s) {
  if (!s)
    return 0;
  for (int i = 0; i < 64; i++)
    if (!isxdigit((unsigned char)s[i]))
      return 0;
  return s[64] == 0;
}

static void hex_lower(char *s) {
  for (; *s; s++)
    *s = (char)tolower((unsigned char)*s);
}

qvl_status verify_sha256_file(const char *path, char hex[65], uint64_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return qvl_errorf(errno == ENOENT ? QVL_ERR_NOT_FOUND : QVL_ERR_IO, "%s: cannot open: %s", path,
                      strerror(errno));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(ctx);
    fclose(f);
    return qvl_errorf(QVL_ERR_INTERNAL, "sha256: cannot initialise the OpenSSL digest");
  }
  static const size_t chunk = 1u << 20;
  unsigned char *b = malloc(chunk);
  if (!b) {
    EVP_MD_CTX_free(ctx);
    fclose(f);
    return qvl_errorf(QVL_ERR_NOMEM, "sha256: out of memory");
  }
  uint64_t total = 0;
  size_t n;
  qvl_status s = QVL_OK;
  while ((n = fread(b, 1, chunk, f)) > 0) {
    total += n;
    if (EVP_DigestUpdate(ctx, b, n) != 1) {
      s = qvl_errorf(QVL_ERR_INTERNAL, "sha256: digest update failed");
      break;
    }
  }
  if (s == QVL_OK && ferror(f))
    s = qvl_errorf(QVL_ERR_IO, "%s: read error after %llu bytes: %s", path, (unsigned long long)total,
                   strerror(errno));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  if (s == QVL_OK && (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32))
    s = qvl_errorf(QVL_ERR_INTERNAL, "sha256: digest final failed");
  if (s == QVL_OK) {
    for (unsigned i = 0; i < 32; i++)
      snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (size)
      *size = total;
  }
  free(b);
  EVP_MD_CTX_free(ctx);
  fclose(f);
  return s;
}

qvl_status verify_file(const char *path, uint64_t size, const char *sha256) {
  struct stat st;
  if (stat(path, &st) != 0)
    return qvl_errorf(errno == ENOENT ? QVL_ERR_NOT_FOUND : QVL_ERR_IO, "%s: %s", path,
                      errno == ENOENT ? "missing" : strerror(errno));
  if (!S_ISREG(st.st_mode))
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: not a regular file", path);
  if (size != UINT64_MAX && (uint64_t)st.st_size != size)
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: size mismatch: expected %llu bytes, found %llu", path,
                      (unsigned long long)size, (unsigned long long)st.st_size);
  if (!sha256 || !*sha256)
    return QVL_OK;
  if (!verify_is_sha256(sha256))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: recorded sha256 '%.80s' is not 64 hex digits", path, sha256);
  char want[65], got[65];
  memcpy(want, sha256, 65);
  hex_lower(want);
  QVL_TRY(verify_sha256_file(path, got, NULL));
  if (strcmp(want, got) != 0)
    return qvl_errorf(QVL_ERR_MISMATCH, "%s: sha256 mismatch: expected %s, found %s", path, want, got);
  return QVL_OK;
}

/* ---- manifest ---- */

static qvl_status path_join(const char *dir, const char *rel, char **out) {
  buf b = {0};
  qvl_status s = buf_printf(&b, "%s/%s", dir, rel);
  if (s != QVL_OK) {
    buf_free(&b);
    return s;
  }
  *out = b.data;
  return QVL_OK;
}

/* Parses dir/qvl-manifest.json. *root is NULL (and QVL_OK returned) when the file is absent. */
static qvl_status manifest_load(const char *dir, cJSON **root) {
  *root = NULL;
  char *mp;
  QVL_TRY(path_join(dir, VERIFY_MANIFEST_NAME, &mp));
  buf b = {0};
  qvl_status s = buf_read_file(mp, VERIFY_MAX_MANIFEST_BYTES, &b);
  if (s == QVL_ERR_NOT_FOUND) {
    qvl_error_clear();
    s = QVL_OK;
  } else if (s == QVL_OK) {
    cJSON *j = cJSON_ParseWithLength(b.data, b.len);
    cJSON *files = j ? cJSON_GetObjectItemCaseSensitive(j, "files") : NULL;
    if (!j || !cJSON_IsObject(j) || !cJSON_IsArray(files)) {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: not a qvl manifest (expected an object with a \"files\" array)", mp);
      cJSON_Delete(j);
    } else {
      *root = j;
    }
  }
  buf_free(&b);
  free(mp);
  return s;
}

/* Reads one entry; ERR_FORMAT naming the manifest when a field is missing or malformed. */
static qvl_status manifest_entry(const char *dir, const cJSON *e, const char **path, uint64_t *size,
                                 const char **sha) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
  const cJSON *z = cJSON_GetObjectItemCaseSensitive(e, "size");
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "sha256");
  if (!cJSON_IsString(p) || !*p->valuestring || !cJSON_IsNumber(z) || z->valuedouble < 0 ||
      z->valuedouble > 9007199254740992.0 || !cJSON_IsString(h) || !verify_is_sha256(h->valuestring))
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s/%s: malformed entry (expected {\"path\": string, \"size\": number, \"sha256\": 64 hex})",
                      dir, VERIFY_MANIFEST_NAME);
  /* The manifest must not name files outside its directory. */
  const char *ps = p->valuestring;
  if (!relpath_is_safe(ps))
    return qvl_errorf(QVL_ERR_FORMAT, "%s/%s: entry path '%s' leaves the directory", dir,
                      VERIFY_MANIFEST_NAME, ps);
  *path = ps;
  *size = (uint64_t)z->valuedouble;
  *sha = h->valuestring;
  return QVL_OK;
}

qvl_status verify_manifest_get(const char *dir, const char *rel_path, uint64_t *size, char sha256[65]) {
  cJSON *root;
  QVL_TRY(manifest_load(dir, &root));
  if (!root)
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: no %s", dir, VERIFY_MANIFEST_NAME);
  qvl_status s = QVL_ERR_NOT_FOUND;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "files")) {
    const char *p, *h;
    uint64_t z;
    qvl_status es = manifest_entry(dir, e, &p, &z, &h);
    if (es != QVL_OK) {
      s = es;
      break;
    }
    if (!strcmp(p, rel_path)) {
      if (size)
        *size = z;
      if (sha256) {
        memcpy(sha256, h, 65);
        hex_lower(sha256);
      }
      s = QVL_OK;
      break;
    }
  }
  if (s == QVL_ERR_NOT_FOUND)
    s = qvl_errorf(QVL_ERR_NOT_FOUND, "%s/%s: no entry for '%s'", dir, VERIFY_MANIFEST_NAME, rel_path);
  cJSON_Delete(root);
  return s;
}

qvl_status verify_manifest_put(const char *dir, const char *repo, const char *revision,
                               const char *rel_path, uint64_t size, const char *sha256) {
  if (!verify_is_sha256(sha256))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "manifest entry for '%s': sha256 '%.80s' is not 64 hex digits",
                      rel_path, sha256 ? sha256 : "(null)");
  cJSON *root;
  QVL_TRY(manifest_load(dir, &root));
  qvl_status s = QVL_OK;
  if (!root) {
    root = cJSON_CreateObject();
    if (!root || !cJSON_AddStringToObject(root, "format", "qvl-manifest") ||
        !cJSON_AddNumberToObject(root, "version", 1) || !cJSON_AddArrayToObject(root, "files")) {
      cJSON_Delete(root);
      return qvl_errorf(QVL_ERR_NOMEM, "manifest: out of memory");
    }
  }
  if (repo) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "repo");
    cJSON_AddStringToObject(root, "repo", repo);
  }
  if (revision) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "revision");
    cJSON_AddStringToObject(root, "revision", revision);
  }
  cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
  for (int i = cJSON_GetArraySize(files) - 1; i >= 0; i--) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(files, i), "path");
    if (cJSON_IsString(p) && !strcmp(p->valuestring, rel_path))
      cJSON_DeleteItemFromArray(files, i);
  }
  char hex[65];
  memcpy(hex, sha256, 65);
  hex_lower(hex);
  cJSON *e = cJSON_CreateObject();
  if (!e || !cJSON_AddStringToObject(e, "path", rel_path) || !cJSON_AddNumberToObject(e, "size", (double)size) ||
      !cJSON_AddStringToObject(e, "sha256", hex) || !cJSON_AddItemToArray(files, e)) {
    cJSON_Delete(e);
    cJSON_Delete(root);
    return qvl_errorf(QVL_ERR_NOMEM, "manifest: out of memory");
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text)
    return qvl_errorf(QVL_ERR_NOMEM, "manifest: out of memory");
  buf tmp = {0}, fin = {0};
  s = buf_printf(&tmp, "%s/%s.tmp.%ld", dir, VERIFY_MANIFEST_NAME, (long)getpid());
  if (s == QVL_OK)
    s = buf_printf(&fin, "%s/%s", dir, VERIFY_MANIFEST_NAME);
  if (s == QVL_OK) {
    FILE *f = fopen(tmp.data, "wb");
    if (!f) {
      s = qvl_errorf(QVL_ERR_IO, "%s: cannot create: %s", tmp.data, strerror(errno));
    } else {
      size_t len = strlen(text);
      int ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
      int err = errno;
      ok = (fclose(f) == 0) && ok;
      if (!ok) {
        s = qvl_errorf(QVL_ERR_IO, "%s: write failed: %s", tmp.data, strerror(err ? err : errno));
        unlink(tmp.data);
      } else if (rename(tmp.data, fin.data) != 0) {
        s = qvl_errorf(QVL_ERR_IO, "%s: cannot rename into place: %s", fin.data, strerror(errno));
        unlink(tmp.data);
      }
    }
  }
  buf_free(&tmp);
  buf_free(&fin);
  free(text);
  return s;
}

/* ---- verify_model ---- */

typedef struct check_list {
  char **path; /* relative to base */
  uint64_t *size; /* UINT64_MAX when not recorded */
  char (*sha)[65];
  size_t n, cap;
} check_list;

static void check_list_free(check_list *c) {
  for (size_t i = 0; i < c->n; i++)
    free(c->path[i]);
  FREE_EACH(c->path, c->size, c->sha);
  memset(c, 0, sizeof *c);
}

static qvl_status check_list_add(check_list *c, const char *path, size_t path_len, uint64_t size,
                                 const char *sha) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 8;
    char **p = realloc(c->path, cap * sizeof *p);
    if (p)
      c->path = p;
    uint64_t *z = realloc(c->size, cap * sizeof *z);
    if (z)
      c->size = z;
    char(*h)[65] = realloc(c->sha, cap * sizeof *h);
    if (h)
      c->sha = h;
    if (!p || !z || !h)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    c->cap = cap;
  }
  char *d = strndup(path, path_len);
  if (!d)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  c->path[c->n] = d;
  c->size[c->n] = size;
  memcpy(c->sha[c->n], sha, 64);
  c->sha[c->n][64] = 0;
  hex_lower(c->sha[c->n]);
  c->n++;
  return QVL_OK;
}

static qvl_status manifest_to_list(const char *dir, check_list *c, int *found) {
  cJSON *root;
  QVL_TRY(manifest_load(dir, &root));
  *found = root != NULL;
  if (!root)
    return QVL_OK;
  qvl_status s = QVL_OK;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "files")) {
    const char *p, *h;
    uint64_t z;
    if ((s = manifest_entry(dir, e, &p, &z, &h)) != QVL_OK || (s = check_list_add(c, p, strlen(p), z, h)) != QVL_OK)
      break;
  }
  cJSON_Delete(root);
  return s;
}

/*
 * sha256sum format: "<hex>  name" or "<hex> *name" per line, or a single bare "<hex>" (then the
 * entry names default_name). Blank lines and '#' comments are skipped.
 */
static qvl_status sums_to_list(const char *file, const char *default_name, check_list *c) {
  buf b = {0};
  QVL_TRY(buf_read_file(file, VERIFY_MAX_MANIFEST_BYTES, &b));
  qvl_status s = QVL_OK;
  int line_no = 0;
  for (char *line = b.data; line && *line && s == QVL_OK;) {
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = 0;
    line_no++;
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
      line[--len] = 0;
    if (len && line[0] != '#') {
      char hex[65];
      int ok = len >= 64;
      if (ok) {
        memcpy(hex, line, 64);
        hex[64] = 0;
        ok = verify_is_sha256(hex);
      }
      const char *name = NULL;
      if (ok && len == 64 && default_name)
        name = default_name;
      else if (ok && len > 66 && line[64] == ' ' && (line[65] == ' ' || line[65] == '*'))
        name = line + 66;
      if (!name) {
        s = qvl_errorf(QVL_ERR_FORMAT, "%s:%d: expected \"<64 hex digits>  <file name>\", found '%.80s'", file,
                       line_no, line);
        break;
      }
      if (!relpath_is_safe(name)) {
        s = qvl_errorf(QVL_ERR_FORMAT, "%s:%d: file name '%s' leaves the directory", file, line_no, name);
        break;
      }
      s = check_list_add(c, name, strlen(name), UINT64_MAX, hex);
    }
    line = nl ? nl + 1 : NULL;
  }
  buf_free(&b);
  return s;
}

static void report_line(verify_report *r, const char *fmt, const char *a, const char *b) {
  if (r && r->out) {
    fprintf(r->out, fmt, a, b);
    fputc('\n', r->out);
    fflush(r->out);
  }
}

static qvl_status check_all(const char *base, const check_list *c, const char *source, verify_report *r) {
  buf bad = {0};
  unsigned n_bad = 0, n_missing = 0;
  qvl_status s = QVL_OK;
  for (size_t i = 0; i < c->n && s == QVL_OK; i++) {
    char *full;
    if ((s = path_join(base, c->path[i], &full)) != QVL_OK)
      break;
    qvl_status v = verify_file(full, c->size[i], c->sha[i]);
    if (r)
      r->n_files++;
    if (v == QVL_OK) {
      if (r)
        r->n_ok++;
      report_line(r, "OK       %s (sha256 %s)", full, c->sha[i]);
    } else if (v == QVL_ERR_MISMATCH || v == QVL_ERR_NOT_FOUND) {
      if (v == QVL_ERR_NOT_FOUND)
        n_missing++;
      else
        n_bad++;
      report_line(r, "%s%s", v == QVL_ERR_NOT_FOUND ? "MISSING  " : "FAILED   ", qvl_last_error());
      if (bad.len < 2000)
        s = buf_printf(&bad, "%s%s", bad.len ? "; " : "", qvl_last_error());
    } else {
      s = v; /* an I/O failure is not a verdict on the file */
    }
    free(full);
  }
  if (r) {
    r->n_bad += n_bad;
    r->n_missing += n_missing;
  }
  if (s == QVL_OK && (n_bad || n_missing))
    s = qvl_errorf(QVL_ERR_MISMATCH,
                   "%u of %zu files recorded in %s are damaged or missing (re-download them): %s",
                   n_bad + n_missing, c->n, source, bad.data);
  buf_free(&bad);
  return s;
}

qvl_status verify_model(const char *path, verify_report *report) {
  struct stat st;
  if (stat(path, &st) != 0)
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
  check_list c = {0};
  qvl_status s = QVL_OK;
  buf src = {0};
  char *base = NULL;
  if (S_ISDIR(st.st_mode)) {
    base = strdup(path);
    int found = 0;
    if (!base)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    if (s == QVL_OK)
      s = manifest_to_list(path, &c, &found);
    if (s == QVL_OK)
      s = buf_printf(&src, "%s/%s", path, VERIFY_MANIFEST_NAME);
    if (s == QVL_OK && !found) {
      src.len = 0;
      s = buf_printf(&src, "%s/SHA256SUMS", path);
      if (s == QVL_OK && access(src.data, R_OK) == 0)
        s = sums_to_list(src.data, NULL, &c);
      else if (s == QVL_OK)
        s = qvl_errorf(QVL_ERR_NOT_FOUND,
                       "%s: no recorded checksums (expected %s or SHA256SUMS in the directory)", path,
                       VERIFY_MANIFEST_NAME);
    }
    if (s == QVL_OK && c.n == 0)
      s = qvl_errorf(QVL_ERR_NOT_FOUND, "%s lists no files", src.data);
  } else {
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    base = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    if (slash && slash == path) {
      free(base);
      base = strdup("/");
    }
    if (!base)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    if (s == QVL_OK)
      s = buf_printf(&src, "%s.sha256", path);
    if (s == QVL_OK && access(src.data, R_OK) == 0) {
      check_list side = {0};
      s = sums_to_list(src.data, name, &side);
      /* A sidecar describes this file only, whatever name it was written under. */
      if (s == QVL_OK && side.n != 1)
        s = qvl_errorf(QVL_ERR_FORMAT, "%s: expected one checksum line, found %zu", src.data, side.n);
      if (s == QVL_OK)
        s = check_list_add(&c, name, strlen(name), UINT64_MAX, side.sha[0]);
      check_list_free(&side);
    } else if (s == QVL_OK) {
      uint64_t z;
      char h[65];
      src.len = 0;
      s = buf_printf(&src, "%s/%s", base, VERIFY_MANIFEST_NAME);
      if (s == QVL_OK) {
        s = verify_manifest_get(base, name, &z, h);
        if (s == QVL_OK)
          s = check_list_add(&c, name, strlen(name), z, h);
        else if (s == QVL_ERR_NOT_FOUND)
          s = qvl_errorf(QVL_ERR_NOT_FOUND,
                         "%s: no recorded checksum (expected %s.sha256 or an entry in %s)", path, path,
                         src.data);
      }
    }
  }
  if (s == QVL_OK)
    s = check_all(base, &c, src.data, report);
  check_list_free(&c);
  buf_free(&src);
  free(base);
  return s;
}

qvl_status verify_quick(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  char *base = slash ? (slash == path ? strdup("/") : strndup(path, (size_t)(slash - path))) : strdup(".");
  if (!base)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  uint64_t z;
  qvl_status s = verify_manifest_get(base, name, &z, NULL);
  if (s == QVL_ERR_NOT_FOUND) {
    qvl_error_clear();
    s = QVL_OK;
  } else if (s == QVL_OK) {
    s = verify_file(path, z, NULL);
    if (s == QVL_ERR_MISMATCH)
      s = qvl_error_prefix(s, "%s records another size; the file is damaged or incomplete (run `qvl verify`): ",
                           VERIFY_MANIFEST_NAME);
  }
  free(base);
  return s;
}
