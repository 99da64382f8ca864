#include "engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/timing.h"

gen_params gen_params_default(void) {
  gen_params g = {0};
  g.sampling = sampler_default_params();
  g.max_tokens = 512;
  return g;
}

void gen_result_free(gen_result *r) {
  buf_free(&r->text);
  free(r->ids);
  memset(r, 0, sizeof *r);
}

/* Bytes a token contributes to the visible text: control tokens (<|im_start|>, ...) are skipped,
 * as transformers' decode(skip_special_tokens=True) does. */
static const char *visible_bytes(const tokenizer *t, int32_t id, size_t *len) {
  if (tokenizer_is_special(t, id)) {
    *len = 0;
    return "";
  }
  const char *b = tokenizer_token_bytes(t, id, len);
  if (!b) {
    *len = 0;
    return "";
  }
  return b;
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
  sampler *smp = NULL;
  stop_state *st = NULL;
  float *work = NULL;
  int64_t vocab = m->text->hp.n_vocab;
  decoder_seq_params sp = {.n_ctx = gp->n_ctx > 0 ? gp->n_ctx : p->n + gp->max_tokens, .n_batch = 0};
  qvl_status s = decoder_seq_init(m->text, &sp, &seq);
  if (s == QVL_OK)
    s = decoder_seq_check_fit(seq, p->n, gp->max_tokens);
  if (s == QVL_OK)
    s = sampler_init(&gp->sampling, vocab, &smp);
  if (s == QVL_OK)
    s = sampler_add_prompt(smp, p->ids, p->n);
  if (s == QVL_OK) {
    stop_params stp = {.eos_ids = gp->ignore_eos ? NULL : m->eos_ids,
                       .n_eos = gp->ignore_eos ? 0 : m->n_eos,
                       .strings = gp->stop,
                       .n_strings = gp->n_stop,
                       .max_tokens = gp->max_tokens};
    s = stop_init(&stp, &st);
  }
  out->ids = malloc(sizeof *out->ids * (size_t)gp->max_tokens);
  work = malloc(sizeof *work * (size_t)vocab);
  if (s == QVL_OK && (!out->ids || !work))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  double t0 = time_now_s(), t_first = 0;
  const float *logits = NULL;
  if (s == QVL_OK) {
    decoder_input in = vlm_prompt_input(p);
    s = decoder_prefill(seq, &in, NULL, &logits);
  }
  out->prefill_ms = (time_now_s() - t0) * 1e3;
  size_t sent = 0;
  while (s == QVL_OK) {
    memcpy(work, logits, sizeof *work * (size_t)vocab);
    int32_t id = sampler_sample(smp, work);
    if (out->n_ids == 0) {
      t_first = time_now_s();
      out->ttft_ms = (t_first - t0) * 1e3;
    }
    out->ids[out->n_ids++] = id;
    s = sampler_accept(smp, id);
    if (s != QVL_OK)
      break;
    size_t nb;
    const char *bytes = visible_bytes(m->tok, id, &nb);
    stop_reason r = stop_push(st, id, bytes, nb);
    if ((s = stop_error(st)) != QVL_OK)
      break;
    size_t len, ready = stop_ready(st);
    const char *text = stop_text(st, &len);
    if (stream && ready > sent) {
      if (!stream(user, text + sent, ready - sent)) {
        s = qvl_errorf(QVL_ERR_CANCELLED, "generation cancelled");
        sent = ready;
        break;
      }
    }
    sent = ready;
    if (r != STOP_NONE) {
      out->reason = r;
      break;
    }
    s = decoder_step(seq, id, &logits);
  }
  if (t_first > 0)
    out->decode_ms = (time_now_s() - t_first) * 1e3;
  if (st) {
    size_t len;
    const char *text = stop_text(st, &len);
    qvl_status bs = buf_append(&out->text, text, len);
    if (s == QVL_OK)
      s = bs;
  }
  free(work);
  stop_free(st);
  sampler_free(smp);
  decoder_seq_free(seq);
  return s;
}
