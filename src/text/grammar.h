/*
 * A byte-level pushdown automaton for JSON output: generic JSON (response_format json_object) or
 * the language of one JSON schema (json_schema.c compiles it into the node table here), optionally
 * wrapped in literal text (tool calls: "<tool_call>\n" value "\n</tool_call>").
 *
 * The automaton is a table of nodes (immutable after compile, shared by every request that uses
 * it) and a state (grammar_state: a few alternative stacks of small frames, copied by value) that
 * bytes advance one at a time. anyOf splits a stack into one per alternative; stacks that reject a
 * byte die; identical stacks merge. The output is accepted (EOS allowed) when feeding the end
 * symbol leaves a live stack.
 *
 * Caps that keep a model from looping forever inside the grammar: whitespace between two tokens is
 * one space, or one newline and at most GRAMMAR_MAX_INDENT spaces or tabs (so pretty-printed JSON
 * is fine, runs of blank lines are not); GRAMMAR_MAX_NUMBER bytes per number, GRAMMAR_MAX_DEPTH
 * nested frames (deeper objects and arrays are refused, so a recursive schema must end), at most
 * GRAMMAR_MAX_ALT live alternatives (beyond that later alternatives are dropped: the language only
 * narrows).
 *
 * Bounded work (grammar_finalize, run once a grammar is built): anyOf alternatives are flattened
 * to at most GRAMMAR_MAX_FLAT nodes that each consume a byte before anything else (an anyOf that
 * reaches itself without consuming one, left recursion, is refused), and every node knows the
 * fewest frames a value of it needs (min_depth; a schema with no finite value is refused). One
 * byte then costs at most GRAMMAR_MAX_ALT stacks x GRAMMAR_MAX_FLAT alternatives x the depth, never
 * an exponential walk, and no live stack is a dead end: a frame is only pushed when a value of its
 * node fits under the depth cap, so every byte the automaton accepts can be completed.
 *
 * Thread safety: a compiled grammar is read-only and may be shared; a state belongs to one thread.
 */
#ifndef QVL_TEXT_GRAMMAR_H
#define QVL_TEXT_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

#define GRAMMAR_MAX_DEPTH 32
#define GRAMMAR_MAX_ALT 4
#define GRAMMAR_MAX_INDENT 20 /* spaces or tabs after a newline between tokens */
#define GRAMMAR_MAX_FLAT 64   /* alternatives of one anyOf once flattened */
#define GRAMMAR_MAX_NUMBER 24
#define GRAMMAR_MAX_NODES 4096
#define GRAMMAR_MAX_PROPS 64  /* properties per object, values per enum (one 64-bit mask) */
#define GRAMMAR_END 256       /* the end-of-output symbol fed to grammar_step */
/* Automaton steps one byte may take at most (grammar_advance_counted), whatever the schema: each
 * live stack pops and pushes at most its depth and looks at each flat alternative a few times. */
#define GRAMMAR_STEP_WORK_MAX (GRAMMAR_MAX_ALT * (4 * GRAMMAR_MAX_DEPTH + 4 * GRAMMAR_MAX_FLAT))

typedef enum grammar_kind {
  GK_ROOT,      /* child: the value; then only the end */
  GK_ANY,       /* any JSON value */
  GK_OBJECT,    /* props[first .. first+n), required mask; any_keys: free keys with ANY values */
  GK_ARRAY,     /* child: items; min/max items */
  GK_STRING,    /* a string of min_items .. max_items characters (code points; an escape is one) */
  GK_NUMBER,
  GK_INTEGER,
  GK_LITERALS,  /* one of lits[first .. first+n) (enum, const, true/false, null) */
  GK_ANYOF,     /* one of alts[first .. first+n) */
  GK_WRAP,      /* lits[first] child lits[first+1]; repeat: again after "\n" (parallel tool calls) */
} grammar_kind;

typedef struct grammar_node {
  uint8_t kind;
  bool any_keys;     /* GK_OBJECT: keys are free strings and values any JSON */
  bool repeat;       /* GK_WRAP */
  uint8_t min_depth; /* frames a value of this node needs, its own included (grammar_finalize) */
  uint16_t n;
  uint32_t first;
  uint32_t child;    /* GK_ROOT, GK_ARRAY, GK_WRAP */
  uint32_t min_items, max_items;
  uint64_t required; /* GK_OBJECT: bit i = props[first + i] */
} grammar_node;

typedef struct grammar_lit {
  uint32_t off, len; /* bytes in the pool */
} grammar_lit;

typedef struct grammar_prop {
  uint32_t key;      /* lits[]: the key as JSON-escaped bytes, without quotes */
  uint32_t node;
} grammar_prop;

