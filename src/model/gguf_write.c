/* GGUF v3 writer; see gguf_write.h for the contract and gguf.c for the layout. */
#include "model/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/free_each.h"
#include "base/mapfile.h"
#include "base/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_write.c writes host-order fields; a big-endian host would need byte swaps"
#endif

#define GGUF_WRITER_ALIGNMENT 32
#define GGUF_MAX_KEY_LEN 65535
#define GGML_MAX_NAME 64

typedef struct wkv {
  char *key;
  gguf_type type;
  buf val; /* the value exactly as serialized after the u32 type */
} wkv;

typedef struct wtensor {
  char *name;
  qvl_dtype type;
  int n_dims;
  int64_t ne[TENSOR_MAX_DIMS]; /* ggml order */
  const void *data;           /* [nbytes], owned or borrowed */
  void *owned;                /* copy made by gguf_writer_add_tensor, else NULL */
  size_t nbytes;
} wtensor;

struct gguf_writer {
  wkv *kv; /* [n_kv] */
  size_t n_kv, cap_kv;
  wtensor *t; /* [n_t] */
  size_t n_t, cap_t;
};

gguf_writer *gguf_writer_init(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
  if (!w)
    return;
  for (size_t i = 0; i < w->n_kv; i++) {
    free(w->kv[i].key);
    buf_free(&w->kv[i].val);
  }
  for (size_t i = 0; i < w->n_t; i++) {
    free(w->t[i].name);
    free(w->t[i].owned);
  }
  FREE_EACH(w->kv, w->t, w);
}

static qvl_status grow(void **arr, size_t *cap, size_t n, size_t elem) {
  return array_grow(arr, cap, n, elem, "gguf writer");
}

/* Finds or creates the entry for key and leaves its value empty, typed `type`. */
static qvl_status kv_slot(gguf_writer *w, const char *key, gguf_type type, buf **val) {
  if (!w || !key)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: NULL writer or key");
  size_t len = strlen(key);
  if (len == 0 || len > GGUF_MAX_KEY_LEN)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key of %zu bytes, expected 1..%d", len,
                      GGUF_MAX_KEY_LEN);
  for (size_t i = 0; i < w->n_kv; i++) {
    if (strcmp(w->kv[i].key, key) == 0) {
      w->kv[i].type = type;
      w->kv[i].val.len = 0;
      *val = &w->kv[i].val;
      return QVL_OK;
    }
  }
  QVL_TRY(grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv));
  wkv *kv = &w->kv[w->n_kv];
  memset(kv, 0, sizeof *kv);
  if (!(kv->key = strdup(key)))
    return qvl_errorf(QVL_ERR_NOMEM, "gguf writer: out of memory");
  kv->type = type;
  w->n_kv++;
  *val = &kv->val;
  return QVL_OK;
}

/* A failed append (out of memory) must not leave a half-written value behind: drop the entry. */
static void kv_drop(gguf_writer *w, const char *key) {
  for (size_t i = 0; i < w->n_kv; i++) {
    if (strcmp(w->kv[i].key, key) == 0) {
      free(w->kv[i].key);
      buf_free(&w->kv[i].val);
      memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
      w->n_kv--;
      return;
    }
  }
}

static qvl_status set_scalar(gguf_writer *w, const char *key, gguf_type type, const void *v, size_t n) {
  buf *val;
  QVL_TRY(kv_slot(w, key, type, &val));
  qvl_status s = buf_append(val, v, n);
  if (s != QVL_OK)
    kv_drop(w, key);
  return s;
}

/* Each fixed-size scalar setter: suffix, C type, GGUF type. The value is stored in host
 * (little-endian) order, sizeof(C type) bytes. */
