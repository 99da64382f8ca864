/* The JSON pushdown automaton (see grammar.h). */
#include "text/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"

/* ---- building -------------------------------------------------------------------------------- */

static qvl_status grow(void **p, uint32_t *cap, uint32_t need, size_t elem, uint32_t max, const char *what) {
  if (need <= *cap)
    return QVL_OK;
  if (need > max)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "grammar: more than %u %s", max, what);
  uint32_t nc = *cap ? *cap * 2 : 16;
  while (nc < need)
    nc *= 2;
  void *q = realloc(*p, elem * nc);
  if (!q)
    return qvl_errorf(QVL_ERR_NOMEM, "grammar: out of memory");
  *p = q;
  *cap = nc;
  return QVL_OK;
}

qvl_status grammar_add_node(grammar *g, const grammar_node *n, uint32_t *idx) {
  QVL_TRY(grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes, GRAMMAR_MAX_NODES, "nodes"));
  g->nodes[g->n_nodes] = *n;
  *idx = g->n_nodes++;
  return QVL_OK;
}

qvl_status grammar_add_lit(grammar *g, const char *bytes, size_t len, uint32_t *idx) {
  if (len > 65535)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "grammar: a literal of %zu bytes (at most 65535)", len);
  QVL_TRY(grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof *g->lits, 1u << 16, "literals"));
  if (g->n_pool + len > g->cap_pool) {
    size_t nc = g->cap_pool ? g->cap_pool * 2 : 1024;
    while (nc < g->n_pool + len)
      nc *= 2;
    if (nc > (1u << 24))
      return qvl_errorf(QVL_ERR_TOO_LARGE, "grammar: literals take more than 16 MiB");
    char *q = realloc(g->pool, nc);
    if (!q)
      return qvl_errorf(QVL_ERR_NOMEM, "grammar: out of memory");
    g->pool = q;
    g->cap_pool = nc;
  }
  if (len)
    memcpy(g->pool + g->n_pool, bytes, len);
  g->lits[g->n_lits] = (grammar_lit){(uint32_t)g->n_pool, (uint32_t)len};
  g->n_pool += len;
  *idx = g->n_lits++;
  return QVL_OK;
}

qvl_status grammar_add_prop(grammar *g, uint32_t key_lit, uint32_t node, uint32_t *idx) {
  QVL_TRY(grow((void **)&g->props, &g->cap_props, g->n_props + 1, sizeof *g->props, 1u << 16, "properties"));
  g->props[g->n_props] = (grammar_prop){key_lit, node};
  *idx = g->n_props++;
  return QVL_OK;
}

qvl_status grammar_add_alt(grammar *g, uint32_t node, uint32_t *idx) {
  QVL_TRY(grow((void **)&g->alts, &g->cap_alts, g->n_alts + 1, sizeof *g->alts, 1u << 16, "alternatives"));
  g->alts[g->n_alts] = node;
  *idx = g->n_alts++;
  return QVL_OK;
}

void grammar_set_root(grammar *g, uint32_t node) { g->nodes[GRAMMAR_NODE_ROOT].child = node; }

void grammar_free(grammar *g) {
  if (!g)
    return;
  FREE_EACH(g->nodes, g->props, g->lits, g->alts, g->pool, g);
}

