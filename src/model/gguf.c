/*
 * GGUF reader. Layout (all little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset },
 *   padding to general.alignment, data section (each tensor at data_start + offset).
 * A string is u64 length + bytes (no NUL); an array is u32 element type + u64 count + elements.
 *
 * Decisions (documented here because the format leaves them open):
 * - Arrays of arrays are rejected with a clear error: nothing qvl reads uses them, llama.cpp's
 *   reader rejects them too, and refusing them bounds the parser's recursion.
 * - Bool values must be 0 or 1 (scalar and array elements): anything else means a corrupt file.
 * - Keys must be 1..65535 bytes (the spec's limit) without NUL bytes; tensor names must be non-empty
 *   without NUL bytes. Both are looked up as C strings, so an embedded NUL would make them ambiguous.
 * - Tensor data regions may overlap (llama.cpp doesn't check either); each one only has to lie
 *   inside the file and start at a multiple of the alignment.
 * - String values are copied (NUL-terminated); string arrays are indexed in place: one u64 offset
 *   per element into the image, so a 151,936-token vocabulary costs one allocation, not 151,936.
 */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/free_each.h"
#include "base/mapfile.h"
#include "base/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c copies little-endian fields directly; a big-endian host would need byte swaps"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY_LEN 65535
/* Caps on counts, far above any real model (~30 keys, ~700 tensors, a few thousand for MoE),
 * so hash-table indices fit in 32 bits. */
#define GGUF_MAX_ENTRIES (1u << 24)
/* Smallest encodings, used to reject counts that cannot fit in the bytes left before allocating:
 * a key/value = u64 key length + 1 key byte + u32 type + 1 value byte; a tensor info = u64 name
 * length + 1 name byte + u32 n_dims + one u64 dim + u32 type + u64 offset. */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_INFO_BYTES 33u

typedef struct gguf_kv {
  const char *key; /* NUL-terminated, in the arena */
  gguf_type type;
  union {
    uint64_t u; /* unsigned integers and bool */
    int64_t i;  /* signed integers */
    double f;   /* float32 / float64 */
  } num;
  const char *str;        /* STRING: NUL-terminated copy in the arena */
  uint64_t str_len;       /* STRING: byte length (may contain NULs) */
  gguf_type arr_type;     /* ARRAY: element type */
  uint64_t arr_len;       /* ARRAY: element count */
  const uint8_t *arr_data;  /* non-string ARRAY: packed elements inside the image */
  uint64_t *arr_str_off;    /* string ARRAY: [arr_len] image offset of each element's u64 length */
} gguf_kv;

typedef struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  char data[];
} arena_block;

/* Open-addressing hash index over names; slots hold entry index + 1 (0 = empty). */
typedef struct name_index {
  uint32_t *slots; /* [mask + 1] */
  uint64_t mask;
} name_index;

struct gguf {
  file_image img; /* the whole file image; img.label names it in messages */
  uint32_t version;
  uint32_t alignment;
  uint64_t data_offset; /* start of the data section */
  int64_t n_kv;
  gguf_kv *kv; /* [n_kv] */
  name_index kv_index;
  int64_t n_tensors;
  tensor *tensors; /* [n_tensors] */
  name_index tensor_index;
  arena_block *arena;
};

/* ---- small helpers ---------------------------------------------------------------------------- */

static const char *const type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

const char *gguf_type_name(gguf_type t) {
  if ((int)t < 0 || t >= GGUF_TYPE_COUNT)
    return "invalid";
  return type_names[t];
}

size_t gguf_type_size(gguf_type t) {
  switch (t) {
  case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
  case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
  case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
  case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
  default: return 0;
  }
}

static bool type_is_int(gguf_type t) {
  switch (t) {
  case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
  case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
    return true;
  default:
    return false;
  }
}

static bool type_is_signed(gguf_type t) {
  return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* Reads one little-endian integer element of type t as (negative?, magnitude-or-value). Signed
 * values are returned in *i, unsigned in *u; *is_signed says which. */
static void load_int(gguf_type t, const uint8_t *p, bool *is_signed, int64_t *i, uint64_t *u) {
  *is_signed = type_is_signed(t);
  *i = 0;
  *u = 0;
  switch (t) {
  case GGUF_TYPE_UINT8: *u = p[0]; break;
  case GGUF_TYPE_INT8: *i = (int8_t)p[0]; break;
  case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *u = v; break; }
  case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); *i = v; break; }
  case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); *u = v; break; }
  case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); *i = v; break; }
  case GGUF_TYPE_UINT64: memcpy(u, p, 8); break;
  case GGUF_TYPE_INT64: memcpy(i, p, 8); break;
  default: break;
  }
}

