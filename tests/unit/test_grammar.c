/* The JSON automaton, the schema compiler and the token masker: hand-written schemas, byte
 * sequences that must be accepted or refused, random walks that must always parse and validate,
 * and the mask against a brute-force check over the real Qwen3 vocabulary. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "test.h"
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"

static grammar *compile_str(const char *json) {
  cJSON *j = cJSON_Parse(json);
  CHECK(j != NULL, "schema JSON parses: %s", json);
  grammar *g = NULL;
  qvl_status s = json_schema_compile(j, &g);
  CHECK(s == QVL_OK, "compile %s: %s", json, qvl_last_error());
  cJSON_Delete(j);
  return g;
}

/* Whole text accepted, and the output may end right after it. */
static bool accepts(const grammar *g, const char *text) {
  grammar_state st;
  grammar_start(g, &st);
  return grammar_feed(g, &st, text, strlen(text)) && grammar_can_end(g, &st);
}

/* ---- a validator for the subset, independent of the compiler ---- */

static const cJSON *resolve_ref(const cJSON *doc, const char *ref) {
  if (!strcmp(ref, "#"))
    return doc;
  const char *p = NULL;
  const cJSON *defs = NULL;
  if (!strncmp(ref, "#/$defs/", 8))
    p = ref + 8, defs = cJSON_GetObjectItemCaseSensitive(doc, "$defs");
  else if (!strncmp(ref, "#/definitions/", 14))
    p = ref + 14, defs = cJSON_GetObjectItemCaseSensitive(doc, "definitions");
  return defs ? cJSON_GetObjectItemCaseSensitive(defs, p) : NULL;
}

static bool type_ok(const char *t, const cJSON *v) {
  if (!strcmp(t, "object"))
    return cJSON_IsObject(v);
  if (!strcmp(t, "array"))
    return cJSON_IsArray(v);
  if (!strcmp(t, "string"))
    return cJSON_IsString(v);
  if (!strcmp(t, "number"))
    return cJSON_IsNumber(v);
  if (!strcmp(t, "integer"))
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
  if (!strcmp(t, "boolean"))
    return cJSON_IsBool(v);
  if (!strcmp(t, "null"))
    return cJSON_IsNull(v);
  return false;
}

static bool validate(const cJSON *doc, const cJSON *s, const cJSON *v) {
  if (cJSON_IsTrue(s))
    return true;
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
  if (ref)
    return validate(doc, resolve_ref(doc, ref->valuestring), v);
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
  if (any) {
    for (const cJSON *a = any->child; a; a = a->next)
      if (validate(doc, a, v))
        return true;
    return false;
  }
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (en) {
    for (const cJSON *e = en->child; e; e = e->next)
      if (cJSON_Compare(e, v, true))
        return true;
    return false;
  }
  const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
  if (cst)
    return cJSON_Compare(cst, v, true);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (cJSON_IsString(type) && !type_ok(type->valuestring, v))
    return false;
  if (cJSON_IsArray(type)) {
    bool ok = false;
    for (const cJSON *t = type->child; t; t = t->next)
      ok |= type_ok(t->valuestring, v);
    if (!ok)
      return false;
  }
  if (cJSON_IsObject(v)) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
      if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
        return false;
    for (const cJSON *m = v->child; m; m = m->next) {
      for (const cJSON *k = m->next; k; k = k->next)
        if (!strcmp(k->string, m->string))
          return false; /* duplicate key */
      const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
      if (!ps && cJSON_IsFalse(addl))
        return false;
      if (ps && !validate(doc, ps, m))
        return false;
    }
  }
  if (cJSON_IsString(v)) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)v->valuestring; *p; p++)
      n += (*p & 0xC0) != 0x80;
    if ((mn && n < mn->valueint) || (mx && n > mx->valueint))
      return false;
  }
  if (cJSON_IsArray(v)) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minItems");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    int n = cJSON_GetArraySize(v);
    if ((mn && n < mn->valueint) || (mx && n > mx->valueint))
      return false;
    for (const cJSON *e = v->child; items && e; e = e->next)
      if (!validate(doc, items, e))
        return false;
  }
  return true;
}

