/*
 * Qwen byte-level BPE tokenizer. See tokenizer.h for the pipeline and the reference it matches.
 *
 * Data layout (all immutable after init, hence shareable between threads):
 *   - every token's raw bytes (byte-level alphabet already undone) in one pool;
 *   - an open-addressing hash of NORMAL tokens' raw bytes -> id (merge results, tokenizer_find);
 *   - the merge table: a hash of the pair (left id, right id) packed with its rank into one
 *     uint64 per slot, so a lookup touches one cache line; the merged id is merge_id[rank];
 *   - a byte trie of the added tokens for the literal leftmost-longest match.
 */
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"
#include "text/unicode.h"
#include "text/unicode_data.h"

#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_JSON_BYTES ((size_t)1 << 30)

/* The Qwen2 pre-tokenizer pattern, as stored in tokenizer.json (JSON-unescaped). */
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Character classes of the pre-tokenizer. */
enum { CL_L = UNICODE_LETTER, CL_N = UNICODE_NUMBER, CL_S = UNICODE_SPACE, CL_NL = 16 };

typedef struct trie_node {
  int32_t child;   /* first child, -1 if none */
  int32_t sibling; /* next sibling, -1 if none */
  int32_t id;      /* token ending here, -1 if none */
  uint8_t byte;
} trie_node;

struct tokenizer {
  int32_t n_vocab;
  uint8_t *kind;     /* [n_vocab] tokenizer_token_type */
  uint32_t *tok_off; /* [n_vocab + 1] raw bytes of token i: tok_bytes[tok_off[i] .. tok_off[i+1]) */
  char *tok_bytes;
  int32_t byte_id[256]; /* initial BPE symbol of each byte, -1 if the vocabulary lacks it */

  int32_t *vocab_slots; /* [vocab_mask + 1] NORMAL token ids by raw bytes, -1 = empty */
  uint64_t vocab_mask;

  uint64_t *pair_slots; /* [pair_mask + 1] ((key + 1) << rank_bits | rank), 0 = empty */
  uint64_t pair_mask;
  unsigned id_bits, rank_bits;
  int32_t n_merges;
  int32_t *merge_id; /* [n_merges] id produced by the merge of each rank */

  trie_node *trie; /* node 0 is the root */
  int32_t n_trie;
  uint8_t added_first[256]; /* bytes that can start an added token */
  int32_t max_added_len;

  bool nfc; /* the normalizer is NFC (else none) */
  uint8_t ascii_class[128]; /* pre-tokenizer class of each ASCII byte */
  int32_t eos, bos, pad;
};

/* ---- byte-level alphabet ----------------------------------------------------------------- */

/* GPT-2's reversible byte -> code point map: printable Latin-1 bytes stand for themselves, the
 * other 68 bytes take code points 256.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
    return b;
  unsigned n = 0;
  for (unsigned x = 0; x < b; x++)
    if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
      n++;
  return 256 + n;
}

/* The inverse map, -1 for code points outside the alphabet. */
static void make_cp_byte(int16_t cp_byte[324]) {
  for (int i = 0; i < 324; i++)
    cp_byte[i] = -1;
  for (unsigned b = 0; b < 256; b++)
    cp_byte[byte_to_cp(b)] = (int16_t)b;
}

/* Byte-level string -> raw bytes, appended to out. Returns false (appending nothing) if a code
 * point is outside the alphabet or the string is not valid UTF-8. */
static bool bytelevel_decode(const int16_t *cp_byte, const char *s, size_t len, buf *out, qvl_status *st) {
  size_t start = out->len;
  *st = buf_reserve(out, len);
  if (*st != QVL_OK)
    return false;
  for (size_t i = 0; i < len;) {
    size_t n;
    uint32_t cp = utf8_decode((const unsigned char *)s + i, len - i, &n);
    if (cp >= 324 || cp_byte[cp] < 0) {
      out->len = start;
      out->data[start] = 0;
      return false;
    }
    out->data[out->len++] = (char)cp_byte[cp];
    i += n;
  }
  out->data[out->len] = 0;
  return true;
}

/* ---- hashing ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  return h;
}

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t x;
    memcpy(&x, p, 8);
    h = (h ^ x) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++)
    x |= (uint64_t)p[i] << (8 * i);
  return mix64(h ^ x);
}

static uint64_t pow2_at_least(uint64_t n) {
  uint64_t c = 16;
  while (c < n)
    c <<= 1;
  return c;
}

static inline const char *tok_ptr(const tokenizer *t, int32_t id, size_t *len) {
  *len = t->tok_off[id + 1] - t->tok_off[id];
  return t->tok_bytes + t->tok_off[id];
}

static int32_t vocab_lookup(const tokenizer *t, const char *s, size_t len) {
  uint64_t i = hash_bytes((const unsigned char *)s, len) & t->vocab_mask;
  for (;; i = (i + 1) & t->vocab_mask) {
    int32_t id = t->vocab_slots[i];
    if (id < 0)
      return -1;
    size_t n;
    const char *p = tok_ptr(t, id, &n);
    if (n == len && memcmp(p, s, len) == 0)
      return id;
  }
}

/* Rank of merging (a, b), or -1. */
static inline int32_t pair_rank(const tokenizer *t, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)a << t->id_bits | (uint64_t)b) + 1;
  uint64_t i = mix64(key) & t->pair_mask;
  for (;; i = (i + 1) & t->pair_mask) {
    uint64_t e = t->pair_slots[i];
    if (e == 0)
      return -1;
    if (e >> t->rank_bits == key)
      return (int32_t)(e & ((1ull << t->rank_bits) - 1));
  }
}

/* ---- building ----------------------------------------------------------------------------- */

typedef struct builder {
  tokenizer *t;
  buf bytes;         /* raw bytes pool */
  uint32_t *offs;    /* [n_vocab] start offset in bytes, UINT32_MAX = no entry yet */
  uint32_t *lens;    /* [n_vocab] */
  uint8_t *in_vocab; /* [n_vocab] defined as a BPE vocabulary entry (maybe also an added token) */
  const char *label; /* file name for messages */
  int16_t cp_byte[324];
} builder;

static qvl_status builder_init(builder *b, int32_t n_vocab, const char *label) {
  memset(b, 0, sizeof *b);
  b->label = label;
  if (n_vocab <= 0 || n_vocab > TOK_MAX_VOCAB)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer vocabulary size %d is outside 1..%d", label, n_vocab,
                      TOK_MAX_VOCAB);
  make_cp_byte(b->cp_byte);
  tokenizer *t = calloc(1, sizeof *t);
  if (!t)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory allocating the tokenizer");
  b->t = t;
  t->n_vocab = n_vocab;
  t->eos = t->bos = t->pad = -1;
  t->nfc = true;
  t->kind = calloc((size_t)n_vocab, 1);
  b->offs = malloc((size_t)n_vocab * sizeof *b->offs);
  b->lens = calloc((size_t)n_vocab, sizeof *b->lens);
  b->in_vocab = calloc((size_t)n_vocab, 1);
  if (!t->kind || !b->offs || !b->lens || !b->in_vocab)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for a %d-token vocabulary", n_vocab);
  for (int32_t i = 0; i < n_vocab; i++)
    b->offs[i] = UINT32_MAX;
  return QVL_OK;
}

