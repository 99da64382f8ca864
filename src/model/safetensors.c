/*
 * safetensors reader and writer. Layout: u64 little-endian header length N, N bytes of JSON
 * (an object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end)}, plus an optional
 * "__metadata__" object of strings), then the data section; offsets are relative to its start.
 *
 * The reader is as strict as the reference implementation (the Rust safetensors crate): the tensors
 * must tile the data section exactly (sorted by offset, no gaps, no overlaps, nothing after the
 * last one), and each [begin, end) must hold exactly nelements * dtype size bytes. It also rejects
 * what the crate would misread or we could not represent: NUL bytes in the header, anything but
 * whitespace after the JSON, duplicate names or fields, unknown fields, non-integer or > 2^53 numbers,
 * more than ST_MAX_DIMS dims. Headers are capped at 100 MB (the crate's limit).
 *
 * Tensor data pointers are only as aligned as the writer made them: the data section starts at
 * 8 + N, which writers (this one, Python's) pad to a multiple of 8; consumers that need alignment
 * must check it (or copy).
 */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/free_each.h"
#include "base/mapfile.h"
#include "base/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads the little-endian header length directly"
#endif

#define ST_MAX_HEADER (100u * 1000u * 1000u)
#define ST_MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact in a double */

static const char *const dtype_names[ST_DTYPE_COUNT] = {"F64", "F32", "F16", "BF16", "I64",
                                                        "I32", "I16", "I8",  "U8",   "BOOL"};
static const size_t dtype_sizes[ST_DTYPE_COUNT] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};

const char *st_dtype_name(st_dtype t) {
  return (int)t >= 0 && t < ST_DTYPE_COUNT ? dtype_names[t] : "invalid";
}

size_t st_dtype_size(st_dtype t) { return (int)t >= 0 && t < ST_DTYPE_COUNT ? dtype_sizes[t] : 0; }

typedef struct st_meta {
  char *key, *value;
} st_meta;

struct safetensors {
  file_image img; /* the whole file image; img.label names it in messages */
  int64_t n;
  st_tensor *t;    /* [n], header order; names owned (malloc'd) */
  uint32_t *index; /* [index_mask + 1] open-addressing slots: tensor index + 1, 0 = empty */
  uint64_t index_mask;
  size_t n_meta;
  st_meta *meta; /* [n_meta] */
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h ^ (h >> 29);
}

/* Slot of name in the index: either the slot holding it (*found >= 0) or the empty slot to use. */
static uint64_t probe(const safetensors *st, const char *name, int64_t *found) {
  uint64_t pos = hash_str(name) & st->index_mask;
  for (;;) {
    uint32_t e = st->index[pos];
    if (e == 0 || strcmp(st->t[e - 1].name, name) == 0) {
      *found = e ? (int64_t)e - 1 : -1;
      return pos;
    }
    pos = (pos + 1) & st->index_mask;
  }
}

/* Bounded, printable rendering of a name from the file for messages. */
typedef struct name_buf {
  char s[100];
} name_buf;

static name_buf show(const char *p) {
  name_buf b;
  size_t k = 0, max = sizeof b.s - 4;
  for (; p && *p && k < max; p++)
    b.s[k++] = ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f) ? *p : '?';
  if (p && *p)
    memcpy(b.s + k, "...", 3), k += 3;
  b.s[k] = 0;
  return b;
}

static bool json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return false;
  double d = item->valuedouble;
  if (!(d >= 0) || d > ST_MAX_EXACT_INT || floor(d) != d)
    return false;
  *out = (uint64_t)d;
  return true;
}

static qvl_status parse_metadata(safetensors *st, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: \"__metadata__\" is not an object of strings", st->img.label);
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next)
    n++;
  st->meta = calloc(n ? n : 1, sizeof *st->meta);
  if (!st->meta)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", st->img.label);
  for (const cJSON *c = obj->child; c; c = c->next) {
    name_buf k = show(c->string);
    if (!cJSON_IsString(c))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is not a string", st->img.label, k.s);
    for (size_t i = 0; i < st->n_meta; i++)
      if (strcmp(st->meta[i].key, c->string) == 0)
        return qvl_errorf(QVL_ERR_FORMAT, "%s: duplicate \"__metadata__\" key '%s'", st->img.label, k.s);
    st_meta *m = &st->meta[st->n_meta];
    m->key = strdup(c->string);
    m->value = strdup(c->valuestring);
    st->n_meta++;
    if (!m->key || !m->value)
      return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", st->img.label);
  }
  return QVL_OK;
}

