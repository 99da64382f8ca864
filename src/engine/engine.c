/*
 * The engine thread and its continuous-batching loop (see engine.h and docs/ENGINE.md).
 *
 * Ownership: the queue, the running set's membership, cancel flags and the stats are guarded by
 * e->mu; everything a running request holds (sequence, sampler, caches) is touched only by the
 * engine thread. engine_submit does the request's CPU work that needs no model (chat template,
 * tokenizer, image fetch/decode/resize) on the caller's thread, so a slow image never stalls the
 * streams that are decoding; the vision tower and the decoder run on the engine thread only (one
 * thread may run kernels at a time).
 */
#include "engine/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cond.h"
#include "base/free_each.h"
#include "base/log.h"
#include "base/status.h"
#include "base/timing.h"
#include "engine/gen_seq.h"
#include "engine/image_cache.h"
#include "engine/prefix_cache.h"
#include "text/grammar.h"
#include "text/stop.h"
#include "text/token_mask.h"

#define ENGINE_MAX_BATCH 64

typedef enum rq_state { RQ_NEW, RQ_VISION, RQ_PREFILL, RQ_DECODE } rq_state;

typedef struct request {
  uint64_t id;
  struct request *next;    /* queue link */
  /* Set under e->mu by engine_cancel / engine_stop, with an atomic store: a grammar mask polls it
   * without the lock (mask_poll). Kept apart from the fields the engine thread reads without the
   * lock (a widened load of neighbours would race with this write). */
  bool cancel;
  struct engine *eng;      /* for mask_poll */
  bool (*on_text)(void *user, const char *text, size_t len);
  bool (*on_reasoning)(void *user, const char *text, size_t len);
  void (*on_done)(void *user, const engine_result *r);
  void *user;
  gen_params gen;
  char *stop[STOP_MAX_STRINGS]; /* owned copies behind gen.stop */
  vlm_prompt_opts popts;
  vlm_prompt p;            /* built at submit with defer_vision: image rows filled by the engine */
  uint64_t *keys;          /* [p.n + max_tokens] prefix-cache content key of every token */
  int64_t need_bytes;      /* memory its sequence takes (KV + logits), reserved at admission */
  int64_t rows_bytes;      /* its image rows (those a restored prefix does not cover), charged at
                            * admission with need_bytes */
  rq_state state;
  bool cancel_seen;        /* the engine thread's copy, taken under e->mu each iteration */
  bool finished;           /* result filled; reaped (on_done + free) at the end of the iteration */
  decoder_seq *seq;
  gen_seq *gs;             /* sampling, constrained decoding, stop, visible text, logprobs */
  vision_job *vjob;        /* the image being encoded (next_image), in slices */
  double vjob_ms;          /* tower time of vjob so far (the vision-encode histogram) */
  float *vds;              /* [n_deepstack][its tokens][n_embd] DeepStack output of vjob */
  const float *logits;     /* the sequence's next-token logits, when in RQ_DECODE */
  int64_t n_prefilled;     /* prompt tokens in the cache (restored + computed) */
  int next_image;
  int64_t n_gen;
  grammar *gram;           /* constrained decoding (owned), NULL = free text */
  bool logprobs;
  int n_top;
  const tokenizer *tok;    /* for the logprobs' token bytes */
  double t_submit, t_queued, t_start, t_first, deadline, prefill_s; /* t_queued: after the prompt was built */
  double setup_s;          /* request_begin */
  engine_result res;
} request;

struct engine {
  const vlm *m;
  engine_config c;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  request *q_head, *q_tail;
  int n_queued;
  request *run[ENGINE_MAX_BATCH];
  int n_run;
  int64_t kv_used, kv_total;
  decoder_work *work;      /* the work buffers of every model step (step_rows rows), engine thread */
  int64_t work_bytes;      /* charged to kv_used while any request runs */
  bool stopping, drain;
  uint64_t next_id;
  image_cache *ic;
  prefix_cache *pc;
  token_trie *tt;          /* vocabulary trie for constrained decoding, built at first use (engine thread) */
  engine_stats st;
  uint64_t loop_iter;      /* iterations of the engine loop (engine_result.admitted_step) */
  double win_t0;           /* decode-speed window (engine thread) */
  int64_t win_tokens;
};

static const double hist_bounds[ENGINE_HIST_BUCKETS] = {50,   100,  250,   500,   1000,  2500,
                                                        5000, 10000, 20000, 30000, 60000, 120000};
/* Image tokens: 448x448 is 196, 1024x768 768, the default 1 MP budget ~1024, 4 MP ~4096. */
static const double img_tok_bounds[ENGINE_HIST_BUCKETS] = {16,  64,   128,  256,  512,  768,
                                                           1024, 1536, 2048, 4096, 8192, 16384};

void engine_config_default(engine_config *c) {
  memset(c, 0, sizeof *c);
  c->max_batch_size = 8;
  c->max_wait_ms = 5;
  c->queue_capacity = 64;
  c->n_ctx = 8192;
  /* Half the memory that is free now, between 256 MiB and 16 GiB. */
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  int64_t mb = pages > 0 && psz > 0 ? (int64_t)pages * psz / 2 / (1024 * 1024) : 2048;
  c->kv_cache_mb = mb < 256 ? 256 : mb > 16384 ? 16384 : mb;
  c->image_cache_mb = 256;
  c->prefix_cache_mb = 512;
  c->prefill_chunk = 256;
  c->vision_layers_per_step = 2;
  c->request_timeout_ms = 0;
}

/* ---- requests ------------------------------------------------------------------------------- */

static void request_free(request *r) {
  if (!r)
    return;
  for (int i = 0; i < STOP_MAX_STRINGS; i++)
    free(r->stop[i]);
  vlm_prompt_free(&r->p);
  decoder_seq_free(r->seq);
  gen_seq_free(r->gs);
  vision_job_free(r->vjob);
  grammar_free(r->gram);
  FREE_EACH(r->keys, r->vds, r);
}