static void builder_free(builder *b) {
  buf_free(&b->bytes);
  FREE_EACH(b->offs, b->lens, b->in_vocab);
  tokenizer_free(b->t);
  b->t = NULL;
}

/* Records token id. text is its string as stored in the file: byte-level for NORMAL tokens,
 * literal content for added ones. Decoding follows the reference's ByteLevel decoder: a string
 * made only of alphabet code points maps back to bytes, anything else is taken as UTF-8. */
static qvl_status builder_set(builder *b, int32_t id, tokenizer_token_type kind, const char *text, size_t len) {
  tokenizer *t = b->t;
  if (id < 0 || id >= t->n_vocab)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: token id %d is outside 0..%d", b->label, id, t->n_vocab - 1);
  if (b->offs[id] != UINT32_MAX && kind != TOKENIZER_TOKEN_CONTROL && kind != TOKENIZER_TOKEN_USER_DEFINED)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: token id %d is defined twice", b->label, id);
  if (b->bytes.len > UINT32_MAX - len - 4)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "%s: token strings exceed 4 GiB", b->label);
  size_t start = b->bytes.len;
  qvl_status st = QVL_OK;
  if (kind == TOKENIZER_TOKEN_UNUSED) {
    /* decodes to nothing */
  } else if (!bytelevel_decode(b->cp_byte, text, len, &b->bytes, &st)) {
    QVL_TRY(st);
    QVL_TRY(buf_append(&b->bytes, text, len));
    if (kind == TOKENIZER_TOKEN_NORMAL)
      kind = TOKENIZER_TOKEN_UNKNOWN; /* not reachable from bytes: kept only for decoding */
  }
  b->offs[id] = (uint32_t)start;
  b->lens[id] = (uint32_t)(b->bytes.len - start);
  t->kind[id] = (uint8_t)kind;
  if (kind == TOKENIZER_TOKEN_NORMAL)
    b->in_vocab[id] = 1;
  return QVL_OK;
}

static qvl_status trie_add(tokenizer *t, const unsigned char *s, size_t len, int32_t id, int32_t *cap) {
  int32_t node = 0;
  for (size_t i = 0; i < len; i++) {
    int32_t c = t->trie[node].child;
    while (c >= 0 && t->trie[c].byte != s[i])
      c = t->trie[c].sibling;
    if (c < 0) {
      if (t->n_trie == *cap) {
        if (*cap > INT32_MAX / 2)
          return qvl_errorf(QVL_ERR_TOO_LARGE, "added-token trie too large");
        trie_node *p = realloc(t->trie, (size_t)*cap * 2 * sizeof *p);
        if (!p)
          return qvl_errorf(QVL_ERR_NOMEM, "out of memory building the added-token trie");
        t->trie = p;
        *cap *= 2;
      }
      c = t->n_trie++;
      t->trie[c] = (trie_node){.child = -1, .sibling = t->trie[node].child, .id = -1, .byte = s[i]};
      t->trie[node].child = c;
    }
    node = c;
  }
  t->trie[node].id = id; /* a later duplicate wins, as in the reference's content -> id map */
  return QVL_OK;
}

/* Finishes the tokenizer once every token is set: pools, lookups, added tokens. merges[] pairs
 * are given as byte-level strings through the callback. */
typedef qvl_status (*merge_get_fn)(void *ctx, int32_t i, const char **a, size_t *alen, const char **bb,
                                   size_t *blen);

static qvl_status builder_finish(builder *b, int32_t n_merges, merge_get_fn get, void *ctx, tokenizer **out) {
  tokenizer *t = b->t;
  int32_t n = t->n_vocab;
  t->tok_off = malloc(((size_t)n + 1) * sizeof *t->tok_off);
  if (!t->tok_off)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for token offsets");
  /* Repack in id order so tok_off is monotonic. */
  buf pool = {0};
  QVL_TRY(buf_reserve(&pool, b->bytes.len));
  for (int32_t i = 0; i < n; i++) {
    t->tok_off[i] = (uint32_t)pool.len;
    if (b->offs[i] == UINT32_MAX) {
      t->kind[i] = TOKENIZER_TOKEN_UNUSED; /* a gap in the ids */
      continue;
    }
    memcpy(pool.data + pool.len, b->bytes.data + b->offs[i], b->lens[i]);
    pool.len += b->lens[i];
  }
  t->tok_off[n] = (uint32_t)pool.len;
  if (pool.data)
    pool.data[pool.len] = 0;
  t->tok_bytes = pool.data ? pool.data : calloc(1, 1);
  if (!t->tok_bytes)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");

  for (unsigned i = 0; i < 128; i++)
    t->ascii_class[i] = (uint8_t)(unicode_flags(i) & (CL_L | CL_N | CL_S));
  t->ascii_class['\r'] |= CL_NL;
  t->ascii_class['\n'] |= CL_NL;

  /* NORMAL tokens by raw bytes. */
  uint64_t cap = pow2_at_least((uint64_t)n * 2);
  t->vocab_slots = malloc(cap * sizeof *t->vocab_slots);
  if (!t->vocab_slots)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the vocabulary hash");
  memset(t->vocab_slots, 0xFF, cap * sizeof *t->vocab_slots);
  t->vocab_mask = cap - 1;
  for (int32_t id = 0; id < n; id++) {
    /* An added token that is also a vocabulary entry stays reachable by BPE merges. */
    if (!b->in_vocab[id])
      continue;
    size_t len;
    const char *p = tok_ptr(t, id, &len);
    if (len == 0)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: token %d is empty", b->label, id);
    int32_t dup = vocab_lookup(t, p, len);
    if (dup >= 0)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tokens %d and %d have the same bytes", b->label, dup, id);
    uint64_t i = hash_bytes((const unsigned char *)p, len) & t->vocab_mask;
    while (t->vocab_slots[i] >= 0)
      i = (i + 1) & t->vocab_mask;
    t->vocab_slots[i] = id;
  }
  for (unsigned c = 0; c < 256; c++) {
    char ch = (char)c;
    t->byte_id[c] = vocab_lookup(t, &ch, 1);
  }

  /* Merges. */
  if (n_merges < 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: negative merge count", b->label);
  t->n_merges = n_merges;
  t->id_bits = 1;
  while ((1u << t->id_bits) < (unsigned)n)
    t->id_bits++;
  t->rank_bits = 1;
  while ((1ull << t->rank_bits) < (uint64_t)n_merges + 1)
    t->rank_bits++;
  if (2 * t->id_bits + 1 + t->rank_bits > 64)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: %d tokens with %d merges do not fit the merge table", b->label,
                      n, n_merges);
  cap = pow2_at_least((uint64_t)n_merges * 2 + 2);
  t->pair_slots = calloc(cap, sizeof *t->pair_slots);
  t->merge_id = malloc(((size_t)n_merges + 1) * sizeof *t->merge_id);
  if (!t->pair_slots || !t->merge_id)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for %d merges", n_merges);
  t->pair_mask = cap - 1;
  buf tmp = {0};
  qvl_status st = QVL_OK;
  for (int32_t r = 0; r < n_merges && st == QVL_OK; r++) {
    const char *sa, *sb;
    size_t la, lb;
    if ((st = get(ctx, r, &sa, &la, &sb, &lb)) != QVL_OK)
      break;
    tmp.len = 0;
    bool ok_a = bytelevel_decode(b->cp_byte, sa, la, &tmp, &st);
    size_t mid = tmp.len;
    bool ok_b = ok_a && st == QVL_OK && bytelevel_decode(b->cp_byte, sb, lb, &tmp, &st);
    if (st != QVL_OK)
      break;
    int32_t ia = ok_a ? vocab_lookup(t, tmp.data, mid) : -1;
    int32_t ib = ok_b ? vocab_lookup(t, tmp.data + mid, tmp.len - mid) : -1;
    int32_t im = ia >= 0 && ib >= 0 ? vocab_lookup(t, tmp.data, tmp.len) : -1;
    if (ia < 0 || ib < 0 || im < 0) {
      st = qvl_errorf(QVL_ERR_FORMAT, "%s: merge %d ('%.*s' '%.*s'): %s is not in the vocabulary", b->label, r,
                      (int)(la > 64 ? 64 : la), sa, (int)(lb > 64 ? 64 : lb), sb,
                      ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the merged token");
      break;
    }
    t->merge_id[r] = im;
    uint64_t key = ((uint64_t)ia << t->id_bits | (uint64_t)ib) + 1;
    uint64_t i = mix64(key) & t->pair_mask;
    for (;; i = (i + 1) & t->pair_mask) {
      uint64_t e = t->pair_slots[i];
      if (e == 0 || e >> t->rank_bits == key) {
        /* A repeated pair keeps its last rank, as the reference's merge map does. */
        t->pair_slots[i] = key << t->rank_bits | (uint64_t)r;
        break;
      }
    }
  }
  buf_free(&tmp);
  QVL_TRY(st);

  /* Added tokens. */
  int32_t tcap = 64;
  t->trie = malloc((size_t)tcap * sizeof *t->trie);
  if (!t->trie)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the added-token trie");
  t->trie[0] = (trie_node){.child = -1, .sibling = -1, .id = -1};
  t->n_trie = 1;
  *out = t;
  return QVL_OK;
}

/* Added-token contents are kept by the init functions in a side list because the byte pool
 * holds decoded bytes (which differ from the content when it has non-alphabet characters). */
typedef struct added_list {
  int32_t *ids;
  char **texts;
  size_t *lens;
  size_t n, cap;
} added_list;

static qvl_status added_push(added_list *a, int32_t id, const char *text, size_t len) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 32;
    int32_t *ids = realloc(a->ids, cap * sizeof *ids);
    if (ids)
      a->ids = ids;
    char **texts = realloc(a->texts, cap * sizeof *texts);
    if (texts)
      a->texts = texts;
    size_t *lens = realloc(a->lens, cap * sizeof *lens);
    if (lens)
      a->lens = lens;
    if (!ids || !texts || !lens)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory for added tokens");
    a->cap = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for added tokens");
  memcpy(copy, text, len);
  copy[len] = 0;
  a->ids[a->n] = id;
  a->texts[a->n] = copy;
  a->lens[a->n] = len;
  a->n++;
  return QVL_OK;
}

