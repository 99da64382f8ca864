#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/unicode_data.h"

uint32_t utf8_decode(const unsigned char *s, size_t len, size_t *n) {
  unsigned c = s[0];
  if (c < 0x80) {
    *n = 1;
    return c;
  }
  size_t need;
  uint32_t cp;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Unicode table 3-7) */
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2, cp = c & 0x0F;
    if (c == 0xE0)
      lo = 0xA0;
    else if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3, cp = c & 0x07;
    if (c == 0xF0)
      lo = 0x90;
    else if (c == 0xF4)
      hi = 0x8F;
  } else {
    *n = 1;
    return UINT32_MAX;
  }
  for (size_t i = 1; i <= need; i++) {
    if (i >= len) {
      *n = i;
      return UINT32_MAX;
    }
    unsigned b = s[i];
    if (b < lo || b > hi) {
      *n = i;
      return UINT32_MAX;
    }
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  *n = need + 1;
  return cp;
}

size_t utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The length of the longest prefix of s that is valid UTF-8 and holds no code point with any of
 * stop_flags (unicode_flags). Bytes below skip_below are single-byte code points taken without a
 * look: the caller knows none of them can stop the scan. */
static size_t scan_code_points(const char *s, size_t len, unsigned char skip_below, uint32_t stop_flags) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    if (p[i] < skip_below) {
      i++;
      continue;
    }
    size_t n;
    uint32_t cp = utf8_decode(p + i, len - i, &n);
    if (cp == UINT32_MAX || (stop_flags && (unicode_flags(cp) & stop_flags)))
      return i;
    i += n;
  }
  return len;
}

size_t utf8_valid_prefix(const char *s, size_t len) { return scan_code_points(s, len, 0x80, 0); }

qvl_status utf8_append_lossy(buf *out, const char *s, size_t len) {
  static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
  size_t i = 0;
  while (i < len) {
    size_t ok = utf8_valid_prefix(s + i, len - i);
    QVL_TRY(buf_append(out, s + i, ok));
    i += ok;
    if (i >= len)
      break;
    size_t n;
    utf8_decode((const unsigned char *)s + i, len - i, &n);
    QVL_TRY(buf_append(out, repl, 3));
    i += n;
  }
  return QVL_OK;
}

qvl_status utf8_append_lossy_nonul(buf *out, const char *s, size_t len) {
  for (;;) {
    const char *z = memchr(s, 0, len);
    size_t seg = z ? (size_t)(z - s) : len;
    QVL_TRY(utf8_append_lossy(out, s, seg));
    if (!z)
      return QVL_OK;
    QVL_TRY(buf_append(out, "\xEF\xBF\xBD", 3));
    s += seg + 1;
    len -= seg + 1;
  }
}

size_t utf8_piece_len(const char *s, size_t len, size_t max) {
  size_t take = len < max ? len : max;
  while (take < len && ((unsigned char)s[take] & 0xC0) == 0x80)
    take++;
  return take;
}

size_t utf8_incomplete_tail(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  /* A sequence is at most 4 bytes: look at the last 3 for a lead byte whose sequence is cut. */
  for (size_t k = 1; k <= 3 && k <= len; k++) {
    unsigned c = p[len - k];
    if (c < 0x80)
      return 0;
    if (c >= 0xC0) {
      if (c < 0xC2 || c > 0xF4)
        return 0; /* never the start of a valid sequence */
      size_t n;
      /* Held back only if all k bytes are a valid start that the end of the input cut. */
      return utf8_decode(p + len - k, k, &n) == UINT32_MAX && n == k ? k : 0;
    }
  }
  return 0;
}

/* ---- NFC ---------------------------------------------------------------------------------- */

enum {
  HANGUL_SBASE = 0xAC00,
  HANGUL_LBASE = 0x1100,
  HANGUL_VBASE = 0x1161,
  HANGUL_TBASE = 0x11A7,
  HANGUL_LCOUNT = 19,
  HANGUL_VCOUNT = 21,
  HANGUL_TCOUNT = 28,
  HANGUL_NCOUNT = HANGUL_VCOUNT * HANGUL_TCOUNT,
  HANGUL_SCOUNT = HANGUL_LCOUNT * HANGUL_NCOUNT,
};

