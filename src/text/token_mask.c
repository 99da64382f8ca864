/* The vocabulary trie and the allowed-token mask (see token_mask.h). */
#include "text/token_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"
#include "text/unicode.h"

/*
 * A trie in depth-first preorder: node i spells byte[i] below the last node of depth depth[i]-1
 * before it; skip[i] is the first node after its subtree. The walk is then one pass over the
 * arrays: a rejected node jumps to skip[i], its whole subtree unvisited.
 */
typedef struct trie {
  uint8_t *byte;     /* [n] */
  uint16_t *depth;   /* [n] 1 .. max_depth */
  uint32_t *skip;    /* [n] */
  int32_t *tok;      /* [n] first token ending here, -1 if none */
  int32_t *tok_next; /* [n_vocab] next token with the same bytes, -1 */
  uint32_t n;
  uint32_t max_depth;
} trie;

struct token_trie {
  int64_t n_vocab;
  trie all;          /* every text token */
  trie special;      /* tokens that are not plain string bytes */
  uint64_t *plain;   /* [words] tokens made only of plain string bytes */
};

struct token_mask_walker {
  const token_trie *tt;
  grammar_state *st; /* [max_depth + 1] the state after each prefix of the current path */
  token_mask_poll_fn poll;
  void *poll_user;
  uint64_t work, budget; /* of the last mask */
};

typedef struct tok_ref {
  const char *b;
  uint32_t len;
  int32_t id;
} tok_ref;

static int ref_cmp(const void *x, const void *y) {
  const tok_ref *a = x, *b = y;
  uint32_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->b, b->b, n);
  if (c)
    return c;
  if (a->len != b->len)
    return a->len < b->len ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static void trie_free(trie *t) {
  FREE_EACH(t->byte, t->depth, t->skip, t->tok, t->tok_next);
  memset(t, 0, sizeof *t);
}

/* Builds from refs sorted by ref_cmp. */
static qvl_status trie_build(trie *t, const tok_ref *r, size_t n_refs, int64_t n_vocab) {
  size_t total = 0;
  for (size_t i = 0; i < n_refs; i++)
    total += r[i].len;
  t->byte = malloc(total ? total : 1);
  t->depth = malloc(sizeof *t->depth * (total ? total : 1));
  t->skip = malloc(sizeof *t->skip * (total ? total : 1));
  t->tok = malloc(sizeof *t->tok * (total ? total : 1));
  t->tok_next = malloc(sizeof *t->tok_next * (size_t)n_vocab);
  uint32_t *path = malloc(sizeof *path * 65536);
  if (!t->byte || !t->depth || !t->skip || !t->tok || !t->tok_next || !path) {
    free(path);
    trie_free(t);
    return qvl_errorf(QVL_ERR_NOMEM, "token trie: out of memory");
  }
  for (int64_t i = 0; i < n_vocab; i++)
    t->tok_next[i] = -1;
  uint32_t n = 0;
  for (size_t i = 0; i < n_refs; i++) {
    uint32_t lcp = 0;
    if (i > 0) {
      uint32_t m = r[i].len < r[i - 1].len ? r[i].len : r[i - 1].len;
      while (lcp < m && r[i].b[lcp] == r[i - 1].b[lcp])
        lcp++;
    }
    for (uint32_t d = lcp; d < r[i].len; d++) {
      t->byte[n] = (uint8_t)r[i].b[d];
      t->depth[n] = (uint16_t)(d + 1);
      t->tok[n] = -1;
      path[d] = n++;
    }
    uint32_t at = path[r[i].len - 1];
    if (t->tok[at] < 0) {
      t->tok[at] = r[i].id;
    } else { /* the same bytes as an earlier token */
      int32_t k = t->tok[at];
      while (t->tok_next[k] >= 0)
        k = t->tok_next[k];
      t->tok_next[k] = r[i].id;
    }
    if (r[i].len > t->max_depth)
      t->max_depth = r[i].len;
  }
  t->n = n;
  /* skip[i]: the next node at a depth <= depth[i]. */
  uint32_t *stk = path; /* reused: node indices whose skip is pending, depths increasing */
  uint32_t sp = 0;
  for (uint32_t i = 0; i < n; i++) {
    while (sp > 0 && t->depth[stk[sp - 1]] >= t->depth[i])
      t->skip[stk[--sp]] = i;
    stk[sp++] = i;
  }
  while (sp > 0)
    t->skip[stk[--sp]] = n;
  free(path);
  return QVL_OK;
}