static void set_error(request *r, qvl_status s, qvl_finish reason, const char *msg) {
  r->res.status = s;
  r->res.finish_reason = reason;
  snprintf(r->res.error, sizeof r->res.error, "%s", msg ? msg : "");
  r->finished = true;
}

static void hist_add_to(uint64_t *h, const double *bounds, double v) {
  for (int i = 0; i < ENGINE_HIST_BUCKETS; i++)
    if (v <= bounds[i])
      h[i]++;
  h[ENGINE_HIST_BUCKETS]++;
}

static void hist_add(uint64_t *h, double v) { hist_add_to(h, hist_bounds, v); }

/* Fills the result's counters and timings and updates the stats (e->mu held). */
static void account_locked(engine *e, request *r, double now) {
  engine_result *res = &r->res;
  res->prompt_tokens = r->p.n;
  res->image_tokens = r->p.n_img;
  res->completion_tokens = r->n_gen;
  engine_timings *t = &res->t;
  double q0 = r->t_queued > 0 ? r->t_queued : r->t_submit;
  t->queue_ms = r->t_start > 0 ? (r->t_start - q0) * 1e3 : (now - q0) * 1e3;
  t->preprocess_ms = r->p.preprocess_ms;
  t->vision_ms = r->p.vision_ms;
  t->prefill_ms = r->prefill_s * 1e3;
  t->prompt_ms = r->t_queued > 0 ? (r->t_queued - r->t_submit) * 1e3 : 0;
  t->setup_ms = r->setup_s * 1e3;
  int64_t computed = r->p.n - res->cached_prompt_tokens;
  t->prefill_tok_s = r->prefill_s > 0 ? (double)computed / r->prefill_s : 0;
  if (r->t_first > 0) {
    t->ttft_ms = (r->t_first - r->t_submit) * 1e3;
    t->decode_ms = (now - r->t_first) * 1e3;
    t->decode_tok_s = r->n_gen > 1 && now > r->t_first ? (double)(r->n_gen - 1) / (now - r->t_first) : 0;
  }
  engine_stats *st = &e->st;
  if (res->status == QVL_OK)
    st->requests_done++;
  else
    st->requests_failed++;
  st->tokens_generated += (uint64_t)r->n_gen;
  if (r->t_start > 0)
    st->prompt_tokens += (uint64_t)r->p.n;
  if (r->t_first > 0) {
    hist_add(st->ttft_hist, t->ttft_ms);
    st->ttft_sum_ms += t->ttft_ms;
  }
  if (r->t_start > 0)
    for (int i = 0; i < r->p.n_images; i++) {
      hist_add_to(st->img_tok_hist, img_tok_bounds, (double)r->p.images[i].n_tokens);
      st->img_tok_sum += (double)r->p.images[i].n_tokens;
    }
  double lat = (now - r->t_submit) * 1e3;
  hist_add(st->latency_hist, lat);
  st->latency_sum_ms += lat;
}

/* Calls on_done and frees (engine thread, e->mu not held). */
static void deliver(request *r) {
  static const int32_t no_ids[1] = {-1};
  size_t len = 0;
  int64_t n_ids = 0;
  const float *lp = NULL, *top_lp = NULL;
  const int32_t *top_ids = NULL;
  r->res.text = r->gs ? gen_seq_text(r->gs, &len) : "";
  r->res.text_len = len;
  r->res.reasoning = r->gs ? gen_seq_reasoning(r->gs, &len) : "";
  r->res.reasoning_len = r->gs ? len : 0;
  r->res.reasoning_tokens = r->gs ? gen_seq_reasoning_tokens(r->gs) : 0;
  r->res.ids = r->gs ? gen_seq_ids(r->gs, &n_ids) : no_ids;
  r->res.images = r->p.images;
  r->res.n_images = r->p.n_images;
  if (r->gs)
    gen_seq_logprobs(r->gs, &lp, &top_ids, &top_lp);
  buf lpt = {0};
  uint32_t *lpo = NULL;
  if (r->logprobs) {
    size_t per = (size_t)(1 + r->n_top), n = (size_t)r->n_gen * per;
    lpo = malloc(sizeof *lpo * (n + 1));
    for (size_t k = 0; lpo && k < n; k++) {
      int64_t i = (int64_t)(k / per), j = (int64_t)(k % per);
      int32_t id = j == 0 ? r->res.ids[i] : top_ids[i * r->n_top + j - 1];
      size_t tl = 0;
      const char *b = id >= 0 ? tokenizer_token_bytes(r->tok, id, &tl) : NULL;
      lpo[k] = (uint32_t)lpt.len;
      if (b && tl && buf_append(&lpt, b, tl) != QVL_OK) {
        free(lpo);
        lpo = NULL;
      }
    }
    if (lpo)
      lpo[n] = (uint32_t)lpt.len;
    r->res.lp_text = lpt.data ? lpt.data : "";
    r->res.lp_off = lpo;
    if (!lpo) {
      r->res.status = QVL_ERR_NOMEM;
      snprintf(r->res.error, sizeof r->res.error, "out of memory for logprobs");
    }
    r->res.logprobs = lp;
    r->res.top_ids = top_ids;
    r->res.top_logprobs = top_lp;
    r->res.n_top = r->n_top;
  }
  if (r->res.finish_reason == QVL_FINISH_NONE && r->res.status != QVL_OK)
    r->res.finish_reason = QVL_FINISH_ERROR;
  r->on_done(r->user, &r->res);
  buf_free(&lpt);
  free(lpo);
  request_free(r);
}

/* Rows of one model step: a decode row per running sequence + a prefill budget (the size of the
 * engine's one decoder_work). */
static int64_t step_rows(const engine *e) { return (int64_t)e->c.prefill_chunk + e->c.max_batch_size; }

/* ---- submit / cancel / stats ----------------------------------------------------------------- */

/* A request waits only when every batch slot is busy: queued requests that free slots will take at
 * the next step are not counted against queue_capacity (e->mu held). */