typedef struct grammar {
  grammar_node *nodes;
  uint32_t n_nodes, cap_nodes;
  grammar_prop *props;
  uint32_t n_props, cap_props;
  grammar_lit *lits;
  uint32_t n_lits, cap_lits;
  uint32_t *alts;
  uint32_t n_alts, cap_alts;
  char *pool;
  size_t n_pool, cap_pool;
} grammar;

/* Nodes every grammar has, at these indices. */
enum { GRAMMAR_NODE_ROOT = 0, GRAMMAR_NODE_ANY, GRAMMAR_NODE_ANY_OBJECT, GRAMMAR_NODE_ANY_ARRAY,
       GRAMMAR_NODE_STRING, GRAMMAR_NODE_NUMBER, GRAMMAR_NODE_TFN, GRAMMAR_NODE_FIRST_FREE };

typedef struct grammar_frame {
  uint16_t node;
  uint8_t phase;
  uint8_t ws;        /* whitespace so far: 0 none, 1 a space, 2 + k a newline and k indent bytes */
  uint16_t pos;      /* key / literal byte index, number length, UTF-8 bytes pending, item count */
  uint8_t lo, hi;    /* next UTF-8 continuation byte range */
  uint32_t cur;      /* object: property of the current value; string: characters so far */
  uint32_t pad;
  uint64_t mask;     /* candidate keys or literals */
  uint64_t seen;     /* object: properties already given */
} grammar_frame;

typedef struct grammar_stack {
  uint32_t depth;
  grammar_frame f[GRAMMAR_MAX_DEPTH];
} grammar_stack;

typedef struct grammar_state {
  uint32_t n;        /* live stacks; 0 = dead */
  grammar_stack s[GRAMMAR_MAX_ALT];
} grammar_state;

/* A grammar with only the base nodes; root = GRAMMAR_NODE_ANY_OBJECT (json_object); finalized. */
qvl_status grammar_init(grammar **out);

/* What grammar_finalize refused, and the node that shows it. */
typedef enum grammar_fault {
  GRAMMAR_FAULT_NONE,
  GRAMMAR_FAULT_CYCLE,     /* an anyOf reaches itself without consuming a byte (left recursion) */
  GRAMMAR_FAULT_EXPANSION, /* an anyOf flattens to more than GRAMMAR_MAX_FLAT alternatives */
  GRAMMAR_FAULT_EMPTY,     /* the root has no finite value */
  GRAMMAR_FAULT_TOO_DEEP,  /* every value of the root nests deeper than GRAMMAR_MAX_DEPTH */
} grammar_fault;

/* Flattens anyOf nodes, computes min_depth, checks the root can produce a value. Call once after
 * the last builder call (and grammar_set_root). QVL_ERR_UNSUPPORTED with *fault and *node (the
 * anyOf on the cycle or too wide; for EMPTY and TOO_DEEP the root's child) when refused. */
qvl_status grammar_finalize(grammar *g, grammar_fault *fault, uint32_t *node);
void grammar_free(grammar *g);

/* Builders (json_schema.c). Each returns the new index or fails with QVL_ERR_TOO_LARGE. */
qvl_status grammar_add_node(grammar *g, const grammar_node *n, uint32_t *idx);
qvl_status grammar_add_lit(grammar *g, const char *bytes, size_t len, uint32_t *idx);
qvl_status grammar_add_prop(grammar *g, uint32_t key_lit, uint32_t node, uint32_t *idx);
qvl_status grammar_add_alt(grammar *g, uint32_t node, uint32_t *idx);
/* Sets what the root holds. */
void grammar_set_root(grammar *g, uint32_t node);

/* The state before any output. */
void grammar_start(const grammar *g, grammar_state *st);
/* Copies only the live part of src (the walk of the token trie copies states a lot). */
void grammar_state_copy(grammar_state *dst, const grammar_state *src);
/* Feeds one byte (0..255) or GRAMMAR_END; false when no stack survives (st is then dead). */
bool grammar_step(const grammar *g, grammar_state *st, int c);
/* dst = src advanced by c (dst must not be src); false when dst is dead. */
bool grammar_advance(const grammar *g, const grammar_state *src, int c, grammar_state *dst);
/* The same, adding the automaton steps it took to *work (the mask's work budget counts them). */
bool grammar_advance_counted(const grammar *g, const grammar_state *src, int c, grammar_state *dst, uint64_t *work);
/* Feeds bytes; false on the first rejected byte. */
bool grammar_feed(const grammar *g, grammar_state *st, const void *bytes, size_t n);
/* Whether the output may end here (the end symbol would be accepted). */
bool grammar_can_end(const grammar *g, const grammar_state *st);
/* Whether every live stack is inside the body of a free string, with no escape or UTF-8 sequence
 * pending: then any token made of plain string bytes is allowed and leaves that true. */
bool grammar_in_free_string(const grammar *g, const grammar_state *st);

#endif