/* Printable ASCII other than '"' and '\', or a complete well-formed UTF-8 sequence. */
static bool plain_string_bytes(const unsigned char *s, uint32_t n) {
  uint32_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F || c == '"' || c == '\\')
        return false;
      i++;
      continue;
    }
    size_t m;
    if (utf8_decode(s + i, n - i, &m) == UINT32_MAX)
      return false;
    i += (uint32_t)m;
  }
  return true;
}

qvl_status token_trie_build(const tokenizer *tk, int64_t n_vocab, token_trie **out) {
  *out = NULL;
  int32_t nt = tokenizer_vocab_size(tk);
  if (n_vocab <= 0 || n_vocab > INT32_MAX || nt > n_vocab)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "token trie: %lld logits rows for a vocabulary of %d", (long long)n_vocab,
                      (int)nt);
  token_trie *tt = calloc(1, sizeof *tt);
  tok_ref *all = malloc(sizeof *all * (size_t)(nt > 0 ? nt : 1));
  tok_ref *spec = malloc(sizeof *spec * (size_t)(nt > 0 ? nt : 1));
  int64_t words = (n_vocab + 63) / 64;
  if (tt)
    tt->plain = calloc((size_t)words, sizeof(uint64_t));
  if (!tt || !all || !spec || !tt->plain) {
    free(all);
    free(spec);
    if (tt)
      free(tt->plain);
    free(tt);
    return qvl_errorf(QVL_ERR_NOMEM, "token trie: out of memory");
  }
  tt->n_vocab = n_vocab;
  size_t na = 0, ns = 0;
  for (int32_t id = 0; id < nt; id++) {
    if (tokenizer_is_special(tk, id))
      continue;
    size_t len = 0;
    const char *b = tokenizer_token_bytes(tk, id, &len);
    if (!b || len == 0 || len > 65535)
      continue;
    tok_ref r = {b, (uint32_t)len, id};
    all[na++] = r;
    if (plain_string_bytes((const unsigned char *)b, (uint32_t)len))
      tt->plain[id / 64] |= 1ull << (id % 64);
    else
      spec[ns++] = r;
  }
  qsort(all, na, sizeof *all, ref_cmp);
  qsort(spec, ns, sizeof *spec, ref_cmp);
  qvl_status s = trie_build(&tt->all, all, na, n_vocab);
  if (s == QVL_OK)
    s = trie_build(&tt->special, spec, ns, n_vocab);
  free(all);
  free(spec);
  if (s != QVL_OK) {
    token_trie_free(tt);
    return s;
  }
  *out = tt;
  return QVL_OK;
}

void token_trie_free(token_trie *tt) {
  if (!tt)
    return;
  trie_free(&tt->all);
  trie_free(&tt->special);
  free(tt->plain);
  free(tt);
}

int64_t token_trie_vocab(const token_trie *tt) { return tt->n_vocab; }
int64_t token_mask_words(const token_trie *tt) { return (tt->n_vocab + 63) / 64; }

qvl_status token_mask_walker_init(const token_trie *tt, token_mask_walker **out) {
  *out = NULL;
  token_mask_walker *w = calloc(1, sizeof *w);
  if (!w)
    return qvl_errorf(QVL_ERR_NOMEM, "token mask: out of memory");
  w->tt = tt;
  w->st = malloc(sizeof *w->st * (size_t)(tt->all.max_depth + 1));
  if (!w->st) {
    free(w);
    return qvl_errorf(QVL_ERR_NOMEM, "token mask: out of memory for %u states", tt->all.max_depth + 1);
  }
  *out = w;
  return QVL_OK;
}

void token_mask_walker_free(token_mask_walker *w) {
  if (!w)
    return;
  FREE_EACH(w->st, w);
}