static qvl_status parse_entry(safetensors *st, const cJSON *e, st_tensor *t, uint64_t *begin, uint64_t *end) {
  name_buf nm = show(e->string);
  if (!cJSON_IsObject(e))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': entry is not an object", st->img.label, nm.s);
  const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
  for (const cJSON *f = e->child; f; f = f->next) {
    const cJSON **slot = strcmp(f->string, "dtype") == 0          ? &dtype
                         : strcmp(f->string, "shape") == 0        ? &shape
                         : strcmp(f->string, "data_offsets") == 0 ? &offsets
                                                                  : NULL;
    name_buf fn = show(f->string);
    if (!slot)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "%s: tensor '%s': unknown field '%s' (expected dtype, shape, data_offsets)", st->img.label,
                        nm.s, fn.s);
    if (*slot)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': duplicate field '%s'", st->img.label, nm.s, fn.s);
    *slot = f;
  }
  if (!dtype || !shape || !offsets)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", st->img.label, nm.s,
                      !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

  if (!cJSON_IsString(dtype))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", st->img.label, nm.s);
  int dt = -1;
  for (int i = 0; i < ST_DTYPE_COUNT; i++)
    if (strcmp(dtype->valuestring, dtype_names[i]) == 0)
      dt = i;
  if (dt < 0) {
    name_buf d = show(dtype->valuestring);
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: tensor '%s' has dtype '%s', which qvl does not read (F64 F32 F16 BF16 I64 I32 "
                      "I16 I8 U8 BOOL)",
                      st->img.label, nm.s, d.s);
  }
  t->dtype = (st_dtype)dt;

  if (!cJSON_IsArray(shape))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': shape is not an array", st->img.label, nm.s);
  int nd = cJSON_GetArraySize(shape);
  if (nd > ST_MAX_DIMS)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dims, qvl reads at most %d", st->img.label, nm.s,
                      nd, ST_MAX_DIMS);
  t->n_dims = nd;
  uint64_t nel = 1;
  bool zero = false;
  int d = 0;
  for (const cJSON *c = shape->child; c; c = c->next, d++) {
    uint64_t v;
    if (!json_uint(c, &v))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer below 2^53",
                        st->img.label, nm.s, d);
    t->shape[d] = (int64_t)v;
    if (v == 0)
      zero = true;
    else if (!zero && nel > UINT64_MAX / v)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': element count overflows at shape[%d] = %llu",
                        st->img.label, nm.s, d, (unsigned long long)v);
    else if (!zero)
      nel *= v;
  }
  if (zero)
    nel = 0;
  size_t es = dtype_sizes[dt];
  if (nel > SIZE_MAX / es)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': byte size overflows (%llu elements of %s)", st->img.label,
                      nm.s, (unsigned long long)nel, dtype_names[dt]);
  t->nbytes = (size_t)(nel * es);

  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || !json_uint(offsets->child, begin) ||
      !json_uint(offsets->child->next, end))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] of non-negative integers",
                      st->img.label, nm.s);
  if (*end < *begin)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) ends before it begins",
                      st->img.label, nm.s, (unsigned long long)*begin, (unsigned long long)*end);
  if (*end - *begin != t->nbytes)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes, expected %zu (%llu x %s)",
                      st->img.label, nm.s, (unsigned long long)*begin, (unsigned long long)*end,
                      (unsigned long long)(*end - *begin), t->nbytes, (unsigned long long)nel, dtype_names[dt]);
  return QVL_OK;
}

