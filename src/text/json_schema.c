/* JSON schema -> grammar (see json_schema.h). */
#include "text/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "text/chat.h"

#define SCHEMA_MAX_REFS 256
#define SCHEMA_MAX_NESTING 48

typedef struct compiler {
  grammar *g;
  const cJSON *doc;                  /* the document $ref pointers resolve in */
  const cJSON *ref_schema[SCHEMA_MAX_REFS];
  uint32_t ref_node[SCHEMA_MAX_REFS];
  int n_refs;
  char path[512];                    /* where we are, for error messages */
  int nesting;
  /* The anyOf nodes and $ref placeholders with where they come from, so that a refusal of
   * grammar_finalize names the schema's construct. */
  struct mark {
    uint32_t node;
    char what[300];
  } *marks;
  int n_marks, cap_marks;
} compiler;

/* Remembers what node stands for ("anyOf at '#/x'"); best effort (only error messages use it). */
static void mark(compiler *c, uint32_t node, const char *fmt, const char *a, const char *b) {
  if (c->n_marks == c->cap_marks) {
    int nc = c->cap_marks ? 2 * c->cap_marks : 32;
    struct mark *m = realloc(c->marks, sizeof *m * (size_t)nc);
    if (!m)
      return;
    c->marks = m;
    c->cap_marks = nc;
  }
  c->marks[c->n_marks].node = node;
  snprintf(c->marks[c->n_marks].what, sizeof c->marks[0].what, fmt, a, b);
  c->n_marks++;
}

static const char *marked(const compiler *c, uint32_t node) {
  for (int i = 0; i < c->n_marks; i++)
    if (c->marks[i].node == node)
      return c->marks[i].what;
  return NULL;
}

static const char *const ignored_keys[] = {"description", "title",      "$schema",   "$id",      "$comment",
                                           "examples",    "default",    "deprecated", "readOnly", "writeOnly",
                                           "$defs",       "definitions", "strict"};
static const char *const handled_keys[] = {"type",     "properties", "required", "additionalProperties",
                                           "items",    "minItems",   "maxItems", "enum",
                                           "const",    "anyOf",      "$ref",     "nullable",
                                           "minLength", "maxLength"};

static bool in_list(const char *k, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(k, list[i]))
      return true;
  return false;
}

static qvl_status unsupported(compiler *c, const char *what) {
  return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: %s at '%s' is not supported (supported: type, properties, "
                    "required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
                    "anyOf, $defs, $ref, nullable)", what, c->path[0] ? c->path : "#");
}

static qvl_status invalid(compiler *c, const char *what) {
  return qvl_errorf(QVL_ERR_INVALID_ARG, "json_schema: %s at '%s'", what, c->path[0] ? c->path : "#");
}

/* The literal's JSON text, as the model is expected to write it (Python json.dumps spacing). */
static qvl_status add_json_lit(grammar *g, const cJSON *v, uint32_t *idx) {
  buf b = {0};
  qvl_status s = chat_tojson(v, &b);
  if (s == QVL_OK)
    s = grammar_add_lit(g, b.data ? b.data : "", b.len, idx);
  buf_free(&b);
  return s;
}

static qvl_status compile(compiler *c, const cJSON *sch, uint32_t *out);

/* Compiles sch with path extended by suffix. */
static qvl_status compile_at(compiler *c, const cJSON *sch, const char *suffix, uint32_t *out) {
  size_t len = strlen(c->path);
  snprintf(c->path + len, sizeof c->path - len, "%s", suffix);
  qvl_status s = compile(c, sch, out);
  c->path[len] = 0;
  return s;
}

/* A JSON pointer ("#", "#/$defs/A", with ~0 ~1 escapes) into the document. */
static const cJSON *resolve(const cJSON *doc, const char *ref) {
  if (ref[0] != '#')
    return NULL;
  const cJSON *cur = doc;
  const char *p = ref + 1;
  while (*p) {
    if (*p != '/')
      return NULL;
    p++;
    char tok[256];
    size_t n = 0;
    while (*p && *p != '/') {
      char ch = *p++;
      if (ch == '~') {
        if (*p == '0')
          ch = '~';
        else if (*p == '1')
          ch = '/';
        else
          return NULL;
        p++;
      }
      if (n + 1 >= sizeof tok)
        return NULL;
      tok[n++] = ch;
    }
    tok[n] = 0;
    if (cJSON_IsArray(cur)) {
      char *end;
      long i = strtol(tok, &end, 10);
      if (*end || i < 0)
        return NULL;
      cur = cJSON_GetArrayItem(cur, (int)i);
    } else if (cJSON_IsObject(cur)) {
      cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
    } else {
      return NULL;
    }
    if (!cur)
      return NULL;
  }
  return cur;
}

