/* The one place a request's rules are checked (engine/engine_request.h): each rule refuses alone,
 * with a message naming it, and the defaults pass. */
#include <string.h>

#include "engine/engine_request.h"
#include "test.h"
#include "text/stop.h"

static void done(void *user, const struct engine_result *r) {
  (void)user;
  (void)r;
}

static engine_request good(const cJSON *msgs) {
  engine_request r;
  engine_request_init(&r);
  r.messages = msgs;
  r.on_done = done;
  r.gen.max_tokens = 16;
  return r;
}

static void refused(const engine_request *r, qvl_status want, const char *part, const char *what) {
  qvl_status s = engine_request_check(r, 4096);
  CHECK(s == want && strstr(qvl_last_error(), part), "%s: status %d, message '%s'", what, (int)s, qvl_last_error());
}

int main(void) {
  cJSON *msgs = cJSON_CreateArray();
  engine_request r = good(msgs);
  CHECK(engine_request_check(&r, 4096) == QVL_OK, "the defaults with a prompt and max_tokens pass: %s",
        qvl_last_error());
  CHECK(r.prompt.add_generation_prompt && r.prompt.pre.max_pixels > 0 && r.gen.sampling.temperature >= 0,
        "init sets the prompt layer's and the sampler's defaults");

  r = good(NULL);
  refused(&r, QVL_ERR_INVALID_ARG, "needs messages", "no prompt");
  r = good(msgs);
  r.on_done = NULL;
  refused(&r, QVL_ERR_INVALID_ARG, "on_done", "no on_done");
  r = good(msgs);
  r.gen.max_tokens = 0;
  refused(&r, QVL_ERR_INVALID_ARG, "max_tokens must be positive", "max_tokens 0");
  r = good(msgs);
  r.gen.max_tokens = 5000;
  refused(&r, QVL_ERR_CONTEXT_OVERFLOW, "exceeds the context", "max_tokens over the context");
  const char *stops[STOP_MAX_STRINGS + 1];
  for (int i = 0; i <= STOP_MAX_STRINGS; i++)
    stops[i] = "x";
  r = good(msgs);
  r.gen.stop = stops;
  r.gen.n_stop = STOP_MAX_STRINGS + 1;
  refused(&r, QVL_ERR_INVALID_ARG, "stop strings", "too many stop strings");
  r.gen.n_stop = STOP_MAX_STRINGS;
  CHECK(engine_request_check(&r, 4096) == QVL_OK, "STOP_MAX_STRINGS stop strings pass");
  stops[1] = "";
  refused(&r, QVL_ERR_INVALID_ARG, "stop string 1", "an empty stop string");
  static char big[STOP_MAX_STRING_BYTES + 2];
  memset(big, 'a', STOP_MAX_STRING_BYTES + 1);
  stops[1] = big;
  refused(&r, QVL_ERR_INVALID_ARG, "stop string 1", "a stop string over the byte cap");
  r = good(msgs);
  r.gen.sampling.temperature = -1;
  CHECK(engine_request_check(&r, 4096) == QVL_ERR_INVALID_ARG, "sampling checked by sampler_check_params");
  r = good(msgs);
  r.logprobs = true;
  r.top_logprobs = ENGINE_MAX_TOP_LOGPROBS + 1;
  refused(&r, QVL_ERR_INVALID_ARG, "top_logprobs", "top_logprobs over the cap");
  r.top_logprobs = ENGINE_MAX_TOP_LOGPROBS;
  CHECK(engine_request_check(&r, 4096) == QVL_OK, "top_logprobs at the cap passes");
  cJSON_Delete(msgs);
  return TEST_SUMMARY("test_engine_request");
}