/* A printable, bounded rendering of a name from the file for error messages: hostile names may be
 * huge or binary. */
typedef struct name_buf {
  char s[100];
} name_buf;

static name_buf show_name(const uint8_t *p, uint64_t n) {
  name_buf b;
  size_t max = sizeof b.s - 4, k = 0;
  for (uint64_t j = 0; j < n && k < max; j++) {
    unsigned char c = p[j];
    b.s[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (n > max)
    memcpy(b.s + k, "...", 3), k += 3;
  b.s[k] = 0;
  return b;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static qvl_status index_init(name_index *ix, uint64_t n, const char *label) {
  uint64_t cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  ix->slots = calloc(cap, sizeof *ix->slots);
  if (!ix->slots)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory for a %llu-entry name index", label,
                      (unsigned long long)n);
  ix->mask = cap - 1;
  return QVL_OK;
}

/* Looks name up; names(i) gives entry i's name. Returns the slot position; *found the entry. */
typedef const char *(*name_of_fn)(const gguf *g, uint32_t i);

static uint64_t index_probe(const name_index *ix, const gguf *g, name_of_fn name_of, const char *name,
                            size_t len, int64_t *found) {
  uint64_t pos = hash_bytes(name, len) & ix->mask;
  for (;;) {
    uint32_t e = ix->slots[pos];
    if (e == 0) {
      *found = -1;
      return pos;
    }
    const char *other = name_of(g, e - 1);
    if (strncmp(other, name, len) == 0 && other[len] == 0) {
      *found = (int64_t)(e - 1);
      return pos;
    }
    pos = (pos + 1) & ix->mask;
  }
}

static const char *kv_name_of(const gguf *g, uint32_t i) { return g->kv[i].key; }
static const char *tensor_name_of(const gguf *g, uint32_t i) { return g->tensors[i].name; }

static char *arena_copy(gguf *g, const uint8_t *src, size_t n) {
  arena_block *b = g->arena;
  if (n == SIZE_MAX)
    return NULL;
  if (!b || b->cap - b->used < n + 1) {
    size_t cap = n + 1 > 65536 ? n + 1 : 65536;
    if (cap > SIZE_MAX - sizeof *b)
      return NULL;
    b = malloc(sizeof *b + cap);
    if (!b)
      return NULL;
    b->next = g->arena;
    b->used = 0;
    b->cap = cap;
    g->arena = b;
  }
  char *dst = b->data + b->used;
  if (n)
    memcpy(dst, src, n);
  dst[n] = 0;
  b->used += n + 1;
  return dst;
}

/* ---- the parser ------------------------------------------------------------------------------- */

typedef struct reader {
  gguf *g;
  size_t off;
  char what[200]; /* what is being read, for truncation messages */
} reader;

static size_t left(const reader *r) { return r->g->img.size - r->off; }

static qvl_status need(reader *r, uint64_t n) {
  if (n > left(r))
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s: file truncated reading %s: need %llu bytes at offset %zu, only %zu left",
                      r->g->img.label, r->what, (unsigned long long)n, r->off, left(r));
  return QVL_OK;
}

static qvl_status read_bytes(reader *r, void *dst, size_t n) {
  QVL_TRY(need(r, n));
  memcpy(dst, r->g->img.data + r->off, n);
  r->off += n;
  return QVL_OK;
}

static qvl_status read_u32(reader *r, uint32_t *v) { return read_bytes(r, v, 4); }
static qvl_status read_u64(reader *r, uint64_t *v) { return read_bytes(r, v, 8); }

/* Reads a string header and returns a pointer to its bytes in the image (checked in range). */
static qvl_status read_str(reader *r, const uint8_t **p, uint64_t *len) {
  QVL_TRY(read_u64(r, len));
  if (*len > left(r))
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s: %s: string length %llu at offset %zu runs past the end of the file "
                      "(%zu bytes left)",
                      r->g->img.label, r->what, (unsigned long long)*len, r->off - 8, left(r));
  *p = r->g->img.data + r->off;
  r->off += (size_t)*len;
  return QVL_OK;
}

static qvl_status check_bools(reader *r, const char *key, const uint8_t *p, uint64_t n, bool is_array) {
  for (uint64_t j = 0; j < n; j++)
    if (p[j] > 1)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': bool %s %llu holds %u, expected 0 or 1", r->g->img.label,
                        key, is_array ? "element" : "value at offset",
                        is_array ? (unsigned long long)j : (unsigned long long)(r->off - 1), p[j]);
  return QVL_OK;
}

