/* Nested / transformers-style config files and the settings checks beyond plain ranges
 * (config_files.h). */
#include "server/config/config_files.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/cpulist.h"
#include "base/log.h"
#include "base/status.h"
#include "prompt/history.h"
#include "server/config/settings.h"

#define CONFIG_MAX_LINES 20000 /* the file is at most 1 MiB; a line per setting */

/* Sections of the nested layout; any of our keys may appear in any of them. */
static const char *const sections[] = {"model", "generation", "generation_config", "system", "server",
                                       "engine", "limits", "logging", "cache", "batching"};
/* Keys from transformers / accelerate / deployment scripts that have no meaning for qvl. */
static const char *const ignored_keys[] = {"device_map", "offload_folder", "use_cache", "cache_type",
                                           "swap_size_gb"};

static bool in_list(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(s, list[i]))
      return true;
  return false;
}
#define IN(s, list) in_list(s, list, sizeof list / sizeof list[0])

/* The output, line by line: lines[i] holds what goes on line i + 1. */
typedef struct flat {
  char **lines;
  size_t n_lines;
} flat;

static void flat_free(flat *f) {
  for (size_t i = 0; i < f->n_lines; i++)
    free(f->lines[i]);
  free(f->lines);
}

void config_yaml_quote(buf *b, const char *v) {
  buf_append_str(b, "\"");
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\')
      buf_printf(b, "\\%c", *p);
    else if (*p < 0x20)
      buf_printf(b, "\\x%02x", *p);
    else
      buf_append(b, p, 1);
  }
  buf_append_str(b, "\"");
}

/* Puts `text` on line `line`; *clash when that line already has a setting (flow mappings). */
static qvl_status flat_put(flat *f, size_t line, buf *text, bool *clash) {
  *clash = false;
  if (line == 0 || line > CONFIG_MAX_LINES)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "config: line %zu is out of range", line);
  if (line > f->n_lines) {
    char **g = realloc(f->lines, sizeof *g * line);
    if (!g)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    memset(g + f->n_lines, 0, sizeof *g * (line - f->n_lines));
    f->lines = g;
    f->n_lines = line;
  }
  if (f->lines[line - 1]) {
    *clash = true;
    return QVL_OK;
  }
  f->lines[line - 1] = text->data ? text->data : strdup("");
  text->data = NULL;
  text->len = text->cap = 0;
  return f->lines[line - 1] ? QVL_OK : qvl_errorf(QVL_ERR_NOMEM, "out of memory");
}

/* torch_dtype names -> ours; "" for auto (as stored); NULL when unknown. */
static const char *map_dtype(const char *v) {
  static const char *const m[][2] = {{"bfloat16", "bf16"}, {"torch.bfloat16", "bf16"}, {"bf16", "bf16"},
                                     {"float16", "f16"},   {"torch.float16", "f16"},   {"half", "f16"},
                                     {"fp16", "f16"},      {"f16", "f16"},             {"float32", "f32"},
                                     {"torch.float32", "f32"}, {"float", "f32"},       {"fp32", "f32"},
                                     {"f32", "f32"},       {"auto", ""},               {"q8_0", "q8_0"},
                                     {"q4_0", "q4_0"},     {"q4_k", "q4_k"}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (!strcasecmp(v, m[i][0]))
      return m[i][1];
  return NULL;
}

/* One key: value of the nested layout -> our key and value. *key_out NULL: drop it (ignored). */
static qvl_status map_setting(const char *section, const char *key, const char *v, const char *where,
                              const char **key_out, char *val, size_t cap, bool *ignored) {
  *ignored = false;
  *key_out = key;
  snprintf(val, cap, "%s", v);
  if (IN(key, ignored_keys)) {
    *ignored = true;
    *key_out = NULL;
    return QVL_OK;
  }
  if (!strcmp(key, "max_new_tokens")) {
    *key_out = "max_tokens";
  } else if (!strcmp(key, "context_length")) {
    *key_out = "ctx";
  } else if (!strcmp(key, "process_priority")) {
    *key_out = "nice";
  } else if (!strcmp(key, "num_threads")) {
    *key_out = "threads";
  } else if (!strcmp(key, "torch_dtype") || !strcmp(key, "dtype")) {
    const char *d = map_dtype(v);
    if (!d)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: %s '%s': expected bfloat16, float16, float32, auto (or f32, bf16, "
                        "f16, q8_0, q4_0, q4_k)", where, key, v);
    *key_out = *d ? "dtype" : NULL; /* auto: the weights as stored, our default */
    snprintf(val, cap, "%s", d);
  } else if (!strcmp(key, "max_wait_time")) {
    char *end;
    errno = 0;
    double s = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(s) || s < 0 || s > 10)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: max_wait_time expects seconds in [0, 10], got '%s'", where, v);
    *key_out = "max_wait_ms";
    snprintf(val, cap, "%lld", (long long)llround(s * 1000));
  } else if (section && !strcmp(section, "model") &&
             (!strcmp(key, "name") || !strcmp(key, "path") || !strcmp(key, "model_path"))) {
    /* a file or directory here is a model; anything else a Hugging Face repository */
    struct stat st;
    size_t n = strlen(v);
    bool local = stat(v, &st) == 0 || (n > 5 && !strcasecmp(v + n - 5, ".gguf"));
    *key_out = local ? "model" : "hf";
  }
  return QVL_OK;
}