qvl_status grammar_init(grammar **out) {
  *out = NULL;
  grammar *g = calloc(1, sizeof *g);
  if (!g)
    return qvl_errorf(QVL_ERR_NOMEM, "grammar: out of memory");
  uint32_t idx, l;
  qvl_status s = QVL_OK;
  grammar_node n[GRAMMAR_NODE_FIRST_FREE];
  memset(n, 0, sizeof n);
  n[GRAMMAR_NODE_ROOT] = (grammar_node){.kind = GK_ROOT, .child = GRAMMAR_NODE_ANY_OBJECT};
  n[GRAMMAR_NODE_ANY] = (grammar_node){.kind = GK_ANY};
  n[GRAMMAR_NODE_ANY_OBJECT] = (grammar_node){.kind = GK_OBJECT, .any_keys = true};
  n[GRAMMAR_NODE_ANY_ARRAY] =
      (grammar_node){.kind = GK_ARRAY, .child = GRAMMAR_NODE_ANY, .min_items = 0, .max_items = UINT32_MAX};
  n[GRAMMAR_NODE_STRING] = (grammar_node){.kind = GK_STRING, .max_items = UINT32_MAX};
  n[GRAMMAR_NODE_NUMBER] = (grammar_node){.kind = GK_NUMBER};
  n[GRAMMAR_NODE_TFN] = (grammar_node){.kind = GK_LITERALS, .n = 3};
  static const char *const tfn[] = {"true", "false", "null"};
  for (int i = 0; i < 3 && s == QVL_OK; i++) {
    s = grammar_add_lit(g, tfn[i], strlen(tfn[i]), &l);
    if (i == 0)
      n[GRAMMAR_NODE_TFN].first = l;
  }
  for (int i = 0; i < GRAMMAR_NODE_FIRST_FREE && s == QVL_OK; i++)
    s = grammar_add_node(g, &n[i], &idx);
  grammar_fault fault;
  if (s == QVL_OK)
    s = grammar_finalize(g, &fault, &idx);
  if (s != QVL_OK) {
    grammar_free(g);
    return s;
  }
  *out = g;
  return QVL_OK;
}

/* ---- finalizing: flat anyOf, min_depth ---------------------------------------------------------- */

#define DEPTH_INF 255u

/* Appends the flat alternatives of node a (not an anyOf, or an already flat one) to list, without
 * duplicates. false when the list would grow past GRAMMAR_MAX_FLAT. */
static bool add_flat(const grammar *g, uint32_t a, uint32_t *list, uint32_t *n) {
  const grammar_node *an = &g->nodes[a];
  uint32_t k = an->kind == GK_ANYOF ? an->n : 1;
  for (uint32_t j = 0; j < k; j++) {
    uint32_t x = an->kind == GK_ANYOF ? g->alts[an->first + j] : a;
    bool dup = false;
    for (uint32_t i = 0; i < *n && !dup; i++)
      dup = list[i] == x;
    if (dup)
      continue;
    if (*n >= GRAMMAR_MAX_FLAT)
      return false;
    list[(*n)++] = x;
  }
  return true;
}

/* Replaces the literal alternatives of a flat list (enum values, constants, true/false/null) by one
 * node holding all of them, when they fit one: literals sharing a prefix ("1", "15") then stay one
 * stack instead of taking several of the GRAMMAR_MAX_ALT. */
static qvl_status merge_literals(grammar *g, uint32_t *list, uint32_t *m) {
  uint32_t n_nodes = 0, n_lits = 0;
  for (uint32_t i = 0; i < *m; i++)
    if (g->nodes[list[i]].kind == GK_LITERALS) {
      n_nodes++;
      n_lits += g->nodes[list[i]].n;
    }
  if (n_nodes < 2 || n_lits > GRAMMAR_MAX_PROPS)
    return QVL_OK;
  grammar_node merged = {.kind = GK_LITERALS, .n = (uint16_t)n_lits};
  uint32_t k = 0, out = 0, idx;
  for (uint32_t i = 0; i < *m; i++) {
    const grammar_node nd = g->nodes[list[i]];
    if (nd.kind != GK_LITERALS) {
      list[out++] = list[i];
      continue;
    }
    for (uint32_t j = 0; j < nd.n; j++, k++) {
      QVL_TRY(grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof *g->lits, 1u << 16, "literals"));
      g->lits[g->n_lits] = g->lits[nd.first + j]; /* the same pool bytes */
      if (k == 0)
        merged.first = g->n_lits;
      g->n_lits++;
    }
  }
  QVL_TRY(grammar_add_node(g, &merged, &idx));
  list[out++] = idx;
  *m = out;
  return QVL_OK;
}

/* Rewrites every anyOf as the flat list of the non-anyOf nodes it stands for (depth first over the
 * anyOf -> alternative edges, memoised: each anyOf is flattened once). */