static qvl_status compile_ref(compiler *c, const char *ref, uint32_t *out) {
  const cJSON *target = resolve(c->doc, ref);
  if (!target) {
    char m[320];
    snprintf(m, sizeof m, "$ref '%.256s' does not resolve in this schema", ref);
    return invalid(c, m);
  }
  for (int i = 0; i < c->n_refs; i++)
    if (c->ref_schema[i] == target) {
      *out = c->ref_node[i];
      return QVL_OK;
    }
  if (c->n_refs >= SCHEMA_MAX_REFS)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "json_schema: more than %d distinct $ref targets", SCHEMA_MAX_REFS);
  /* A placeholder first, so that a recursive reference finds it; it takes the compiled node's
   * value afterwards (an empty anyOf meanwhile, which matches nothing). */
  grammar_node ph = {.kind = GK_ANYOF, .n = 0};
  uint32_t idx, body;
  QVL_TRY(grammar_add_node(c->g, &ph, &idx));
  int slot = c->n_refs++;
  c->ref_schema[slot] = target;
  c->ref_node[slot] = idx;
  mark(c, idx, "$ref '%.120s' at '%.160s'", ref, c->path[0] ? c->path : "#");
  char suffix[300];
  snprintf(suffix, sizeof suffix, "->%.256s", ref);
  QVL_TRY(compile_at(c, target, suffix, &body));
  c->g->nodes[idx] = c->g->nodes[body];
  *out = idx;
  return QVL_OK;
}

static qvl_status compile_object(compiler *c, const cJSON *sch, uint32_t *out) {
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
  const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
  const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
  if (addl && !cJSON_IsBool(addl))
    return unsupported(c, "additionalProperties as a schema");
  if (props && !cJSON_IsObject(props))
    return invalid(c, "'properties' must be an object");
  if (req && !cJSON_IsArray(req))
    return invalid(c, "'required' must be an array of property names");
  if (!props && !cJSON_IsFalse(addl)) {
    if (req && cJSON_GetArraySize(req) > 0)
      return unsupported(c, "'required' without 'properties'");
    *out = GRAMMAR_NODE_ANY_OBJECT;
    return QVL_OK;
  }
  int n = props ? cJSON_GetArraySize(props) : 0;
  if (n > GRAMMAR_MAX_PROPS)
    return unsupported(c, "an object with more than 64 properties");
  uint32_t child[GRAMMAR_MAX_PROPS], keys[GRAMMAR_MAX_PROPS];
  int i = 0;
  for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
    cJSON *k = cJSON_CreateString(p->string);
    if (!k)
      return qvl_errorf(QVL_ERR_NOMEM, "json_schema: out of memory");
    buf b = {0};
    qvl_status s = chat_tojson(k, &b);
    cJSON_Delete(k);
    /* Without the quotes: the key's bytes as they appear between them. */
    if (s == QVL_OK)
      s = grammar_add_lit(c->g, b.data + 1, b.len - 2, &keys[i]);
    buf_free(&b);
    QVL_TRY(s);
    char suffix[300];
    snprintf(suffix, sizeof suffix, "/properties/%.200s", p->string);
    QVL_TRY(compile_at(c, p, suffix, &child[i]));
  }
  uint64_t required = 0;
  for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
    if (!cJSON_IsString(r))
      return invalid(c, "'required' must be an array of property names");
    int j = 0;
    const cJSON *p = props->child;
    for (; p && strcmp(p->string, r->valuestring); p = p->next)
      j++;
    if (!p) {
      char m[300];
      snprintf(m, sizeof m, "required property '%.200s' is not in 'properties'", r->valuestring);
      return invalid(c, m);
    }
    required |= 1ull << j;
  }
  grammar_node nd = {.kind = GK_OBJECT, .n = (uint16_t)n, .required = required};
  for (int j = 0; j < n; j++) {
    uint32_t pi;
    QVL_TRY(grammar_add_prop(c->g, keys[j], child[j], &pi));
    if (j == 0)
      nd.first = pi;
  }
  return grammar_add_node(c->g, &nd, out);
}

