#include "model/wtable.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/free_each.h"
#include "base/status.h"

typedef struct wentry {
  tensor t;    /* t.name points to name below */
  char *name;
  void *owned; /* data owned by the table, or NULL for a view */
} wentry;

struct wtable {
  char *label;
  wentry *e;
  int64_t n, cap;
  void (*release)(void *);
  void *owner;
};

qvl_status wtable_init(const char *label, wtable **out) {
  *out = NULL;
  wtable *t = calloc(1, sizeof *t);
  if (!t || !(t->label = strdup(label ? label : "(weights)"))) {
    free(t);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  *out = t;
  return QVL_OK;
}

void wtable_free(wtable *t) {
  if (!t)
    return;
  for (int64_t i = 0; i < t->n; i++)
    FREE_EACH(t->e[i].name, t->e[i].owned);
  if (t->release)
    t->release(t->owner);
  FREE_EACH(t->e, t->label, t);
}

void wtable_set_owner(wtable *t, void (*release)(void *user), void *user) {
  t->release = release;
  t->owner = user;
}

const char *wtable_label(const wtable *t) { return t->label; }
int64_t wtable_count(const wtable *t) { return t->n; }
const tensor *wtable_at(const wtable *t, int64_t i) { return i >= 0 && i < t->n ? &t->e[i].t : NULL; }

static wentry *lookup(const wtable *t, const char *name) {
  for (int64_t i = 0; i < t->n; i++)
    if (!strcmp(t->e[i].name, name))
      return &t->e[i];
  return NULL;
}

int64_t wtable_index(const wtable *t, const char *name) {
  wentry *e = lookup(t, name);
  return e ? e - t->e : -1;
}

const tensor *wtable_find(void *user, const char *name) {
  wentry *e = lookup(user, name);
  return e ? &e->t : NULL;
}

void wtable_release(void *user) { wtable_free(user); }

tensor_source wtable_source(wtable *t) {
  return (tensor_source){.label = wtable_label(t), .user = t, .find = wtable_find, .release = wtable_release};
}

static qvl_status add(wtable *t, const char *name, const tensor *v, void *owned) {
  if (lookup(t, name))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s' appears twice", t->label, name);
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 64;
    wentry *e = realloc(t->e, sizeof *e * (size_t)cap);
    if (!e)
      return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", t->label);
    t->e = e;
    t->cap = cap;
  }
  wentry *e = &t->e[t->n];
  memset(e, 0, sizeof *e);
  if (!(e->name = strdup(name)))
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", t->label);
  e->t = *v;
  e->t.name = e->name;
  e->owned = owned;
  t->n++;
  return QVL_OK;
}

qvl_status wtable_add_view(wtable *t, const char *name, const tensor *view) { return add(t, name, view, NULL); }

/* Exact byte size of a tensor of this type and shape; false if it is not representable. */
static bool tensor_bytes(qvl_dtype type, int n_dims, const int64_t *ne, size_t *out) {
  size_t row;
  if (n_dims < 1 || n_dims > TENSOR_MAX_DIMS || !dtype_row_bytes(type, ne[0], &row))
    return false;
  size_t total = row;
  for (int d = 1; d < n_dims; d++) {
    if (ne[d] < 1 || (uint64_t)ne[d] > SIZE_MAX / total)
      return false;
    total *= (size_t)ne[d];
  }
  *out = total;
  return true;
}

qvl_status wtable_add_owned(wtable *t, const char *name, qvl_dtype type, int n_dims, const int64_t *ne,
                            void *data, size_t nbytes) {
  size_t want;
  if (!tensor_bytes(type, n_dims, ne, &want) || want != nbytes) {
    free(data);
    return qvl_errorf(QVL_ERR_INTERNAL, "%s: tensor '%s': %zu bytes do not match its type %s and shape", t->label,
                      name, nbytes, dtype_name(type));
  }
  tensor v = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data, .nbytes = nbytes};
  for (int d = 0; d < n_dims; d++)
    v.ne[d] = ne[d];
  qvl_status s = add(t, name, &v, data);
  if (s != QVL_OK)
    free(data);
  return s;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !memcmp(s + n - m, suffix, m);
}

bool wtable_is_matrix(wtable_kind kind, const char *name, const tensor *t) {
  if (t->n_dims != 2 || t->ne[2] != 1 || t->ne[3] != 1 || !ends_with(name, ".weight"))
    return false;
  if (kind == WTABLE_TEXT)
    return !ends_with(name, "_norm.weight");
  /* llama-quantize keeps the position table and both patch kernels (4-D anyway) in their type. */
  if (strstr(name, "position_embd") || strstr(name, "patch_embd") || strstr(name, "norm") ||
      strstr(name, "ln"))
    return false;
  return true;
}

