/* Boxes and points of a grounding answer in pixels of the prompt's images (see boxes.h). */
#include "server/openai/boxes.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 8

/* A mark on the 0..1000 grid, before it is placed on an image. */
typedef struct mark {
  bool point;
  double v[4];       /* x1 y1 x2 y2, or x y */
  const char *label; /* inside the parsed JSON */
  int image;         /* explicit 1-based image, 0: none */
  int group;
} mark;

typedef struct marks {
  mark *m;
  int n;
  int group;         /* the group being collected */
} marks;

static bool coord(const cJSON *j, double *out) {
  double v;
  if (cJSON_IsNumber(j)) {
    v = j->valuedouble;
  } else if (cJSON_IsString(j) && j->valuestring[0]) {
    char *end = NULL;
    v = strtod(j->valuestring, &end);
    if (*end)
      return false;
  } else {
    return false;
  }
  if (!isfinite(v))
    return false;
  *out = v < 0 ? 0 : v > 1000 ? 1000 : v;
  return true;
}

static bool coords(const cJSON *arr, int n, double *out) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
    return false;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next)
    if (!coord(c, &out[i++]))
      return false;
  return true;
}

static const char *label_of(const cJSON *o) {
  static const char *const keys[] = {"label", "text_content", "name", "category", "text"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    if (cJSON_IsString(j) && j->valuestring[strspn(j->valuestring, " \t\r\n")])
      return j->valuestring;
  }
  return "";
}

static const cJSON *either(const cJSON *o, const char *a, const char *b) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, a);
  return j ? j : cJSON_GetObjectItemCaseSensitive(o, b);
}

static void collect(const cJSON *v, marks *ms, int depth) {
  if (ms->n >= BOXES_MAX || depth > MAX_DEPTH || !v)
    return;
  if (cJSON_IsArray(v)) {
    for (const cJSON *c = v->child; c; c = c->next)
      collect(c, ms, depth + 1);
    return;
  }
  if (!cJSON_IsObject(v))
    return;
  mark m = {.label = label_of(v), .group = ms->group};
  const cJSON *img = cJSON_GetObjectItemCaseSensitive(v, "image");
  if (cJSON_IsNumber(img) && img->valuedouble >= 1 && img->valuedouble <= 1e6 && img->valuedouble == floor(img->valuedouble))
    m.image = (int)img->valuedouble;
  if (coords(either(v, "bbox_2d", "bbox"), 4, m.v)) {
    if (m.v[2] < m.v[0]) {
      double t = m.v[0];
      m.v[0] = m.v[2];
      m.v[2] = t;
    }
    if (m.v[3] < m.v[1]) {
      double t = m.v[1];
      m.v[1] = m.v[3];
      m.v[3] = t;
    }
    ms->m[ms->n++] = m;
    return;
  }
  if (coords(either(v, "point_2d", "point"), 2, m.v)) {
    m.point = true;
    ms->m[ms->n++] = m;
    return;
  }
  for (const cJSON *c = v->child; c; c = c->next)
    if (cJSON_IsArray(c) || cJSON_IsObject(c))
      collect(c, ms, depth + 1);
}

/* The marks of one piece of text (a fence's body or the whole answer); cut-short or prose-wrapped
 * text gives each flat {...} that parses. Returns how many it added. */
static int collect_text(const char *s, size_t n, marks *ms, cJSON **keep) {
  int before = ms->n;
  while (n && strchr(" \t\r\n", *s)) {
    s++;
    n--;
  }
  while (n && strchr(" \t\r\n", s[n - 1]))
    n--;
  cJSON *j = n ? cJSON_ParseWithLength(s, n) : NULL;
  if (j) {
    /* a top-level list of lists: each inner list is a group (one per image) */
    bool lists = cJSON_IsArray(j) && j->child && cJSON_GetArraySize(j) > 1;
    for (const cJSON *c = lists ? j->child : NULL; c && lists; c = c->next)
      lists = cJSON_IsArray(c);
    if (lists) {
      for (const cJSON *c = j->child; c; c = c->next) {
        int n0 = ms->n;
        collect(c, ms, 1);
        if (ms->n > n0)
          ms->group++;
      }
    } else {
      collect(j, ms, 0);
      if (ms->n > before)
        ms->group++;
    }
    *keep = j; /* labels point into it */
    return ms->n - before;
  }
  cJSON *all = cJSON_CreateArray();
  for (size_t i = 0; i < n && ms->n < BOXES_MAX; i++) {
    if (s[i] != '{')
      continue;
    size_t k = i + 1;
    while (k < n && s[k] != '{' && s[k] != '}')
      k++;
    if (k >= n || s[k] != '}')
      continue;
    cJSON *o = cJSON_ParseWithLength(s + i, k + 1 - i);
    if (o) {
      collect(o, ms, 0);
      cJSON_AddItemToArray(all, o);
    }
    i = k;
  }
  if (ms->n > before)
    ms->group++;
  *keep = all;
  return ms->n - before;
}

static double round1(double v) { return floor(v * 10 + 0.5) / 10; }

cJSON *boxes_from_text(const char *text, size_t len, const engine_image *images, int n_images) {
  cJSON *out = cJSON_CreateArray();
  if (!out || !text || !len || n_images <= 0 || (!memmem(text, len, "bbox", 4) && !memmem(text, len, "point", 5)))
    return out;
  marks ms = {.m = malloc(sizeof(mark) * BOXES_MAX)};
  cJSON *parsed = cJSON_CreateArray(); /* what the labels point into */
  if (!ms.m || !parsed) {
    free(ms.m);
    cJSON_Delete(parsed);
    cJSON_Delete(out);
    return NULL;
  }
  /* ```json fences first; the whole answer when none has marks */
  const char *p = text, *end = text + len;
  while (p < end && ms.n < BOXES_MAX) {
    const char *f = memmem(p, (size_t)(end - p), "```", 3);
    if (!f)
      break;
    const char *body = memchr(f + 3, '\n', (size_t)(end - f - 3));
    if (!body)
      break;
    body++;
    const char *close = memmem(body, (size_t)(end - body), "```", 3);
    const char *stop = close ? close : end;
    cJSON *keep = NULL;
    collect_text(body, (size_t)(stop - body), &ms, &keep);
    if (keep)
      cJSON_AddItemToArray(parsed, keep);
    p = close ? close + 3 : end;
  }
  if (ms.n == 0) {
    cJSON *keep = NULL;
    collect_text(text, len, &ms, &keep);
    if (keep)
      cJSON_AddItemToArray(parsed, keep);
  }
  /* the last user message with images, and its images */
  int last_msg = images[n_images - 1].message_index, first = n_images - 1;
  while (first > 0 && images[first - 1].message_index == last_msg)
    first--;
  int in_last = n_images - first;
  for (int i = 0; i < ms.n; i++) {
    const mark *m = &ms.m[i];
    int img = n_images - 1;
    if (m->image >= 1 && m->image <= n_images)
      img = m->image - 1;
    else if (ms.group > 1 && ms.group == in_last)
      img = first + m->group;
    double w = images[img].width, h = images[img].height;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "image", img);
    cJSON_AddStringToObject(o, "label", m->label);
    double px[4];
    for (int k = 0; k < (m->point ? 2 : 4); k++)
      px[k] = round1(m->v[k] / 1000.0 * (k % 2 ? h : w));
    cJSON_AddItemToObject(o, m->point ? "point" : "box", cJSON_CreateDoubleArray(px, m->point ? 2 : 4));
    cJSON_AddItemToArray(out, o);
  }
  free(ms.m);
  cJSON_Delete(parsed);
  return out;
}
