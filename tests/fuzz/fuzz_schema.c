/* Fuzz target: the JSON-schema compiler, the automaton and the token mask (issue 24). Input: a
 * schema (JSON), or a tools array when the first byte is 'T'; after the first NUL byte, the bytes
 * that steer a walk through the grammar (each picks one of the bytes the automaton allows).
 *
 * Asserted, beyond "no crash": a refused schema gets a 4xx status with a message; one byte never
 * costs more than GRAMMAR_STEP_WORK_MAX automaton steps, whatever the schema (the attack of issue
 * 24 took 73 x 9^7); no state the walk reaches is a dead end (some byte or the end is allowed);
 * wherever the end is allowed the output is valid JSON; the token mask of the mock vocabulary
 * stays within its work budget and allows a token. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"

#define MAX_STEPS 256

static void fail(const char *what, const char *out, size_t n) {
  fprintf(stderr, "fuzz_schema: %s after %zu bytes: %.*s\n", what, n, (int)(n > 400 ? 400 : n), out);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static tokenizer *tok;
  static token_trie *tt;
  static token_mask_walker *w;
  static uint64_t *mask;
  if (!tok) {
    if (tokenizer_init_hf("tests/fixtures/tokenizer/mock512/tokenizer.json", &tok) != QVL_OK ||
        token_trie_build(tok, tokenizer_vocab_size(tok), &tt) != QVL_OK || token_mask_walker_init(tt, &w) != QVL_OK ||
        !(mask = malloc(sizeof *mask * (size_t)token_mask_words(tt)))) {
      fprintf(stderr, "fuzz_schema: cannot load the mock tokenizer (run from the repository root)\n");
      abort();
    }
  }
  const uint8_t *nul = memchr(data, 0, size);
  size_t slen = nul ? (size_t)(nul - data) : size;
  const uint8_t *steer = nul ? nul + 1 : NULL;
  size_t nsteer = nul ? size - slen - 1 : 0;
  bool tools = slen > 0 && data[0] == 'T';
  cJSON *j = cJSON_ParseWithLength((const char *)data + tools, slen - tools);
  if (!j)
    return 0;
  grammar *g = NULL;
  qvl_status s = tools ? json_schema_tool_calls(j, NULL, true, &g) : json_schema_compile(j, &g);
  cJSON_Delete(j);
  if (s != QVL_OK) {
    int http = qvl_status_http(s);
    if (g || ((http < 400 || http > 499) && s != QVL_ERR_NOMEM) || !qvl_last_error()[0])
      abort();
    return 0;
  }
  int32_t eos = 0;
  grammar_state *st = malloc(sizeof *st), *tmp = malloc(sizeof *tmp);
  char out[MAX_STEPS + 1];
  size_t n = 0;
  if (!st || !tmp)
    abort();
  grammar_start(g, st);
  for (size_t k = 0; k < MAX_STEPS; k++) {
    int allowed[GRAMMAR_END + 1], na = 0;
    bool can_end = false;
    for (int c = 0; c <= GRAMMAR_END; c++) {
      uint64_t work = 0;
      bool ok = grammar_advance_counted(g, st, c, tmp, &work);
      if (work > GRAMMAR_STEP_WORK_MAX)
        fail("one byte took more than GRAMMAR_STEP_WORK_MAX steps", out, n);
      if (ok)
        allowed[na++] = c;
      can_end |= ok && c == GRAMMAR_END;
    }
    if (na == 0)
      fail("dead end: no byte and no end allowed", out, n);
    if (can_end && !tools) {
      cJSON *v = cJSON_ParseWithLength(out, n);
      if (!v)
        fail("the end is allowed but the output is not JSON", out, n);
      cJSON_Delete(v);
    }
    if (k % 16 == 0) {
      int64_t count = 0;
      qvl_status ms = token_mask_fill(w, g, st, &eos, 1, mask, &count);
      if (ms != QVL_OK || token_mask_last_work(w) > token_mask_last_budget(w))
        fail("the token mask went over its work budget", out, n);
      if (count == 0)
        fail("the token mask allows nothing", out, n);
    }
    if (k >= nsteer)
      break;
    int c = allowed[steer[k] % na];
    if (c == GRAMMAR_END)
      break;
    grammar_step(g, st, c);
    out[n++] = (char)c;
  }
  if (getenv("QVL_FUZZ_VERBOSE"))
    fprintf(stderr, "walk: %.*s\n", (int)n, out);
  free(st);
  free(tmp);
  grammar_free(g);
  return 0;
}