static bool queue_full_locked(const engine *e) {
  int free_slots = e->c.max_batch_size - e->n_run;
  int waiting = e->n_queued - (free_slots > 0 ? free_slots : 0);
  return waiting >= e->c.queue_capacity;
}

static qvl_status submit(engine *e, const engine_request *rq, uint64_t *id);

/* vlm_prompt_opts.known_image: a file whose embeddings the image cache holds is not decoded again
 * (the request threads ask; the engine thread notes the keys after each image). */
static bool known_image(void *user, uint64_t bytes_key, vlm_known_image *out) {
  engine *e = user;
  return image_cache_find_encoded(e->ic, bytes_key, &out->hash, &out->grid_t, &out->grid_h, &out->grid_w,
                                  &out->n_tokens);
}

/* The grammar is the engine's from here on, whatever happens. */
qvl_status engine_submit(engine *e, const engine_request *rq, uint64_t *id) {
  qvl_status s = submit(e, rq, id);
  if (s != QVL_OK && rq)
    grammar_free(rq->grammar);
  return s;
}

/* Refuses at once, before the expensive part, when the answer is already known. */
static qvl_status refuse_early(engine *e) {
  pthread_mutex_lock(&e->mu);
  bool stopping = e->stopping, full = queue_full_locked(e);
  int queued = e->n_queued;
  pthread_mutex_unlock(&e->mu);
  if (stopping)
    return qvl_errorf(QVL_ERR_BUSY, "the server is shutting down");
  if (full)
    return qvl_errorf(QVL_ERR_BUSY, "the queue is full (%d requests waiting); retry later", queued);
  return QVL_OK;
}

/* A new request with its own copies of rq's callbacks, settings and stop strings. */
static qvl_status request_new(engine *e, const engine_request *rq, request **out) {
  request *r = calloc(1, sizeof *r);
  if (!r)
    return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
  r->res.finish_reason = QVL_FINISH_NONE; /* -1: calloc's zero is QVL_FINISH_EOS */
  r->t_submit = time_now_s();
  r->on_text = rq->on_text;
  r->on_reasoning = rq->on_reasoning;
  r->on_done = rq->on_done;
  r->user = rq->user;
  r->gen = rq->gen;
  for (int i = 0; i < rq->gen.n_stop; i++)
    if (!(r->stop[i] = strdup(rq->gen.stop[i]))) {
      request_free(r);
      return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
    }
  r->gen.stop = (const char *const *)r->stop;
  r->popts = rq->prompt;
  r->popts.defer_vision = true;
  r->popts.keep_images = false;
  r->popts.trace = NULL;
  r->popts.trace_user = NULL;
  r->popts.known_image = known_image;
  r->popts.known_user = e;
  r->popts.defer_rows = true; /* allocated at admission, for the images the prefix cache lacks */
  /* A thinking model's chat prompt opens a think block, or closes an empty one for budget 0. */
  bool chat = !rq->raw_ids && !rq->raw_text;
  r->popts.skip_thinking = e->m->thinking && chat && rq->gen.reasoning_budget == 0;
  r->gen.reasoning = e->m->thinking && chat && r->popts.add_generation_prompt && rq->gen.reasoning_budget != 0;
  *out = r;
  return QVL_OK;
}

/* The prompt (the prompt layer, under the context policy), and whether it fits the context. */
static qvl_status request_prompt(engine *e, const engine_request *rq, request *r) {
  /* Stop tokenizing as soon as the prompt cannot fit (a 40 MB text costs ctx tokens, not 40 MB).
   * An automatic max_tokens may shrink to one token; trimming must measure the whole conversation,
   * so it runs without the cap (still bounded by the body cap, the deadline and the stop checks). */
  bool auto_max = rq->history && rq->history->auto_max_tokens;
  int64_t room = e->c.n_ctx - (auto_max ? 1 : rq->gen.max_tokens);
  if (e->c.max_prompt_tokens > 0 && e->c.max_prompt_tokens < room)
    room = e->c.max_prompt_tokens + 1; /* one more, so the exact count check below still reports it */
  r->popts.max_tokens = rq->history && rq->history->mode == HISTORY_TRIM ? 0 : room > 0 ? room : 1;
  qvl_status s = rq->raw_ids    ? vlm_prompt_from_ids(e->m, rq->raw_ids, rq->n_raw_ids, &r->p)
                 : rq->raw_text ? vlm_prompt_from_text(e->m, rq->raw_text, rq->raw_len, &r->p)
                 : rq->history  ? history_build_prompt(&e->m->pm, rq->messages, &r->popts, rq->history, e->c.n_ctx,
                                                       e->c.max_prompt_tokens, &r->gen.max_tokens, &r->p,
                                                       &r->res.history)
                                : vlm_prompt_build(e->m, rq->messages, &r->popts, &r->p);
  r->popts.stop = NULL; /* its user data belongs to the submitting thread */
  r->popts.stop_user = NULL;
  r->popts.budget = NULL;
  r->popts.resolve_media = NULL; /* read while planning only */
  r->popts.resolve_user = NULL;
  if (rq->history_out)
    *rq->history_out = r->res.history;
  const gen_params *g = &r->gen; /* the policy may have chosen max_tokens */
  if (s == QVL_ERR_CONTEXT_OVERFLOW && e->c.max_prompt_tokens > 0 && e->c.max_prompt_tokens < e->c.n_ctx - g->max_tokens)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the prompt has more than %lld tokens (images included); this server accepts at most %lld",
                   (long long)e->c.max_prompt_tokens, (long long)e->c.max_prompt_tokens);
  else if (s == QVL_ERR_CONTEXT_OVERFLOW && r->popts.max_tokens > 0)
    s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW,
                   "prompt of more than %lld tokens + %lld to generate exceeds the context of %lld tokens",
                   (long long)r->popts.max_tokens, (long long)g->max_tokens, (long long)e->c.n_ctx);
  if (s == QVL_OK && r->p.n <= 0)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt is empty");
  if (s == QVL_OK && e->c.max_prompt_tokens > 0 && r->p.n > e->c.max_prompt_tokens)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the prompt has %lld tokens (images included); this server accepts at most %lld",
                   (long long)r->p.n, (long long)e->c.max_prompt_tokens);
  if (s == QVL_OK && r->p.n > e->c.n_ctx - g->max_tokens)
    s = qvl_errorf(QVL_ERR_CONTEXT_OVERFLOW,
                   "prompt of %lld tokens + %lld to generate exceeds the context of %lld tokens",
                   (long long)r->p.n, (long long)g->max_tokens, (long long)e->c.n_ctx);
  return s;
}