static qvl_status flatten(grammar *g, grammar_fault *fault, uint32_t *bad) {
  uint32_t n = g->n_nodes;
  uint8_t *color = calloc(n, 1);
  uint32_t *stk = malloc(sizeof *stk * n), *at = malloc(sizeof *at * n);
  qvl_status s = QVL_OK;
  if (!color || !stk || !at)
    s = qvl_errorf(QVL_ERR_NOMEM, "grammar: out of memory");
  for (uint32_t root = 0; s == QVL_OK && root < n; root++) {
    if (g->nodes[root].kind != GK_ANYOF || color[root])
      continue;
    uint32_t sp = 0;
    stk[sp] = root;
    at[sp++] = 0;
    color[root] = 1;
    while (sp > 0 && s == QVL_OK) {
      uint32_t v = stk[sp - 1];
      grammar_node *nd = &g->nodes[v];
      if (at[sp - 1] < nd->n) {
        uint32_t a = g->alts[nd->first + at[sp - 1]++];
        if (g->nodes[a].kind != GK_ANYOF || color[a] == 2)
          continue;
        if (color[a] == 1) {
          *fault = GRAMMAR_FAULT_CYCLE;
          *bad = a;
          s = QVL_ERR_UNSUPPORTED;
          break;
        }
        color[a] = 1;
        stk[sp] = a;
        at[sp++] = 0;
        continue;
      }
      /* Every alternative of v is flat now: v's list is theirs, merged. */
      uint32_t list[GRAMMAR_MAX_FLAT], m = 0;
      bool ok = true;
      for (uint32_t i = 0; i < nd->n && ok; i++)
        ok = add_flat(g, g->alts[nd->first + i], list, &m);
      if (!ok) {
        *fault = GRAMMAR_FAULT_EXPANSION;
        *bad = v;
        s = QVL_ERR_UNSUPPORTED;
        break;
      }
      s = merge_literals(g, list, &m);
      uint32_t first = 0;
      for (uint32_t i = 0; i < m && s == QVL_OK; i++) {
        uint32_t ai = 0;
        s = grammar_add_alt(g, list[i], &ai);
        if (i == 0)
          first = ai;
      }
      nd = &g->nodes[v];
      nd->first = first;
      nd->n = (uint16_t)m;
      color[v] = 2;
      sp--;
    }
  }
  free(color);
  free(stk);
  free(at);
  return s;
}

static uint32_t node_depth(const grammar *g, const uint32_t *md, uint32_t v) {
  const grammar_node *nd = &g->nodes[v];
  uint32_t d = 0;
  switch (nd->kind) {
  case GK_ROOT:
  case GK_WRAP:
    d = md[nd->child];
    break;
  case GK_ARRAY:
    d = nd->min_items > 0 ? md[nd->child] : 0;
    break;
  case GK_OBJECT:
    for (uint32_t i = 0; !nd->any_keys && i < nd->n; i++)
      if (nd->required >> i & 1 && md[g->props[nd->first + i].node] > d)
        d = md[g->props[nd->first + i].node];
    break;
  case GK_ANYOF: /* replaced by an alternative: no frame of its own */
    d = DEPTH_INF;
    for (uint32_t i = 0; i < nd->n; i++)
      if (md[g->alts[nd->first + i]] < d)
        d = md[g->alts[nd->first + i]];
    return d;
  case GK_LITERALS:
    if (nd->n == 0)
      return DEPTH_INF;
    break;
  default:
    break;
  }
  if (d >= DEPTH_INF)
    return DEPTH_INF;
  /* A container opens only below GRAMMAR_MAX_DEPTH - 1 (run): as if it needed two more frames. */
  if ((nd->kind == GK_OBJECT || nd->kind == GK_ARRAY) && d < 2)
    d = 2;
  return d + 1;
}

qvl_status grammar_finalize(grammar *g, grammar_fault *fault, uint32_t *node) {
  *fault = GRAMMAR_FAULT_NONE;
  *node = 0;
  QVL_TRY(flatten(g, fault, node));
  uint32_t n = g->n_nodes;
  uint32_t *md = malloc(sizeof *md * n);
  if (!md)
    return qvl_errorf(QVL_ERR_NOMEM, "grammar: out of memory");
  for (uint32_t i = 0; i < n; i++)
    md[i] = DEPTH_INF;
  /* The least fixed point from above: values only fall, each pass settles at least one more node
   * of a dependency chain, so n + 1 passes always suffice (a few in practice). */
  bool changed = true;
  for (uint32_t pass = 0; changed && pass <= n; pass++) {
    changed = false;
    for (uint32_t i = n; i-- > 0;) {
      uint32_t d = node_depth(g, md, i);
      if (d < md[i]) {
        md[i] = d;
        changed = true;
      }
    }
  }
  for (uint32_t i = 0; i < n; i++)
    g->nodes[i].min_depth = (uint8_t)md[i];
  uint32_t root = md[GRAMMAR_NODE_ROOT];
  free(md);
  if (root >= DEPTH_INF || root > GRAMMAR_MAX_DEPTH) {
    *fault = root >= DEPTH_INF ? GRAMMAR_FAULT_EMPTY : GRAMMAR_FAULT_TOO_DEEP;
    *node = g->nodes[GRAMMAR_NODE_ROOT].child;
    return QVL_ERR_UNSUPPORTED;
  }
  return QVL_OK;
}