/* ---- byte-level random walks ---- */

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* Random output of the grammar, byte by byte (closing bytes favoured so walks end); NULL if it
 * did not end within cap bytes. */
static char *random_walk(const grammar *g, size_t cap) {
  grammar_state st, tmp;
  grammar_start(g, &st);
  char *out = malloc(cap + 1);
  size_t n = 0;
  static const char prefer[] = "\"}],:0123456789tfn{[";
  while (n < cap) {
    int allowed[257], na = 0, pref[64], np = 0;
    for (int c = 0; c <= GRAMMAR_END; c++)
      if (grammar_advance(g, &st, c, &tmp)) {
        allowed[na++] = c;
        if (c == GRAMMAR_END || (c < 256 && c && strchr(prefer, c)))
          pref[np++] = c;
      }
    if (na == 0) {
      out[n] = 0;
      CHECK(0, "byte walk dead end (no byte and no end allowed) after: %.300s", out);
      break;
    }
    int c = (np && rnd() % 3 == 0) ? pref[rnd() % np] : allowed[rnd() % na];
    if (c == GRAMMAR_END) {
      out[n] = 0;
      return out;
    }
    grammar_step(g, &st, c);
    out[n++] = (char)c;
  }
  free(out);
  return NULL;
}

static void walks_validate(const char *schema_json, int n_walks) {
  cJSON *sch = cJSON_Parse(schema_json);
  grammar *g = compile_str(schema_json);
  if (!g || !sch) {
    cJSON_Delete(sch);
    return;
  }
  int ended = 0, valid = 0;
  for (int i = 0; i < n_walks; i++) {
    char *s = random_walk(g, 4000);
    if (!s)
      continue;
    ended++;
    cJSON *v = cJSON_Parse(s);
    bool ok = v && validate(sch, sch, v);
    CHECK(ok, "walk output parses and validates under %s: %s", schema_json, s);
    valid += ok;
    cJSON_Delete(v);
    free(s);
  }
  CHECK(ended >= n_walks / 2, "most walks end (%d of %d) for %s", ended, n_walks, schema_json);
  CHECK(valid == ended, "every ended walk validates (%d of %d) for %s", valid, ended, schema_json);
  grammar_free(g);
  cJSON_Delete(sch);
}

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
    "\"properties\":{\"desc\":{\"type\":\"string\"},\"price\":{\"type\":\"number\"},\"qty\":{\"type\":[\"integer\","
    "\"null\"]}},\"required\":[\"desc\",\"price\",\"qty\"],\"additionalProperties\":false},\"maxItems\":4},"
    "\"total\":{\"type\":\"number\"},\"currency\":{\"enum\":[\"EUR\",\"USD\",\"E\"]}},"
    "\"required\":[\"items\",\"total\",\"currency\"],\"additionalProperties\":false}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":"
    "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\",\"kids\"],"
    "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"object\",\"properties\":{\"x\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"object\","
    "\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"],\"additionalProperties\":false},{\"type\":"
    "\"object\",\"properties\":{\"ab\":{\"type\":\"boolean\"}},\"required\":[\"ab\"],\"additionalProperties\":false},"
    "{\"type\":\"null\"}]},\"n\":{\"enum\":[1,10,100,\"10\"]}},\"required\":[\"x\",\"n\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"opt\":{\"type\":\"string\"},\"req\":{\"type\":\"boolean\"},"
    "\"list\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}},"
    "\"required\":[\"req\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"k\\\"ey\":{\"type\":\"string\"},\"k\":{\"type\":\"number\"}},"
    "\"required\":[\"k\\\"ey\",\"k\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},"
    "\"t\":{\"type\":[\"string\",\"null\"],\"maxLength\":1}},\"required\":[\"s\",\"t\"],\"additionalProperties\":false}",
    /* Recursion that reaches the depth cap: the items that still fit there must be the only ones
     * allowed (an object needing two more levels must not open at the cap). */
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#/$defs/d\"}]},\"$defs\":{\"d\":"
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1}},"
    "\"required\":[\"a\"],\"additionalProperties\":false}}}",
    /* A linked list: next is required, null or another node. */
    "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#\"},"
    "{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"],\"additionalProperties\":false}",
};