void token_mask_walker_set_poll(token_mask_walker *w, token_mask_poll_fn poll, void *user) {
  w->poll = poll;
  w->poll_user = user;
}

uint64_t token_mask_last_work(const token_mask_walker *w) { return w->work; }
uint64_t token_mask_last_budget(const token_mask_walker *w) { return w->budget; }

/* The allowed tokens of t under st into mask. */
static qvl_status walk(token_mask_walker *w, const trie *t, const grammar *g, const grammar_state *st,
                       uint64_t *mask) {
  grammar_state_copy(&w->st[0], st);
  uint32_t i = 0, n = t->n, polls = TOKEN_MASK_POLL_NODES - 1; /* the first node polls */
  while (i < n) {
    if (w->work > w->budget)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "constrained decoding: one token's mask took more than %llu automaton "
                        "steps (the budget is %d per vocabulary trie node); the schema is too costly",
                        (unsigned long long)w->budget, TOKEN_MASK_WORK_PER_NODE);
    if (++polls == TOKEN_MASK_POLL_NODES) {
      polls = 0;
      if (w->poll && w->poll(w->poll_user))
        return qvl_errorf(QVL_ERR_CANCELLED, "generation cancelled");
    }
    uint32_t d = t->depth[i];
    if (!grammar_advance_counted(g, &w->st[d - 1], t->byte[i], &w->st[d], &w->work)) {
      i = t->skip[i];
      continue;
    }
    for (int32_t k = t->tok[i]; k >= 0; k = t->tok_next[k])
      mask[k / 64] |= 1ull << (k % 64);
    i++;
  }
  return QVL_OK;
}

qvl_status token_mask_fill(token_mask_walker *w, const grammar *g, const grammar_state *st, const int32_t *eos,
                           int n_eos, uint64_t *mask, int64_t *allowed) {
  const token_trie *tt = w->tt;
  int64_t words = token_mask_words(tt);
  *allowed = 0;
  w->work = 0;
  w->budget = 0;
  if (st->n == 0) {
    memset(mask, 0, sizeof *mask * (size_t)words);
    return QVL_OK;
  }
  qvl_status s;
  if (grammar_in_free_string(g, st)) {
    memcpy(mask, tt->plain, sizeof *mask * (size_t)words);
    w->budget = (uint64_t)TOKEN_MASK_WORK_PER_NODE * (tt->special.n + 256);
    s = walk(w, &tt->special, g, st, mask);
  } else {
    memset(mask, 0, sizeof *mask * (size_t)words);
    w->budget = (uint64_t)TOKEN_MASK_WORK_PER_NODE * (tt->all.n + 256);
    s = walk(w, &tt->all, g, st, mask);
  }
  if (s != QVL_OK) {
    memset(mask, 0, sizeof *mask * (size_t)words);
    return s;
  }
  if (grammar_can_end(g, st))
    for (int i = 0; i < n_eos; i++)
      if (eos[i] >= 0 && eos[i] < tt->n_vocab)
        mask[eos[i] / 64] |= 1ull << (eos[i] % 64);
  int64_t count = 0;
  for (int64_t i = 0; i < words; i++)
    count += __builtin_popcountll(mask[i]);
  *allowed = count;
  return QVL_OK;
}

int64_t token_mask_compute(token_mask_walker *w, const grammar *g, const grammar_state *st, const int32_t *eos,
                           int n_eos, uint64_t *mask) {
  int64_t n = 0;
  return token_mask_fill(w, g, st, eos, n_eos, mask, &n) == QVL_OK ? n : 0;
}

void token_mask_apply(const uint64_t *mask, int64_t n_vocab, float *logits) {
  for (int64_t i = 0; i < n_vocab; i += 64) {
    uint64_t m = mask[i / 64];
    if (m == ~0ull)
      continue;
    int64_t end = i + 64 < n_vocab ? i + 64 : n_vocab;
    for (int64_t j = i; j < end; j++)
      if (!(m >> (j - i) & 1))
        logits[j] = -INFINITY;
  }
}