/* ---- running --------------------------------------------------------------------------------- */

enum { R_REJECT, R_OK, R_DONE, R_POP, R_PUSH };

static inline bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static inline bool is_digit(int c) { return c >= '0' && c <= '9'; }
static inline uint64_t low_bits(unsigned n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

static inline const char *lit_bytes(const grammar *g, uint32_t l, uint32_t *len) {
  *len = g->lits[l].len;
  return g->pool + g->lits[l].off;
}

/* Whitespace where JSON allows it: one space, or one newline and a short indent. -1: not
 * whitespace (the run ends). */
static inline int take_ws(grammar_frame *f, int c) {
  if (!is_ws(c)) {
    f->ws = 0;
    return -1;
  }
  if (f->ws == 0 && (c == ' ' || c == '\n')) {
    f->ws = c == ' ' ? 1 : 2;
    return R_OK;
  }
  if (f->ws >= 2 && (c == ' ' || c == '\t') && f->ws < 2 + GRAMMAR_MAX_INDENT) {
    f->ws++;
    return R_OK;
  }
  return R_REJECT;
}

/* A phase that takes exactly the byte want and moves on to phase next. */
static inline int expect_byte(grammar_frame *f, int c, int want, uint8_t next) {
  if (c != want)
    return R_REJECT;
  f->phase = next;
  return R_OK;
}

/* Whether a frame of node pushed to make the stack depth frames deep can still be completed under
 * the depth cap. */
static inline bool fits(const grammar *g, uint32_t depth, uint32_t node) {
  return depth - 1 + g->nodes[node].min_depth <= GRAMMAR_MAX_DEPTH;
}

/* The properties of an object (frame at depth) not given yet whose values fit below it. */
static uint64_t open_props(const grammar *g, const grammar_node *nd, const grammar_frame *f, uint32_t depth) {
  uint64_t m = low_bits(nd->n) & ~f->seen, keep = 0;
  for (uint64_t b = m; b; b &= b - 1) {
    unsigned i = (unsigned)__builtin_ctzll(b);
    if (fits(g, depth + 1, g->props[nd->first + i].node))
      keep |= 1ull << i;
  }
  return keep;
}

/* A '"' opening a key of a schema object: candidates are the properties not yet given. */
static int open_key(const grammar *g, const grammar_node *nd, grammar_frame *f, uint32_t depth, uint32_t *child) {
  if (nd->any_keys) {
    if (depth + 1 > GRAMMAR_MAX_DEPTH)
      return R_REJECT;
    f->phase = 3;
    *child = GRAMMAR_NODE_STRING;
    return R_PUSH;
  }
  uint64_t m = open_props(g, nd, f, depth);
  if (!m)
    return R_REJECT;
  f->mask = m;
  f->pos = 0;
  f->phase = 2;
  return R_OK;
}

static int step_object(const grammar *g, const grammar_node *nd, grammar_frame *f, uint32_t depth, int c,
                       uint32_t *child) {
  int w;
  switch (f->phase) {
  case 0:
    return expect_byte(f, c, '{', 1);
  case 1:
  case 6:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    if (c == '"')
      return open_key(g, nd, f, depth, child);
    if (c == '}' && f->phase == 1)
      return (nd->required & ~f->seen) ? R_REJECT : R_DONE;
    return R_REJECT;
  case 2: { /* inside a key: narrow the candidates byte by byte */
    if (c == GRAMMAR_END)
      return R_REJECT;
    uint64_t m = f->mask, keep = 0;
    for (uint64_t b = m; b; b &= b - 1) {
      unsigned i = (unsigned)__builtin_ctzll(b);
      uint32_t len;
      const char *k = lit_bytes(g, g->props[nd->first + i].key, &len);
      if (c == '"' && len == f->pos) {
        f->seen |= 1ull << i;
        f->cur = i;
        f->phase = 3;
        return R_OK;
      }
      if (len > f->pos && (unsigned char)k[f->pos] == c)
        keep |= 1ull << i;
    }
    if (!keep || f->pos == 65535)
      return R_REJECT;
    f->mask = keep;
    f->pos++;
    return R_OK;
  }
  case 3:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    return expect_byte(f, c, ':', 4);
  case 4:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    if (c == GRAMMAR_END)
      return R_REJECT;
    f->phase = 5;
    *child = nd->any_keys ? GRAMMAR_NODE_ANY : g->props[nd->first + f->cur].node;
    return R_PUSH;
  case 5:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    if (c == ',') {
      /* Only when another property can follow (and fits under the depth cap). */
      if (nd->any_keys ? depth + 1 > GRAMMAR_MAX_DEPTH : !open_props(g, nd, f, depth))
        return R_REJECT;
      f->phase = 6;
      return R_OK;
    }
    if (c == '}')
      return (nd->required & ~f->seen) ? R_REJECT : R_DONE;
    return R_REJECT;
  }
  return R_REJECT;
}

static int step_array(const grammar *g, const grammar_node *nd, grammar_frame *f, uint32_t depth, int c,
                      uint32_t *child) {
  int w;
  switch (f->phase) {
  case 0:
    return expect_byte(f, c, '[', 1);
  case 1:
  case 3:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    if (c == ']' && f->phase == 1)
      return nd->min_items == 0 ? R_DONE : R_REJECT;
    if (c == GRAMMAR_END || c == ']' || c == ',')
      return R_REJECT;
    if ((f->phase == 1 && nd->max_items == 0) || !fits(g, depth + 1, nd->child))
      return R_REJECT;
    if (f->pos < 65535)
      f->pos++;
    f->phase = 2;
    *child = nd->child;
    return R_PUSH;
  case 2:
    if ((w = take_ws(f, c)) >= 0)
      return w;
    if (c == ',') {
      if (f->pos >= nd->max_items || !fits(g, depth + 1, nd->child))
        return R_REJECT;
      f->phase = 3;
      return R_OK;
    }
    if (c == ']')
      return f->pos >= nd->min_items ? R_DONE : R_REJECT;
    return R_REJECT;
  }
  return R_REJECT;
}

static int step_string(const grammar_node *nd, grammar_frame *f, int c) {
  switch (f->phase) {
  case 0:
    return expect_byte(f, c, '"', 1);
  case 1:
    if (c == '"')
      return f->cur >= nd->min_items ? R_DONE : R_REJECT;
    if (c < 0x20 || c == GRAMMAR_END || c == 0x7F || f->cur >= nd->max_items)
      return R_REJECT;
    /* A character starts here (an escape or a UTF-8 lead byte). One above U+FFFF counts twice:
     * JavaScript (zod's .max(), JSON.parse + length) counts UTF-16 units, and a string within the
     * limit in UTF-16 is within it in code points too. */
    if (c >= 0xF0 && f->cur + 2 > nd->max_items)
      return R_REJECT;
    f->cur += c >= 0xF0 ? 2 : 1;
    if (c == '\\') {
      f->phase = 2;
      return R_OK;
    }
    if (c < 0x80)
      return R_OK;
    /* UTF-8 lead byte: how many continuation bytes, and the range of the first (no overlongs,
     * no surrogates, nothing above U+10FFFF). */
    f->lo = 0x80;
    f->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
      f->pos = 1;
    else if (c == 0xE0)
      f->pos = 2, f->lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      f->pos = 2;
    else if (c == 0xED)
      f->pos = 2, f->hi = 0x9F;
    else if (c == 0xF0)
      f->pos = 3, f->lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
      f->pos = 3;
    else if (c == 0xF4)
      f->pos = 3, f->hi = 0x8F;
    else
      return R_REJECT;
    f->phase = 3;
    return R_OK;
  case 2:
    if (c == 'u') {
      f->phase = 4;
      f->pos = 4;
      return R_OK;
    }
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
      f->phase = 1;
      return R_OK;
    }
    return R_REJECT;
  case 3:
    if (c < f->lo || c > f->hi)
      return R_REJECT;
    f->lo = 0x80;
    f->hi = 0xBF;
    if (--f->pos == 0)
      f->phase = 1;
    return R_OK;
  case 4:
    if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
      return R_REJECT;
    /* No surrogate escapes (\uD800-\uDFFF): a lone one is refused by strict parsers, and a pair
     * can always be written as the UTF-8 character itself. */
    if (f->pos == 4)
      f->lo = (c == 'd' || c == 'D');
    else if (f->pos == 3 && f->lo && !(c >= '0' && c <= '7'))
      return R_REJECT;
    if (--f->pos == 0)
      f->phase = 1;
    return R_OK;
  }
  return R_REJECT;
}