static qvl_status emit(flat *f, size_t line, const char *key, const char *v, bool plain_empty, bool *clash) {
  buf b = {0};
  buf_printf(&b, "%s:", key);
  if (!plain_empty) {
    buf_append_str(&b, " ");
    config_yaml_quote(&b, v);
  }
  qvl_status s = flat_put(f, line, &b, clash);
  buf_free(&b);
  return s;
}

qvl_status config_yaml_normalize(const char *text, size_t len, const char *name, buf *out, bool *rewritten,
                                 buf *ignored_out) {
  *rewritten = false;
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return qvl_errorf(QVL_ERR_NOMEM, "%s: cannot initialise the YAML parser", name);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  flat f = {0};
  buf ignored = {0};
  qvl_status st = QVL_OK;
  bool needed = false, bail = false, done = false;
  int depth = 0;               /* mappings open */
  char section[128] = "";      /* inside a section mapping (depth 2) */
  char key[128] = "";          /* the key waiting for its value */
  size_t key_line = 0;
  bool have_key = false;
  buf seq = {0};               /* a list value being collected */
  bool in_seq = false;
  char where[600], val[1024];
  while (!done && !bail && st == QVL_OK) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      bail = true; /* the flat parser reports syntax errors */
      break;
    }
    size_t line = ev.start_mark.line + 1;
    switch (ev.type) {
    case YAML_STREAM_END_EVENT:
      done = true;
      break;
    case YAML_MAPPING_START_EVENT:
      if (depth == 0) {
        depth = 1;
      } else if (depth == 1 && have_key && !in_seq) {
        if (!IN(key, sections)) {
          bail = true; /* the flat parser reports it: an unknown setting, or a mapping where a value goes */
          break;
        }
        snprintf(section, sizeof section, "%s", key);
        have_key = false;
        depth = 2;
        needed = true;
      } else {
        if (depth == 2 && have_key)
          st = qvl_errorf(QVL_ERR_INVALID_ARG, "%s:%zu: %s.%s: expected a value, found a mapping", name, key_line,
                          section, key);
        else
          bail = true;
      }
      break;
    case YAML_MAPPING_END_EVENT:
      depth--;
      section[0] = '\0';
      break;
    case YAML_SEQUENCE_START_EVENT:
      if (depth >= 1 && have_key && !in_seq) {
        in_seq = true;
        buf_free(&seq);
        buf_append_str(&seq, "");
      } else {
        bail = true;
      }
      break;
    case YAML_SEQUENCE_END_EVENT: {
      in_seq = false;
      have_key = false;
      snprintf(where, sizeof where, "%s:%zu", name, key_line);
      bool clash = false;
      if (!strcmp(key, "cpu_affinity")) {
        /* [0, 1, 2, 3] is the same CPU list as "0-3" */
        st = emit(&f, key_line, key, seq.data ? seq.data : "", false, &clash);
        needed = true;
      } else if (IN(key, ignored_keys)) {
        buf_printf(&ignored, "%s%s", ignored.len ? ", " : "", key);
        needed = true;
      } else {
        /* a list setting (api_key): re-emit as a flow list of the quoted items */
        buf b = {0};
        buf_printf(&b, "%s: [", key);
        char *save = NULL, *copy = strdup(seq.data ? seq.data : "");
        int i = 0;
        for (char *t = copy ? strtok_r(copy, "\x1f", &save) : NULL; t; t = strtok_r(NULL, "\x1f", &save), i++) {
          if (i)
            buf_append_str(&b, ", ");
          config_yaml_quote(&b, t);
        }
        free(copy);
        buf_append_str(&b, "]");
        st = flat_put(&f, key_line, &b, &clash);
        buf_free(&b);
      }
      if (clash)
        bail = true;
      break;
    }
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)ev.data.scalar.value;
      if (in_seq) {
        if (!strcmp(key, "cpu_affinity"))
          buf_printf(&seq, "%s%s", seq.len ? "," : "", v);
        else
          buf_printf(&seq, "%s%s", seq.len ? "\x1f" : "", v);
      } else if (!have_key) {
        if (depth < 1) {
          bail = true;
          break;
        }
        snprintf(key, sizeof key, "%s", v);
        key_line = line;
        have_key = true;
      } else {
        have_key = false;
        snprintf(where, sizeof where, "%s:%zu", name, key_line);
        const char *k2 = NULL;
        bool ign = false;
        st = map_setting(depth == 2 ? section : NULL, key, v, where, &k2, val, sizeof val, &ign);
        if (st != QVL_OK)
          break;
        if (ign)
          buf_printf(&ignored, "%s%s", ignored.len ? ", " : "", key);
        if (!k2 || strcmp(k2, key) || strcmp(val, v))
          needed = true;
        bool clash = false;
        if (k2) {
          bool plain_empty = !*v && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
          st = emit(&f, key_line, k2, val, plain_empty, &clash);
        }
        if (clash)
          bail = true;
      }
      break;
    }
    case YAML_ALIAS_EVENT:
      bail = true;
      break;
    default:
      break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  buf_free(&seq);
  if (st == QVL_OK && needed && !bail) {
    for (size_t i = 0; i < f.n_lines; i++) {
      if (f.lines[i])
        buf_append_str(out, f.lines[i]);
      buf_append_str(out, "\n");
    }
    if (!out->data)
      buf_append_str(out, "{}\n");
    *rewritten = true;
    if (ignored.len) {
      log_warn("%s: ignoring settings that mean nothing for qvl: %s", name, ignored.data);
      if (ignored_out)
        buf_append_str(ignored_out, ignored.data);
    }
  }
  buf_free(&ignored);
  flat_free(&f);
  return st;
}

