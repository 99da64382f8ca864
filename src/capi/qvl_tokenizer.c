/* qvl_tokenizer (include/qvl.h): a model's tokenizer, or one read alone from a GGUF file or an
 * HF directory's tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capi/api_impl.h"
#include "base/buf.h"
#include "base/status.h"

const qvl_tokenizer *qvl_model_tokenizer(const qvl_model *m) { return &m->tok; }

qvl_status qvl_tokenizer_load(const char *path, qvl_tokenizer **out) {
  *out = NULL;
  qvl_tokenizer *t = calloc(1, sizeof *t);
  if (!t)
    return qvl_errorf(QVL_ERR_NOMEM, "tokenizer: out of memory");
  t->owned = true;
  qvl_status s;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    char json[4096];
    snprintf(json, sizeof json, "%s/tokenizer.json", path);
    s = tokenizer_init_hf(json, &t->t);
  } else {
    s = gguf_open(path, &t->g);
    if (s == QVL_OK)
      s = tokenizer_init_gguf(t->g, &t->t);
  }
  if (s != QVL_OK) {
    qvl_tokenizer_free(t);
    return s;
  }
  *out = t;
  return QVL_OK;
}

void qvl_tokenizer_free(qvl_tokenizer *t) {
  if (!t || !t->owned)
    return;
  tokenizer_free(t->t);
  gguf_close(t->g);
  free(t);
}

qvl_status qvl_tokenize(const qvl_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
  return tokenizer_encode(t->t, text ? text : "", text ? len : 0, ids, n_ids);
}

qvl_status qvl_detokenize(const qvl_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text) {
  buf b = {0};
  return buf_finish(&b, tokenizer_decode(t->t, ids, n, skip_special, &b), text, NULL);
}

int32_t qvl_n_vocab(const qvl_tokenizer *t) { return tokenizer_vocab_size(t->t); }