static void added_free(added_list *a) {
  for (size_t i = 0; i < a->n; i++)
    free(a->texts[i]);
  FREE_EACH(a->ids, a->texts, a->lens);
  memset(a, 0, sizeof *a);
}

static qvl_status build_trie(tokenizer *t, const added_list *a) {
  int32_t cap = t->n_trie > 64 ? t->n_trie : 64;
  for (size_t i = 0; i < a->n; i++) {
    if (a->lens[i] == 0)
      continue;
    if (a->lens[i] > INT32_MAX)
      return qvl_errorf(QVL_ERR_FORMAT, "added token %d is too long", a->ids[i]);
    QVL_TRY(trie_add(t, (const unsigned char *)a->texts[i], a->lens[i], a->ids[i], &cap));
    t->added_first[(unsigned char)a->texts[i][0]] = 1;
    if ((int32_t)a->lens[i] > t->max_added_len)
      t->max_added_len = (int32_t)a->lens[i];
  }
  return QVL_OK;
}

void tokenizer_free(tokenizer *t) {
  if (!t)
    return;
  FREE_EACH(t->kind, t->tok_off, t->tok_bytes, t->vocab_slots, t->pair_slots, t->merge_id, t->trie, t);
}

/* ---- init from GGUF ----------------------------------------------------------------------- */

typedef struct gguf_merges {
  const gguf *g;
  int64_t idx;
} gguf_merges;

static qvl_status gguf_merge_get(void *ctx, int32_t i, const char **a, size_t *alen, const char **b,
                                 size_t *blen) {
  gguf_merges *m = ctx;
  size_t len;
  const char *s = gguf_array_str(m->g, m->idx, (uint64_t)i, &len);
  const char *sp = s ? memchr(s, ' ', len) : NULL;
  if (!sp)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer.ggml.merges[%d] is not two tokens separated by a space",
                      gguf_path(m->g), i);
  *a = s;
  *alen = (size_t)(sp - s);
  *b = sp + 1;
  *blen = len - *alen - 1;
  return QVL_OK;
}

static qvl_status gguf_string_array(const gguf *g, const char *key, int64_t *idx, uint64_t *n) {
  *idx = gguf_find_key(g, key);
  if (*idx < 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer key '%s' is missing", gguf_path(g), key);
  if (gguf_key_type(g, *idx) != GGUF_TYPE_ARRAY || gguf_array_type(g, *idx) != GGUF_TYPE_STRING)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer key '%s' must be an array of strings, found %s", gguf_path(g),
                      key, gguf_type_name(gguf_key_type(g, *idx)));
  *n = gguf_array_len(g, *idx);
  return QVL_OK;
}

/* llama.cpp's converter marks every added token that looks like <|...|> as CONTROL, although
 * Qwen's tokenizer.json declares these six "special": false; the reference therefore keeps them
 * in decode(skip_special_tokens=True). The GGUF has lost the flag, so restore it by name. */