static void test_generic(void) {
  grammar *g = NULL;
  CHECK(json_schema_any_object(&g) == QVL_OK, "json_object grammar");
  CHECK(accepts(g, "{}"), "empty object");
  CHECK(!accepts(g, " {}"), "no whitespace before the value");
  CHECK(accepts(g, "{\"a\": [1, -2.5e+3, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": {}}}"), "nested");
  CHECK(accepts(g, "{\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\": 0}"), "UTF-8 key");
  CHECK(!accepts(g, "[]"), "top level must be an object");
  CHECK(!accepts(g, "{\"a\": 01}"), "leading zero");
  CHECK(!accepts(g, "{\"a\": 1.}"), "dangling dot");
  CHECK(!accepts(g, "{\"a\": tru}"), "partial literal");
  CHECK(!accepts(g, "{\"a\": 1,}"), "trailing comma");
  CHECK(!accepts(g, "{\"a\" 1}"), "missing colon");
  CHECK(!accepts(g, "{\"a\": \"\x01\"}"), "control character in a string");
  CHECK(!accepts(g, "{\"a\": \"\xc0\xaf\"}"), "overlong UTF-8");
  CHECK(!accepts(g, "{\"a\": \"\xed\xa0\x80\"}"), "UTF-8 surrogate");
  CHECK(!accepts(g, "{\"a\": \"\\x\"}"), "bad escape");
  CHECK(!accepts(g, "{\"a\": 1} x"), "nothing after the value");
  CHECK(!accepts(g, "{\"a\": 1"), "unclosed: cannot end");
  /* Whitespace between tokens: one space, or one newline and a short indent; nothing longer. */
  char ws[64], buf1[128];
  CHECK(accepts(g, "{ \"a\": 1 }") && accepts(g, "{\n  \"a\": [\n\t\t1\n  ]\n}"), "a space; a newline and an indent");
  memset(ws, ' ', sizeof ws);
  ws[GRAMMAR_MAX_INDENT] = 0;
  snprintf(buf1, sizeof buf1, "{\n%s}", ws);
  CHECK(accepts(g, buf1), "a newline and GRAMMAR_MAX_INDENT spaces");
  ws[GRAMMAR_MAX_INDENT] = ' ';
  ws[GRAMMAR_MAX_INDENT + 1] = 0;
  snprintf(buf1, sizeof buf1, "{\n%s}", ws);
  CHECK(!accepts(g, buf1), "one more space is refused (no endless whitespace)");
  CHECK(!accepts(g, "{  }"), "two spaces are refused");
  CHECK(!accepts(g, "{\n\n}") && !accepts(g, "{\"a\":\n\n1}"), "a blank line is refused");
  CHECK(!accepts(g, "{\t}") && !accepts(g, "{\r\n}") && !accepts(g, "{ \n}"), "tab, CR, space-newline alone are refused");
  char num[64] = "{\"n\": ";
  for (int i = 0; i < GRAMMAR_MAX_NUMBER + 1; i++)
    strcat(num, "1");
  strcat(num, "}");
  CHECK(!accepts(g, num), "numbers are capped");
  /* Depth cap: the innermost container cannot open, what is open can close. */
  char deep[256] = "";
  for (int i = 0; i < GRAMMAR_MAX_DEPTH + 2; i++)
    strcat(deep, "{\"a\":");
  grammar_state st;
  grammar_start(g, &st);
  CHECK(!grammar_feed(g, &st, deep, strlen(deep)), "nesting beyond the cap is refused");
  grammar_free(g);
}