/* Phases: 0 start, 1 after '-', 2 after a leading 0, 3 integer digits, 4 after '.', 5 fraction,
 * 6 after 'e', 7 after the exponent sign, 8 exponent digits. */
static int step_number(grammar_frame *f, int c, bool integer) {
  int next = -1;
  bool can_end = false;
  switch (f->phase) {
  case 0:
    next = c == '-' ? 1 : c == '0' ? 2 : (c >= '1' && c <= '9') ? 3 : -1;
    break;
  case 1:
    next = c == '0' ? 2 : (c >= '1' && c <= '9') ? 3 : -1;
    break;
  case 2:
  case 3:
    can_end = true;
    if (f->phase == 3 && is_digit(c))
      next = 3;
    else if (!integer && c == '.')
      next = 4;
    else if (!integer && (c == 'e' || c == 'E'))
      next = 6;
    break;
  case 4:
    next = is_digit(c) ? 5 : -1;
    break;
  case 5:
    can_end = true;
    next = is_digit(c) ? 5 : (c == 'e' || c == 'E') ? 6 : -1;
    break;
  case 6:
    next = (c == '+' || c == '-') ? 7 : is_digit(c) ? 8 : -1;
    break;
  case 7:
    next = is_digit(c) ? 8 : -1;
    break;
  case 8:
    can_end = true;
    next = is_digit(c) ? 8 : -1;
    break;
  }
  if (next >= 0) {
    /* Room for this byte, and for one more after it when the number cannot end there ("-", "1.",
     * "1e", "1e+"): a number at the cap is always complete. */
    bool final = next == 2 || next == 3 || next == 5 || next == 8;
    if (f->pos + (final ? 1 : 2) > GRAMMAR_MAX_NUMBER)
      return can_end ? R_POP : R_REJECT;
    f->pos++;
    f->phase = (uint8_t)next;
    return R_OK;
  }
  return can_end ? R_POP : R_REJECT;
}