static bool qwen_not_special(const char *s, size_t len) {
  static const char *names[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
      return true;
  return false;
}

static int32_t gguf_opt_id(const gguf *g, const char *key, int32_t n_vocab) {
  uint32_t v;
  if (gguf_find_key(g, key) < 0 || gguf_get_u32(g, key, &v) != QVL_OK || v >= (uint32_t)n_vocab) {
    qvl_error_clear();
    return -1;
  }
  return (int32_t)v;
}

qvl_status tokenizer_init_gguf(const gguf *g, tokenizer **out) {
  *out = NULL;
  const char *path = gguf_path(g);
  const char *model = NULL, *pre = NULL;
  /* the projector has no tokenizer, and is read first: the mistake is the file, not its keys */
  if (gguf_find_key(g, "tokenizer.ggml.model") < 0 && gguf_is_mmproj(g))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, GGUF_MMPROJ_AS_MODEL_FMT, path);
  if (gguf_find_key(g, "tokenizer.ggml.model") < 0)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: no tokenizer in this file (key 'tokenizer.ggml.model' is missing)", path);
  QVL_TRY(gguf_get_str(g, "tokenizer.ggml.model", &model));
  if (strcmp(model, "gpt2") != 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: tokenizer.ggml.model is '%s'; only 'gpt2' (byte-level BPE, Qwen) is supported", path, model);
  if (gguf_find_key(g, "tokenizer.ggml.pre") < 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre is missing; expected 'qwen2'", path);
  QVL_TRY(gguf_get_str(g, "tokenizer.ggml.pre", &pre));
  if (strcmp(pre, "qwen2") != 0)
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: tokenizer.ggml.pre is '%s'; only the 'qwen2' pre-tokenizer is supported", path, pre);
  int64_t tok_idx, merge_idx;
  uint64_t n_tok, n_merge;
  QVL_TRY(gguf_string_array(g, "tokenizer.ggml.tokens", &tok_idx, &n_tok));
  QVL_TRY(gguf_string_array(g, "tokenizer.ggml.merges", &merge_idx, &n_merge));
  if (n_tok == 0 || n_tok > TOK_MAX_VOCAB)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries, expected 1..%d", path,
                      (unsigned long long)n_tok, TOK_MAX_VOCAB);
  if (n_merge > INT32_MAX / 4)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer.ggml.merges has %llu entries", path,
                      (unsigned long long)n_merge);
  int64_t *types = NULL;
  uint64_t n_types = 0;
  if (gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
    QVL_TRY(gguf_get_int_array(g, "tokenizer.ggml.token_type", &types, &n_types));
    if (n_types != n_tok) {
      free(types);
      return qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %llu", path,
                        (unsigned long long)n_types, (unsigned long long)n_tok);
    }
  }
  builder b;
  added_list added = {0};
  qvl_status st = builder_init(&b, (int32_t)n_tok, path);
  for (uint64_t i = 0; i < n_tok && st == QVL_OK; i++) {
    size_t len;
    const char *s = gguf_array_str(g, tok_idx, i, &len);
    int64_t ty = types ? types[i] : TOKENIZER_TOKEN_NORMAL;
    if (ty < TOKENIZER_TOKEN_NORMAL || ty > TOKENIZER_TOKEN_BYTE) {
      st = qvl_errorf(QVL_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu] = %lld, expected 1..6", path,
                      (unsigned long long)i, (long long)ty);
      break;
    }
    if (ty == TOKENIZER_TOKEN_BYTE || ty == TOKENIZER_TOKEN_UNKNOWN)
      ty = TOKENIZER_TOKEN_NORMAL;
    if (ty == TOKENIZER_TOKEN_CONTROL && qwen_not_special(s, len))
      ty = TOKENIZER_TOKEN_USER_DEFINED;
    st = builder_set(&b, (int32_t)i, (tokenizer_token_type)ty, s, len);
    if (st == QVL_OK && (ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_USER_DEFINED))
      st = added_push(&added, (int32_t)i, s, len);
  }
  free(types);
  tokenizer *t = NULL;
  gguf_merges m = {g, merge_idx};
  if (st == QVL_OK)
    st = builder_finish(&b, (int32_t)n_merge, gguf_merge_get, &m, &t);
  if (st == QVL_OK)
    st = build_trie(t, &added);
  added_free(&added);
  if (st != QVL_OK) {
    builder_free(&b);
    return st;
  }
  t->eos = gguf_opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab);
  t->bos = gguf_opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab);
  t->pad = gguf_opt_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab);
  b.t = NULL;
  builder_free(&b);
  *out = t;
  return QVL_OK;
}

/* ---- init from tokenizer.json ------------------------------------------------------------- */

static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool json_is_false_or_null(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v) || cJSON_IsFalse(v);
}

static bool json_is_empty_str_or_null(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == 0);
}

static bool json_type_is(const cJSON *o, const char *type) {
  const char *s = cJSON_IsObject(o) ? json_str(o, "type") : NULL;
  return s && strcmp(s, type) == 0;
}

/* Checks the normalizer / pre-tokenizer / decoder are the Qwen2 ones. */
static qvl_status hf_check_pipeline(const cJSON *root, const char *path, bool *nfc) {
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (!norm || cJSON_IsNull(norm))
    *nfc = false;
  else if (json_type_is(norm, "NFC"))
    *nfc = true;
  else
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: normalizer must be NFC or null (the Qwen2 tokenizer)", path);
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const cJSON *seq = json_type_is(pre, "Sequence") ? cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers") : NULL;
  const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
  const char *regex = cJSON_IsObject(pat) ? json_str(pat, "Regex") : NULL;
  const char *behavior = json_str(split, "behavior");
  if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) != 2 || !json_type_is(split, "Split") || !regex ||
      strcmp(regex, QWEN2_PATTERN) != 0 || !behavior || strcmp(behavior, "Isolated") != 0 ||
      !json_is_false_or_null(split, "invert") || !json_type_is(bl, "ByteLevel") ||
      !json_is_false_or_null(bl, "use_regex") || !json_is_false_or_null(bl, "add_prefix_space"))
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: pre_tokenizer is not the Qwen2 one (Sequence of Split with the Qwen2 regex, Isolated, "
                      "and ByteLevel without regex or prefix space)",
                      path);
  const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  if (!json_type_is(dec, "ByteLevel"))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: decoder must be ByteLevel", path);
  return QVL_OK;
}

typedef struct hf_merges {
  const cJSON **items;
  const char *path;
} hf_merges;

static qvl_status hf_merge_get(void *ctx, int32_t i, const char **a, size_t *alen, const char **b, size_t *blen) {
  hf_merges *m = ctx;
  const cJSON *it = m->items[i];
  if (cJSON_IsString(it)) {
    const char *s = it->valuestring, *sp = strchr(s, ' ');
    if (!sp)
      return qvl_errorf(QVL_ERR_FORMAT, "%s: model.merges[%d] = '%.64s' is not two tokens separated by a space",
                        m->path, i, s);
    *a = s;
    *alen = (size_t)(sp - s);
    *b = sp + 1;
    *blen = strlen(sp + 1);
    return QVL_OK;
  }
  const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
  if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(x) || !cJSON_IsString(y))
    return qvl_errorf(QVL_ERR_FORMAT, "%s: model.merges[%d] must be \"a b\" or [\"a\", \"b\"]", m->path, i);
  *a = x->valuestring;
  *alen = strlen(x->valuestring);
  *b = y->valuestring;
  *blen = strlen(y->valuestring);
  return QVL_OK;
}