static qvl_status parse_value(reader *r, gguf_kv *kv) {
  const char *key = kv->key;
  size_t sz = gguf_type_size(kv->type);
  if (kv->type == GGUF_TYPE_STRING) {
    const uint8_t *p;
    uint64_t n;
    snprintf(r->what, sizeof r->what, "the string value of key '%s'", key);
    QVL_TRY(read_str(r, &p, &n));
    kv->str = arena_copy(r->g, p, (size_t)n);
    kv->str_len = n;
    if (!kv->str)
      return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory copying key '%s'", r->g->img.label, key);
    return QVL_OK;
  }
  if (kv->type == GGUF_TYPE_ARRAY) {
    uint32_t et;
    uint64_t n;
    snprintf(r->what, sizeof r->what, "the array header of key '%s'", key);
    QVL_TRY(read_u32(r, &et));
    QVL_TRY(read_u64(r, &n));
    if (et >= GGUF_TYPE_COUNT)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': array element type %u is not a GGUF type (0..%d)",
                        r->g->img.label, key, et, GGUF_TYPE_COUNT - 1);
    if (et == GGUF_TYPE_ARRAY)
      return qvl_errorf(QVL_ERR_UNSUPPORTED,
                        "%s: key '%s' is an array of arrays, which qvl does not support", r->g->img.label,
                        key);
    kv->arr_type = (gguf_type)et;
    kv->arr_len = n;
    /* A string element takes at least its 8-byte length; check before allocating the index. */
    size_t min = et == GGUF_TYPE_STRING ? 8 : gguf_type_size((gguf_type)et);
    if (n > left(r) / min)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "%s: key '%s': array of %llu %s elements needs at least %llu bytes per element "
                        "but only %zu bytes are left in the file",
                        r->g->img.label, key, (unsigned long long)n, gguf_type_name((gguf_type)et),
                        (unsigned long long)min, left(r));
    if (et != GGUF_TYPE_STRING) {
      kv->arr_data = r->g->img.data + r->off;
      if (et == GGUF_TYPE_BOOL)
        QVL_TRY(check_bools(r, key, kv->arr_data, n, true));
      r->off += (size_t)(n * min);
      return QVL_OK;
    }
    kv->arr_str_off = malloc((n ? n : 1) * sizeof *kv->arr_str_off);
    if (!kv->arr_str_off)
      return qvl_errorf(QVL_ERR_NOMEM, "%s: key '%s': out of memory indexing %llu strings", r->g->img.label,
                        key, (unsigned long long)n);
    for (uint64_t j = 0; j < n; j++) {
      const uint8_t *p;
      uint64_t len;
      kv->arr_str_off[j] = r->off;
      snprintf(r->what, sizeof r->what, "string %llu of array key '%s'", (unsigned long long)j, key);
      QVL_TRY(read_str(r, &p, &len));
    }
    return QVL_OK;
  }
  uint8_t raw[8] = {0};
  snprintf(r->what, sizeof r->what, "the %s value of key '%s'", gguf_type_name(kv->type), key);
  QVL_TRY(read_bytes(r, raw, sz));
  if (kv->type == GGUF_TYPE_BOOL) {
    QVL_TRY(check_bools(r, key, raw, 1, false));
    kv->num.u = raw[0];
  } else if (kv->type == GGUF_TYPE_FLOAT32) {
    float f;
    memcpy(&f, raw, 4);
    kv->num.f = f;
  } else if (kv->type == GGUF_TYPE_FLOAT64) {
    memcpy(&kv->num.f, raw, 8);
  } else {
    bool s;
    int64_t i;
    uint64_t u;
    load_int(kv->type, raw, &s, &i, &u);
    if (s)
      kv->num.i = i;
    else
      kv->num.u = u;
  }
  return QVL_OK;
}

/* How reading a key's name and a tensor's name differ: the words of the messages, the length limit
 * and the index the name goes into. */
typedef struct entry_names {
  const char *noun;        /* "<noun> #k has an empty name" */
  const char *nul_byte;    /* "<noun> #k ('name') <nul_byte>" */
  const char *dup_what;    /* "duplicate <dup_what> 'name'" */
  const char *dup_entries; /* "(<dup_entries> #i and #k)" */
  uint64_t max_len;        /* 0: no limit */
  name_of_fn name_of;
} entry_names;

static const entry_names key_names = {"key", "contains a NUL byte", "key", "entries", GGUF_MAX_KEY_LEN, kv_name_of};
static const entry_names tensor_names = {"tensor", "has a NUL byte in its name", "tensor name", "tensors", 0,
                                         tensor_name_of};