typedef struct span {
  uint64_t begin, end;
  int64_t i;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

static qvl_status parse_header(safetensors *st, const cJSON *root, size_t data_start) {
  if (!cJSON_IsObject(root))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: header is not a JSON object", st->img.label);
  size_t n = 0;
  bool have_meta = false;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") != 0) {
      n++;
    } else {
      if (have_meta)
        return qvl_errorf(QVL_ERR_FORMAT, "%s: duplicate \"__metadata__\"", st->img.label);
      have_meta = true;
      QVL_TRY(parse_metadata(st, c));
    }
  }
  uint64_t cap = 16;
  while (cap < 2 * (uint64_t)n)
    cap *= 2;
  st->t = calloc(n ? n : 1, sizeof *st->t);
  st->index = calloc(cap, sizeof *st->index);
  span *spans = malloc((n ? n : 1) * sizeof *spans);
  if (!st->t || !st->index || !spans) {
    free(spans);
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory for %zu tensors", st->img.label, n);
  }
  st->index_mask = cap - 1;
  qvl_status s = QVL_OK;
  for (const cJSON *c = root->child; c && s == QVL_OK; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0)
      continue;
    int64_t k = st->n, dup;
    uint64_t slot = probe(st, c->string, &dup);
    if (dup >= 0) {
      name_buf nm = show(c->string);
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: duplicate tensor name '%s'", st->img.label, nm.s);
      break;
    }
    st_tensor *t = &st->t[k];
    if (!(t->name = strdup(c->string))) {
      s = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", st->img.label);
      break;
    }
    st->n++;
    st->index[slot] = (uint32_t)k + 1;
    spans[k].i = k;
    s = parse_entry(st, c, t, &spans[k].begin, &spans[k].end);
  }
  /* The tensors must tile the data section: sorted by offset, each starts where the last ended. */
  size_t data_size = st->img.size - data_start;
  if (s == QVL_OK) {
    qsort(spans, n, sizeof *spans, span_cmp);
    uint64_t at = 0;
    for (size_t i = 0; i < n && s == QVL_OK; i++) {
      const st_tensor *t = &st->t[spans[i].i];
      name_buf nm = show(t->name);
      if (spans[i].begin != at)
        s = qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) %s, expected it to start at %llu",
                       st->img.label, nm.s, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                       spans[i].begin < at ? "overlap the previous tensor" : "leave a gap", (unsigned long long)at);
      else if (spans[i].end > data_size)
        s = qvl_errorf(QVL_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu) run past the end of the data section (%zu bytes)",
                       st->img.label, nm.s, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                       data_size);
      at = spans[i].end;
    }
    if (s == QVL_OK && at != data_size)
      s = qvl_errorf(QVL_ERR_FORMAT, "%s: the tensors cover %llu bytes of the data section, but it holds %zu",
                     st->img.label, (unsigned long long)at, data_size);
  }
  if (s == QVL_OK)
    for (size_t i = 0; i < n; i++)
      st->t[spans[i].i].data = st->img.data + data_start + spans[i].begin;
  free(spans);
  return s;
}

static qvl_status parse(safetensors *st) {
  if (st->img.size < 8)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: not a safetensors file (only %zu bytes, need an 8-byte header length)",
                      st->img.label, st->img.size);
  uint64_t hlen;
  memcpy(&hlen, st->img.data, 8);
  if (hlen > ST_MAX_HEADER)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: header length %llu exceeds the %u byte limit", st->img.label,
                      (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen > st->img.size - 8)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", st->img.label,
                      (unsigned long long)hlen, st->img.size);
  const char *h = (const char *)st->img.data + 8;
  if (hlen < 2 || h[0] != '{')
    return qvl_errorf(QVL_ERR_FORMAT, "%s: header does not start with a JSON object ('{')", st->img.label);
  const char *nul = memchr(h, 0, (size_t)hlen);
  if (nul)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: header has a NUL byte at offset %zu", st->img.label, (size_t)(nul - h) + 8);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
  if (!root) {
    size_t at = end && end >= h && end <= h + hlen ? (size_t)(end - h) : 0;
    return qvl_errorf(QVL_ERR_FORMAT, "%s: header is not valid JSON (error near header byte %zu)", st->img.label, at);
  }
  for (const char *p = end; p < h + hlen; p++) {
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      cJSON_Delete(root);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: header has trailing bytes after the JSON object (header byte %zu)",
                        st->img.label, (size_t)(p - h));
    }
  }
  qvl_status s = parse_header(st, root, 8 + (size_t)hlen);
  cJSON_Delete(root);
  return s;
}

/* Takes over im (closed on failure) and parses it. */
static qvl_status open_image(file_image *im, safetensors **out) {
  *out = NULL;
  safetensors *st = calloc(1, sizeof *st);
  if (!st) {
    qvl_status e = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", im->label);
    file_image_close(im);
    return e;
  }
  st->img = *im;
  qvl_status s = parse(st);
  if (s != QVL_OK) {
    st_close(st);
    return s;
  }
  *out = st;
  return QVL_OK;
}

qvl_status st_open(const char *path, safetensors **out) {
  *out = NULL;
  file_image im;
  QVL_TRY(file_image_map(path, 8, "safetensors", &im));
  return open_image(&im, out);
}

qvl_status st_open_memory(const void *data, size_t size, const char *label, safetensors **out) {
  *out = NULL;
  file_image im;
  QVL_TRY(file_image_memory(data, size, label, &im));
  return open_image(&im, out);
}

void st_close(safetensors *st) {
  if (!st)
    return;
  for (int64_t i = 0; i < st->n; i++)
    free((char *)st->t[i].name);
  for (size_t i = 0; i < st->n_meta; i++)
    FREE_EACH(st->meta[i].key, st->meta[i].value);
  FREE_EACH(st->meta, st->t, st->index);
  file_image_close(&st->img);
  free(st);
}