/* eos / bos / pad from tokenizer_config.json next to tokenizer.json, if present. */
static void hf_read_config(tokenizer *t, const char *json_path) {
  const char *slash = strrchr(json_path, '/');
  size_t dir = slash ? (size_t)(slash - json_path + 1) : 0;
  buf p = {0}, text = {0};
  if (buf_append(&p, json_path, dir) != QVL_OK || buf_append_str(&p, "tokenizer_config.json") != QVL_OK ||
      buf_read_file(p.data, 64u << 20, &text) != QVL_OK) {
    qvl_error_clear();
    buf_free(&p);
    buf_free(&text);
    return;
  }
  cJSON *root = cJSON_ParseWithLength(text.data, text.len);
  static const char *keys[3] = {"eos_token", "bos_token", "pad_token"};
  int32_t *dst[3] = {&t->eos, &t->bos, &t->pad};
  for (int k = 0; root && k < 3; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
    const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? json_str(v, "content") : NULL;
    if (s)
      *dst[k] = tokenizer_find(t, s);
  }
  cJSON_Delete(root);
  buf_free(&p);
  buf_free(&text);
}

qvl_status tokenizer_init_hf(const char *path, tokenizer **out) {
  *out = NULL;
  buf text = {0};
  QVL_TRY(buf_read_file(path, TOK_MAX_JSON_BYTES, &text));
  cJSON *root = cJSON_ParseWithLength(text.data, text.len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    bool inside = at && at >= text.data && at <= text.data + text.len;
    qvl_status es = qvl_errorf(QVL_ERR_FORMAT, "%s: not valid JSON (at byte %zu, near '%.32s')", path,
                               inside ? (size_t)(at - text.data) : (size_t)0, inside ? at : "?");
    buf_free(&text);
    return es;
  }
  buf_free(&text);
  qvl_status st = QVL_OK;
  builder b = {0};
  added_list added = {0};
  const cJSON **merge_items = NULL;
  tokenizer *t = NULL;
  bool nfc = true;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *addl = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  const char *mtype = json_str(model, "type");
  if (!cJSON_IsObject(model) || (mtype && strcmp(mtype, "BPE") != 0)) {
    st = qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: model.type is '%s'; only BPE is supported", path, mtype ? mtype : "?");
    goto done;
  }
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
    st = qvl_errorf(QVL_ERR_FORMAT, "%s: model.vocab (object) and model.merges (array) are required", path);
    goto done;
  }
  if (!json_is_false_or_null(model, "dropout") || !json_is_false_or_null(model, "byte_fallback") ||
      !json_is_false_or_null(model, "ignore_merges") || !json_is_empty_str_or_null(model, "continuing_subword_prefix") ||
      !json_is_empty_str_or_null(model, "end_of_word_suffix")) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!(cJSON_IsNumber(d) && d->valuedouble == 0.0)) {
      st = qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: BPE options dropout, byte_fallback, ignore_merges, continuing_subword_prefix and "
                      "end_of_word_suffix must be off",
                      path);
      goto done;
    }
  }
  if ((st = hf_check_pipeline(root, path, &nfc)) != QVL_OK)
    goto done;
  if (addl && !cJSON_IsArray(addl)) {
    st = qvl_errorf(QVL_ERR_FORMAT, "%s: added_tokens must be an array", path);
    goto done;
  }
  /* Vocabulary size: the largest id + 1 over vocab and added tokens. */
  double max_id = -1;
  const cJSON *it;
  cJSON_ArrayForEach(it, vocab) {
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= TOK_MAX_VOCAB ||
        it->valuedouble != (double)(int32_t)it->valuedouble) {
      st = qvl_errorf(QVL_ERR_FORMAT, "%s: model.vocab['%.64s'] is not a token id in 0..%d", path, it->string,
                      TOK_MAX_VOCAB - 1);
      goto done;
    }
    if (it->valuedouble > max_id)
      max_id = it->valuedouble;
  }
  cJSON_ArrayForEach(it, addl) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    const char *content = json_str(it, "content");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= TOK_MAX_VOCAB ||
        id->valuedouble != (double)(int32_t)id->valuedouble || !content) {
      st = qvl_errorf(QVL_ERR_FORMAT, "%s: an added_tokens entry lacks a valid id or content", path);
      goto done;
    }
    if (!json_is_false_or_null(it, "lstrip") || !json_is_false_or_null(it, "rstrip") ||
        !json_is_false_or_null(it, "single_word") || !json_is_false_or_null(it, "normalized")) {
      st = qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s: added token '%.64s' uses lstrip/rstrip/single_word/normalized, which are not supported",
                      path, content);
      goto done;
    }
    if (id->valuedouble > max_id)
      max_id = id->valuedouble;
  }
  if ((st = builder_init(&b, (int32_t)max_id + 1, path)) != QVL_OK)
    goto done;
  cJSON_ArrayForEach(it, vocab) {
    if ((st = builder_set(&b, (int32_t)it->valuedouble, TOKENIZER_TOKEN_NORMAL, it->string, strlen(it->string))) !=
        QVL_OK)
      goto done;
  }
  cJSON_ArrayForEach(it, addl) {
    int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
    const char *content = json_str(it, "content");
    bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
    tokenizer_token_type kind = special ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_USER_DEFINED;
    if ((st = builder_set(&b, id, kind, content, strlen(content))) != QVL_OK ||
        (st = added_push(&added, id, content, strlen(content))) != QVL_OK)
      goto done;
  }
  int n_merges = cJSON_GetArraySize(merges);
  merge_items = malloc(((size_t)n_merges + 1) * sizeof *merge_items);
  if (!merge_items) {
    st = qvl_errorf(QVL_ERR_NOMEM, "out of memory for %d merges", n_merges);
    goto done;
  }
  int k = 0;
  cJSON_ArrayForEach(it, merges) merge_items[k++] = it;
  hf_merges hm = {merge_items, path};
  if ((st = builder_finish(&b, n_merges, hf_merge_get, &hm, &t)) != QVL_OK)
    goto done;
  if ((st = build_trie(t, &added)) != QVL_OK)
    goto done;
  t->nfc = nfc;
  hf_read_config(t, path);
done:
  free(merge_items);
  added_free(&added);
  cJSON_Delete(root);
  if (st != QVL_OK) {
    builder_free(&b);
    return st;
  }
  b.t = NULL;
  builder_free(&b);
  *out = t;
  return QVL_OK;
}

/* ---- accessors ---------------------------------------------------------------------------- */

int32_t tokenizer_vocab_size(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_eos_id(const tokenizer *t) { return t->eos; }
int32_t tokenizer_bos_id(const tokenizer *t) { return t->bos; }
int32_t tokenizer_pad_id(const tokenizer *t) { return t->pad; }

tokenizer_token_type tokenizer_token_kind(const tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab ? (tokenizer_token_type)t->kind[id] : (tokenizer_token_type)0;
}

bool tokenizer_is_special(const tokenizer *t, int32_t id) {
  return tokenizer_token_kind(t, id) == TOKENIZER_TOKEN_CONTROL;
}

bool tokenizer_is_added(const tokenizer *t, int32_t id) {
  tokenizer_token_type k = tokenizer_token_kind(t, id);
  return k == TOKENIZER_TOKEN_CONTROL || k == TOKENIZER_TOKEN_USER_DEFINED;
}

const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab) {
    *len = 0;
    return NULL;
  }
  return tok_ptr(t, id, len);
}

