/* Log destination (file reopened on SIGHUP) and format (logfmt or JSON); see logsink.h. */
#include "base/logsink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"

static char g_path[4096];
static atomic_bool g_json;

static qvl_status open_onto_stderr(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return qvl_errorf(QVL_ERR_IO, "log file %s: %s", path, strerror(errno));
  /* dup2 swaps fd 2 atomically: a concurrent write goes to the old file or the new one */
  if (dup2(fd, 2) < 0) {
    int err = errno;
    close(fd);
    return qvl_errorf(QVL_ERR_IO, "log file %s: %s", path, strerror(err));
  }
  close(fd);
  return QVL_OK;
}

qvl_status logsink_open(const char *path) {
  if (!path || !*path || strlen(path) >= sizeof g_path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "log file: expected a path of 1..%zu bytes", sizeof g_path - 1);
  QVL_TRY(open_onto_stderr(path));
  snprintf(g_path, sizeof g_path, "%s", path);
  return QVL_OK;
}

qvl_status logsink_reopen(void) { return g_path[0] ? open_onto_stderr(g_path) : QVL_OK; }

void logsink_set_json(bool json) { atomic_store(&g_json, json); }
bool logsink_json(void) { return atomic_load(&g_json); }

static bool is_number(const char *s, size_t n) {
  if (n == 0)
    return false;
  size_t i = s[0] == '-' ? 1 : 0;
  bool digits = false, dot = false;
  if (i < n && s[i] == '0' && i + 1 < n && s[i + 1] != '.')
    return false; /* JSON has no leading zeros */
  for (; i < n; i++) {
    if (s[i] >= '0' && s[i] <= '9')
      digits = true;
    else if (s[i] == '.' && !dot)
      dot = true;
    else
      return false;
  }
  return digits && s[n - 1] != '.';
}

/* Appends s[0..n) JSON-escaped; returns the new length (never past cap - 3). */
static size_t put_escaped(char *out, size_t o, size_t cap, const char *s, size_t n) {
  for (size_t i = 0; i < n && o + 8 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  return o;
}

size_t logsink_logfmt_to_json(const char *line, size_t len, char *out, size_t cap) {
  size_t o = 0;
  if (cap < 4) {
    if (cap)
      out[0] = '\0';
    return 0;
  }
  while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    len--;
  out[o++] = '{';
  size_t i = 0;
  bool first = true;
  while (i < len && o + 16 < cap) {
    while (i < len && line[i] == ' ')
      i++;
    if (i >= len)
      break;
    size_t k0 = i;
    while (i < len && line[i] != '=' && line[i] != ' ')
      i++;
    size_t k1 = i, v0 = i, v1 = i;
    bool quoted = false;
    if (i < len && line[i] == '=') {
      i++;
      if (i < len && line[i] == '"') {
        quoted = true;
        v0 = ++i;
        while (i < len && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < len)
            i++;
          i++;
        }
        v1 = i;
        if (i < len)
          i++;
      } else {
        v0 = i;
        while (i < len && line[i] != ' ')
          i++;
        v1 = i;
      }
    }
    if (!first)
      out[o++] = ',';
    first = false;
    out[o++] = '"';
    o = put_escaped(out, o, cap, line + k0, k1 - k0);
    out[o++] = '"';
    out[o++] = ':';
    if (!quoted && is_number(line + v0, v1 - v0)) {
      o = put_escaped(out, o, cap, line + v0, v1 - v0);
    } else {
      out[o++] = '"';
      o = put_escaped(out, o, cap, line + v0, v1 - v0);
      out[o++] = '"';
    }
  }
  out[o++] = '}';
  out[o++] = '\n';
  out[o] = '\0';
  return o;
}

void logsink_write(const char *line, size_t len) {
  char json[4096];
  const char *p = line;
  size_t n = len;
  char with_nl[4096];
  if (atomic_load(&g_json)) {
    n = logsink_logfmt_to_json(line, len, json, sizeof json);
    p = json;
  } else if (!len || line[len - 1] != '\n') {
    if (len > sizeof with_nl - 1)
      len = sizeof with_nl - 1;
    memcpy(with_nl, line, len);
    with_nl[len] = '\n';
    p = with_nl;
    n = len + 1;
  }
  ssize_t w = write(2, p, n);
  (void)w;
}