static qvl_status get_count(compiler *c, const cJSON *sch, const char *key, uint32_t dflt, uint32_t *v) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(sch, key);
  *v = dflt;
  if (!j)
    return QVL_OK;
  if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble != floor(j->valuedouble) || j->valuedouble > 1e9) {
    char m[100];
    snprintf(m, sizeof m, "'%s' must be a non-negative integer", key);
    return invalid(c, m);
  }
  *v = (uint32_t)j->valuedouble;
  return QVL_OK;
}

static qvl_status compile_type(compiler *c, const cJSON *sch, const char *type, uint32_t *out) {
  if (!strcmp(type, "object"))
    return compile_object(c, sch, out);
  if (!strcmp(type, "array")) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items");
    grammar_node nd = {.kind = GK_ARRAY, .child = GRAMMAR_NODE_ANY};
    QVL_TRY(get_count(c, sch, "minItems", 0, &nd.min_items));
    QVL_TRY(get_count(c, sch, "maxItems", UINT32_MAX, &nd.max_items));
    if (nd.min_items > nd.max_items)
      return invalid(c, "minItems is larger than maxItems");
    if (items) {
      if (cJSON_IsArray(items))
        return unsupported(c, "'items' as an array (tuple)");
      QVL_TRY(compile_at(c, items, "/items", &nd.child));
    }
    return grammar_add_node(c->g, &nd, out);
  }
  if (!strcmp(type, "string")) {
    grammar_node sn = {.kind = GK_STRING};
    QVL_TRY(get_count(c, sch, "minLength", 0, &sn.min_items));
    QVL_TRY(get_count(c, sch, "maxLength", UINT32_MAX, &sn.max_items));
    if (sn.min_items > sn.max_items)
      return invalid(c, "minLength is larger than maxLength");
    if (sn.min_items == 0 && sn.max_items == UINT32_MAX) {
      *out = GRAMMAR_NODE_STRING;
      return QVL_OK;
    }
    return grammar_add_node(c->g, &sn, out);
  }
  if (!strcmp(type, "number")) {
    *out = GRAMMAR_NODE_NUMBER;
    return QVL_OK;
  }
  grammar_node nd = {.kind = GK_INTEGER};
  if (!strcmp(type, "integer"))
    return grammar_add_node(c->g, &nd, out);
  if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
    bool b = type[0] == 'b';
    nd = (grammar_node){.kind = GK_LITERALS, .first = c->g->nodes[GRAMMAR_NODE_TFN].first + (b ? 0 : 2),
                        .n = b ? 2 : 1};
    return grammar_add_node(c->g, &nd, out);
  }
  char m[300];
  snprintf(m, sizeof m, "type '%.200s'", type);
  return unsupported(c, m);
}

static qvl_status add_anyof(compiler *c, const uint32_t *alts, int n, uint32_t *out) {
  grammar_node nd = {.kind = GK_ANYOF, .n = 0};
  for (int i = 0; i < n; i++) {
    /* Flatten nested anyOf, so the automaton splits once. */
    const grammar_node *a = &c->g->nodes[alts[i]];
    if (a->kind == GK_ANYOF && a->n > 0) {
      uint32_t first = a->first, na = a->n;
      for (uint32_t k = 0; k < na; k++) {
        uint32_t ai;
        QVL_TRY(grammar_add_alt(c->g, c->g->alts[first + k], &ai));
        if (nd.n++ == 0)
          nd.first = ai;
      }
      continue;
    }
    uint32_t ai;
    QVL_TRY(grammar_add_alt(c->g, alts[i], &ai));
    if (nd.n++ == 0)
      nd.first = ai;
  }
  return grammar_add_node(c->g, &nd, out);
}