static int step_literals(const grammar *g, const grammar_node *nd, grammar_frame *f, int c) {
  if (f->phase == 0) {
    f->phase = 1;
    f->mask = low_bits(nd->n);
    f->pos = 0;
  }
  uint64_t keep = 0;
  bool complete = false;
  for (uint64_t b = f->mask; b; b &= b - 1) {
    unsigned i = (unsigned)__builtin_ctzll(b);
    uint32_t len;
    const char *s = lit_bytes(g, nd->first + i, &len);
    if (len == f->pos)
      complete = true;
    else if (c != GRAMMAR_END && (unsigned char)s[f->pos] == c)
      keep |= 1ull << i;
  }
  if (keep) {
    f->mask = keep;
    f->pos++;
    return R_OK;
  }
  return complete ? R_POP : R_REJECT;
}

static int step_wrap(const grammar *g, const grammar_node *nd, grammar_frame *f, int c, uint32_t *child) {
  uint32_t len;
  const char *s;
  switch (f->phase) {
  case 0:
  case 2:
    s = lit_bytes(g, nd->first + (f->phase == 2), &len);
    if (f->pos >= len || c != (unsigned char)s[f->pos])
      return R_REJECT;
    if (++f->pos == len) {
      f->phase++;
      f->pos = 0;
    }
    return R_OK;
  case 1:
    f->phase = 2;
    f->pos = 0;
    *child = nd->child;
    return R_PUSH;
  case 3:
    if (c == GRAMMAR_END)
      return R_POP;
    if (nd->repeat && c == '\n') {
      f->phase = 0;
      f->pos = 0;
      return R_OK;
    }
    return R_REJECT;
  }
  return R_REJECT;
}