/* Longest added token starting at s (0 if none); its id in *id. */
static size_t match_added(const tokenizer *t, const unsigned char *s, size_t len, int32_t *id) {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = 0; i < len; i++) {
    int32_t c = t->trie[node].child;
    while (c >= 0 && t->trie[c].byte != s[i])
      c = t->trie[c].sibling;
    if (c < 0)
      break;
    node = c;
    if (t->trie[node].id >= 0) {
      best = i + 1;
      *id = t->trie[node].id;
    }
  }
  return best;
}

int32_t tokenizer_find_bytes(const tokenizer *t, const char *bytes, size_t len) {
  int32_t id = -1;
  if (len && match_added(t, (const unsigned char *)bytes, len, &id) == len)
    return id;
  return len ? vocab_lookup(t, bytes, len) : -1;
}

int32_t tokenizer_find(const tokenizer *t, const char *token_text) {
  return tokenizer_find_bytes(t, token_text, strlen(token_text));
}

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct ids_vec {
  int32_t *v;
  size_t n, cap;
} ids_vec;

static qvl_status ids_reserve(ids_vec *a, size_t extra) {
  if (extra <= a->cap - a->n)
    return QVL_OK;
  size_t cap = a->cap ? a->cap : 64;
  while (cap - a->n < extra) {
    if (cap > SIZE_MAX / 2 / sizeof(int32_t))
      return qvl_errorf(QVL_ERR_NOMEM, "token output too large");
    cap *= 2;
  }
  int32_t *p = realloc(a->v, cap * sizeof *p);
  if (!p)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for %zu token ids", cap);
  a->v = p;
  a->cap = cap;
  return QVL_OK;
}

/* Per-call memo of pieces already encoded: a direct-mapped table pointing at the first
 * occurrence's ids in the output. Per call, so the tokenizer stays immutable and thread-safe. */
#define PIECE_CACHE_MAX_BITS 14
#define PIECE_CACHE_MAX_LEN 128
typedef struct piece_cache_entry {
  const char *p;
  uint32_t len, n_ids;
  size_t ids_off;
} piece_cache_entry;

typedef struct encode_ctx {
  const tokenizer *t;
  ids_vec out;
  piece_cache_entry *cache; /* [1 << cache_bits] or NULL */
  unsigned cache_bits;
  /* scratch for long pieces */
  int32_t *sym, *prev, *next;
  uint64_t *heap;
  size_t scratch_cap;
  /* tokenizer_encode_capped: give up past max_ids ids (0 = never) or when stop says so */
  size_t max_ids;
  qvl_stop_fn stop;
  void *stop_user;
  size_t pieces;
} encode_ctx;

/* Resizes *p to bytes; on failure *p keeps its old block (still owned by the caller) and it is false. */
static bool realloc_keep(void **p, size_t bytes) {
  void *q = realloc(*p, bytes);
  if (q)
    *p = q;
  return q != NULL;
}

static qvl_status ctx_scratch(encode_ctx *c, size_t n) {
  if (n <= c->scratch_cap)
    return QVL_OK;
  size_t cap = c->scratch_cap ? c->scratch_cap : 256;
  while (cap < n)
    cap *= 2;
  if (!realloc_keep((void **)&c->sym, cap * sizeof *c->sym) ||
      !realloc_keep((void **)&c->prev, cap * sizeof *c->prev) ||
      !realloc_keep((void **)&c->next, cap * sizeof *c->next) ||
      !realloc_keep((void **)&c->heap, 2 * cap * sizeof *c->heap))
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory encoding a %zu-byte piece", n);
  c->scratch_cap = cap;
  return QVL_OK;
}

static inline void heap_push(uint64_t *h, size_t *n, uint64_t x) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= x)
      break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], x = h[--(*n)];
  size_t i = 0, m = *n;
  for (;;) {
    size_t l = 2 * i + 1;
    if (l >= m)
      break;
    size_t r = l + 1, c = r < m && h[r] < h[l] ? r : l;
    if (h[c] >= x)
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
  return top;
}

/* BPE of one piece with a binary heap of (rank, position): O(n log n) for any piece length.
 * Ties between equal ranks go to the leftmost position, like the reference. */
static qvl_status bpe_long(encode_ctx *c, const unsigned char *s, size_t len) {
  const tokenizer *t = c->t;
  QVL_TRY(ctx_scratch(c, len));
  int32_t *sym = c->sym, *prev = c->prev, *next = c->next;
  size_t m = 0;
  for (size_t i = 0; i < len; i++) {
    int32_t id = t->byte_id[s[i]];
    if (id >= 0)
      sym[m++] = id;
  }
  for (size_t i = 0; i < m; i++) {
    prev[i] = (int32_t)i - 1;
    next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
  }
  size_t hn = 0;
  for (size_t i = 0; i + 1 < m; i++) {
    int32_t r = pair_rank(t, sym[i], sym[i + 1]);
    if (r >= 0)
      heap_push(c->heap, &hn, (uint64_t)r << 32 | i);
  }
  while (hn) {
    uint64_t top = heap_pop(c->heap, &hn);
    int32_t r = (int32_t)(top >> 32);
    int32_t pos = (int32_t)(top & 0xFFFFFFFFu);
    if (sym[pos] < 0)
      continue;
    int32_t nx = next[pos];
    if (nx < 0 || pair_rank(t, sym[pos], sym[nx]) != r)
      continue;
    sym[pos] = t->merge_id[r];
    sym[nx] = -1;
    next[pos] = next[nx];
    if (next[nx] >= 0)
      prev[next[nx]] = pos;
    if (prev[pos] >= 0) {
      int32_t r2 = pair_rank(t, sym[prev[pos]], sym[pos]);
      if (r2 >= 0)
        heap_push(c->heap, &hn, (uint64_t)r2 << 32 | (uint32_t)prev[pos]);
    }
    if (next[pos] >= 0) {
      int32_t r2 = pair_rank(t, sym[pos], sym[next[pos]]);
      if (r2 >= 0)
        heap_push(c->heap, &hn, (uint64_t)r2 << 32 | (uint32_t)pos);
    }
  }
  QVL_TRY(ids_reserve(&c->out, m));
  for (int32_t i = m ? 0 : -1; i >= 0; i = next[i])
    c->out.v[c->out.n++] = sym[i];
  return QVL_OK;
}

#define BPE_SMALL 16

/* BPE of a short piece: symbols and the ranks of adjacent pairs in arrays; each step merges the
 * leftmost lowest-rank pair. Quadratic in the piece length, hence only for short pieces. */