#define GGUF_WRITER_SCALARS(X)                                                                                   \
  X(u8, uint8_t, GGUF_TYPE_UINT8)                                                                                \
  X(i8, int8_t, GGUF_TYPE_INT8)                                                                                  \
  X(u16, uint16_t, GGUF_TYPE_UINT16)                                                                             \
  X(i16, int16_t, GGUF_TYPE_INT16)                                                                               \
  X(u32, uint32_t, GGUF_TYPE_UINT32)                                                                             \
  X(i32, int32_t, GGUF_TYPE_INT32)                                                                               \
  X(u64, uint64_t, GGUF_TYPE_UINT64)                                                                             \
  X(i64, int64_t, GGUF_TYPE_INT64)                                                                               \
  X(f32, float, GGUF_TYPE_FLOAT32)                                                                               \
  X(f64, double, GGUF_TYPE_FLOAT64)

#define GGUF_WRITER_SET_SCALAR(suffix, ctype, type)                                                              \
  qvl_status gguf_writer_set_##suffix(gguf_writer *w, const char *key, ctype v) {                                \
    return set_scalar(w, key, type, &v, sizeof v);                                                               \
  }
GGUF_WRITER_SCALARS(GGUF_WRITER_SET_SCALAR)
#undef GGUF_WRITER_SET_SCALAR

qvl_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
  uint8_t b = v ? 1 : 0;
  return set_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}

static qvl_status append_str(buf *val, const char *s, size_t len) {
  uint64_t n = len;
  QVL_TRY(buf_append(val, &n, 8));
  return buf_append(val, s, len);
}

qvl_status gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, size_t len) {
  if (!v && len)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key ? key : "(null)");
  buf *val;
  QVL_TRY(kv_slot(w, key, GGUF_TYPE_STRING, &val));
  qvl_status s = append_str(val, v ? v : "", len);
  if (s != QVL_OK)
    kv_drop(w, key);
  return s;
}

qvl_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
  return gguf_writer_set_strn(w, key, v, v ? strlen(v) : 0);
}

/* An array value starts with its element type (u32) and element count (u64). */
static qvl_status append_array_head(buf *val, gguf_type elem_type, uint64_t n) {
  uint32_t et = (uint32_t)elem_type;
  QVL_TRY(buf_append(val, &et, 4));
  return buf_append(val, &n, 8);
}

qvl_status gguf_writer_set_array(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                                 uint64_t n) {
  const char *k = key ? key : "(null)";
  size_t es = gguf_type_size(elem_type);
  if (es == 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "gguf writer: key '%s': array element type %s is not a fixed-size type", k,
                      gguf_type_name(elem_type));
  if (n > SIZE_MAX / es || (!data && n))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key '%s': bad array (%llu elements)", k,
                      (unsigned long long)n);
  if (elem_type == GGUF_TYPE_BOOL)
    for (uint64_t i = 0; i < n; i++)
      if (((const uint8_t *)data)[i] > 1)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key '%s': bool element %llu is %u, expected 0 or 1",
                          k, (unsigned long long)i, ((const uint8_t *)data)[i]);
  buf *val;
  QVL_TRY(kv_slot(w, key, GGUF_TYPE_ARRAY, &val));
  qvl_status s = append_array_head(val, elem_type, n);
  if (s == QVL_OK)
    s = buf_append(val, data, (size_t)(n * es));
  if (s != QVL_OK)
    kv_drop(w, key);
  return s;
}

qvl_status gguf_writer_set_str_array(gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n) {
  if (!strs && n)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string array", key ? key : "(null)");
  for (uint64_t i = 0; i < n; i++)
    if (!strs[i] && (!lens || lens[i]))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL",
                        key ? key : "(null)", (unsigned long long)i);
  buf *val;
  QVL_TRY(kv_slot(w, key, GGUF_TYPE_ARRAY, &val));
  qvl_status s = append_array_head(val, GGUF_TYPE_STRING, n);
  for (uint64_t i = 0; i < n && s == QVL_OK; i++) {
    const char *p = strs[i] ? strs[i] : "";
    s = append_str(val, p, lens ? lens[i] : strlen(p));
  }
  if (s != QVL_OK)
    kv_drop(w, key);
  return s;
}

