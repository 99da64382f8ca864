/* What the public handles of include/qvl.h wrap (src/api/ only). */
#ifndef QVL_CAPI_API_IMPL_H
#define QVL_CAPI_API_IMPL_H

#include "engine/engine.h"
#include "engine/vlm.h"
#include "model/gguf.h"
#include "qvl.h"
#include "text/tokenizer.h"

struct qvl_tokenizer {
  tokenizer *t;
  gguf *g;        /* the file a standalone tokenizer was read from (NULL otherwise) */
  bool owned;     /* false: the model's own (freed with the model) */
};

struct qvl_model {
  vlm *v;
  struct qvl_tokenizer tok; /* t = v->tok, not owned */
};

struct qvl_engine {
  engine *e;
  const qvl_model *m;
};

struct qvl_result {
  const engine_result *r;
  const qvl_model *m;
};

#endif