static int step_root(grammar_frame *f, int c, uint32_t root_child, uint32_t *child) {
  if (f->phase == 0) {
    /* No whitespace before the value: it would only cost tokens (and show as content before a
     * tool call). */
    if (c == GRAMMAR_END)
      return R_REJECT;
    f->phase = 1;
    *child = root_child;
    return R_PUSH;
  }
  return c == GRAMMAR_END ? R_OK : R_REJECT;
}

static inline void stack_copy(grammar_stack *d, const grammar_stack *s) {
  d->depth = s->depth;
  memcpy(d->f, s->f, sizeof s->f[0] * s->depth);
}

static void emit(grammar_state *out, const grammar_stack *s) {
  for (uint32_t i = 0; i < out->n; i++)
    if (out->s[i].depth == s->depth && !memcmp(out->s[i].f, s->f, sizeof s->f[0] * s->depth))
      return;
  if (out->n < GRAMMAR_MAX_ALT)
    stack_copy(&out->s[out->n++], s);
}

static inline void push_frame(grammar_stack *s, uint32_t node) {
  grammar_frame *f = &s->f[s->depth++];
  memset(f, 0, sizeof *f);
  f->node = (uint16_t)node;
}

/* Whether a fresh frame of node (not an anyOf: they are flattened) may take c as its first byte;
 * lets an anyOf skip the alternatives that reject c without copying a stack for each. */
static bool may_start(const grammar *g, uint32_t node, int c) {
  const grammar_node *nd = &g->nodes[node];
  switch (nd->kind) {
  case GK_OBJECT:
    return c == '{';
  case GK_ARRAY:
    return c == '[';
  case GK_STRING:
    return c == '"';
  case GK_NUMBER:
  case GK_INTEGER:
    return c == '-' || is_digit(c);
  case GK_ANY:
    return c == '{' || c == '[' || c == '"' || c == '-' || is_digit(c) || c == 't' || c == 'f' || c == 'n';
  case GK_LITERALS:
    for (uint32_t i = 0; i < nd->n; i++) {
      uint32_t len;
      const char *b = lit_bytes(g, nd->first + i, &len);
      if (len && (unsigned char)b[0] == c)
        return true;
    }
    return false;
  default:
    return true;
  }
}

/* Feeds c to the stack w (modified); every resulting stack goes to out. Every loop turn and every
 * alternative looked at adds one to *work. The walk never recurses: an anyOf's alternatives are
 * flat (grammar_finalize), each starts a fresh frame that consumes c or rejects it. */