static qvl_status add_tensor(gguf_writer *w, const char *name, qvl_dtype type, int n_dims, const int64_t *ne,
                             const void *data, bool copy) {
  if (!w || !name || !ne || !data)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: NULL argument adding tensor '%s'",
                      name ? name : "(null)");
  size_t len = strlen(name);
  if (len == 0 || len >= GGML_MAX_NAME)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: tensor name '%s' is %zu bytes, expected 1..%d", name,
                      len, GGML_MAX_NAME - 1);
  if (n_dims < 1 || n_dims > TENSOR_MAX_DIMS)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: tensor '%s' has %d dims, expected 1..%d", name, n_dims,
                      TENSOR_MAX_DIMS);
  if (!dtype_supported((int)type) || type == QVL_DTYPE_Q8_K)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: tensor '%s': type id %d cannot be stored", name,
                      (int)type);
  int64_t nel = 1;
  for (int d = 0; d < n_dims; d++) {
    if (ne[d] <= 0 || ne[d] > INT64_MAX / nel)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad ne[%d] = %lld", name, d,
                        (long long)ne[d]);
    nel *= ne[d];
  }
  size_t row_bytes;
  if (!dtype_row_bytes(type, ne[0], &row_bytes))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d", name,
                      (long long)ne[0], dtype_name((int)type), dtype_block_elems(type));
  uint64_t rows = (uint64_t)(nel / ne[0]);
  if (row_bytes && rows > (SIZE_MAX / 2) / row_bytes)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: tensor '%s': byte size overflows", name);
  for (size_t i = 0; i < w->n_t; i++)
    if (strcmp(w->t[i].name, name) == 0)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
  QVL_TRY(grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t));
  wtensor *t = &w->t[w->n_t];
  memset(t, 0, sizeof *t);
  t->nbytes = (size_t)rows * row_bytes;
  if (copy) {
    t->owned = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->owned)
      return qvl_errorf(QVL_ERR_NOMEM, "gguf writer: out of memory copying tensor '%s' (%zu bytes)", name,
                        t->nbytes);
    memcpy(t->owned, data, t->nbytes);
  }
  if (!(t->name = strdup(name))) {
    free(t->owned);
    return qvl_errorf(QVL_ERR_NOMEM, "gguf writer: out of memory");
  }
  t->data = copy ? t->owned : data;
  t->type = type;
  t->n_dims = n_dims;
  for (int d = 0; d < TENSOR_MAX_DIMS; d++)
    t->ne[d] = d < n_dims ? ne[d] : 1;
  w->n_t++;
  return QVL_OK;
}

qvl_status gguf_writer_add_tensor(gguf_writer *w, const char *name, qvl_dtype type, int n_dims,
                                  const int64_t *ne, const void *data) {
  return add_tensor(w, name, type, n_dims, ne, data, true);
}

qvl_status gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, qvl_dtype type, int n_dims,
                                      const int64_t *ne, const void *data) {
  return add_tensor(w, name, type, n_dims, ne, data, false);
}

/* ---- serialization ---------------------------------------------------------------------------- */

typedef struct sink {
  FILE *f;      /* file output, or */
  buf *b;       /* memory output */
  const char *where;
  uint64_t pos; /* bytes written so far */
} sink;

static qvl_status put(sink *s, const void *p, size_t n) {
  if (n == 0)
    return QVL_OK;
  if (s->f) {
    if (fwrite(p, 1, n, s->f) != n)
      return qvl_errorf(QVL_ERR_IO, "%s: write failed at offset %llu: %s", s->where,
                        (unsigned long long)s->pos, strerror(errno));
  } else {
    QVL_TRY(buf_append(s->b, p, n));
  }
  s->pos += n;
  return QVL_OK;
}

static qvl_status put_u32(sink *s, uint32_t v) { return put(s, &v, 4); }
static qvl_status put_u64(sink *s, uint64_t v) { return put(s, &v, 8); }

static qvl_status put_str(sink *s, const char *p, size_t n) {
  QVL_TRY(put_u64(s, n));
  return put(s, p, n);
}