static void test_schema_accepts(void) {
  grammar *g = compile_str(schemas[0]);
  CHECK(accepts(g, "{\"name\": \"Ann\", \"age\": 31}"), "both");
  CHECK(accepts(g, "{\"age\":-0,\"name\":\"\"}"), "any order");
  CHECK(!accepts(g, "{\"name\": \"Ann\"}"), "required missing");
  CHECK(!accepts(g, "{\"name\": \"Ann\", \"age\": 3.5}"), "integer");
  CHECK(!accepts(g, "{\"name\": \"Ann\", \"age\": 1.0}") && !accepts(g, "{\"name\": \"Ann\", \"age\": 1e3}") &&
            !accepts(g, "{\"name\": \"Ann\", \"age\": 1E+3}") && accepts(g, "{\"name\": \"Ann\", \"age\": -120}"),
        "integer: integer literals only (no fraction, no exponent)");
  CHECK(!accepts(g, "{\"name\": \"Ann\", \"age\": 3, \"x\": 1}"), "additional property");
  CHECK(!accepts(g, "{\"name\": \"Ann\", \"name\": \"Bob\", \"age\": 3}"), "duplicate key");
  CHECK(!accepts(g, "{\"nam\": \"Ann\", \"age\": 3}"), "key prefix only");
  grammar_free(g);
  g = compile_str(schemas[3]);
  CHECK(accepts(g, "{\"x\": {\"a\": 1}, \"n\": 10}"), "anyOf object a");
  CHECK(accepts(g, "{\"x\": {\"ab\": false}, \"n\": 1}"), "anyOf object ab (shares the prefix)");
  CHECK(accepts(g, "{\"x\": null, \"n\": \"10\"}"), "anyOf null, enum string");
  CHECK(accepts(g, "{\"x\": \"s\", \"n\": 100}"), "enum with prefixes of each other");
  CHECK(!accepts(g, "{\"x\": {\"a\": 2}, \"n\": 1}"), "const");
  CHECK(!accepts(g, "{\"x\": 5, \"n\": 1}"), "no alternative");
  CHECK(!accepts(g, "{\"x\": null, \"n\": 1000}"), "not in enum");
  grammar_free(g);
  g = compile_str(schemas[2]);
  CHECK(accepts(g, "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": []}, {\"v\": 3, \"kids\": [{\"v\": 4, \"kids\": []}]}]}"),
        "recursive tree");
  CHECK(!accepts(g, "{\"v\": 1, \"kids\": [{\"v\": 2}]}"), "recursive: required inside");
  CHECK(!accepts(g, "{\"v\": 1, \"kids\": [{\"v\":1,\"kids\":[]},{\"v\":1,\"kids\":[]},{\"v\":1,\"kids\":[]}]}"),
        "maxItems");
  grammar_free(g);
  g = compile_str(schemas[6]);
  CHECK(accepts(g, "{\"s\": \"ab\", \"t\": null}"), "minLength 2");
  CHECK(accepts(g, "{\"s\": \"\xc3\xa9\\n\xe4\xb8\xad\", \"t\": \"\\u00e9\"}"), "characters, not bytes; an escape is one");
  CHECK(!accepts(g, "{\"s\": \"a\", \"t\": null}"), "too short");
  CHECK(!accepts(g, "{\"s\": \"abcd\", \"t\": null}"), "too long");
  CHECK(!accepts(g, "{\"s\": \"abc\", \"t\": \"xy\"}"), "maxLength on a nullable string");
  CHECK(!accepts(g, "{\"s\": \"ab\xf0\x9f\x98\x80\", \"t\": null}") && accepts(g, "{\"s\": \"a\xf0\x9f\x98\x80\", \"t\": null}"),
        "a character above U+FFFF counts twice for maxLength (UTF-16, as JavaScript)");
  grammar_free(g);
  g = compile_str(schemas[5]);
  CHECK(accepts(g, "{\"k\\\"ey\": \"q\", \"k\": 1}"), "escaped key");
  grammar_free(g);
}

/* ---- hostile schemas: refused at compile time, or bounded work per byte ---- */

static void refused(const char *json, const char *needle) {
  cJSON *j = cJSON_Parse(json);
  CHECK(j != NULL, "schema JSON parses: %.200s", json);
  grammar *g = NULL;
  qvl_status s = json_schema_compile(j, &g);
  CHECK(s == QVL_ERR_UNSUPPORTED && !g && strstr(qvl_last_error(), needle), "%.200s: refused naming '%s' (got %d: %s)",
        json, needle, (int)s, qvl_last_error());
  grammar_free(g);
  cJSON_Delete(j);
}