qvl_dtype wtable_target_type(qvl_dtype to, int64_t n_in) {
  int blk = dtype_block_elems(to);
  if (blk <= 1 || n_in % blk == 0)
    return to;
  if ((to == QVL_DTYPE_Q4_K || to == QVL_DTYPE_Q6_K) && n_in % 32 == 0)
    return QVL_DTYPE_Q8_0;
  return QVL_DTYPE_F16;
}

bool wtable_parse_dtype(const char *s, qvl_dtype *out) {
  static const struct {
    const char *name;
    qvl_dtype t;
  } names[] = {{"f32", QVL_DTYPE_F32},   {"bf16", QVL_DTYPE_BF16}, {"f16", QVL_DTYPE_F16},
               {"q8_0", QVL_DTYPE_Q8_0}, {"q4_0", QVL_DTYPE_Q4_0}, {"q4_k", QVL_DTYPE_Q4_K}};
  for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
    if (!strcasecmp(s, names[i].name)) {
      *out = names[i].t;
      return true;
    }
  return false;
}

static qvl_status convert_one(wtable *t, wentry *e, qvl_dtype to) {
  const tensor *src = &e->t;
  int64_t n_in = src->ne[0], rows = src->ne[1] * src->ne[2] * src->ne[3];
  qvl_dtype dst_type = wtable_target_type(to, n_in);
  if (dst_type == src->type)
    return QVL_OK;
  size_t src_row, dst_row;
  if (!dtype_supported(src->type) || !dtype_row_bytes(src->type, n_in, &src_row))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s': cannot convert from type %s", t->label, e->name,
                      dtype_name(src->type));
  if (!dtype_row_bytes(dst_type, n_in, &dst_row) || rows < 1 || (uint64_t)rows > SIZE_MAX / dst_row ||
      (uint64_t)rows > SIZE_MAX / src_row || src_row * (size_t)rows > src->nbytes)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': shape {%lld, %lld} does not fit its %zu bytes", t->label,
                      e->name, (long long)n_in, (long long)rows, src->nbytes);
  float *tmp = malloc(sizeof(float) * (size_t)n_in);
  void *dst = malloc(dst_row * (size_t)rows);
  if (!tmp || !dst) {
    free(tmp);
    free(dst);
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory converting tensor '%s' to %s", t->label, e->name,
                      dtype_name(dst_type));
  }
  for (int64_t r = 0; r < rows; r++) {
    dtype_dequantize_row(src->type, (const char *)src->data + (size_t)r * src_row, tmp, n_in);
    dtype_quantize_row(dst_type, tmp, (char *)dst + (size_t)r * dst_row, n_in);
  }
  free(tmp);
  free(e->owned);
  e->owned = dst;
  e->t.type = dst_type;
  e->t.data = dst;
  e->t.nbytes = dst_row * (size_t)rows;
  return QVL_OK;
}

qvl_status wtable_convert(wtable *t, qvl_dtype to, wtable_kind kind) {
  if (to != QVL_DTYPE_F32 && to != QVL_DTYPE_F16 && to != QVL_DTYPE_BF16 && to != QVL_DTYPE_Q8_0 &&
      to != QVL_DTYPE_Q4_0 && to != QVL_DTYPE_Q4_K)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "cannot convert weights to %s (expected f32, bf16, f16, q8_0, q4_0 or q4_k)",
                      dtype_name(to));
  for (int64_t i = 0; i < t->n; i++) {
    wentry *e = &t->e[i];
    if (wtable_is_matrix(kind, e->name, &e->t))
      QVL_TRY(convert_one(t, e, to));
    else if (e->t.type == QVL_DTYPE_F16 || e->t.type == QVL_DTYPE_BF16)
      QVL_TRY(convert_one(t, e, QVL_DTYPE_F32)); /* norms, biases, tables: F32 as llama.cpp's files store them */
  }
  return QVL_OK;
}

static void close_gguf(void *g) { gguf_close(g); }

qvl_status wtable_from_gguf(gguf *g, wtable **out) {
  *out = NULL;
  wtable *t;
  qvl_status s = wtable_init(gguf_path(g), &t);
  if (s != QVL_OK) {
    gguf_close(g);
    return s;
  }
  wtable_set_owner(t, close_gguf, g);
  for (int64_t i = 0; s == QVL_OK && i < gguf_n_tensors(g); i++) {
    const tensor *v = gguf_tensor_at(g, i);
    s = wtable_add_view(t, v->name, v);
  }
  if (s != QVL_OK) {
    wtable_free(t);
    return s;
  }
  *out = t;
  return QVL_OK;
}