static qvl_status bpe_piece(encode_ctx *c, const unsigned char *s, size_t len) {
  const tokenizer *t = c->t;
  if (len == 1) {
    int32_t id = t->byte_id[s[0]];
    if (id < 0)
      return QVL_OK;
    QVL_TRY(ids_reserve(&c->out, 1));
    c->out.v[c->out.n++] = id;
    return QVL_OK;
  }
  if (len > BPE_SMALL)
    return bpe_long(c, s, len);
  int32_t sym[BPE_SMALL], rank[BPE_SMALL];
  size_t m = 0;
  for (size_t i = 0; i < len; i++) {
    int32_t id = t->byte_id[s[i]];
    if (id >= 0)
      sym[m++] = id;
  }
  for (size_t i = 0; i + 1 < m; i++)
    rank[i] = pair_rank(t, sym[i], sym[i + 1]);
  while (m > 1) {
    size_t best = SIZE_MAX;
    uint32_t best_rank = UINT32_MAX;
    for (size_t i = 0; i + 1 < m; i++) {
      if ((uint32_t)rank[i] < best_rank) { /* -1 (no merge) is the largest as unsigned */
        best_rank = (uint32_t)rank[i];
        best = i;
      }
    }
    if (best == SIZE_MAX)
      break;
    sym[best] = t->merge_id[best_rank];
    size_t tail = m - best - 2; /* symbols after the absorbed one */
    memmove(sym + best + 1, sym + best + 2, tail * sizeof *sym);
    if (tail > 1)
      memmove(rank + best + 1, rank + best + 2, (tail - 1) * sizeof *rank);
    m--;
    if (best > 0)
      rank[best - 1] = pair_rank(t, sym[best - 1], sym[best]);
    if (best + 1 < m)
      rank[best] = pair_rank(t, sym[best], sym[best + 1]);
  }
  QVL_TRY(ids_reserve(&c->out, m));
  memcpy(c->out.v + c->out.n, sym, m * sizeof *sym);
  c->out.n += m;
  return QVL_OK;
}

static qvl_status encode_piece(encode_ctx *c, const char *p, size_t len) {
  if (len < 2 || len > PIECE_CACHE_MAX_LEN || !c->cache)
    return bpe_piece(c, (const unsigned char *)p, len);
  uint64_t h = hash_bytes((const unsigned char *)p, len);
  piece_cache_entry *e = &c->cache[h & ((1u << c->cache_bits) - 1)];
  if (e->p && e->len == len && memcmp(e->p, p, len) == 0) {
    QVL_TRY(ids_reserve(&c->out, e->n_ids));
    memcpy(c->out.v + c->out.n, c->out.v + e->ids_off, e->n_ids * sizeof(int32_t));
    c->out.n += e->n_ids;
    return QVL_OK;
  }
  size_t before = c->out.n;
  QVL_TRY(bpe_piece(c, (const unsigned char *)p, len));
  *e = (piece_cache_entry){.p = p, .len = (uint32_t)len, .n_ids = (uint32_t)(c->out.n - before), .ids_off = before};
  return QVL_OK;
}


static inline uint32_t cp_at(const uint8_t *ascii_class, const unsigned char *s, size_t len, size_t i, size_t *n, unsigned *cls) {
  if (s[i] < 0x80) {
    *n = 1;
    *cls = ascii_class[s[i]];
    return s[i];
  }
  uint32_t cp = utf8_decode(s + i, len - i, n);
  *cls = unicode_flags(cp) & (CL_L | CL_N | CL_S);
  return cp;
}

/* Case-insensitive letter for the contraction alternative: ASCII, plus U+017F LONG S, which the
 * reference's regex engine folds to 's'. */
static inline int fold_ascii(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z')
    return (int)(cp - 'A' + 'a');
  if (cp < 128)
    return (int)cp;
  if (cp == 0x17F)
    return 's';
  return 0;
}

static size_t scan_letters(const uint8_t *ac, const unsigned char *s, size_t len, size_t i) {
  while (i < len) {
    size_t n;
    unsigned cl;
    cp_at(ac, s, len, i, &n, &cl);
    if (!(cl & CL_L))
      break;
    i += n;
  }
  return i;
}

/* End of the regex match starting at byte i (the pattern always matches at least one char). */
static size_t pretok_next(const uint8_t *ac, const unsigned char *s, size_t len, size_t i) {
  size_t n0, n1, n2;
  unsigned c0cl, c1cl, c2cl;
  uint32_t c0 = cp_at(ac, s, len, i, &n0, &c0cl);
  size_t i1 = i + n0;
  /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
  if (c0 == '\'' && i1 < len) {
    int a = fold_ascii(cp_at(ac, s, len, i1, &n1, &c1cl));
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
      return i1 + n1;
    if ((a == 'r' || a == 'v' || a == 'l') && i1 + n1 < len) {
      int b = fold_ascii(cp_at(ac, s, len, i1 + n1, &n2, &c2cl));
      if ((a == 'l' && b == 'l') || (a != 'l' && b == 'e'))
        return i1 + n1 + n2;
    }
  }
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (c0cl & CL_L)
    return scan_letters(ac, s, len, i1);
  if (!(c0cl & (CL_N | CL_NL)) && c0 != '\r' && c0 != '\n' && i1 < len) {
    cp_at(ac, s, len, i1, &n1, &c1cl);
    if (c1cl & CL_L)
      return scan_letters(ac, s, len, i1 + n1);
  }
  /* \p{N} */
  if (c0cl & CL_N)
    return i1;
  /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
  size_t j = SIZE_MAX;
  if (!(c0cl & CL_S)) {
    j = i1;
  } else if (c0 == ' ' && i1 < len) {
    cp_at(ac, s, len, i1, &n1, &c1cl);
    if (!(c1cl & (CL_L | CL_N | CL_S)))
      j = i1 + n1;
  }
  if (j != SIZE_MAX) {
    while (j < len) {
      size_t n;
      unsigned cl;
      cp_at(ac, s, len, j, &n, &cl);
      if (cl & (CL_L | CL_N | CL_S))
        break;
      j += n;
    }
    while (j < len && (s[j] == '\r' || s[j] == '\n'))
      j++;
    return j;
  }
  /* c0 is whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ over the maximal whitespace run. */
  size_t end = i, last_nl_end = SIZE_MAX, last_start = i;
  while (end < len) {
    size_t n;
    unsigned cl;
    uint32_t cp = cp_at(ac, s, len, end, &n, &cl);
    if (!(cl & CL_S))
      break;
    if (cp == '\r' || cp == '\n')
      last_nl_end = end + n;
    last_start = end;
    end += n;
  }
  if (last_nl_end != SIZE_MAX)
    return last_nl_end;
  if (end == len || last_start == i)
    return end;
  return last_start;
}

/* Stops a capped encode as soon as the answer is known: too many ids, or the caller's stop check
 * (polled every 1024 pieces: cheap next to the pieces themselves). */
static qvl_status check_caps(encode_ctx *c) {
  if (c->max_ids && c->out.n > c->max_ids)
    return qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW, "the text has more than %zu tokens", c->max_ids);
  if (c->stop && (++c->pieces & 1023) == 0)
    return c->stop(c->stop_user);
  return QVL_OK;
}

static qvl_status encode_span(encode_ctx *c, const char *text, size_t len, char **norm_keep, size_t *n_keep) {
  if (len == 0)
    return QVL_OK;
  const char *s = text;
  if (c->t->nfc && !unicode_nfc_quick_check(text, len)) {
    buf nb = {0};
    qvl_status st = unicode_nfc_append(&nb, text, len);
    if (st != QVL_OK) {
      buf_free(&nb);
      return st;
    }
    /* Kept alive to the end of the call: the piece cache points into it. */
    norm_keep[(*n_keep)++] = nb.data;
    s = nb.data;
    len = nb.len;
  }
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    size_t j = pretok_next(c->t->ascii_class, u, len, i);
    QVL_TRY(encode_piece(c, s + i, j - i));
    i = j;
    QVL_TRY(check_caps(c));
  }
  return QVL_OK;
}

