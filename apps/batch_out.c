#include "batch_out.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CSV_HEADER "path,answer,finish,prompt_tokens,completion_tokens,error\n"

/* Records the message in o->err (the library's qvl_errorf is not public) and returns code. */
__attribute__((format(printf, 3, 4))) static qvl_status fail(batch_out *o, qvl_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->err, sizeof o->err, fmt, ap);
  va_end(ap);
  return code;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first CSV field of line (quoted with "" escapes, or bare up to the comma), malloc'd. */
static char *csv_first(const char *line) {
  size_t n = strlen(line);
  char *out = malloc(n + 1);
  if (!out)
    return NULL;
  size_t k = 0;
  if (line[0] == '"') {
    for (size_t i = 1; i < n; i++) {
      if (line[i] == '"' && line[i + 1] == '"')
        out[k++] = '"', i++;
      else if (line[i] == '"')
        break;
      else
        out[k++] = line[i];
    }
  } else {
    while (k < n && line[k] != ',')
      out[k] = line[k], k++;
  }
  out[k] = '\0';
  return out;
}

/* The path of one complete line, or NULL (with *bad set when the line is not ours). */
static char *line_path(const batch_out *o, const char *line, bool *bad) {
  if (o->csv)
    return csv_first(line);
  cJSON *j = cJSON_Parse(line);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "path");
  char *path = cJSON_IsString(p) ? strdup(p->valuestring) : NULL;
  *bad = !path;
  cJSON_Delete(j);
  return path;
}

/* Reads the complete lines back; returns the length of the file up to the last complete line. */
static qvl_status read_back(batch_out *o, const char *path, long *keep) {
  *keep = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? QVL_OK : fail(o, QVL_ERR_IO, "cannot read %s: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0, cap_done = 0;
  ssize_t n;
  qvl_status st = QVL_OK;
  for (long at = 0, lineno = 1; st == QVL_OK && (n = getline(&line, &cap, f)) > 0; lineno++) {
    if (line[n - 1] != '\n')
      break; /* cut off mid-line: done again */
    line[n - 1] = '\0';
    at += n;
    *keep = at;
    if (o->csv && lineno == 1) {
      if (strcmp(line, "path,answer,finish,prompt_tokens,completion_tokens,error"))
        st = fail(o, QVL_ERR_FORMAT, "%s does not start with qvl batch's CSV header; give another -o", path);
      continue;
    }
    bool bad = false;
    char *p = line_path(o, line, &bad);
    if (!p) {
      st = bad ? fail(o, QVL_ERR_FORMAT, "%s line %ld is not a qvl batch line; give another -o", path, lineno)
               : fail(o, QVL_ERR_NOMEM, "out of memory");
      break;
    }
    if (o->n_done == cap_done) {
      cap_done = cap_done ? cap_done * 2 : 256;
      char **d = realloc(o->done, cap_done * sizeof *d);
      if (!d) {
        free(p);
        st = fail(o, QVL_ERR_NOMEM, "out of memory");
        break;
      }
      o->done = d;
    }
    o->done[o->n_done++] = p;
  }
  free(line);
  fclose(f);
  if (st == QVL_OK && o->n_done)
    qsort(o->done, o->n_done, sizeof *o->done, cmp_str);
  return st;
}

qvl_status batch_out_open(batch_out *o, const char *path) {
  memset(o, 0, sizeof *o);
  size_t n = strlen(path);
  o->csv = n >= 4 && !strcasecmp(path + n - 4, ".csv");
  long keep;
  qvl_status st = read_back(o, path, &keep);
  if (st != QVL_OK)
    return st;
  if (truncate(path, keep) != 0 && errno != ENOENT)
    return fail(o, QVL_ERR_IO, "cannot cut the unfinished last line of %s: %s", path, strerror(errno));
  if (!(o->f = fopen(path, "a")))
    return fail(o, QVL_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  if (o->csv && keep == 0 && (fputs(CSV_HEADER, o->f) == EOF || fflush(o->f) != 0))
    return fail(o, QVL_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  return QVL_OK;
}

bool batch_out_has(const batch_out *o, const char *path) {
  return o->n_done && bsearch(&path, o->done, o->n_done, sizeof *o->done, cmp_str) != NULL;
}

static void csv_field(FILE *f, const char *s, bool last) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputs(last ? "\"\n" : "\",", f);
}

qvl_status batch_out_write(batch_out *o, const batch_line *l) {
  if (o->csv) {
    csv_field(o->f, l->path, false);
    csv_field(o->f, l->answer, false);
    fprintf(o->f, "%s,%lld,%lld,", l->finish, (long long)l->prompt_tokens, (long long)l->completion_tokens);
    csv_field(o->f, l->error, true);
  } else {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", l->path);
    if (l->error) {
      cJSON_AddStringToObject(j, "error", l->error);
    } else {
      cJSON_AddStringToObject(j, "answer", l->answer ? l->answer : "");
      cJSON_AddStringToObject(j, "finish", l->finish);
      cJSON *u = cJSON_AddObjectToObject(j, "usage");
      cJSON_AddNumberToObject(u, "prompt_tokens", (double)l->prompt_tokens);
      cJSON_AddNumberToObject(u, "completion_tokens", (double)l->completion_tokens);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
      return fail(o, QVL_ERR_NOMEM, "out of memory");
    fputs(s, o->f);
    fputc('\n', o->f);
    free(s);
  }
  if (fflush(o->f) != 0 || ferror(o->f))
    return fail(o, QVL_ERR_IO, "cannot write the output: %s", strerror(errno));
  return QVL_OK;
}

qvl_status batch_out_close(batch_out *o) {
  qvl_status st = QVL_OK;
  if (o->f && fclose(o->f) != 0)
    st = fail(o, QVL_ERR_IO, "cannot write the output: %s", strerror(errno));
  for (size_t i = 0; i < o->n_done; i++)
    free(o->done[i]);
  free(o->done);
  o->f = NULL;
  o->done = NULL;
  o->n_done = 0;
  return st;
}