/* Reads the name of entry #k, checks it (not empty, within the limit, no NUL byte, not a
 * duplicate), copies it into the arena as *name and adds it to ix. *shown is its printable form,
 * for the caller's later messages. */
static qvl_status read_entry_name(reader *r, uint64_t k, const entry_names *en, name_index *ix, const char **name,
                                  name_buf *shown) {
  gguf *g = r->g;
  const uint8_t *p;
  uint64_t len;
  snprintf(r->what, sizeof r->what, "the name of %s #%llu", en->noun, (unsigned long long)k);
  QVL_TRY(read_str(r, &p, &len));
  *shown = show_name(p, len);
  if (len == 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: %s #%llu has an empty name", g->img.label, en->noun, (unsigned long long)k);
  if (en->max_len && len > en->max_len)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: %s #%llu ('%s') is %llu bytes long, the limit is %llu", g->img.label,
                      en->noun, (unsigned long long)k, shown->s, (unsigned long long)len,
                      (unsigned long long)en->max_len);
  if (memchr(p, 0, (size_t)len))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: %s #%llu ('%s') %s", g->img.label, en->noun, (unsigned long long)k,
                      shown->s, en->nul_byte);
  int64_t dup;
  uint64_t slot = index_probe(ix, g, en->name_of, (const char *)p, (size_t)len, &dup);
  if (dup >= 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: duplicate %s '%s' (%s #%lld and #%llu)", g->img.label, en->dup_what,
                      shown->s, en->dup_entries, (long long)dup, (unsigned long long)k);
  *name = arena_copy(g, p, (size_t)len);
  if (!*name)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory copying %s names", g->img.label, en->noun);
  ix->slots[slot] = (uint32_t)k + 1;
  return QVL_OK;
}

static qvl_status parse_kvs(reader *r, uint64_t n_kv) {
  gguf *g = r->g;
  for (uint64_t k = 0; k < n_kv; k++) {
    gguf_kv *kv = &g->kv[k];
    uint32_t type;
    name_buf shown;
    QVL_TRY(read_entry_name(r, k, &key_names, &g->kv_index, &kv->key, &shown));
    g->n_kv = (int64_t)k + 1; /* entries up to here are complete enough for gguf_close */
    snprintf(r->what, sizeof r->what, "the type of key '%s'", shown.s);
    QVL_TRY(read_u32(r, &type));
    if (type >= GGUF_TYPE_COUNT)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' has value type %u, expected a GGUF type (0..%d)",
                        g->img.label, shown.s, type, GGUF_TYPE_COUNT - 1);
    kv->type = (gguf_type)type;
    QVL_TRY(parse_value(r, kv));
  }
  return QVL_OK;
}

/* ggml type names for messages about types qvl does not load (ids from ggml.h). */
static const char *ggml_type_name(uint32_t id) {
  static const char *const names[] = {
      [0] = "F32",      [1] = "F16",       [2] = "Q4_0",     [3] = "Q4_1",     [6] = "Q5_0",
      [7] = "Q5_1",     [8] = "Q8_0",      [9] = "Q8_1",     [10] = "Q2_K",    [11] = "Q3_K",
      [12] = "Q4_K",    [13] = "Q5_K",     [14] = "Q6_K",    [15] = "Q8_K",    [16] = "IQ2_XXS",
      [17] = "IQ2_XS",  [18] = "IQ3_XXS",  [19] = "IQ1_S",   [20] = "IQ4_NL",  [21] = "IQ3_S",
      [22] = "IQ2_S",   [23] = "IQ4_XS",   [24] = "I8",      [25] = "I16",     [26] = "I32",
      [27] = "I64",     [28] = "F64",      [29] = "IQ1_M",   [30] = "BF16",    [34] = "TQ1_0",
      [35] = "TQ2_0",   [39] = "MXFP4",
  };
  if (id < sizeof names / sizeof names[0] && names[id])
    return names[id];
  return NULL;
}