/* The lossy UTF-8 copy of text with the plain spans moved to its offsets: each region between span
 * boundaries is cleaned on its own, so a boundary stays between the same characters. */
static qvl_status clean_with_spans(const char *text, size_t len, const text_span *plain, size_t n_plain, buf *clean,
                                   text_span **moved) {
  *moved = NULL;
  if (n_plain && !(*moved = malloc(n_plain * sizeof **moved)))
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  size_t at = 0;
  for (size_t k = 0; k <= n_plain; k++) {
    size_t b = k < n_plain ? plain[k].begin : len, e = k < n_plain ? plain[k].end : len;
    QVL_TRY(utf8_append_lossy(clean, text + at, b - at));
    if (k == n_plain)
      break;
    (*moved)[k].begin = clean->len;
    QVL_TRY(utf8_append_lossy(clean, text + b, e - b));
    (*moved)[k].end = clean->len;
    at = e;
  }
  if (!clean->data)
    QVL_TRY(buf_append(clean, "", 0));
  return QVL_OK;
}

static qvl_status encode_impl(const tokenizer *t, const char *text, size_t len, unsigned flags,
                              const text_span *plain, size_t n_plain, size_t max_ids, qvl_stop_fn stop,
                              void *stop_user, int32_t **ids, size_t *n_ids) {
  *ids = NULL;
  *n_ids = 0;
  if (!text && len)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "tokenizer_encode: NULL text");
  if (len > (size_t)INT32_MAX)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "tokenizer_encode: %zu bytes of text exceed the 2 GiB limit", len);
  for (size_t k = 0; k < n_plain; k++)
    if (plain[k].begin > plain[k].end || plain[k].end > len || (k && plain[k].begin < plain[k - 1].end))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "tokenizer_encode: plain span %zu [%zu, %zu) is out of order or range",
                        k, plain[k].begin, plain[k].end);
  buf clean = {0};
  text_span *moved = NULL;
  const char *s = text ? text : "";
  if (utf8_valid_prefix(s, len) != len) {
    qvl_status cs = clean_with_spans(s, len, plain, n_plain, &clean, &moved);
    if (cs != QVL_OK) {
      buf_free(&clean);
      free(moved);
      return cs;
    }
    s = clean.data;
    len = clean.len;
    plain = moved;
  }
  encode_ctx c = {.t = t, .max_ids = max_ids, .stop = stop, .stop_user = stop_user};
  qvl_status st = ids_reserve(&c.out, (max_ids && max_ids < len / 3 ? max_ids : len / 3) + 16);
  if (len >= 256) {
    /* About one slot per 16 bytes of text: small prompts get a small table. */
    c.cache_bits = 8;
    while (c.cache_bits < PIECE_CACHE_MAX_BITS && ((size_t)16 << c.cache_bits) < len)
      c.cache_bits++;
    c.cache = calloc((size_t)1 << c.cache_bits, sizeof *c.cache);
  }
  /* Each span between added tokens may need a normalized copy; at most one per span. */
  char **keep = NULL;
  size_t n_keep = 0, keep_cap = 0;
  const unsigned char *u = (const unsigned char *)s;
  size_t span = 0, i = 0;
  bool use_added = !(flags & TOKENIZER_ENCODE_NO_ADDED) && t->max_added_len > 0;
  size_t ps = 0; /* the first plain span that ends after i */
  while (st == QVL_OK) {
    size_t next_span = len, match = 0;
    int32_t id = -1;
    if (use_added) {
      for (; i < len; i++) {
        while (ps < n_plain && plain[ps].end <= i)
          ps++;
        if (ps < n_plain && plain[ps].begin <= i) {
          i = plain[ps].end - 1; /* no added token starts inside plain text */
          continue;
        }
        /* nor runs into it: the match ends before the next plain span */
        size_t room = (ps < n_plain ? plain[ps].begin : len) - i;
        if (t->added_first[u[i]] && (match = match_added(t, u + i, room, &id)) > 0)
          break;
      }
      next_span = i;
    }
    if (n_keep == keep_cap) {
      size_t cap = keep_cap ? keep_cap * 2 : 8;
      char **p = realloc(keep, cap * sizeof *p);
      if (!p) {
        st = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
        break;
      }
      keep = p;
      keep_cap = cap;
    }
    st = encode_span(&c, s + span, next_span - span, keep, &n_keep);
    if (st != QVL_OK || match == 0)
      break;
    if ((st = ids_reserve(&c.out, 1)) != QVL_OK)
      break;
    c.out.v[c.out.n++] = id;
    if ((st = check_caps(&c)) != QVL_OK)
      break;
    i += match;
    span = i;
  }
  for (size_t k = 0; k < n_keep; k++)
    free(keep[k]);
  free(keep);
  free(c.cache);
  free(c.sym);
  free(c.prev);
  free(c.next);
  free(c.heap);
  buf_free(&clean);
  free(moved);
  if (st != QVL_OK) {
    free(c.out.v);
    return st;
  }
  *ids = c.out.v;
  *n_ids = c.out.n;
  return QVL_OK;
}

qvl_status tokenizer_encode_flags(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                                  size_t *n_ids) {
  return encode_impl(t, text, len, flags, NULL, 0, 0, NULL, NULL, ids, n_ids);
}

qvl_status tokenizer_encode_capped(const tokenizer *t, const char *text, size_t len, unsigned flags, size_t max_ids,
                                   qvl_stop_fn stop, void *stop_user, int32_t **ids, size_t *n_ids) {
  return encode_impl(t, text, len, flags, NULL, 0, max_ids, stop, stop_user, ids, n_ids);
}

qvl_status tokenizer_encode_spans(const tokenizer *t, const char *text, size_t len, const text_span *plain,
                                  size_t n_plain, size_t max_ids, qvl_stop_fn stop, void *stop_user, int32_t **ids,
                                  size_t *n_ids) {
  return encode_impl(t, text, len, 0, plain, n_plain, max_ids, stop, stop_user, ids, n_ids);
}

qvl_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
  return tokenizer_encode_flags(t, text, len, 0, ids, n_ids);
}

/* ---- decoding ----------------------------------------------------------------------------- */

qvl_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, buf *out) {
  buf raw = {0};
  qvl_status st = QVL_OK;
  for (size_t i = 0; i < n && st == QVL_OK; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_vocab)
      continue; /* unknown ids are dropped, as the reference does */
    if (skip_special && t->kind[id] == TOKENIZER_TOKEN_CONTROL)
      continue;
    size_t len;
    const char *p = tok_ptr(t, id, &len);
    st = buf_append(&raw, p, len);
  }
  if (st == QVL_OK)
    st = utf8_append_lossy(out, raw.data ? raw.data : "", raw.len);
  buf_free(&raw);
  return st;
}