/* The attack of issue 24: anyOf of n {"$ref":"#"} and null. */
static char *self_anyof(int n) {
  static char b[1024];
  strcpy(b, "{\"anyOf\":[");
  for (int i = 0; i < n; i++)
    strcat(b, "{\"$ref\":\"#\"},");
  strcat(b, "{\"type\":\"null\"}]}");
  return b;
}

static void test_hostile(void) {
  refused(self_anyof(8), "left recursion");
  refused(self_anyof(1), "left recursion");
  refused("{\"$ref\":\"#\"}", "no finite JSON value");
  refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
          "$ref '#/$defs/");
  refused("{\"$ref\":\"#\",\"nullable\":true}", "left recursion");
  refused("{\"anyOf\":[{\"$ref\":\"#\"}],\"nullable\":true}", "left recursion");
  /* The cycle found only once the whole graph is built (B finished before A uses it again). */
  refused("{\"$defs\":{\"A\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/B\"}}},"
          "{\"$ref\":\"#/$defs/B\"}]},\"B\":{\"anyOf\":[{\"$ref\":\"#/$defs/A\"},{\"type\":\"null\"}]}},"
          "\"$ref\":\"#/$defs/A\"}",
          "left recursion");
  /* Every value needs itself inside. */
  refused("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}",
          "no finite JSON value");
  refused("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"minItems\":1}", "no finite JSON value");
  /* Every value nests deeper than the cap. */
  char deep[4096] = "", tail[1024] = "";
  for (int i = 0; i < 40; i++) {
    strcat(deep, "{\"type\":\"object\",\"properties\":{\"a\":");
    strcat(tail, "},\"required\":[\"a\"]}");
  }
  char deep_all[8192];
  snprintf(deep_all, sizeof deep_all, "%s{\"type\":\"string\"}%s", deep, tail);
  refused(deep_all, "nests deeper");
  /* anyOf wider than GRAMMAR_MAX_FLAT once references are resolved: 5 x 16 constants. */
  char wide[8192] = "{\"$defs\":{";
  for (int d = 0; d < 5; d++) {
    char h[64];
    snprintf(h, sizeof h, "%s\"d%d\":{\"anyOf\":[", d ? "," : "", d);
    strcat(wide, h);
    for (int k = 0; k < 16; k++) {
      snprintf(h, sizeof h, "%s{\"const\":%d}", k ? "," : "", d * 100 + k);
      strcat(wide, h);
    }
    strcat(wide, "]}");
  }
  strcat(wide, "},\"anyOf\":[");
  for (int d = 0; d < 5; d++) {
    char h[64];
    snprintf(h, sizeof h, "%s{\"$ref\":\"#/$defs/d%d\"}", d ? "," : "", d);
    strcat(wide, h);
  }
  strcat(wide, "]}");
  refused(wide, "more than 64 alternatives");
  /* Keywords next to $ref are not dropped silently. */
  refused("{\"$defs\":{\"a\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/a\",\"maxLength\":3}", "next to '$ref'");
  /* A tool's parameters go through the same checks. */
  cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                             "{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}}}]");
  grammar *g = NULL;
  qvl_status s = json_schema_tool_calls(tools, NULL, false, &g);
  CHECK(s == QVL_ERR_UNSUPPORTED && strstr(qvl_last_error(), "tools[0].function.parameters"),
        "a tool's left recursion is refused naming the tool (%d: %s)", (int)s, qvl_last_error());
  grammar_free(g);
  cJSON_Delete(tools);

  /* What is left is served: nullable references, 64 alternatives, recursion inside containers. */
  g = compile_str("{\"$defs\":{\"a\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/a\",\"nullable\":true}");
  CHECK(g && accepts(g, "null") && accepts(g, "\"x\"") && !accepts(g, "1"), "nullable next to $ref");
  grammar_free(g);
  char wide64[8192] = "{\"anyOf\":[";
  for (int k = 0; k < 16; k++) {
    char h[400];
    snprintf(h, sizeof h, "%s{\"anyOf\":[{\"const\":%d},{\"type\":\"object\",\"properties\":{\"k%d\":{\"type\":"
             "\"integer\"}},\"required\":[\"k%d\"]},{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2},"
             "{\"const\":\"s%d\"}]}", k ? "," : "", k, k, k, k);
    strcat(wide64, h);
  }
  strcat(wide64, "]}");
  g = compile_str(wide64);
  CHECK(g && accepts(g, "{\"k1\": 3}") && accepts(g, "[[15, \"s2\"], {\"k0\": -1}]") && !accepts(g, "{\"k1\": 3.5}"),
        "64 alternatives (16 x 4) with recursion inside arrays");
  /* Work per byte stays within GRAMMAR_STEP_WORK_MAX on random walks of the wide schema. */
  grammar_state st, tmp;
  uint64_t worst = 0;
  for (int walk = 0; g && walk < 50; walk++) {
    grammar_start(g, &st);
    for (int k = 0; k < 400; k++) {
      int ok[257], n = 0;
      for (int c = 0; c <= GRAMMAR_END; c++) {
        uint64_t w = 0;
        if (grammar_advance_counted(g, &st, c, &tmp, &w))
          ok[n++] = c;
        if (w > worst)
          worst = w;
      }
      if (n == 0 || (n == 1 && ok[0] == GRAMMAR_END))
        break;
      int c = ok[rnd() % (uint32_t)n];
      if (c == GRAMMAR_END)
        break;
      grammar_step(g, &st, c);
    }
  }
  CHECK(worst <= GRAMMAR_STEP_WORK_MAX, "work per byte %llu <= GRAMMAR_STEP_WORK_MAX (%d)", (unsigned long long)worst,
        GRAMMAR_STEP_WORK_MAX);
  if (getenv("QVL_TEST_VERBOSE"))
    fprintf(stderr, "wide schema: worst work per byte %llu\n", (unsigned long long)worst);
  grammar_free(g);
}