int64_t st_n_tensors(const safetensors *st) { return st->n; }

const st_tensor *st_tensor_at(const safetensors *st, int64_t i) {
  return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const st_tensor *st_find(const safetensors *st, const char *name) {
  if (!name || st->n == 0)
    return NULL;
  int64_t found;
  probe(st, name, &found);
  return found >= 0 ? &st->t[found] : NULL;
}

const char *st_metadata(const safetensors *st, const char *key) {
  for (size_t i = 0; key && i < st->n_meta; i++)
    if (strcmp(st->meta[i].key, key) == 0)
      return st->meta[i].value;
  return NULL;
}

/* ---- writer ----------------------------------------------------------------------------------- */

typedef struct st_wtensor {
  char *name;
  st_dtype dtype;
  int n_dims;
  int64_t shape[ST_MAX_DIMS];
  void *data; /* [nbytes], owned copy */
  size_t nbytes;
} st_wtensor;

struct st_writer {
  st_wtensor *t;
  size_t n, cap;
  st_meta *meta;
  size_t n_meta, cap_meta;
};

st_writer *st_writer_init(void) { return calloc(1, sizeof(st_writer)); }

void st_writer_free(st_writer *w) {
  if (!w)
    return;
  for (size_t i = 0; i < w->n; i++)
    FREE_EACH(w->t[i].name, w->t[i].data);
  for (size_t i = 0; i < w->n_meta; i++)
    FREE_EACH(w->meta[i].key, w->meta[i].value);
  FREE_EACH(w->t, w->meta, w);
}

static qvl_status grow(void **arr, size_t *cap, size_t n, size_t elem) {
  return array_grow(arr, cap, n, elem, "safetensors writer");
}

qvl_status st_writer_set_metadata(st_writer *w, const char *key, const char *value) {
  if (!w || !key || !value)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: NULL metadata key or value");
  for (size_t i = 0; i < w->n_meta; i++) {
    if (strcmp(w->meta[i].key, key) == 0) {
      char *v = strdup(value);
      if (!v)
        return qvl_errorf(QVL_ERR_NOMEM, "safetensors writer: out of memory");
      free(w->meta[i].value);
      w->meta[i].value = v;
      return QVL_OK;
    }
  }
  QVL_TRY(grow((void **)&w->meta, &w->cap_meta, w->n_meta, sizeof *w->meta));
  st_meta *m = &w->meta[w->n_meta];
  m->key = strdup(key);
  m->value = strdup(value);
  if (!m->key || !m->value) {
    free(m->key);
    free(m->value);
    return qvl_errorf(QVL_ERR_NOMEM, "safetensors writer: out of memory");
  }
  w->n_meta++;
  return QVL_OK;
}

qvl_status st_writer_add(st_writer *w, const char *name, st_dtype dtype, int n_dims, const int64_t *shape,
                         const void *data) {
  if (!w || !name)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: NULL writer or name");
  if (strcmp(name, "__metadata__") == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: '__metadata__' cannot name a tensor");
  if ((int)dtype < 0 || dtype >= ST_DTYPE_COUNT)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: tensor '%s': bad dtype %d", name, (int)dtype);
  if (n_dims < 0 || n_dims > ST_MAX_DIMS || (n_dims && !shape))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: tensor '%s': %d dims, expected 0..%d", name,
                      n_dims, ST_MAX_DIMS);
  uint64_t nel = 1;
  for (int d = 0; d < n_dims; d++) {
    if (shape[d] < 0 || (double)shape[d] > ST_MAX_EXACT_INT)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: tensor '%s': bad shape[%d] = %lld", name, d,
                        (long long)shape[d]);
    if (shape[d] && nel > (SIZE_MAX / 8) / (uint64_t)shape[d])
      return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: tensor '%s': size overflows", name);
    nel *= (uint64_t)shape[d];
  }
  size_t nbytes = (size_t)nel * dtype_sizes[dtype];
  if (nbytes && !data)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: tensor '%s': NULL data", name);
  for (size_t i = 0; i < w->n; i++)
    if (strcmp(w->t[i].name, name) == 0)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: duplicate tensor name '%s'", name);
  QVL_TRY(grow((void **)&w->t, &w->cap, w->n, sizeof *w->t));
  st_wtensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  t->data = malloc(nbytes ? nbytes : 1);
  if (!t->name || !t->data) {
    free(t->name);
    free(t->data);
    return qvl_errorf(QVL_ERR_NOMEM, "safetensors writer: out of memory for tensor '%s' (%zu bytes)", name, nbytes);
  }
  if (nbytes)
    memcpy(t->data, data, nbytes);
  t->nbytes = nbytes;
  t->dtype = dtype;
  t->n_dims = n_dims;
  for (int d = 0; d < n_dims; d++)
    t->shape[d] = shape[d];
  w->n++;
  return QVL_OK;
}