bool unicode_nfc_quick_check(const char *s, size_t len) {
  /* Every code point below U+0300 (lead byte < 0xCC) is a stable starter. */
  return scan_code_points(s, len, 0xCC, UNICODE_NFC_UNSTABLE) == len;
}

typedef struct u32vec {
  uint32_t *v;
  size_t n, cap;
} u32vec;

static qvl_status u32vec_push(u32vec *a, uint32_t x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    uint32_t *p = realloc(a->v, cap * sizeof *p);
    if (!p)
      return qvl_errorf(QVL_ERR_NOMEM, "NFC: out of memory (%zu code points)", cap);
    a->v = p;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return QVL_OK;
}

static const unicode_decomp_entry *find_decomp(uint32_t cp) {
  size_t lo = 0, hi = unicode_decomp_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (unicode_decomp[mid].cp < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < unicode_decomp_count && unicode_decomp[lo].cp == cp ? &unicode_decomp[lo] : NULL;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= HANGUL_LBASE && a < HANGUL_LBASE + HANGUL_LCOUNT && b >= HANGUL_VBASE &&
      b < HANGUL_VBASE + HANGUL_VCOUNT)
    return HANGUL_SBASE + ((a - HANGUL_LBASE) * HANGUL_VCOUNT + (b - HANGUL_VBASE)) * HANGUL_TCOUNT;
  if (a >= HANGUL_SBASE && a < HANGUL_SBASE + HANGUL_SCOUNT && (a - HANGUL_SBASE) % HANGUL_TCOUNT == 0 &&
      b > HANGUL_TBASE && b < HANGUL_TBASE + HANGUL_TCOUNT)
    return a + (b - HANGUL_TBASE);
  size_t lo = 0, hi = unicode_comp_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const unicode_comp_entry *e = &unicode_comp[mid];
    if (e->first < a || (e->first == a && e->second < b))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < unicode_comp_count && unicode_comp[lo].first == a && unicode_comp[lo].second == b)
    return unicode_comp[lo].composite;
  return 0;
}

static qvl_status decompose_push(u32vec *d, uint32_t cp) {
  if (cp >= HANGUL_SBASE && cp < HANGUL_SBASE + HANGUL_SCOUNT) {
    uint32_t si = cp - HANGUL_SBASE;
    QVL_TRY(u32vec_push(d, HANGUL_LBASE + si / HANGUL_NCOUNT));
    QVL_TRY(u32vec_push(d, HANGUL_VBASE + (si % HANGUL_NCOUNT) / HANGUL_TCOUNT));
    if (si % HANGUL_TCOUNT)
      QVL_TRY(u32vec_push(d, HANGUL_TBASE + si % HANGUL_TCOUNT));
    return QVL_OK;
  }
  const unicode_decomp_entry *e = cp >= 0xC0 ? find_decomp(cp) : NULL;
  if (!e)
    return u32vec_push(d, cp);
  for (unsigned k = 0; k < e->len; k++)
    QVL_TRY(u32vec_push(d, unicode_decomp_pool[e->offset + k]));
  return QVL_OK;
}

/* Stable sort of v[0..n) by combining class (the canonical ordering of one run of marks). */
static qvl_status sort_by_ccc(uint32_t *v, size_t n) {
  if (n <= 32) {
    for (size_t i = 1; i < n; i++) {
      uint32_t x = v[i];
      unsigned cx = unicode_ccc(x);
      size_t j = i;
      while (j > 0 && unicode_ccc(v[j - 1]) > cx) {
        v[j] = v[j - 1];
        j--;
      }
      v[j] = x;
    }
    return QVL_OK;
  }
  /* Long runs (hostile input): counting sort by class keeps it linear and stable. */
  size_t count[257] = {0};
  for (size_t i = 0; i < n; i++)
    count[unicode_ccc(v[i]) + 1]++;
  for (int c = 1; c < 257; c++)
    count[c] += count[c - 1];
  uint32_t *tmp = malloc(n * sizeof *tmp);
  if (!tmp)
    return qvl_errorf(QVL_ERR_NOMEM, "NFC: out of memory sorting %zu combining marks", n);
  for (size_t i = 0; i < n; i++)
    tmp[count[unicode_ccc(v[i])]++] = v[i];
  memcpy(v, tmp, n * sizeof *tmp);
  free(tmp);
  return QVL_OK;
}