static void test_unsupported(void) {
  static const char *const bad[][2] = {
      {"{\"type\":\"string\",\"pattern\":\"^a\"}", "pattern"},
      {"{\"type\":\"string\",\"format\":\"email\"}", "format"},
      {"{\"type\":\"number\",\"minimum\":0}", "minimum"},
      {"{\"oneOf\":[{\"type\":\"string\"}]}", "oneOf"},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[]}}}", "allOf"},
      {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties"},
      {"{\"type\":\"uuid\"}", "uuid"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cJSON *j = cJSON_Parse(bad[i][0]);
    grammar *g = NULL;
    qvl_status s = json_schema_compile(j, &g);
    CHECK(s == QVL_ERR_UNSUPPORTED && !g && strstr(qvl_last_error(), bad[i][1]),
          "%s: unsupported naming '%s' (got %d: %s)", bad[i][0], bad[i][1], (int)s, qvl_last_error());
    cJSON_Delete(j);
  }
  cJSON *j = cJSON_Parse("{\"$ref\":\"#/$defs/missing\"}");
  grammar *g = NULL;
  CHECK(json_schema_compile(j, &g) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "missing"),
        "unresolved $ref: %s", qvl_last_error());
  cJSON_Delete(j);
  j = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}");
  CHECK(json_schema_compile(j, &g) == QVL_ERR_INVALID_ARG, "required not in properties");
  cJSON_Delete(j);
}

