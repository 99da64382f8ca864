/* The hub's file listing: parse and check it, and pick the files a model needs (no I/O). */
#include "hub/hub_impl.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "base/mapfile.h"
#include "base/relpath.h"
#include "model/verify.h"

#define HUB_MAX_FILES 100000

static int ends_with_ci(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcasecmp(s + n - m, suffix);
}

static int is_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i]))
      return 0;
  return s[n] == 0;
}

void hub_listing_free(hub_listing *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->e[i].path);
  free(l->e);
  memset(l, 0, sizeof *l);
}

const hub_entry *hub_listing_find(const hub_listing *l, const char *path) {
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

qvl_status hub_listing_add_json(hub_listing *l, const cJSON *arr, const char *what) {
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
    hub_entry e = {0};
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
    if (hub_listing_find(l, p->valuestring))
      continue;
    if (l->n >= HUB_MAX_FILES)
      return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: more than %d files", what, HUB_MAX_FILES);
    if (l->n == l->cap) {
      size_t cap = l->cap ? l->cap * 2 : 64;
      hub_entry *ne = realloc(l->e, cap * sizeof *ne);
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

cJSON *hub_listing_to_json(const hub_listing *l, const char *repo, const char *revision) {
  cJSON *root = cJSON_CreateObject();
  cJSON *files = root ? cJSON_AddArrayToObject(root, "files") : NULL;
  if (!files || !cJSON_AddStringToObject(root, "repo", repo) || !cJSON_AddStringToObject(root, "revision", revision)) {
    cJSON_Delete(root);
    return NULL;
  }
  for (size_t i = 0; i < l->n; i++) {
    const hub_entry *e = &l->e[i];
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

static qvl_status sel_add(hub_selection *s, size_t i, hub_role r) {
  for (size_t k = 0; k < s->n; k++)
    if (s->idx[k] == i)
      return QVL_OK;
  QVL_TRY(array_grow((void **)&s->idx, &s->idx_cap, s->n, sizeof *s->idx, "hub"));
  QVL_TRY(array_grow((void **)&s->role, &s->role_cap, s->n, sizeof *s->role, "hub"));
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

static qvl_status add_gguf_model(const char *const *paths, size_t n, size_t first, const char *repo, hub_selection *s) {
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

qvl_status hub_listing_select(const char *const *paths, size_t n, const char *quant, const char *repo,
                              hub_selection *s, int *is_gguf, const char **quant_used) {
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
  hub_selection s = {0};
  const char *qu;
  qvl_status st = hub_listing_select(paths, n, quant, repo ? repo : "?", &s, is_gguf, &qu);
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
  hub_listing l = {0};
  qvl_status s = hub_listing_add_json(&l, j, "listing");
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
  hub_listing_free(&l);
  return s;
}