static qvl_status compile_inner(compiler *c, const cJSON *sch, uint32_t *out) {
  if (cJSON_IsTrue(sch)) {
    *out = GRAMMAR_NODE_ANY;
    return QVL_OK;
  }
  if (!cJSON_IsObject(sch))
    return invalid(c, cJSON_IsFalse(sch) ? "the schema false (matches nothing)" : "a schema must be an object");
  for (const cJSON *k = sch->child; k; k = k->next)
    if (!in_list(k->string, ignored_keys, sizeof ignored_keys / sizeof *ignored_keys) &&
        !in_list(k->string, handled_keys, sizeof handled_keys / sizeof *handled_keys)) {
      char m[300];
      snprintf(m, sizeof m, "keyword '%.200s'", k->string);
      return unsupported(c, m);
    }
  const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(sch, "nullable");
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref");
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(sch, "enum");
  const cJSON *cst = cJSON_GetObjectItemCaseSensitive(sch, "const");
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(sch, "anyOf");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(sch, "type");
  if (ref) {
    if (!cJSON_IsString(ref))
      return invalid(c, "'$ref' must be a string");
    /* Keywords next to $ref apply too (2019-09 and later): only nullable is taken; anything else
     * would be silently dropped, so it is refused. */
    for (const cJSON *k = sch->child; k; k = k->next)
      if (strcmp(k->string, "$ref") && strcmp(k->string, "nullable") &&
          !in_list(k->string, ignored_keys, sizeof ignored_keys / sizeof *ignored_keys)) {
        char m[300];
        snprintf(m, sizeof m, "'%.200s' next to '$ref' (put both in an anyOf or inside the referenced schema)",
                 k->string);
        return unsupported(c, m);
      }
    if (!cJSON_IsTrue(nullable))
      return compile_ref(c, ref->valuestring, out);
    uint32_t alts[2];
    QVL_TRY(compile_ref(c, ref->valuestring, &alts[0]));
    grammar_node nn = {.kind = GK_LITERALS, .first = c->g->nodes[GRAMMAR_NODE_TFN].first + 2, .n = 1};
    QVL_TRY(grammar_add_node(c->g, &nn, &alts[1]));
    QVL_TRY(add_anyof(c, alts, 2, out));
    mark(c, *out, "'nullable' with '$ref' at '%s'%s", c->path[0] ? c->path : "#", "");
    return QVL_OK;
  }
  uint32_t node;
  if (en || cst) {
    if (en && cst)
      return unsupported(c, "'enum' together with 'const'");
    if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0))
      return invalid(c, "'enum' must be a non-empty array");
    int n = en ? cJSON_GetArraySize(en) : 1;
    if (n > GRAMMAR_MAX_PROPS)
      return unsupported(c, "an enum with more than 64 values");
    grammar_node nd = {.kind = GK_LITERALS, .n = (uint16_t)n};
    int i = 0;
    for (const cJSON *v = en ? en->child : cst; v && i < n; v = v->next, i++) {
      uint32_t li;
      QVL_TRY(add_json_lit(c->g, v, &li));
      if (i == 0)
        nd.first = li;
    }
    QVL_TRY(grammar_add_node(c->g, &nd, &node));
  } else if (any) {
    if (type)
      return unsupported(c, "'anyOf' together with 'type'");
    if (!cJSON_IsArray(any) || cJSON_GetArraySize(any) == 0 || cJSON_GetArraySize(any) > 16)
      return invalid(c, "'anyOf' must be an array of 1..16 schemas");
    uint32_t alts[16];
    int n = 0;
    for (const cJSON *a = any->child; a; a = a->next, n++) {
      char suffix[32];
      snprintf(suffix, sizeof suffix, "/anyOf/%d", n);
      QVL_TRY(compile_at(c, a, suffix, &alts[n]));
    }
    QVL_TRY(add_anyof(c, alts, n, &node));
    mark(c, node, "anyOf at '%s'%s", c->path[0] ? c->path : "#", "");
  } else if (cJSON_IsString(type)) {
    QVL_TRY(compile_type(c, sch, type->valuestring, &node));
  } else if (cJSON_IsArray(type)) {
    int n = cJSON_GetArraySize(type);
    if (n == 0 || n > 7)
      return invalid(c, "'type' must list 1..7 type names");
    uint32_t alts[7];
    int i = 0;
    for (const cJSON *t = type->child; t; t = t->next, i++) {
      if (!cJSON_IsString(t))
        return invalid(c, "'type' must be a type name or a list of them");
      QVL_TRY(compile_type(c, sch, t->valuestring, &alts[i]));
    }
    QVL_TRY(n == 1 ? (node = alts[0], QVL_OK) : add_anyof(c, alts, n, &node));
  } else if (type) {
    return invalid(c, "'type' must be a type name or a list of them");
  } else if (cJSON_GetObjectItemCaseSensitive(sch, "properties")) {
    QVL_TRY(compile_type(c, sch, "object", &node));
  } else if (cJSON_GetObjectItemCaseSensitive(sch, "items")) {
    QVL_TRY(compile_type(c, sch, "array", &node));
  } else {
    node = GRAMMAR_NODE_ANY;
  }
  if (cJSON_IsTrue(nullable)) {
    uint32_t alts[2] = {node, 0};
    grammar_node nn = {.kind = GK_LITERALS, .first = c->g->nodes[GRAMMAR_NODE_TFN].first + 2, .n = 1};
    QVL_TRY(grammar_add_node(c->g, &nn, &alts[1]));
    QVL_TRY(add_anyof(c, alts, 2, &node));
    mark(c, node, "'nullable' at '%s'%s", c->path[0] ? c->path : "#", "");
  }
  *out = node;
  return QVL_OK;
}