static qvl_status pad_to(sink *s, uint64_t align) {
  static const uint8_t zeros[64];
  while (s->pos % align) {
    uint64_t n = align - s->pos % align;
    QVL_TRY(put(s, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros));
  }
  return QVL_OK;
}

static qvl_status writer_alignment(const gguf_writer *w, const char *where, uint64_t *align) {
  *align = GGUF_WRITER_ALIGNMENT;
  for (size_t i = 0; i < w->n_kv; i++) {
    if (strcmp(w->kv[i].key, "general.alignment") != 0)
      continue;
    uint32_t a;
    if (w->kv[i].type != GGUF_TYPE_UINT32)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: key 'general.alignment' has type %s, expected uint32", where,
                        gguf_type_name(w->kv[i].type));
    memcpy(&a, w->kv[i].val.data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s: key 'general.alignment' = %u, expected a nonzero power of two",
                        where, a);
    *align = a;
  }
  return QVL_OK;
}

static qvl_status write_all(const gguf_writer *w, sink *s) {
  uint64_t align;
  QVL_TRY(writer_alignment(w, s->where, &align));
  QVL_TRY(put(s, "GGUF", 4));
  QVL_TRY(put_u32(s, 3));
  QVL_TRY(put_u64(s, w->n_t));
  QVL_TRY(put_u64(s, w->n_kv));
  for (size_t i = 0; i < w->n_kv; i++) {
    const wkv *kv = &w->kv[i];
    QVL_TRY(put_str(s, kv->key, strlen(kv->key)));
    QVL_TRY(put_u32(s, (uint32_t)kv->type));
    QVL_TRY(put(s, kv->val.data, kv->val.len));
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < w->n_t; i++) {
    const wtensor *t = &w->t[i];
    QVL_TRY(put_str(s, t->name, strlen(t->name)));
    QVL_TRY(put_u32(s, (uint32_t)t->n_dims));
    for (int d = 0; d < t->n_dims; d++)
      QVL_TRY(put_u64(s, (uint64_t)t->ne[d]));
    QVL_TRY(put_u32(s, (uint32_t)t->type));
    QVL_TRY(put_u64(s, offset));
    offset = (offset + t->nbytes + align - 1) / align * align;
  }
  QVL_TRY(pad_to(s, align));
  for (size_t i = 0; i < w->n_t; i++) {
    QVL_TRY(put(s, w->t[i].data, w->t[i].nbytes));
    /* data_start is aligned, so aligning the file position aligns the next offset too. */
    QVL_TRY(pad_to(s, align));
  }
  return QVL_OK;
}

qvl_status gguf_writer_save(const gguf_writer *w, const char *path) {
  if (!w || !path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: NULL writer or path");
  buf tmp = {0};
  QVL_TRY(buf_printf(&tmp, "%s.tmp", path));
  FILE *f = fopen(tmp.data, "wb");
  if (!f) {
    qvl_status s = qvl_errorf(QVL_ERR_IO, "%s: cannot create: %s", tmp.data, strerror(errno));
    buf_free(&tmp);
    return s;
  }
  sink sk = {.f = f, .where = path};
  qvl_status s = write_all(w, &sk);
  if (fflush(f) != 0 && s == QVL_OK)
    s = qvl_errorf(QVL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  if (fclose(f) != 0 && s == QVL_OK)
    s = qvl_errorf(QVL_ERR_IO, "%s: close failed: %s", path, strerror(errno));
  if (s == QVL_OK && rename(tmp.data, path) != 0)
    s = qvl_errorf(QVL_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp.data, strerror(errno));
  if (s != QVL_OK)
    unlink(tmp.data);
  buf_free(&tmp);
  return s;
}

qvl_status gguf_writer_save_mem(const gguf_writer *w, void **out, size_t *size) {
  *out = NULL;
  *size = 0;
  if (!w)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "gguf writer: NULL writer");
  buf b = {0};
  sink sk = {.b = &b, .where = "gguf writer"};
  char *bytes;
  QVL_TRY(buf_finish(&b, write_all(w, &sk), &bytes, size));
  *out = bytes;
  return QVL_OK;
}
