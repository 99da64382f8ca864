/* The model's JSON text, embedded as it is (see json_raw.h). */
#include "server/openai/json_raw.h"

#include <stdlib.h>
#include <string.h>

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t n) {
  while (i < n && is_ws(s[i]))
    i++;
  return i;
}

/* The end of the string starting at s[i] == '"' (one past the closing quote), or n. */
static size_t skip_string(const char *s, size_t i, size_t n) {
  for (i++; i < n; i++) {
    if (s[i] == '\\')
      i++;
    else if (s[i] == '"')
      return i + 1;
  }
  return n;
}

/* The end of the value starting at s[i] (the text is valid JSON: brackets balance). */
static size_t skip_value(const char *s, size_t i, size_t n) {
  if (i >= n)
    return n;
  if (s[i] == '"')
    return skip_string(s, i, n);
  if (s[i] == '{' || s[i] == '[') {
    size_t depth = 0;
    while (i < n) {
      char c = s[i];
      if (c == '"') {
        i = skip_string(s, i, n);
        continue;
      }
      if (c == '{' || c == '[')
        depth++;
      else if (c == '}' || c == ']') {
        if (--depth == 0)
          return i + 1;
      }
      i++;
    }
    return n;
  }
  while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
    i++;
  return i;
}

/* text[0..len) parsed, NULL unless it is exactly one JSON value (whitespace around it allowed). */
static cJSON *parse_whole(const char *text, size_t len) {
  if (!text || memchr(text, 0, len))
    return NULL;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!j)
    return NULL;
  size_t i = end ? (size_t)(end - text) : len;
  if (skip_ws(text, i, len) != len) {
    cJSON_Delete(j);
    return NULL;
  }
  return j;
}

bool json_raw_member(const char *text, size_t len, const char *key, size_t *off, size_t *vlen) {
  cJSON *whole = parse_whole(text, len);
  bool object = cJSON_IsObject(whole);
  cJSON_Delete(whole);
  if (!object)
    return false;
  size_t i = skip_ws(text, 0, len);
  if (i >= len || text[i] != '{')
    return false;
  i++;
  for (;;) {
    i = skip_ws(text, i, len);
    if (i >= len || text[i] != '"')
      return false;
    size_t k0 = i, k1 = skip_string(text, i, len);
    /* The key decoded, so that an escaped spelling of key matches too. */
    cJSON *k = cJSON_ParseWithLength(text + k0, k1 - k0);
    bool match = cJSON_IsString(k) && !strcmp(k->valuestring, key);
    cJSON_Delete(k);
    i = skip_ws(text, k1, len);
    if (i >= len || text[i] != ':')
      return false;
    i = skip_ws(text, i + 1, len);
    size_t v0 = i, v1 = skip_value(text, i, len);
    if (match) {
      *off = v0;
      *vlen = v1 - v0;
      return true;
    }
    i = skip_ws(text, v1, len);
    if (i >= len || text[i] != ',')
      return false;
    i++;
  }
}

cJSON *json_raw_value(const char *text, size_t len, bool object_only) {
  cJSON *parsed = parse_whole(text, len);
  bool ok = parsed && (!object_only || cJSON_IsObject(parsed));
  cJSON_Delete(parsed);
  if (!ok)
    return NULL;
  char *out = malloc(len + 1);
  if (!out)
    return NULL;
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    if (text[i] == '"') {
      size_t e = skip_string(text, i, len);
      memcpy(out + n, text + i, e - i);
      n += e - i;
      i = e;
    } else if (is_ws(text[i])) {
      i++;
    } else {
      out[n++] = text[i++];
    }
  }
  out[n] = 0;
  cJSON *raw = cJSON_CreateRaw(out);
  free(out);
  return raw;
}