/* Whether its memory can ever fit the budget (the admission itself waits in the engine loop), and
 * the prefix-cache keys of its tokens. */
static qvl_status request_admissible(engine *e, request *r) {
  const gen_params *g = &r->gen;
  decoder_seq_params sp = {.n_ctx = r->p.n + g->max_tokens, .shared_work = true, .kv_type = e->c.kv_type};
  uint64_t need = decoder_seq_bytes(e->m->text, &sp);
  r->need_bytes = (int64_t)need;
  /* The step's work buffers are charged with the first running request: alone it needs both; and
   * with nothing cached, the rows of all its images. */
  need = need == 0 ? 0 : need + (uint64_t)e->work_bytes + (uint64_t)prompt_rows_bytes(&e->m->pm, &r->p, 0);
  if (need == 0 || need > (uint64_t)e->kv_total)
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "prompt of %lld tokens + %lld to generate needs %.1f MiB of KV cache, image rows and work memory; "
                      "the engine has %.1f MiB in all (kv_cache_mb)",
                      (long long)r->p.n, (long long)g->max_tokens, (double)need / 1048576.0,
                      (double)e->kv_total / 1048576.0);
  if (!(r->keys = malloc(sizeof *r->keys * (size_t)(r->p.n + g->max_tokens))))
    return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
  for (int64_t i = 0; i < r->p.n; i++)
    r->keys[i] = (uint64_t)(uint32_t)r->p.ids[i];
  for (int i = 0; i < r->p.n_images; i++) {
    const vlm_image *im = &r->p.images[i];
    for (int64_t j = 0; j < im->n_tokens; j++)
      r->keys[r->p.img_idx[im->row0 + j]] = prefix_image_key(im->hash, j);
  }
  if (e->c.request_timeout_ms > 0)
    r->deadline = r->t_submit + (double)e->c.request_timeout_ms / 1e3;
  return QVL_OK;
}

/* Queues r (taken, freed when refused) with rq's grammar and logprob settings. */
static qvl_status enqueue(engine *e, const engine_request *rq, request *r, uint64_t *id) {
  pthread_mutex_lock(&e->mu);
  if (e->stopping || queue_full_locked(e)) {
    bool st = e->stopping;
    int nq = e->n_queued;
    pthread_mutex_unlock(&e->mu);
    request_free(r);
    return st ? qvl_errorf(QVL_ERR_BUSY, "the server is shutting down")
              : qvl_errorf(QVL_ERR_BUSY, "the queue is full (%d requests waiting); retry later", nq);
  }
  r->gram = rq->grammar; /* owned from here: request_free frees it */
  r->logprobs = rq->logprobs;
  r->n_top = rq->logprobs ? rq->top_logprobs : 0;
  r->tok = e->m->tok;
  r->id = ++e->next_id;
  r->t_queued = time_now_s();
  if (e->q_tail)
    e->q_tail->next = r;
  else
    e->q_head = r;
  e->q_tail = r;
  e->n_queued++;
  e->st.queued = e->n_queued;
  if (id)
    *id = r->id;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return QVL_OK;
}

/* check -> prompt -> admit -> enqueue. */
static qvl_status submit(engine *e, const engine_request *rq, uint64_t *id) {
  if (id)
    *id = 0;
  QVL_TRY(engine_request_check(rq, e->c.n_ctx));
  QVL_TRY(refuse_early(e));
  request *r = NULL;
  QVL_TRY(request_new(e, rq, &r));
  qvl_status s = request_prompt(e, rq, r);
  if (s == QVL_OK && rq->count_only) { /* the prompt is built and checked: that is the answer */
    r->res.status = QVL_OK;
    r->res.finish_reason = QVL_FINISH_EOS;
    r->res.prompt_tokens = r->p.n;
    r->res.image_tokens = r->p.n_img;
    r->res.text = "";
    r->res.reasoning = "";
    r->res.images = r->p.images;
    r->res.n_images = r->p.n_images;
    r->res.t.prompt_ms = (time_now_s() - r->t_submit) * 1e3;
    r->res.t.preprocess_ms = r->p.preprocess_ms;
    rq->on_done(rq->user, &r->res);
    r->gram = rq->grammar; /* owned from submit on: freed with the request */
    request_free(r);
    return QVL_OK;
  }
  if (s == QVL_OK)
    s = request_admissible(e, r);
  if (s != QVL_OK) {
    request_free(r);
    return s;
  }
  return enqueue(e, rq, r, id);
}