static qvl_status parse_tensor_infos(reader *r, uint64_t n_tensors) {
  gguf *g = r->g;
  for (uint64_t k = 0; k < n_tensors; k++) {
    tensor *t = &g->tensors[k];
    name_buf shown;
    QVL_TRY(read_entry_name(r, k, &tensor_names, &g->tensor_index, &t->name, &shown));
    g->n_tensors = (int64_t)k + 1;

    uint32_t n_dims, type;
    snprintf(r->what, sizeof r->what, "the info of tensor '%s'", shown.s);
    QVL_TRY(read_u32(r, &n_dims));
    if (n_dims < 1 || n_dims > TENSOR_MAX_DIMS)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s' has %u dimensions, expected 1..%d", g->img.label,
                        shown.s, n_dims, TENSOR_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t nel = 1;
    for (int d = 0; d < TENSOR_MAX_DIMS; d++)
      t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
      uint64_t ne;
      QVL_TRY(read_u64(r, &ne));
      if (ne == 0 || ne > (uint64_t)INT64_MAX)
        return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': ne[%u] = %lld, expected a positive size",
                          g->img.label, shown.s, d, (long long)ne);
      if ((int64_t)ne > INT64_MAX / nel)
        return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': element count overflows int64 at ne[%u] = %llu",
                          g->img.label, shown.s, d, (unsigned long long)ne);
      t->ne[d] = (int64_t)ne;
      nel *= (int64_t)ne;
    }
    QVL_TRY(read_u32(r, &type));
    const char *tn = ggml_type_name(type);
    /* Q8_K only exists as an activation format for dot products; files never store it. */
    if (!dtype_supported((int)type) || type == QVL_DTYPE_Q8_K) {
      if (tn)
        return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (id %u), which qvl does not support",
                          g->img.label, shown.s, tn, type);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s' has type id %u, which is not a known ggml type",
                        g->img.label, shown.s, type);
    }
    t->type = (qvl_dtype)type;
    size_t row_bytes;
    if (t->ne[0] % dtype_block_elems(t->type) != 0)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "%s: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d",
                        g->img.label, shown.s, (long long)t->ne[0], dtype_name((int)type),
                        dtype_block_elems(t->type));
    if (!dtype_row_bytes(t->type, t->ne[0], &row_bytes))
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': row of ne[0] = %lld %s elements overflows size_t",
                        g->img.label, shown.s, (long long)t->ne[0], dtype_name((int)type));
    uint64_t rows = (uint64_t)(nel / t->ne[0]);
    if (row_bytes != 0 && rows > SIZE_MAX / row_bytes)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': byte size (%llu rows of %zu bytes) overflows",
                        g->img.label, shown.s, (unsigned long long)rows, row_bytes);
    t->nbytes = (size_t)rows * row_bytes;
    uint64_t offset;
    QVL_TRY(read_u64(r, &offset));
    /* Stash the relative offset; it becomes a pointer once the data section start is known. */
    t->data = (const void *)(uintptr_t)offset;
  }
  return QVL_OK;
}

