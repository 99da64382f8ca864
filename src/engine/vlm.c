#include "engine/vlm.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "base/timing.h"
#include "engine/model_sampling.h"
#include "model/verify.h"
#include "model/wtable.h"
#include "text/chat.h"

static int32_t require_token(const tokenizer *t, const char *text, const char *path, qvl_status *s) {
  int32_t id = tokenizer_find(t, text);
  if (id < 0 && *s == QVL_OK)
    *s = qvl_errorf(QVL_ERR_FORMAT, "%s: the vocabulary has no '%s' token (not a Qwen3-VL tokenizer?)", path, text);
  return id;
}

/* Re-encodes the matrices of t as *dt when a dtype is asked for; frees t when that fails. */
static qvl_status convert_table(wtable *t, const qvl_dtype *dt, wtable_kind kind) {
  qvl_status s = dt ? wtable_convert(t, *dt, kind) : QVL_OK;
  if (s != QVL_OK)
    wtable_free(t);
  return s;
}

/* Builds the decoder / vision tower from a weight table (taken), re-encoding its matrices first
 * when a dtype is asked for. */
static qvl_status init_text(const decoder_hparams *hp, wtable *t, const qvl_dtype *dt, decoder_model **out) {
  QVL_TRY(convert_table(t, dt, WTABLE_TEXT));
  tensor_source src = wtable_source(t);
  return decoder_init(hp, &src, out);
}

static qvl_status init_vision(const vision_hparams *hp, wtable *t, const qvl_dtype *dt, kn_precision prec,
                              vision_model **out) {
  QVL_TRY(convert_table(t, dt, WTABLE_VISION));
  tensor_source src = wtable_source(t);
  return vision_init_prec(hp, &src, prec, out);
}

/* The weight table of an open GGUF (g is taken) whose hyper-parameters were read with status
 * hparams: g is closed when that failed. */
static qvl_status gguf_table(gguf *g, qvl_status hparams, wtable **out) {
  if (hparams != QVL_OK) {
    gguf_close(g);
    return hparams;
  }
  return wtable_from_gguf(g, out);
}

/* The text decoder of an open GGUF (g is taken). */
static qvl_status load_text_gguf(gguf *g, const qvl_dtype *dt, decoder_model **out) {
  if (!dt)
    return decoder_load_gguf_file(g, out);
  decoder_hparams hp;
  wtable *t;
  QVL_TRY(gguf_table(g, decoder_hparams_from_gguf(g, &hp), &t));
  return init_text(&hp, t, dt, out);
}

static qvl_status load_vision_gguf(const char *path, const qvl_dtype *dt, kn_precision prec, vision_model **out) {
  if (!dt)
    return vision_load_gguf_prec(path, prec, out);
  gguf *g;
  QVL_TRY(gguf_open(path, &g));
  vision_hparams hp;
  wtable *t;
  QVL_TRY(gguf_table(g, vision_hparams_from_gguf(g, &hp), &t));
  return init_vision(&hp, t, dt, prec, out);
}

/* A Hugging Face directory: tokenizer.json, then the weight tables under GGUF names. */
static qvl_status load_hf(const char *dir, const qvl_dtype *dt, kn_precision prec, vlm *m) {
  QVL_TRY(hf_model_open(dir, &m->hf));
  const hf_config *c = hf_model_config(m->hf);
  QVL_TRY(tokenizer_init_hf(hf_model_path(m->hf, "tokenizer.json"), &m->tok));
  wtable *t;
  QVL_TRY(hf_model_text_weights(m->hf, &t));
  QVL_TRY(init_text(&c->text, t, dt, &m->text));
  if (c->has_vision) {
    QVL_TRY(hf_model_vision_weights(m->hf, &t));
    QVL_TRY(init_vision(&c->vision, t, dt, prec, &m->vision));
    QVL_TRY(vision_check_text(m->vision, m->text->hp.n_embd, m->text->hp.n_deepstack));
  }
  /* config.json names the image tokens; a tokenizer that disagrees would place images wrongly. */
  const struct {
    const char *text;
    int32_t id;
  } ids[] = {{"<|image_pad|>", c->image_token_id},
             {"<|vision_start|>", c->vision_start_token_id},
             {"<|vision_end|>", c->vision_end_token_id}};
  for (int i = 0; i < 3; i++) {
    int32_t got = tokenizer_find(m->tok, ids[i].text);
    if (ids[i].id >= 0 && got != ids[i].id)
      return qvl_errorf(QVL_ERR_MISMATCH, "%s: config.json gives %s the id %d, the tokenizer %d", dir,
                        ids[i].text, (int)ids[i].id, (int)got);
  }
  return QVL_OK;
}

qvl_status vlm_load(const vlm_paths *p, vlm **out) { return vlm_load_with(p, NULL, out); }