static qvl_status json_str(buf *b, const char *s) {
  QVL_TRY(buf_append(b, "\"", 1));
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      QVL_TRY(buf_append(b, e, 2));
    } else if (c < 0x20) {
      QVL_TRY(buf_printf(b, "\\u%04x", c));
    } else {
      QVL_TRY(buf_append(b, s, 1));
    }
  }
  return buf_append(b, "\"", 1);
}

/* Builds the 8-byte length + JSON header, padded with spaces so the data section starts at a
 * multiple of 8 (so F64/I64 data is naturally aligned in a page-aligned mapping). */
static qvl_status build_header(const st_writer *w, buf *b) {
  QVL_TRY(buf_append(b, "\0\0\0\0\0\0\0\0", 8));
  QVL_TRY(buf_append(b, "{", 1));
  bool first = true;
  if (w->n_meta) {
    QVL_TRY(buf_append_str(b, "\"__metadata__\":{"));
    for (size_t i = 0; i < w->n_meta; i++) {
      if (i)
        QVL_TRY(buf_append(b, ",", 1));
      QVL_TRY(json_str(b, w->meta[i].key));
      QVL_TRY(buf_append(b, ":", 1));
      QVL_TRY(json_str(b, w->meta[i].value));
    }
    QVL_TRY(buf_append(b, "}", 1));
    first = false;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < w->n; i++) {
    const st_wtensor *t = &w->t[i];
    if (!first)
      QVL_TRY(buf_append(b, ",", 1));
    first = false;
    QVL_TRY(json_str(b, t->name));
    QVL_TRY(buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[t->dtype]));
    for (int d = 0; d < t->n_dims; d++)
      QVL_TRY(buf_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]));
    QVL_TRY(buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                       (unsigned long long)(off + t->nbytes)));
    off += t->nbytes;
  }
  QVL_TRY(buf_append(b, "}", 1));
  while (b->len % 8)
    QVL_TRY(buf_append(b, " ", 1));
  uint64_t hlen = b->len - 8;
  if (hlen > ST_MAX_HEADER)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "safetensors writer: header of %llu bytes exceeds the %u byte limit",
                      (unsigned long long)hlen, ST_MAX_HEADER);
  memcpy(b->data, &hlen, 8);
  return QVL_OK;
}

qvl_status st_writer_save_mem(const st_writer *w, void **out, size_t *size) {
  *out = NULL;
  *size = 0;
  if (!w)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: NULL writer");
  buf b = {0};
  qvl_status s = build_header(w, &b);
  for (size_t i = 0; i < w->n && s == QVL_OK; i++)
    s = buf_append(&b, w->t[i].data, w->t[i].nbytes);
  if (s != QVL_OK) {
    buf_free(&b);
    return s;
  }
  *out = b.data;
  *size = b.len;
  return QVL_OK;
}

qvl_status st_writer_save(const st_writer *w, const char *path) {
  if (!w || !path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "safetensors writer: NULL writer or path");
  buf hdr = {0}, tmp = {0};
  qvl_status s = build_header(w, &hdr);
  if (s == QVL_OK)
    s = buf_printf(&tmp, "%s.tmp", path);
  FILE *f = NULL;
  if (s == QVL_OK && !(f = fopen(tmp.data, "wb")))
    s = qvl_errorf(QVL_ERR_IO, "%s: cannot create: %s", tmp.data, strerror(errno));
  if (s == QVL_OK && fwrite(hdr.data, 1, hdr.len, f) != hdr.len)
    s = qvl_errorf(QVL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  for (size_t i = 0; i < w->n && s == QVL_OK; i++)
    if (fwrite(w->t[i].data, 1, w->t[i].nbytes, f) != w->t[i].nbytes)
      s = qvl_errorf(QVL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  if (f && fclose(f) != 0 && s == QVL_OK)
    s = qvl_errorf(QVL_ERR_IO, "%s: close failed: %s", path, strerror(errno));
  if (f && s == QVL_OK && rename(tmp.data, path) != 0)
    s = qvl_errorf(QVL_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp.data, strerror(errno));
  if (f && s != QVL_OK)
    unlink(tmp.data);
  buf_free(&hdr);
  buf_free(&tmp);
  return s;
}