static void test_tool_calls(void) {
  cJSON *tools = cJSON_Parse(
      "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
      "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
      "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]");
  grammar *g = NULL;
  CHECK(json_schema_tool_calls(tools, NULL, true, &g) == QVL_OK, "tool grammar: %s", qvl_last_error());
  const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  CHECK(accepts(g, one), "one call");
  char two[512];
  snprintf(two, sizeof two, "%s\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", one);
  CHECK(accepts(g, two), "parallel calls");
  CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"), "args schema");
  CHECK(!accepts(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"), "unknown name");
  grammar_free(g);
  CHECK(json_schema_tool_calls(tools, "get_time", false, &g) == QVL_OK, "named");
  CHECK(!accepts(g, one), "named: the other tool is refused");
  CHECK(!accepts(g, two), "not parallel: one call only");
  grammar_free(g);
  CHECK(json_schema_tool_calls(tools, "missing", false, &g) == QVL_ERR_INVALID_ARG, "named tool not in tools");
  cJSON_Delete(tools);
}

/* ---- the token masker with the real vocabulary ---- */

static bool token_ok(const tokenizer *tk, const grammar *g, const grammar_state *st, int32_t id) {
  if (tokenizer_is_special(tk, id))
    return false;
  size_t len;
  const char *b = tokenizer_token_bytes(tk, id, &len);
  if (!b || !len)
    return false;
  grammar_state tmp;
  grammar_state_copy(&tmp, st);
  return grammar_feed(g, &tmp, b, len);
}

static bool stop_after_one(void *user) {
  ++*(int *)user;
  return true;
}

static void test_mask(void) {
  tokenizer *tk = NULL;
  if (tokenizer_init_hf("tests/fixtures/tokenizer/tokenizer.json", &tk) != QVL_OK) {
    CHECK(0, "tokenizer: %s", qvl_last_error());
    return;
  }
  const int64_t V = 151936;
  token_trie *tt = NULL;
  CHECK(token_trie_build(tk, V, &tt) == QVL_OK, "trie: %s", qvl_last_error());
  token_mask_walker *w = NULL;
  CHECK(token_mask_walker_init(tt, &w) == QVL_OK, "walker");
  uint64_t *mask = malloc(sizeof *mask * (size_t)token_mask_words(tt));
  int32_t eos[2] = {tokenizer_find(tk, "<|im_end|>"), tokenizer_find(tk, "<|endoftext|>")};
  CHECK(eos[0] >= 0 && eos[1] >= 0, "eos ids");

  grammar *g = compile_str(schemas[1]);
  /* Prefixes that put the automaton in different places: structural, key, free string (with a
   * UTF-8 sequence pending), number, enum, end. */
  static const char *const prefixes[] = {
      "", "{", "{\"it", "{\"items\": [{\"desc\": \"caf", "{\"items\": [{\"desc\": \"caf\xc3",
      "{\"items\": [{\"desc\": \"x\", \"price\": 1", "{\"items\": [], \"total\": 2, \"currency\": \"E",
      "{\"items\": [], \"total\": 2, \"currency\": \"EUR\"}"};
  for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
    grammar_state st;
    grammar_start(g, &st);
    CHECK(grammar_feed(g, &st, prefixes[p], strlen(prefixes[p])), "prefix %zu feeds", p);
    int64_t n = token_mask_compute(w, g, &st, eos, 2, mask);
    int64_t brute = 0, wrong = 0;
    for (int32_t id = 0; id < V; id++) {
      bool want = id == eos[0] || id == eos[1] ? grammar_can_end(g, &st)
                                               : id < tokenizer_vocab_size(tk) && token_ok(tk, g, &st, id);
      bool got = mask[id / 64] >> (id % 64) & 1;
      brute += want;
      wrong += want != got;
    }
    CHECK(wrong == 0 && n == brute, "prefix '%s': mask = brute force (%lld allowed, %lld differ)", prefixes[p],
          (long long)n, (long long)wrong);
    if (p == 4)
      CHECK(n > 0 && n < 5000, "pending UTF-8 narrows the mask to continuations (%lld)", (long long)n);
    if (p == 7)
      CHECK(n == 2, "complete: only the end tokens (%lld)", (long long)n);
  }
  /* A token spanning several structural characters is allowed exactly where the grammar goes
   * through all of them. */
  int32_t qc = tokenizer_find_bytes(tk, "\",", 2), qb = tokenizer_find_bytes(tk, "\"}", 2);
  CHECK(qc >= 0 && qb >= 0, "the vocabulary has '\",' and '\"}'");
  grammar_state st;
  grammar_start(g, &st);
  const char *pre = "{\"items\": [{\"desc\": \"abc";
  grammar_feed(g, &st, pre, strlen(pre));
  token_mask_compute(w, g, &st, eos, 2, mask);
  CHECK((mask[qc / 64] >> (qc % 64) & 1) && !(mask[qb / 64] >> (qb % 64) & 1),
        "'\",' allowed (more keys to come), '\"}' not (price and qty are required)");

  /* The poll stops a mask midway (the engine's cancellation, deadline and shutdown). */
  int polls = 0;
  token_mask_walker_set_poll(w, stop_after_one, &polls);
  grammar_start(g, &st);
  int64_t n_ok = -1;
  qvl_status ps = token_mask_fill(w, g, &st, eos, 2, mask, &n_ok);
  CHECK(ps == QVL_ERR_CANCELLED && polls == 1 && n_ok == 0 && mask[0] == 0, "a poll saying stop cancels the mask (%d, %d polls)",
        (int)ps, polls);
  token_mask_walker_set_poll(w, NULL, NULL);
  CHECK(token_mask_fill(w, g, &st, eos, 2, mask, &n_ok) == QVL_OK && n_ok > 0 &&
            token_mask_last_work(w) <= token_mask_last_budget(w),
        "without the poll the same mask is filled, within its budget (%llu of %llu steps)",
        (unsigned long long)token_mask_last_work(w), (unsigned long long)token_mask_last_budget(w));

  /* Random token-level generation: always parses and validates. */
  cJSON *doc = NULL;
  int32_t *ids = malloc(sizeof *ids * (size_t)V);
  for (size_t si = 0; si < sizeof schemas / sizeof *schemas; si++) {
    grammar *gs = compile_str(schemas[si]);
    doc = cJSON_Parse(schemas[si]);
    int ended = 0;
    for (int run = 0; run < 12; run++) {
      grammar_start(gs, &st);
      char out[8192];
      size_t n = 0;
      bool done = false;
      for (int step = 0; step < 600 && !done; step++) {
        int64_t na = token_mask_compute(w, gs, &st, eos, 2, mask);
        if (na == 0) {
          out[n] = 0;
          CHECK(0, "dead end under schema %zu after: %s", si, out);
          break;
        }
        /* favour the end, short tokens and non-whitespace so outputs finish */
        int32_t pick = -1, n_ids = 0;
        if ((mask[eos[0] / 64] >> (eos[0] % 64) & 1) && rnd() % 2 == 0)
          pick = eos[0];
        for (int32_t id = 0; pick < 0 && id < V; id++)
          if (mask[id / 64] >> (id % 64) & 1)
            ids[n_ids++] = id;
        for (int tries = 0; pick < 0 && tries < 16; tries++) {
          int32_t id = ids[rnd() % (uint32_t)n_ids];
          size_t len = 0;
          const char *b = id == eos[0] || id == eos[1] ? "" : tokenizer_token_bytes(tk, id, &len);
          bool blank = len > 0 && strspn(b, " \t\r\n") >= len;
          if ((len <= 3 && !blank) || tries == 15)
            pick = id;
        }
        if (pick < 0)
          break;
        if (pick == eos[0] || pick == eos[1]) {
          done = true;
          break;
        }
        size_t len;
        const char *b = tokenizer_token_bytes(tk, pick, &len);
        if (n + len >= sizeof out)
          break;
        memcpy(out + n, b, len);
        n += len;
        CHECK(grammar_feed(gs, &st, b, len), "a masked-in token is accepted");
      }
      if (!done) {
        out[n < sizeof out ? n : sizeof out - 1] = 0;
        if (getenv("QVL_TEST_VERBOSE"))
          fprintf(stderr, "walk of schema %zu did not end: %.300s\n", si, out);
        continue;
      }
      ended++;
      out[n] = 0;
      cJSON *v = cJSON_Parse(out);
      CHECK(v && validate(doc, doc, v), "token walk under schema %zu parses and validates: %s", si, out);
      cJSON_Delete(v);
    }
    CHECK(ended > 0, "some token walks of schema %zu end (%d)", si, ended);
    cJSON_Delete(doc);
    grammar_free(gs);
  }
  grammar_free(g);
  free(ids);
  free(mask);
  token_mask_walker_free(w);
  token_trie_free(tt);
  tokenizer_free(tk);
}

int main(void) {
  test_generic();
  test_schema_accepts();
  test_unsupported();
  test_hostile();
  test_tool_calls();
  for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++)
    walks_validate(schemas[i], 200);
  test_mask();
  return TEST_SUMMARY("test_grammar");
}