qvl_status vlm_load_with(const vlm_paths *p, const vlm_load_opts *o, vlm **out) {
  *out = NULL;
  const char *hf_dir = o && o->hf_dir && *o->hf_dir ? o->hf_dir : NULL;
  if (!hf_dir && p->model && hf_model_is_dir(p->model)) {
    if (p->mmproj && *p->mmproj)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "%s is a Hugging Face directory (it holds the vision tower too); "
                        "it takes no --mmproj", p->model);
    hf_dir = p->model;
  }
  bool hf = hf_dir != NULL;
  if (!hf && (!p->model || !*p->model))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "no model file given (-m MODEL.gguf)");
  if (hf && hf_dir != p->model && ((p->model && *p->model) || (p->mmproj && *p->mmproj)))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "give either a Hugging Face directory or GGUF files, not both");
  const char *dts = o ? o->dtype : NULL;
  qvl_dtype dtype;
  if (dts && !wtable_parse_dtype(dts, &dtype))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "unknown weight type '%s' (expected f32, bf16, f16, q8_0, q4_0 or q4_k)",
                      dts);
  const qvl_dtype *dt = dts ? &dtype : NULL;
  kn_precision prec = vision_precision();
  if (o && o->precision)
    QVL_TRY(kn_precision_parse(o->precision, &prec));
  const char *label = hf ? hf_dir : p->model;
  vlm *m = calloc(1, sizeof *m);
  if (!m)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  gguf *g = NULL;
  qvl_status s = QVL_OK;
  m->sampling = model_sampling_qwen3vl();
  if (hf) {
    s = load_hf(hf_dir, dt, prec, m);
    if (s == QVL_OK) {
      model_sampling_from_hf(hf_model_config(m->hf), &m->sampling);
      m->thinking = chat_template_is_thinking(hf_model_chat_template(m->hf));
    }
  } else {
    /* A file whose size differs from what a download recorded is damaged: say so instead of failing
     * later with a parse error (or, worse, loading garbage). */
    s = verify_quick(p->model);
    if (s == QVL_OK && p->mmproj && *p->mmproj)
      s = verify_quick(p->mmproj);
    if (s == QVL_OK)
      s = gguf_open(p->model, &g);
    if (s == QVL_OK)
      s = tokenizer_init_gguf(g, &m->tok);
    if (s == QVL_OK)
      s = model_sampling_from_gguf(g, &m->sampling);
    if (s == QVL_OK && gguf_find_key(g, "tokenizer.chat_template") >= 0) {
      const char *tmpl = NULL;
      if (gguf_get_str(g, "tokenizer.chat_template", &tmpl) == QVL_OK)
        m->thinking = chat_template_is_thinking(tmpl);
      qvl_error_clear();
    }
    if (s == QVL_OK) {
      s = load_text_gguf(g, dt, &m->text); /* takes ownership of g */
      g = NULL;
    }
    gguf_close(g);
    if (s == QVL_OK && p->mmproj && *p->mmproj) {
      s = load_vision_gguf(p->mmproj, dt, prec, &m->vision);
      if (s == QVL_OK)
        s = vision_check_text(m->vision, m->text->hp.n_embd, m->text->hp.n_deepstack);
      if (s != QVL_OK)
        qvl_error_prefix(s, "%s does not fit %s: ", p->mmproj, p->model);
    }
  }
  if (s == QVL_OK) {
    m->image_pad_id = require_token(m->tok, "<|image_pad|>", label, &s);
    m->vision_start_id = require_token(m->tok, "<|vision_start|>", label, &s);
    m->vision_end_id = require_token(m->tok, "<|vision_end|>", label, &s);
    m->video_pad_id = tokenizer_find(m->tok, "<|video_pad|>");
    int32_t im_end = tokenizer_find(m->tok, "<|im_end|>");
    int32_t eot = tokenizer_find(m->tok, "<|endoftext|>");
    if (im_end >= 0)
      m->eos_ids[m->n_eos++] = im_end;
    if (eot >= 0)
      m->eos_ids[m->n_eos++] = eot;
    if (m->n_eos == 0 && tokenizer_eos_id(m->tok) >= 0)
      m->eos_ids[m->n_eos++] = tokenizer_eos_id(m->tok);
    int32_t *close = NULL;
    size_t n_close = 0;
    if (s == QVL_OK && tokenizer_encode(m->tok, "\n</think>\n\n", 11, &close, &n_close) == QVL_OK &&
        n_close <= sizeof m->think_close / sizeof m->think_close[0]) {
      memcpy(m->think_close, close, sizeof *close * n_close);
      m->n_think_close = (int)n_close;
    }
    free(close);
    qvl_error_clear();
    m->pm = (prompt_model){.tok = m->tok, .vision = m->vision, .n_embd = m->text->hp.n_embd,
                           .image_pad_id = m->image_pad_id, .vision_start_id = m->vision_start_id,
                           .vision_end_id = m->vision_end_id, .video_pad_id = m->video_pad_id,
                           .thinking = m->thinking};
    if (s == QVL_OK && tokenizer_vocab_size(m->tok) > m->text->hp.n_vocab)
      s = qvl_errorf(QVL_ERR_MISMATCH, "%s: tokenizer has %d tokens but the embedding only %lld rows", label,
                     tokenizer_vocab_size(m->tok), (long long)m->text->hp.n_vocab);
  }
  if (s != QVL_OK) {
    vlm_free(m);
    return s;
  }
  *out = m;
  return QVL_OK;
}

void vlm_free(vlm *m) {
  if (!m)
    return;
  decoder_free(m->text);
  vision_free(m->vision);
  tokenizer_free(m->tok);
  hf_model_close(m->hf);
  free(m);
}

/* The old names of the prompt layer's entry points (prompt/prompt.h), on a loaded model. */
void vlm_prompt_opts_default(vlm_prompt_opts *o) { prompt_opts_default(o); }
void vlm_prompt_free(vlm_prompt *p) { prompt_free(p); }
decoder_input vlm_prompt_input(const vlm_prompt *p) { return prompt_input(p); }

qvl_status vlm_prompt_build(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, vlm_prompt *out) {
  return prompt_build(&m->pm, messages, o, out);
}

qvl_status vlm_prompt_from_ids(const vlm *m, const int32_t *ids, int64_t n, vlm_prompt *out) {
  return prompt_from_ids(&m->pm, ids, n, out);
}

qvl_status vlm_prompt_from_text(const vlm *m, const char *text, size_t len, vlm_prompt *out) {
  return prompt_from_text(&m->pm, text, len, out);
}