void config_ops_model_choice(server_config *c, int argc, char **argv, int first, const char *(*env)(const char *)) {
  bool chosen = false;
  if (env) {
    const char *m = env("QVL_MODEL"), *h = env("QVL_HF");
    chosen = (m && *m) || (h && *h);
  }
  for (int i = first; i < argc && !chosen; i++) {
    const char *a = argv[i];
    chosen = !strcmp(a, "-m") || !strcmp(a, "--model") || !strncmp(a, "--model=", 8) || !strcmp(a, "--hf") ||
             !strncmp(a, "--hf=", 5);
  }
  if (!chosen)
    return;
  free(c->model);
  free(c->hf);
  c->model = c->hf = NULL;
}

/* ---- checks ---------------------------------------------------------------------------------- */

qvl_status config_ops_check(server_config *c) {
  history_mode hm;
  if (c->history && !history_mode_parse(c->history, &hm))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "history: expected error or trim, got '%s'", c->history);
  if (c->log_format && strcmp(c->log_format, "logfmt") && strcmp(c->log_format, "json"))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "log_format: expected logfmt or json, got '%s'", c->log_format);
  if (c->log_file && !*c->log_file)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "log_file: empty path");
  if (c->cpu_affinity) {
    cpu_set_t set;
    QVL_TRY(cpulist_parse(c->cpu_affinity, &set, NULL, 0, NULL));
  }
  return QVL_OK;
}