void engine_cancel(engine *e, uint64_t id) {
  pthread_mutex_lock(&e->mu);
  for (request *r = e->q_head; r; r = r->next)
    if (r->id == id)
      __atomic_store_n(&r->cancel, true, __ATOMIC_RELAXED);
  for (int i = 0; i < e->n_run; i++)
    if (e->run[i]->id == id)
      __atomic_store_n(&e->run[i]->cancel, true, __ATOMIC_RELAXED);
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

kv_type engine_kv_type(const engine *e) { return e->c.kv_type; }

void engine_get_stats(engine *e, engine_stats *out) {
  pthread_mutex_lock(&e->mu);
  *out = e->st;
  pthread_mutex_unlock(&e->mu);
}

/* ---- the engine thread ----------------------------------------------------------------------- */

/* The first image of p with a row past the first `covered` tokens: the ones before are never read. */
static int first_uncovered_image(const vlm_prompt *p, int64_t covered) {
  int i = 0;
  while (i < p->n_images && p->img_idx[p->images[i].row0 + p->images[i].n_tokens - 1] < covered)
    i++;
  return i;
}

/* The image rows r will allocate when it starts (engine thread): the prefix cache covers the rest. */
static int64_t rows_needed(engine *e, const request *r) {
  if (r->p.n_images == 0)
    return 0;
  int64_t covered = prefix_cache_match(e->pc, r->keys, r->p.n - 1);
  return prompt_rows_bytes(&e->m->pm, &r->p, first_uncovered_image(&r->p, covered));
}

/* Asked by a grammar mask every few thousand trie nodes (engine thread, without the lock): a mask
 * stops midway when its request is cancelled (client gone, drain timed out), past its deadline, or
 * when the engine stops without draining, so one request's mask never holds the others up. */
static bool mask_poll(void *user) {
  const request *r = user;
  if (__atomic_load_n(&r->cancel, __ATOMIC_RELAXED))
    return true;
  if (r->deadline > 0 && time_now_s() >= r->deadline)
    return true;
  return __atomic_load_n(&r->eng->stopping, __ATOMIC_RELAXED) && !__atomic_load_n(&r->eng->drain, __ATOMIC_RELAXED);
}

/* Creates the sequence and its generation state and restores the longest cached prefix. */
static qvl_status request_begin(engine *e, request *r) {
  const vlm *m = e->m;
  decoder_seq_params sp = {.n_ctx = r->p.n + r->gen.max_tokens, .shared_work = true, .kv_type = e->c.kv_type};
  QVL_TRY(decoder_seq_init(m->text, &sp, &r->seq));
  if (r->gram && !e->tt)
    QVL_TRY(token_trie_build(m->tok, m->text->hp.n_vocab, &e->tt));
  gen_seq_config gc = gen_seq_config_of(m, &r->gen, r->p.ids, r->p.n);
  gc.gram = r->gram;
  gc.trie = e->tt;
  r->eng = e;
  gc.poll = mask_poll;
  gc.poll_user = r;
  gc.logprobs = r->logprobs;
  gc.n_top = r->n_top;
  gc.reasoning_stream = r->on_reasoning;
  QVL_TRY(gen_seq_init(&gc, &r->gs));
  /* At least the last prompt token is computed: its logits start the generation. */
  int64_t next_pos = 0;
  int64_t got = prefix_cache_restore(e->pc, r->keys, r->p.n - 1, decoder_seq_kv(r->seq), &next_pos);
  if (got > 0)
    QVL_TRY(decoder_seq_set_past(r->seq, got, next_pos));
  r->n_prefilled = got;
  r->res.cached_prompt_tokens = got;
  int first = first_uncovered_image(&r->p, got);
  int64_t rows = prompt_rows_bytes(&m->pm, &r->p, first);
  if (rows != r->rows_bytes) { /* the cache changed since admission (it does not; kept honest) */
    pthread_mutex_lock(&e->mu);
    e->kv_used += rows - r->rows_bytes;
    pthread_mutex_unlock(&e->mu);
    r->rows_bytes = rows;
  }
  QVL_TRY(prompt_alloc_rows(&m->pm, &r->p, first));
  pthread_mutex_lock(&e->mu);
  if (got > 0)
    e->st.prefix_cache_hits++;
  else if (e->c.prefix_cache_mb > 0)
    e->st.prefix_cache_misses++;
  pthread_mutex_unlock(&e->mu);
  r->state = r->p.n_images > 0 ? RQ_VISION : RQ_PREFILL;
  return QVL_OK;
}

/* Advances the vision work of r by one slice: the next image the prefill still needs is taken from
 * the image cache, or its tower job runs vision_layers_per_step more blocks. */
static qvl_status vision_step(engine *e, request *r) {
  vlm_prompt *p = &r->p;
  int64_t d = e->m->text->hp.n_embd;
  int64_t nds = p->n_deepstack;
  while (r->next_image < p->n_images) {
    int i = r->next_image;
    vlm_image *im = &p->images[i];
    if (!r->vjob && p->img_idx[im->row0 + im->n_tokens - 1] < r->n_prefilled) {
      /* Rows that lie entirely in the restored prefix are never read (nor allocated): no vision. */
      rcbuf_unref(im->encoded);
      im->encoded = NULL;
      r->next_image++;
      continue;
    }
    float *embd = prompt_image_rows(&e->m->pm, p, i), *ds = prompt_image_deepstack(&e->m->pm, p, i);
    int64_t ds_stride = (p->n_img - p->rows0) * d;
    if (!r->vjob) {
      if (image_cache_get(e->ic, im->hash, im->grid_t, im->grid_h, im->grid_w, im->n_tokens, d, nds, embd, ds,
                          ds_stride)) {
        r->res.image_cache_hits++;
        image_cache_note_encoded(e->ic, im->hash, im->bytes_key);
        pthread_mutex_lock(&e->mu);
        e->st.image_cache_hits++;
        pthread_mutex_unlock(&e->mu);
        free(im->patches.pixel_values);
        im->patches.pixel_values = NULL;
        rcbuf_unref(im->encoded);
        im->encoded = NULL;
        r->next_image++;
        continue;
      }
      /* Its decode was skipped for embeddings evicted since: decode it now (rare). */
      if (!im->patches.pixel_values) {
        double t0 = time_now_s();
        QVL_TRY(prompt_image_decode_deferred(&r->popts, im, i));
        p->preprocess_ms += (time_now_s() - t0) * 1e3;
      }
      /* The tower writes DeepStack levels per image ([nds][nt][d]); the decoder wants them over all
       * images of the prompt, so they land in a buffer first. */
      free(r->vds);
      r->vds = malloc(sizeof *r->vds * (size_t)(im->n_tokens * d * (nds ? nds : 1)));
      if (!r->vds)
        return qvl_errorf(QVL_ERR_NOMEM, "image %d: out of memory for its DeepStack features", i + 1);
      double t0 = time_now_s();
      qvl_status s = vision_job_begin(e->m->vision, im->patches.pixel_values, im->grid_t, im->grid_h, im->grid_w,
                                      embd, r->vds, NULL, NULL, &r->vjob);
      r->vjob_ms = (time_now_s() - t0) * 1e3;
      p->vision_ms += r->vjob_ms;
      if (s != QVL_OK)
        return qvl_error_prefix(s, "image %d: ", i + 1);
      free(im->patches.pixel_values); /* read by begin only */
      im->patches.pixel_values = NULL;
      return QVL_OK; /* the blocks start in the next slice */
    }
    double t0 = time_now_s();
    bool done;
    qvl_status vs = vision_job_run(r->vjob, e->c.vision_layers_per_step, &done);
    double slice_ms = (time_now_s() - t0) * 1e3;
    p->vision_ms += slice_ms;
    r->vjob_ms += slice_ms;
    if (vs != QVL_OK)
      return qvl_error_prefix(vs, "image %d: ", i + 1);
    if (!done)
      return QVL_OK;
    vision_job_free(r->vjob);
    r->vjob = NULL;
    prompt_put_deepstack(&e->m->pm, p, i, r->vds);
    free(r->vds);
    r->vds = NULL;
    image_cache_put(e->ic, im->hash, im->grid_t, im->grid_h, im->grid_w, im->n_tokens, d, nds, embd, ds, ds_stride);
    image_cache_note_encoded(e->ic, im->hash, im->bytes_key);
    r->res.image_cache_misses++;
    r->next_image++;
    pthread_mutex_lock(&e->mu);
    e->st.image_cache_misses++;
    e->st.image_cache_bytes = image_cache_bytes(e->ic);
    hist_add(e->st.vision_hist, r->vjob_ms);
    e->st.vision_sum_ms += r->vjob_ms;
    pthread_mutex_unlock(&e->mu);
    break;
  }
  if (r->next_image >= p->n_images && !r->vjob)
    r->state = RQ_PREFILL;
  return QVL_OK;
}

/* Samples the next token of r (gen_seq_next). Returns true when r goes on (the token must be fed),
 * false when it finished. */
static bool sample_one(request *r, int32_t *tok) {
  int32_t id;
  bool done;
  qvl_status s = gen_seq_next(r->gs, r->logits, r->on_text, r->user, &id, &done);
  int64_t n;
  gen_seq_ids(r->gs, &n);
  if (n > r->n_gen) { /* a token was recorded */
    if (r->n_gen == 0)
      r->t_first = gen_seq_t_first(r->gs);
    r->keys[r->p.n + r->n_gen] = (uint64_t)(uint32_t)id;
    r->n_gen = n;
  }
  if (s == QVL_ERR_CANCELLED) {
    /* A mask stopped by mask_poll says why here; the stream's refusal is the client's. */
    if (r->deadline > 0 && time_now_s() >= r->deadline && !__atomic_load_n(&r->cancel, __ATOMIC_RELAXED))
      set_error(r, QVL_ERR_TIMEOUT, QVL_FINISH_ERROR, "the request timed out");
    else
      set_error(r, s, QVL_FINISH_CANCELLED, "cancelled by the client");
    return false;
  }
  if (s != QVL_OK) {
    set_error(r, s, QVL_FINISH_ERROR, qvl_last_error());
    return false;
  }
  if (done) {
    r->res.status = QVL_OK;
    r->res.finish_reason = gen_seq_reason(r->gs);
    r->res.stop_match = gen_seq_stop_matched(r->gs);
    r->finished = true;
    return false;
  }
  *tok = id;
  return true;
}

/* Keeps the finished conversation's KV (prompt + generated tokens fed so far) for later turns. */
static void store_prefix(engine *e, request *r) {
  if (!r->seq || e->c.prefix_cache_mb <= 0)
    return;
  kv_cache *kv = decoder_seq_kv(r->seq);
  if (kv->n == 0)
    return;
  int64_t *rnp = malloc(sizeof *rnp * (size_t)kv->n);
  if (!rnp)
    return;
  int64_t run = 0, n = r->p.n;
  for (int64_t i = 0; i < kv->n; i++) {
    if (i < n) {
      for (int a = 0; a < 3; a++)
        if (r->p.pos[a * n + i] + 1 > run)
          run = r->p.pos[a * n + i] + 1;
    } else {
      run++; /* generated tokens take next_pos, +1, ... on all axes */
    }
    rnp[i] = run;
  }
  prefix_cache_store(e->pc, r->keys, kv->n, kv, rnp);
  free(rnp);
}

/* Removes finished requests from the running set, then delivers them. */
static void reap(engine *e) {
  request *done[ENGINE_MAX_BATCH];
  int nd = 0;
  for (int i = 0; i < e->n_run; i++)
    if (e->run[i]->finished && e->run[i]->res.status == QVL_OK)
      store_prefix(e, e->run[i]);
  double now = time_now_s();
  pthread_mutex_lock(&e->mu);
  int k = 0;
  for (int i = 0; i < e->n_run; i++) {
    request *r = e->run[i];
    if (r->finished) {
      done[nd++] = r;
      e->kv_used -= r->need_bytes + r->rows_bytes;
      account_locked(e, r, now);
    } else {
      e->run[k++] = r;
    }
  }
  if (k == 0 && e->n_run > 0)
    e->kv_used -= e->work_bytes; /* idle: the step's work buffers are no longer in use */
  e->n_run = k;
  e->st.running = k;
  e->st.kv_used_bytes = e->kv_used;
  e->st.prefix_cache_bytes = prefix_cache_bytes(e->pc);
  e->st.image_cache_bytes = image_cache_bytes(e->ic);
  pthread_mutex_unlock(&e->mu);
  for (int i = 0; i < nd; i++) {
    /* Free the sequence before the callback: its memory is back when the client hears. */
    decoder_seq_free(done[i]->seq);
    done[i]->seq = NULL;
    deliver(done[i]);
  }
}

/*
 * One model step for everyone: every sequence with logits samples its next token; then those that go
 * on (one row each) and the next prefill pieces of requests still reading their prompt (up to
 * prefill_chunk rows in all, in admission order) run through the decoder in ONE forward, so the
 * weights are read once per step however many requests are active.
 */
static void model_step(engine *e) {
  decoder_batch_item items[ENGINE_MAX_BATCH];
  decoder_input ins[ENGINE_MAX_BATCH];
  request *who[ENGINE_MAX_BATCH];
  const float *logits[ENGINE_MAX_BATCH];
  int nb = 0, n_decode = 0;
  for (int i = 0; i < e->n_run; i++) {
    request *r = e->run[i];
    if (r->finished || r->state != RQ_DECODE)
      continue;
    int32_t tok;
    if (sample_one(r, &tok)) {
      items[nb] = (decoder_batch_item){.seq = r->seq, .token = tok};
      who[nb++] = r;
    }
  }
  n_decode = nb;
  int64_t budget = e->c.prefill_chunk;
  for (int i = 0; i < e->n_run && budget > 0; i++) {
    request *r = e->run[i];
    if (r->finished || r->state != RQ_PREFILL)
      continue;
    int64_t end = r->n_prefilled + budget < r->p.n ? r->n_prefilled + budget : r->p.n;
    ins[nb] = vlm_prompt_input(&r->p);
    items[nb] = (decoder_batch_item){.seq = r->seq, .in = &ins[nb], .begin = r->n_prefilled, .end = end,
                                     .logits = end == r->p.n};
    who[nb++] = r;
    budget -= end - r->n_prefilled;
  }
  if (nb == 0)
    return;
  double t0 = time_now_s();
  qvl_status s = decoder_forward(e->work, items, nb, logits);
  double t1 = time_now_s();
  for (int i = 0; i < nb; i++) {
    request *r = who[i];
    if (s != QVL_OK) {
      set_error(r, s, QVL_FINISH_ERROR, qvl_last_error());
      continue;
    }
    if (i < n_decode) {
      r->logits = logits[i];
      continue;
    }
    r->prefill_s += t1 - t0;
    r->n_prefilled = items[i].end;
    if (items[i].logits) {
      r->logits = logits[i];
      r->state = RQ_DECODE;
    }
  }
  if (s != QVL_OK || n_decode == 0)
    return;
  /* Aggregate decode speed over windows of about a second of decoding. */
  e->win_tokens += n_decode;
  if (e->win_t0 == 0)
    e->win_t0 = t0;
  if (t1 - e->win_t0 >= 1.0) {
    double rate = (double)e->win_tokens / (t1 - e->win_t0);
    pthread_mutex_lock(&e->mu);
    e->st.decode_tok_s = rate;
    pthread_mutex_unlock(&e->mu);
    e->win_t0 = t1;
    e->win_tokens = 0;
  }
}

static void *engine_main(void *arg) {
  engine *e = arg;
  for (;;) {
    request *gone = NULL; /* queued requests that end without running */
    double now = time_now_s();
    pthread_mutex_lock(&e->mu);
    e->loop_iter++;
    bool abort_all = e->stopping && !e->drain;
    request **pp = &e->q_head;
    e->q_tail = NULL;
    while (*pp) {
      request *r = *pp;
      bool late = r->deadline > 0 && now >= r->deadline;
      if (r->cancel || abort_all || late) {
        *pp = r->next;
        e->n_queued--;
        if (late && !r->cancel && !abort_all)
          set_error(r, QVL_ERR_TIMEOUT, QVL_FINISH_ERROR, "the request timed out while queued");
        else
          set_error(r, QVL_ERR_CANCELLED, QVL_FINISH_CANCELLED, "cancelled before it started");
        account_locked(e, r, now);
        r->next = gone;
        gone = r;
      } else {
        e->q_tail = r;
        pp = &r->next;
      }
    }
    for (int i = 0; i < e->n_run; i++) {
      if (abort_all)
        __atomic_store_n(&e->run[i]->cancel, true, __ATOMIC_RELAXED);
      e->run[i]->cancel_seen = e->run[i]->cancel;
    }
    /* Dynamic batching: an idle engine waits up to max_wait_ms for companions of a first request,
     * so that requests arriving together start (and decode) together. */
    double gather_until = 0;
    if (e->n_run == 0 && e->q_head && !e->stopping && e->c.max_wait_ms > 0 &&
        e->n_queued < e->c.max_batch_size) {
      double until = e->q_head->t_submit + e->c.max_wait_ms / 1e3;
      if (now < until)
        gather_until = until;
    }
    /* Admission, in arrival order (no overtaking: a large request is not starved by small ones). */
    while (gather_until == 0 && e->n_run < e->c.max_batch_size && e->q_head &&
           e->kv_used + e->q_head->need_bytes + (e->q_head->rows_bytes = rows_needed(e, e->q_head)) +
                   (e->n_run == 0 ? e->work_bytes : 0) <=
               e->kv_total) {
      request *r = e->q_head;
      if (e->n_run == 0)
        e->kv_used += e->work_bytes;
      e->q_head = r->next;
      if (!e->q_head)
        e->q_tail = NULL;
      r->next = NULL;
      e->n_queued--;
      e->kv_used += r->need_bytes + r->rows_bytes;
      r->t_start = now;
      r->res.admitted_step = e->loop_iter;
      r->state = RQ_NEW;
      e->run[e->n_run++] = r;
    }
    e->st.queued = e->n_queued;
    e->st.running = e->n_run;
    e->st.kv_used_bytes = e->kv_used;
    if (e->n_run == 0 && !gone) {
      if (e->stopping && !e->q_head) {
        pthread_mutex_unlock(&e->mu);
        break;
      }
      /* Idle: sleep until work arrives, the gathering window closes, or a queued deadline. */
      e->st.decode_tok_s = 0;
      e->win_t0 = 0;
      e->win_tokens = 0;
      double wake = now + 0.05;
      if (gather_until > 0 && gather_until < wake)
        wake = gather_until;
      cond_wait_until(&e->cv, &e->mu, wake);
      pthread_mutex_unlock(&e->mu);
      continue;
    }
    pthread_mutex_unlock(&e->mu);
    while (gone) {
      request *r = gone;
      gone = r->next;
      deliver(r);
    }

    /* Cancellations and timeouts of running requests free their slot and memory right away. */
    now = time_now_s();
    for (int i = 0; i < e->n_run; i++) {
      request *r = e->run[i];
      if (r->cancel_seen)
        set_error(r, QVL_ERR_CANCELLED, QVL_FINISH_CANCELLED, "cancelled");
      else if (r->deadline > 0 && now >= r->deadline)
        set_error(r, QVL_ERR_TIMEOUT, QVL_FINISH_ERROR, "the request timed out");
    }
    for (int i = 0; i < e->n_run; i++) {
      request *r = e->run[i];
      if (!r->finished && r->state == RQ_NEW) {
        double t0 = time_now_s();
        qvl_status s = request_begin(e, r);
        r->setup_s = time_now_s() - t0;
        if (s != QVL_OK)
          set_error(r, s, QVL_FINISH_ERROR, qvl_last_error());
      }
    }
    /* One vision slice per iteration, then one forward: decode rows + prefill pieces. */
    for (int i = 0; i < e->n_run; i++) {
      request *r = e->run[i];
      if (!r->finished && r->state == RQ_VISION) {
        qvl_status s = vision_step(e, r);
        if (s != QVL_OK)
          set_error(r, s, QVL_FINISH_ERROR, qvl_last_error());
        break;
      }
    }
    model_step(e);
    reap(e);
  }
  return NULL;
}

/* What engine_start made, once the thread is gone (or was never started). */
static void engine_free(engine *e) {
  decoder_work_free(e->work);
  image_cache_free(e->ic);
  prefix_cache_free(e->pc);
  token_trie_free(e->tt);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

qvl_status engine_start(const vlm *m, const engine_config *c, engine **out) {
  *out = NULL;
  engine_config cfg;
  if (c)
    cfg = *c;
  else
    engine_config_default(&cfg);
  if (cfg.max_batch_size < 1 || cfg.max_batch_size > ENGINE_MAX_BATCH)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "max_batch_size must be 1..%d, found %d", ENGINE_MAX_BATCH,
                      cfg.max_batch_size);
  if (cfg.max_wait_ms < 0 || cfg.queue_capacity < 0 || cfg.n_ctx < 1 || cfg.n_ctx > INT32_MAX ||
      cfg.prefill_chunk < 1 || cfg.request_timeout_ms < 0 || cfg.image_cache_mb < 0 || cfg.prefix_cache_mb < 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "invalid engine settings (max_wait_ms %d, queue_capacity %d, n_ctx %lld, prefill_chunk %d, "
                      "request_timeout_ms %lld)",
                      cfg.max_wait_ms, cfg.queue_capacity, (long long)cfg.n_ctx, cfg.prefill_chunk,
                      (long long)cfg.request_timeout_ms);
  if (cfg.kv_cache_mb <= 0) {
    engine_config d;
    engine_config_default(&d);
    cfg.kv_cache_mb = d.kv_cache_mb;
  }
  engine *e = calloc(1, sizeof *e);
  if (!e)
    return qvl_errorf(QVL_ERR_NOMEM, "engine: out of memory");
  e->m = m;
  cfg.kv_type = kv_type_resolve(cfg.kv_type); /* one type for every sequence and the prefix cache */
  e->c = cfg;
  e->kv_total = cfg.kv_cache_mb * 1024 * 1024;
  e->st.kv_total_bytes = e->kv_total;
  memcpy(e->st.hist_bounds_ms, hist_bounds, sizeof hist_bounds);
  memcpy(e->st.img_tok_bounds, img_tok_bounds, sizeof img_tok_bounds);
  const decoder_hparams *hp = &m->text->hp;
  e->work_bytes = (int64_t)decoder_work_bytes(m->text, step_rows(e));
  qvl_status s = decoder_work_init(m->text, step_rows(e), &e->work);
  if (s == QVL_OK)
    s = image_cache_init(cfg.image_cache_mb * 1024 * 1024, &e->ic);
  if (s == QVL_OK)
    s = prefix_cache_init_type(cfg.prefix_cache_mb * 1024 * 1024, hp->n_layer, hp->n_head_kv * hp->head_dim,
                               cfg.kv_type, &e->pc);
  pthread_mutex_init(&e->mu, NULL);
  cond_init_monotonic(&e->cv);
  if (s == QVL_OK && pthread_create(&e->thread, NULL, engine_main, e) != 0)
    s = qvl_errorf(QVL_ERR_INTERNAL, "engine: cannot start the engine thread");
  if (s != QVL_OK) {
    engine_free(e);
    return s;
  }
  log_info("engine: batch %d, queue %d, context %lld, KV budget %lld MiB (%s, %.1f KiB per token), image cache %lld "
           "MiB, prefix cache %lld MiB, prefill chunk %d",
           cfg.max_batch_size, cfg.queue_capacity, (long long)cfg.n_ctx, (long long)cfg.kv_cache_mb,
           kv_type_name(cfg.kv_type),
           (double)kv_cache_bytes_type(hp->n_layer, 1, hp->n_head_kv * hp->head_dim, cfg.kv_type) / 1024.0,
           (long long)cfg.image_cache_mb, (long long)cfg.prefix_cache_mb, cfg.prefill_chunk);
  *out = e;
  return QVL_OK;
}

void engine_stop(engine *e, bool drain) {
  if (!e)
    return;
  pthread_mutex_lock(&e->mu);
  /* Atomic stores: mask_poll reads them without the lock. */
  __atomic_store_n(&e->drain, drain, __ATOMIC_RELAXED);
  __atomic_store_n(&e->stopping, true, __ATOMIC_RELAXED);
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->thread, NULL);
  engine_free(e);
}