static void run(const grammar *g, grammar_stack *w, int c, grammar_state *out, uint64_t *work) {
  for (;;) {
    ++*work;
    if (w->depth == 0 || out->n >= GRAMMAR_MAX_ALT)
      return; /* out full: whatever else this yields would be dropped */
    grammar_frame *f = &w->f[w->depth - 1];
    const grammar_node *nd = &g->nodes[f->node];
    uint32_t child = 0;
    int r = R_REJECT;
    switch (nd->kind) {
    case GK_ANYOF: {
      uint32_t d = w->depth, last = UINT32_MAX;
      /* The one alternative that takes c goes on in w itself (no copy); when several do, each but
       * the last runs on a copy. */
      for (uint32_t i = 0; i < nd->n; i++) {
        uint32_t a = g->alts[nd->first + i];
        ++*work;
        if (!may_start(g, a, c) || !fits(g, d, a))
          continue;
        if (last != UINT32_MAX) {
          grammar_stack alt;
          stack_copy(&alt, w);
          alt.depth--;
          push_frame(&alt, last);
          run(g, &alt, c, out, work);
        }
        last = a;
      }
      if (last == UINT32_MAX)
        return;
      w->depth--;
      push_frame(w, last);
      continue;
    }
    case GK_ANY: {
      uint32_t to;
      if (c == '{')
        to = GRAMMAR_NODE_ANY_OBJECT;
      else if (c == '[')
        to = GRAMMAR_NODE_ANY_ARRAY;
      else if (c == '"')
        to = GRAMMAR_NODE_STRING;
      else if (c == '-' || is_digit(c))
        to = GRAMMAR_NODE_NUMBER;
      else if (c == 't' || c == 'f' || c == 'n')
        to = GRAMMAR_NODE_TFN;
      else
        return;
      w->depth--;
      push_frame(w, to);
      continue;
    }
    case GK_ROOT:
      r = step_root(f, c, nd->child, &child);
      break;
    case GK_OBJECT:
    case GK_ARRAY:
      /* Near the depth cap no container opens, so that whatever is open can still close. */
      if (f->phase == 0 && w->depth >= GRAMMAR_MAX_DEPTH - 1)
        return;
      r = nd->kind == GK_OBJECT ? step_object(g, nd, f, w->depth, c, &child)
                                : step_array(g, nd, f, w->depth, c, &child);
      break;
    case GK_STRING:
      r = step_string(nd, f, c);
      break;
    case GK_NUMBER:
    case GK_INTEGER:
      r = step_number(f, c, nd->kind == GK_INTEGER);
      break;
    case GK_LITERALS:
      r = step_literals(g, nd, f, c);
      break;
    case GK_WRAP:
      r = step_wrap(g, nd, f, c, &child);
      break;
    }
    switch (r) {
    case R_REJECT:
      return;
    case R_OK:
      emit(out, w);
      return;
    case R_DONE:
      w->depth--;
      if (w->depth > 0)
        emit(out, w);
      return;
    case R_POP:
      w->depth--;
      continue;
    case R_PUSH:
      if (w->depth >= GRAMMAR_MAX_DEPTH || !fits(g, w->depth + 1, child))
        return;
      push_frame(w, child);
      continue;
    }
  }
}

void grammar_start(const grammar *g, grammar_state *st) {
  (void)g;
  st->n = 1;
  st->s[0].depth = 0;
  push_frame(&st->s[0], GRAMMAR_NODE_ROOT);
}

void grammar_state_copy(grammar_state *dst, const grammar_state *src) {
  dst->n = src->n;
  for (uint32_t i = 0; i < src->n; i++)
    stack_copy(&dst->s[i], &src->s[i]);
}

/* dst = src advanced by c (dst != src). */
static bool advance(const grammar *g, const grammar_state *src, int c, grammar_state *dst, uint64_t *work) {
  dst->n = 0;
  for (uint32_t i = 0; i < src->n && dst->n < GRAMMAR_MAX_ALT; i++) {
    grammar_stack w;
    stack_copy(&w, &src->s[i]);
    run(g, &w, c, dst, work);
  }
  return dst->n > 0;
}

bool grammar_step(const grammar *g, grammar_state *st, int c) {
  grammar_state tmp;
  uint64_t work = 0;
  bool ok = advance(g, st, c, &tmp, &work);
  grammar_state_copy(st, &tmp);
  return ok;
}

bool grammar_advance(const grammar *g, const grammar_state *src, int c, grammar_state *dst) {
  uint64_t work = 0;
  return advance(g, src, c, dst, &work);
}

bool grammar_advance_counted(const grammar *g, const grammar_state *src, int c, grammar_state *dst, uint64_t *work) {
  return advance(g, src, c, dst, work);
}

bool grammar_feed(const grammar *g, grammar_state *st, const void *bytes, size_t n) {
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++)
    if (!grammar_step(g, st, b[i]))
      return false;
  return true;
}

bool grammar_can_end(const grammar *g, const grammar_state *st) {
  grammar_state tmp;
  uint64_t work = 0;
  return advance(g, st, GRAMMAR_END, &tmp, &work);
}

bool grammar_in_free_string(const grammar *g, const grammar_state *st) {
  if (st->n == 0)
    return false;
  for (uint32_t i = 0; i < st->n; i++) {
    const grammar_stack *s = &st->s[i];
    const grammar_frame *f = &s->f[s->depth - 1];
    const grammar_node *nd = &g->nodes[f->node];
    if (nd->kind != GK_STRING || f->phase != 1 || nd->max_items != UINT32_MAX)
      return false;
  }
  return true;
}