static qvl_status parse(gguf *g) {
  reader r = {.g = g, .off = 0};
  if (g->img.size < 4)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: not a GGUF file (only %zu bytes)", g->img.label, g->img.size);
  if (memcmp(g->img.data, "GGUF", 4) != 0) {
    name_buf m = show_name(g->img.data, 4);
    return qvl_errorf(QVL_ERR_FORMAT, "%s: not a GGUF file (magic '%s', expected 'GGUF')", g->img.label, m.s);
  }
  r.off = 4;
  snprintf(r.what, sizeof r.what, "the GGUF version");
  QVL_TRY(read_u32(&r, &g->version));
  if (g->version != 2 && g->version != 3) {
    if (g->version == 1)
      return qvl_errorf(QVL_ERR_UNSUPPORTED,
                        "%s: GGUF version 1 is not supported (qvl reads versions 2 and 3)", g->img.label);
    if ((g->version & 0xffff) == 0)
      return qvl_errorf(QVL_ERR_UNSUPPORTED,
                        "%s: GGUF version field 0x%08x looks big-endian, which qvl does not support",
                        g->img.label, g->version);
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: unsupported GGUF version %u (qvl reads versions 2 and 3)",
                      g->img.label, g->version);
  }
  uint64_t n_tensors, n_kv;
  snprintf(r.what, sizeof r.what, "the tensor and key counts");
  QVL_TRY(read_u64(&r, &n_tensors));
  QVL_TRY(read_u64(&r, &n_kv));
  size_t rest = left(&r);
  if (n_kv > rest / GGUF_MIN_KV_BYTES || n_tensors > rest / GGUF_MIN_TENSOR_INFO_BYTES ||
      n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_INFO_BYTES > rest)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s: header declares %llu keys and %llu tensors, which need more than the %zu bytes "
                      "left in the file",
                      g->img.label, (unsigned long long)n_kv, (unsigned long long)n_tensors, rest);
  if (n_kv > GGUF_MAX_ENTRIES || n_tensors > GGUF_MAX_ENTRIES)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: header declares %llu keys and %llu tensors, the limit is %u each",
                      g->img.label, (unsigned long long)n_kv, (unsigned long long)n_tensors, GGUF_MAX_ENTRIES);

  g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
  g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
  if (!g->kv || !g->tensors)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory for %llu keys and %llu tensors", g->img.label,
                      (unsigned long long)n_kv, (unsigned long long)n_tensors);
  QVL_TRY(index_init(&g->kv_index, n_kv, g->img.label));
  QVL_TRY(index_init(&g->tensor_index, n_tensors, g->img.label));

  QVL_TRY(parse_kvs(&r, n_kv));

  g->alignment = GGUF_DEFAULT_ALIGNMENT;
  int64_t ai = gguf_find_key(g, "general.alignment");
  if (ai >= 0) {
    const gguf_kv *kv = &g->kv[ai];
    if (kv->type != GGUF_TYPE_UINT32)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'general.alignment' has type %s, expected uint32", g->img.label,
                        gguf_type_name(kv->type));
    if (kv->num.u == 0 || (kv->num.u & (kv->num.u - 1)) != 0)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key 'general.alignment' = %llu, expected a nonzero power of two",
                        g->img.label, (unsigned long long)kv->num.u);
    g->alignment = (uint32_t)kv->num.u;
  }

  QVL_TRY(parse_tensor_infos(&r, n_tensors));

  /* off <= size < 2^63 and alignment <= 2^31, so this cannot overflow. */
  uint64_t a = g->alignment;
  g->data_offset = ((uint64_t)r.off + a - 1) / a * a;
  for (int64_t k = 0; k < g->n_tensors; k++) {
    tensor *t = &g->tensors[k];
    uint64_t offset = (uint64_t)(uintptr_t)t->data;
    if (offset % a != 0)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u", g->img.label,
                        t->name, (unsigned long long)offset, g->alignment);
    uint64_t data_size = g->data_offset <= g->img.size ? g->img.size - g->data_offset : 0;
    if (offset > data_size || t->nbytes > data_size - offset)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "%s: tensor '%s': data [%llu, %llu + %zu) lies outside the data section of %llu "
                        "bytes (file %zu bytes, data starts at %llu)",
                        g->img.label, t->name, (unsigned long long)offset, (unsigned long long)offset,
                        t->nbytes, (unsigned long long)data_size, g->img.size,
                        (unsigned long long)g->data_offset);
    t->data = g->img.data + g->data_offset + offset;
  }
  return QVL_OK;
}

/* Takes over im (closed on failure) and parses it. */
static qvl_status open_image(file_image *im, gguf **out) {
  *out = NULL;
  gguf *g = calloc(1, sizeof *g);
  if (!g) {
    qvl_status e = qvl_errorf(QVL_ERR_NOMEM, "%s: out of memory", im->label);
    file_image_close(im);
    return e;
  }
  g->img = *im;
  qvl_status s = parse(g);
  if (s != QVL_OK) {
    gguf_close(g);
    return s;
  }
  *out = g;
  return QVL_OK;
}

qvl_status gguf_open(const char *path, gguf **out) {
  *out = NULL;
  file_image im;
  QVL_TRY(file_image_map(path, 4, "GGUF", &im));
  return open_image(&im, out);
}

qvl_status gguf_open_memory(const void *data, size_t size, const char *label, gguf **out) {
  *out = NULL;
  file_image im;
  QVL_TRY(file_image_memory(data, size, label, &im));
  return open_image(&im, out);
}

void gguf_close(gguf *g) {
  if (!g)
    return;
  for (int64_t k = 0; k < g->n_kv; k++)
    free(g->kv[k].arr_str_off);
  FREE_EACH(g->kv, g->tensors, g->kv_index.slots, g->tensor_index.slots);
  while (g->arena) {
    arena_block *next = g->arena->next;
    free(g->arena);
    g->arena = next;
  }
  file_image_close(&g->img);
  free(g);
}

/* ---- accessors -------------------------------------------------------------------------------- */

const char *gguf_path(const gguf *g) { return g->img.label; }
uint32_t gguf_version(const gguf *g) { return g->version; }
uint32_t gguf_alignment(const gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf *g) { return g->data_offset; }
int64_t gguf_n_kv(const gguf *g) { return g->n_kv; }

int64_t gguf_find_key(const gguf *g, const char *key) {
  if (!key || g->n_kv == 0)
    return -1;
  int64_t found;
  index_probe(&g->kv_index, g, kv_name_of, key, strlen(key), &found);
  return found;
}

static const gguf_kv *kv_at(const gguf *g, int64_t idx) {
  return idx >= 0 && idx < g->n_kv ? &g->kv[idx] : NULL;
}

const char *gguf_key_name(const gguf *g, int64_t idx) {
  const gguf_kv *kv = kv_at(g, idx);
  return kv ? kv->key : NULL;
}