/* Normalizes one chunk: it starts at a stable code point (or at the start of the text) and the
 * code point after it, if any, is stable too, so the chunk normalizes independently. */
static qvl_status nfc_chunk(buf *out, const unsigned char *s, size_t len, u32vec *d) {
  d->n = 0;
  for (size_t i = 0; i < len;) {
    size_t n;
    uint32_t cp = utf8_decode(s + i, len - i, &n);
    QVL_TRY(decompose_push(d, cp));
    i += n;
  }
  /* Canonical ordering of each run of non-starters. */
  for (size_t i = 0; i < d->n;) {
    if (unicode_ccc(d->v[i]) == 0) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < d->n && unicode_ccc(d->v[j]) != 0)
      j++;
    QVL_TRY(sort_by_ccc(d->v + i, j - i));
    i = j;
  }
  /* Canonical composition (UAX #15): a mark composes with the last starter unless blocked. */
  uint32_t *v = d->v;
  size_t n = d->n, w = 0, starter = SIZE_MAX;
  unsigned last_class = 256;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = v[i];
    unsigned cc = unicode_ccc(c);
    if (starter != SIZE_MAX && (last_class < cc || last_class == 0)) {
      uint32_t comp = compose_pair(v[starter], c);
      if (comp) {
        v[starter] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = w;
      last_class = 0;
    } else {
      last_class = cc;
    }
    v[w++] = c;
  }
  QVL_TRY(buf_reserve(out, w * 4));
  for (size_t i = 0; i < w; i++)
    out->len += utf8_encode(v[i], out->data + out->len);
  out->data[out->len] = 0;
  return QVL_OK;
}

qvl_status unicode_nfc_append(buf *out, const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  size_t flushed = 0;         /* bytes of s already written to out */
  size_t last_stable = SIZE_MAX; /* offset of the last stable code point not yet flushed */
  u32vec d = {0};
  qvl_status st = QVL_OK;
  size_t i = 0;
  while (i < len) {
    if (s[i] < 0x80) {
      last_stable = i++;
      continue;
    }
    if (s[i] < 0xCC) { /* a 2-byte code point below U+0300: a stable starter */
      last_stable = i;
      i += 2;
      continue;
    }
    size_t n;
    uint32_t cp = utf8_decode(s + i, len - i, &n);
    if (cp == UINT32_MAX) {
      st = qvl_errorf(QVL_ERR_INTERNAL, "NFC: invalid UTF-8 at byte %zu", i);
      break;
    }
    if (!(unicode_flags(cp) & UNICODE_NFC_UNSTABLE)) {
      last_stable = i;
      i += n;
      continue;
    }
    size_t start = last_stable != SIZE_MAX && last_stable >= flushed ? last_stable : flushed;
    size_t j = i + n;
    while (j < len) {
      uint32_t c2 = utf8_decode(s + j, len - j, &n);
      if (c2 == UINT32_MAX || !(unicode_flags(c2) & UNICODE_NFC_UNSTABLE))
        break;
      j += n;
    }
    if ((st = buf_append(out, s + flushed, start - flushed)) != QVL_OK)
      break;
    if ((st = nfc_chunk(out, s + start, j - start, &d)) != QVL_OK)
      break;
    flushed = j;
    last_stable = SIZE_MAX;
    i = j;
  }
  free(d.v);
  if (st == QVL_OK)
    st = buf_append(out, s + flushed, len - flushed);
  return st;
}
