#include "engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/timing.h"

gen_params gen_params_default(void) {
  gen_params g = {0};
  g.sampling = sampler_default_params();
  g.max_tokens = 512;
  g.reasoning_budget = -1;
  return g;
}

void gen_result_free(gen_result *r) {
  buf_free(&r->text);
  free(r->ids);
  memset(r, 0, sizeof *r);
}

gen_seq_config gen_seq_config_of(const vlm *m, const gen_params *gp, const int32_t *prompt, int64_t n_prompt) {
  return (gen_seq_config){.tok = m->tok,
                          .n_vocab = m->text->hp.n_vocab,
                          .sampling = &gp->sampling,
                          .prompt = prompt,
                          .n_prompt = n_prompt,
                          .eos_ids = m->eos_ids,
                          .n_eos = m->n_eos,
                          .ignore_eos = gp->ignore_eos,
                          .stop = gp->stop,
                          .n_stop = gp->n_stop,
                          .max_tokens = gp->max_tokens,
                          .reasoning = gp->reasoning,
                          .reasoning_budget = gp->reasoning_budget,
                          .think_close = m->think_close,
                          .n_think_close = m->n_think_close};
}

qvl_status generate(const vlm *m, const vlm_prompt *p, const gen_params *gp, gen_stream_fn stream,
                    void *user, gen_result *out) {
  memset(out, 0, sizeof *out);
  out->n_prompt = p->n;
  if (gp->max_tokens <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "max_tokens must be positive");
  if (p->n <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "the prompt is empty");
  QVL_TRY(sampler_check_params(&gp->sampling));
  decoder_seq *seq = NULL;
  gen_seq *g = NULL;
  decoder_seq_params sp = {.n_ctx = gp->n_ctx > 0 ? gp->n_ctx : p->n + gp->max_tokens, .n_batch = 0};
  qvl_status s = decoder_seq_init(m->text, &sp, &seq);
  if (s == QVL_OK)
    s = decoder_seq_check_fit(seq, p->n, gp->max_tokens);
  if (s == QVL_OK) {
    gen_seq_config gc = gen_seq_config_of(m, gp, p->ids, p->n);
    s = gen_seq_init(&gc, &g);
  }
  double t0 = time_now_s();
  const float *logits = NULL;
  if (s == QVL_OK) {
    decoder_input in = vlm_prompt_input(p);
    s = decoder_prefill(seq, &in, NULL, &logits);
  }
  out->prefill_ms = (time_now_s() - t0) * 1e3;
  while (s == QVL_OK) {
    int32_t id;
    bool done;
    s = gen_seq_next(g, logits, stream, user, &id, &done);
    if (s != QVL_OK || done)
      break;
    s = decoder_step(seq, id, &logits);
  }
  if (g) {
    double t_first = gen_seq_t_first(g);
    if (t_first > 0) {
      out->ttft_ms = (t_first - t0) * 1e3;
      out->decode_ms = (time_now_s() - t_first) * 1e3;
    }
    out->reason = s == QVL_OK ? gen_seq_reason(g) : QVL_FINISH_NONE;
    size_t len;
    const char *text = gen_seq_text(g, &len);
    const int32_t *ids = gen_seq_ids(g, &out->n_ids);
    qvl_status bs = buf_append(&out->text, text, len);
    if (bs == QVL_OK && !(out->ids = malloc(sizeof *out->ids * (size_t)(out->n_ids > 0 ? out->n_ids : 1))))
      bs = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    if (out->ids)
      memcpy(out->ids, ids, sizeof *ids * (size_t)out->n_ids);
    if (s == QVL_OK)
      s = bs;
  }
  gen_seq_free(g);
  decoder_seq_free(seq);
  return s;
}