gguf_type gguf_key_type(const gguf *g, int64_t idx) {
  const gguf_kv *kv = kv_at(g, idx);
  return kv ? kv->type : GGUF_TYPE_COUNT;
}

gguf_type gguf_array_type(const gguf *g, int64_t idx) {
  const gguf_kv *kv = kv_at(g, idx);
  return kv && kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : GGUF_TYPE_COUNT;
}

uint64_t gguf_array_len(const gguf *g, int64_t idx) {
  const gguf_kv *kv = kv_at(g, idx);
  return kv && kv->type == GGUF_TYPE_ARRAY ? kv->arr_len : 0;
}

const void *gguf_array_data(const gguf *g, int64_t idx) {
  const gguf_kv *kv = kv_at(g, idx);
  if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type == GGUF_TYPE_STRING)
    return NULL;
  return kv->arr_data;
}

const char *gguf_array_str(const gguf *g, int64_t idx, uint64_t i, size_t *len) {
  const gguf_kv *kv = kv_at(g, idx);
  if (len)
    *len = 0;
  if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING || i >= kv->arr_len)
    return NULL;
  uint64_t off = kv->arr_str_off[i], n;
  memcpy(&n, g->img.data + off, 8);
  if (len)
    *len = (size_t)n;
  return (const char *)g->img.data + off + 8;
}

const char *gguf_key_str(const gguf *g, int64_t idx, size_t *len) {
  const gguf_kv *kv = kv_at(g, idx);
  if (len)
    *len = 0;
  if (!kv || kv->type != GGUF_TYPE_STRING)
    return NULL;
  if (len)
    *len = (size_t)kv->str_len;
  return kv->str;
}

static qvl_status lookup(const gguf *g, const char *key, const gguf_kv **kv) {
  int64_t i = gguf_find_key(g, key);
  if (i < 0)
    return qvl_errorf(QVL_ERR_NOT_FOUND, "%s: key '%s' not found", g->img.label, key ? key : "(null)");
  *kv = &g->kv[i];
  return QVL_OK;
}

static qvl_status wrong_type(const gguf *g, const gguf_kv *kv, const char *expected) {
  if (kv->type == GGUF_TYPE_ARRAY)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' has type array of %s, expected %s", g->img.label, kv->key,
                      gguf_type_name(kv->arr_type), expected);
  return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' has type %s, expected %s", g->img.label, kv->key,
                    gguf_type_name(kv->type), expected);
}

/* An integer key as (signed?, value) after checking its type. */
static qvl_status get_int(const gguf *g, const char *key, const char *want, const gguf_kv **kvp) {
  QVL_TRY(lookup(g, key, kvp));
  if (!type_is_int((*kvp)->type))
    return wrong_type(g, *kvp, want);
  return QVL_OK;
}

/* An integer key whose value must lie in [lo, hi] (fit names the target type in the error). */
static qvl_status get_int_in(const gguf *g, const char *key, const char *want, const char *fit, int64_t lo,
                             int64_t hi, int64_t *out) {
  const gguf_kv *kv = NULL;
  QVL_TRY(get_int(g, key, want, &kv));
  if (type_is_signed(kv->type)) {
    if (kv->num.i < lo || kv->num.i > hi)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' = %lld (%s) does not fit in %s", g->img.label, key,
                        (long long)kv->num.i, gguf_type_name(kv->type), fit);
    *out = kv->num.i;
  } else {
    if (kv->num.u > (uint64_t)hi)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s' = %llu (%s) does not fit in %s", g->img.label, key,
                        (unsigned long long)kv->num.u, gguf_type_name(kv->type), fit);
    *out = (int64_t)kv->num.u;
  }
  return QVL_OK;
}

qvl_status gguf_get_u32(const gguf *g, const char *key, uint32_t *out) {
  int64_t v;
  QVL_TRY(get_int_in(g, key, "an integer (uint32)", "uint32", 0, UINT32_MAX, &v));
  *out = (uint32_t)v;
  return QVL_OK;
}

qvl_status gguf_get_i64(const gguf *g, const char *key, int64_t *out) {
  return get_int_in(g, key, "an integer (int64)", "int64", INT64_MIN, INT64_MAX, out);
}

/* A key that must have the scalar type `type` (expected names it in the error). */
static qvl_status lookup_typed(const gguf *g, const char *key, gguf_type type, const char *expected,
                               const gguf_kv **kv) {
  QVL_TRY(lookup(g, key, kv));
  return (*kv)->type == type ? QVL_OK : wrong_type(g, *kv, expected);
}

