/* qvl_engine and qvl_result (include/qvl.h) over the serving engine (engine/engine.h). */
#include <stdlib.h>
#include <string.h>

#include "capi/api_impl.h"
#include "capi/request_impl.h"
#include "base/status.h"

/* The settings qvl_engine_params carries, each named as in engine_config. */
#define ENGINE_PARAMS(X)                                                                                         \
  X(max_batch_size) X(max_wait_ms) X(queue_capacity) X(n_ctx) X(max_prompt_tokens) X(kv_cache_mb)               \
  X(image_cache_mb) X(prefix_cache_mb) X(request_timeout_ms)

void qvl_engine_params_default(qvl_engine_params *p) {
  engine_config c;
  engine_config_default(&c);
  memset(p, 0, sizeof *p);
#define FROM_CONFIG(field) p->field = c.field;
  ENGINE_PARAMS(FROM_CONFIG)
#undef FROM_CONFIG
}

qvl_status qvl_engine_start(const qvl_model *m, const qvl_engine_params *params, qvl_engine **out) {
  *out = NULL;
  engine_config c;
  engine_config_default(&c); /* the settings the public struct does not carry keep their defaults */
  if (params) {
#define TO_CONFIG(field) c.field = params->field;
    ENGINE_PARAMS(TO_CONFIG)
#undef TO_CONFIG
    if (params->kv_type && kv_type_parse(params->kv_type, &c.kv_type) != QVL_OK)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "kv_type '%s': expected f16 or f32", params->kv_type);
  }
  qvl_engine *e = calloc(1, sizeof *e);
  if (!e)
    return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
  e->m = m;
  qvl_status s = engine_start(m->v, &c, &e->e);
  if (s != QVL_OK) {
    free(e);
    return s;
  }
  *out = e;
  return QVL_OK;
}

void qvl_engine_stop(qvl_engine *e, bool drain) {
  if (!e)
    return;
  engine_stop(e->e, drain);
  free(e);
}

void qvl_engine_get_stats(qvl_engine *e, qvl_engine_stats *out) {
  engine_stats st;
  engine_get_stats(e->e, &st);
  memset(out, 0, sizeof *out);
  out->queued = st.queued;
  out->running = st.running;
  out->requests_done = st.requests_done;
  out->requests_failed = st.requests_failed;
  out->tokens_generated = st.tokens_generated;
  out->prompt_tokens = st.prompt_tokens;
  out->image_cache_hits = st.image_cache_hits;
  out->image_cache_misses = st.image_cache_misses;
  out->prefix_cache_hits = st.prefix_cache_hits;
  out->prefix_cache_misses = st.prefix_cache_misses;
  out->kv_used_bytes = st.kv_used_bytes;
  out->kv_total_bytes = st.kv_total_bytes;
  out->decode_tok_s = st.decode_tok_s;
}

/* One submitted request's callbacks, alive from submit to the end of on_done. */
typedef struct submission {
  request_callbacks cb;
  const qvl_model *m;
} submission;

static bool sub_text(void *user, const char *text, size_t len) {
  const request_callbacks *cb = &((submission *)user)->cb;
  return cb->on_text ? cb->on_text(cb->user, text, len) : true;
}

static bool sub_reasoning(void *user, const char *text, size_t len) {
  const request_callbacks *cb = &((submission *)user)->cb;
  return cb->on_reasoning ? cb->on_reasoning(cb->user, text, len) : true;
}

static void sub_done(void *user, const engine_result *r) {
  submission *s = user;
  qvl_result res = {r, s->m};
  if (s->cb.on_done)
    s->cb.on_done(s->cb.user, &res);
  free(s);
}

qvl_status qvl_engine_submit(qvl_engine *e, const qvl_request *r, uint64_t *id) {
  engine_request rq; /* points into r: nothing to free */
  QVL_TRY(request_to_engine(r, &rq));
  submission *sub = malloc(sizeof *sub);
  if (!sub)
    return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
  *sub = (submission){r->cb, e->m};
  history_policy hp = history_policy_default();
  if (r->trim_history) {
    hp.mode = HISTORY_TRIM;
    hp.auto_max_tokens = true;
    rq.history = &hp;
  }
  rq.on_text = sub_text;
  rq.on_reasoning = r->cb.on_reasoning ? sub_reasoning : NULL;
  rq.on_done = sub_done;
  rq.user = sub;
  uint64_t got = 0;
  qvl_status s = engine_submit(e->e, &rq, &got);
  if (s != QVL_OK)
    free(sub); /* no callback will come */
  else if (id)
    *id = got;
  return s;
}

void qvl_engine_cancel(qvl_engine *e, uint64_t id) { engine_cancel(e->e, id); }

/* ---- results ---- */

qvl_status qvl_result_status(const qvl_result *r) { return r->r->status; }
const char *qvl_result_error(const qvl_result *r) { return r->r->error; }

qvl_finish qvl_result_finish(const qvl_result *r) {
  /* the engine reports the reason gen_seq saw; NONE never reaches on_done (errors say ERROR) */
  return r->r->finish_reason == QVL_FINISH_NONE ? QVL_FINISH_ERROR : r->r->finish_reason;
}

const char *qvl_result_text(const qvl_result *r, size_t *len) {
  if (len)
    *len = r->r->text ? r->r->text_len : 0;
  return r->r->text ? r->r->text : "";
}

const char *qvl_result_reasoning(const qvl_result *r, size_t *len) {
  if (len)
    *len = r->r->reasoning ? r->r->reasoning_len : 0;
  return r->r->reasoning ? r->r->reasoning : "";
}

const int32_t *qvl_result_ids(const qvl_result *r, int64_t *n) {
  *n = r->r->ids ? r->r->completion_tokens : 0;
  return r->r->ids;
}

void qvl_result_usage(const qvl_result *r, qvl_usage *out) {
  const engine_result *e = r->r;
  memset(out, 0, sizeof *out);
  out->prompt_tokens = e->prompt_tokens;
  out->completion_tokens = e->completion_tokens;
  out->reasoning_tokens = e->reasoning_tokens;
  out->image_tokens = e->image_tokens;
  out->cached_prompt_tokens = e->cached_prompt_tokens;
  out->image_cache_hits = e->image_cache_hits;
  out->image_cache_misses = e->image_cache_misses;
  out->dropped_turns = e->history.dropped_turns;
}

void qvl_result_timings(const qvl_result *r, qvl_timings *out) {
  const engine_timings *t = &r->r->t;
  out->queue_ms = t->queue_ms;
  out->preprocess_ms = t->preprocess_ms;
  out->vision_ms = t->vision_ms;
  out->prefill_ms = t->prefill_ms;
  out->ttft_ms = t->ttft_ms;
  out->decode_ms = t->decode_ms;
  out->prefill_tok_s = t->prefill_tok_s;
  out->decode_tok_s = t->decode_tok_s;
}