static qvl_status compile(compiler *c, const cJSON *sch, uint32_t *out) {
  if (c->nesting >= SCHEMA_MAX_NESTING)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "json_schema: nested deeper than %d levels at '%s'", SCHEMA_MAX_NESTING,
                      c->path);
  c->nesting++;
  qvl_status s = compile_inner(c, sch, out);
  c->nesting--;
  return s;
}

/* grammar_finalize's refusal, naming the construct. */
static qvl_status finalize(compiler *c) {
  grammar_fault fault;
  uint32_t node;
  qvl_status s = grammar_finalize(c->g, &fault, &node);
  if (s != QVL_ERR_UNSUPPORTED)
    return s;
  const char *what = marked(c, node);
  char where[340];
  if (!what) {
    snprintf(where, sizeof where, "the schema at '%.300s'", c->path[0] ? c->path : "#");
    what = where;
  }
  switch (fault) {
  case GRAMMAR_FAULT_CYCLE:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: %s leads back to itself before any value starts (left "
                      "recursion: no finite value starts with itself); a recursive reference must sit inside an "
                      "object property or an array item", what);
  case GRAMMAR_FAULT_EXPANSION:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: %s stands for more than %d alternatives once nested anyOf, "
                      "type lists and $ref are resolved (the limit is %d)", what, GRAMMAR_MAX_FLAT, GRAMMAR_MAX_FLAT);
  case GRAMMAR_FAULT_EMPTY:
    /* Name the reference cycle that has no way out, when there is one. */
    for (int i = 0; i < c->n_marks; i++)
      if (c->marks[i].node < c->g->n_nodes && c->g->nodes[c->marks[i].node].min_depth == 255 &&
          !strncmp(c->marks[i].what, "$ref", 4)) {
        what = c->marks[i].what;
        break;
      }
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: no finite JSON value matches the schema (%s only ever "
                      "leads back to itself: a value would have to contain itself)", what);
  case GRAMMAR_FAULT_TOO_DEEP:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: every value of the schema nests deeper than the %d levels "
                      "constrained output allows (%s)", GRAMMAR_MAX_DEPTH, what);
  default:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "json_schema: refused (%s)", what);
  }
}

/* The last step of every compile: when s is QVL_OK, root becomes the grammar's root, the grammar is
 * checked (finalize) and handed to *out; otherwise the grammar is freed. The compiler is freed
 * either way; returns the final status. */
static qvl_status finish(compiler *c, qvl_status s, uint32_t root, grammar **out) {
  if (s == QVL_OK) {
    grammar_set_root(c->g, root);
    c->path[0] = 0; /* finalize reports from the top of the schema */
    s = finalize(c);
  }
  if (s == QVL_OK)
    *out = c->g;
  else
    grammar_free(c->g);
  free(c->marks);
  free(c);
  return s;
}

qvl_status json_schema_any_object(grammar **out) { return grammar_init(out); }