qvl_status gguf_get_f32(const gguf *g, const char *key, float *out) {
  const gguf_kv *kv = NULL;
  QVL_TRY(lookup_typed(g, key, GGUF_TYPE_FLOAT32, "float32", &kv));
  *out = (float)kv->num.f;
  return QVL_OK;
}

qvl_status gguf_get_bool(const gguf *g, const char *key, bool *out) {
  const gguf_kv *kv = NULL;
  QVL_TRY(lookup_typed(g, key, GGUF_TYPE_BOOL, "bool", &kv));
  *out = kv->num.u != 0;
  return QVL_OK;
}

qvl_status gguf_get_str(const gguf *g, const char *key, const char **out) {
  const gguf_kv *kv = NULL;
  QVL_TRY(lookup_typed(g, key, GGUF_TYPE_STRING, "string", &kv));
  *out = kv->str;
  return QVL_OK;
}

qvl_status gguf_get_int_array(const gguf *g, const char *key, int64_t **out, uint64_t *n) {
  const gguf_kv *kv = NULL;
  *out = NULL;
  *n = 0;
  QVL_TRY(lookup(g, key, &kv));
  if (kv->type != GGUF_TYPE_ARRAY || !type_is_int(kv->arr_type))
    return wrong_type(g, kv, "an array of integers");
  size_t es = gguf_type_size(kv->arr_type);
  /* arr_len * es <= file size, so arr_len * 8 fits too. */
  int64_t *v = malloc((kv->arr_len ? kv->arr_len : 1) * sizeof *v);
  if (!v)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: key '%s': out of memory for %llu integers", g->img.label, key,
                      (unsigned long long)kv->arr_len);
  for (uint64_t j = 0; j < kv->arr_len; j++) {
    bool s;
    int64_t i;
    uint64_t u;
    load_int(kv->arr_type, kv->arr_data + j * es, &s, &i, &u);
    if (!s && u > (uint64_t)INT64_MAX) {
      free(v);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: key '%s': element %llu = %llu does not fit in int64", g->img.label,
                        key, (unsigned long long)j, (unsigned long long)u);
    }
    v[j] = s ? i : (int64_t)u;
  }
  *out = v;
  *n = kv->arr_len;
  return QVL_OK;
}

qvl_status gguf_get_f32_array(const gguf *g, const char *key, float **out, uint64_t *n) {
  const gguf_kv *kv = NULL;
  *out = NULL;
  *n = 0;
  QVL_TRY(lookup(g, key, &kv));
  if (kv->type != GGUF_TYPE_ARRAY ||
      (kv->arr_type != GGUF_TYPE_FLOAT32 && kv->arr_type != GGUF_TYPE_FLOAT64))
    return wrong_type(g, kv, "an array of float32 or float64");
  float *v = malloc((kv->arr_len ? kv->arr_len : 1) * sizeof *v);
  if (!v)
    return qvl_errorf(QVL_ERR_NOMEM, "%s: key '%s': out of memory for %llu floats", g->img.label, key,
                      (unsigned long long)kv->arr_len);
  for (uint64_t j = 0; j < kv->arr_len; j++) {
    if (kv->arr_type == GGUF_TYPE_FLOAT32) {
      memcpy(&v[j], kv->arr_data + j * 4, 4);
    } else {
      double d;
      memcpy(&d, kv->arr_data + j * 8, 8);
      v[j] = (float)d;
    }
  }
  *out = v;
  *n = kv->arr_len;
  return QVL_OK;
}

int64_t gguf_n_tensors(const gguf *g) { return g->n_tensors; }

const tensor *gguf_tensor_at(const gguf *g, int64_t i) {
  return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const tensor *gguf_find_tensor(const gguf *g, const char *name) {
  if (!name || g->n_tensors == 0)
    return NULL;
  int64_t found;
  index_probe(&g->tensor_index, g, tensor_name_of, name, strlen(name), &found);
  return found >= 0 ? &g->tensors[found] : NULL;
}

/* A string key equal to want; absent or of another type is no match (and sets no error). */
static bool key_str_is(const gguf *g, const char *key, const char *want) {
  int64_t i = gguf_find_key(g, key);
  size_t len = 0;
  const char *v = i >= 0 && gguf_key_type(g, i) == GGUF_TYPE_STRING ? gguf_key_str(g, i, &len) : NULL;
  return v && len == strlen(want) && !memcmp(v, want, len);
}

bool gguf_is_mmproj(const gguf *g) {
  return key_str_is(g, "general.architecture", "clip") || key_str_is(g, "general.type", "mmproj");
}