qvl_status json_schema_compile(const cJSON *schema, grammar **out) {
  *out = NULL;
  if (!schema)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "json_schema: no schema");
  compiler *c = calloc(1, sizeof *c);
  if (!c)
    return qvl_errorf(QVL_ERR_NOMEM, "json_schema: out of memory");
  qvl_status s = grammar_init(&c->g);
  uint32_t root = 0;
  c->doc = schema;
  if (s == QVL_OK)
    s = compile(c, schema, &root);
  return finish(c, s, root, out);
}

qvl_status json_schema_tool_calls(const cJSON *tools, const char *only_name, bool parallel, grammar **out) {
  *out = NULL;
  if (!cJSON_IsArray(tools))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "tools must be an array");
  compiler *c = calloc(1, sizeof *c);
  if (!c)
    return qvl_errorf(QVL_ERR_NOMEM, "json_schema: out of memory");
  qvl_status s = grammar_init(&c->g);
  uint32_t alts[64];
  int n = 0, ti = 0;
  for (const cJSON *t = tools->child; t && s == QVL_OK; t = t->next, ti++) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsString(name)) {
      s = qvl_errorf(QVL_ERR_INVALID_ARG, "tools[%d].function.name must be a string", ti);
      break;
    }
    if (only_name && strcmp(only_name, name->valuestring))
      continue;
    if (n >= 64) {
      s = qvl_errorf(QVL_ERR_TOO_LARGE, "more than 64 tools");
      break;
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    uint32_t args = GRAMMAR_NODE_ANY_OBJECT, lit = 0, k_name = 0, k_args = 0, p0 = 0, p1 = 0;
    c->doc = params;
    c->n_refs = 0;
    snprintf(c->path, sizeof c->path, "tools[%d].function.parameters", ti);
    if (params && !cJSON_IsNull(params))
      s = compile(c, params, &args);
    cJSON *nm = s == QVL_OK ? cJSON_CreateString(name->valuestring) : NULL;
    if (s == QVL_OK && !nm)
      s = qvl_errorf(QVL_ERR_NOMEM, "json_schema: out of memory");
    if (s == QVL_OK)
      s = add_json_lit(c->g, nm, &lit);
    cJSON_Delete(nm);
    grammar_node lits = {.kind = GK_LITERALS, .first = 0, .n = 1};
    uint32_t name_node = 0;
    lits.first = lit;
    if (s == QVL_OK)
      s = grammar_add_node(c->g, &lits, &name_node);
    if (s == QVL_OK)
      s = grammar_add_lit(c->g, "name", 4, &k_name);
    if (s == QVL_OK)
      s = grammar_add_lit(c->g, "arguments", 9, &k_args);
    if (s == QVL_OK)
      s = grammar_add_prop(c->g, k_name, name_node, &p0);
    if (s == QVL_OK)
      s = grammar_add_prop(c->g, k_args, args, &p1);
    grammar_node obj = {.kind = GK_OBJECT, .n = 2, .first = p0, .required = 3};
    if (s == QVL_OK)
      s = grammar_add_node(c->g, &obj, &alts[n++]);
  }
  if (s == QVL_OK && n == 0)
    s = only_name ? qvl_errorf(QVL_ERR_INVALID_ARG, "tool_choice names '%s', which is not in tools", only_name)
                  : qvl_errorf(QVL_ERR_INVALID_ARG, "tool_choice requires a tool call but 'tools' is empty");
  uint32_t body = 0, pre = 0, suf = 0, wrap = 0;
  if (s == QVL_OK)
    s = n == 1 ? (body = alts[0], QVL_OK) : add_anyof(c, alts, n, &body);
  if (s == QVL_OK)
    s = grammar_add_lit(c->g, "<tool_call>\n", 12, &pre);
  if (s == QVL_OK)
    s = grammar_add_lit(c->g, "\n</tool_call>", 13, &suf);
  grammar_node w = {.kind = GK_WRAP, .first = 0, .child = body, .repeat = parallel};
  if (s == QVL_OK) {
    w.first = pre;
    (void)suf; /* suf == pre + 1: the wrap's two literals */
    s = grammar_add_node(c->g, &w, &wrap);
  }
  return finish(c, s, wrap, out);
}
