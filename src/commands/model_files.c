/* Model file tools of qvl_tools.h: qvl_convert, qvl_verify, qvl_make_random. */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "engine/hf_convert.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "hub/hub.h"
#include "model/random_model.h"
#include "model/verify.h"
#include "model/wtable.h"
#include "qvl_tools.h"

qvl_status qvl_convert(const char *hf_dir, const char *outtype, const char *out_text, const char *out_mmproj,
                       const char *name) {
  hf_convert_opts o = {.outtype = QVL_DTYPE_F16, .out_text = out_text, .out_mmproj = out_mmproj, .name = name};
  if (outtype && !wtable_parse_dtype(outtype, &o.outtype))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "outtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k", outtype);
  return hf_convert(hf_dir, &o);
}

qvl_status qvl_verify(const char *path, const char *hf, FILE *out, qvl_verify_counts *counts) {
  memset(counts, 0, sizeof *counts);
  hub_files f;
  memset(&f, 0, sizeof f);
  if (hf) {
    hub_opts o = {0};
    o.offline = 1; /* verify what is in the cache; never download */
    o.cache_only = "qvl verify checks the cache only";
    QVL_TRY(hub_resolve(&o, hf, &f));
    path = f.dir;
  }
  verify_report rep = {.out = out};
  qvl_status s = verify_model(path, &rep);
  counts->n_files = rep.n_files;
  counts->n_ok = rep.n_ok;
  counts->n_bad = rep.n_bad;
  counts->n_missing = rep.n_missing;
  hub_files_free(&f);
  return s;
}

qvl_status qvl_make_random(const qvl_random_opts *o) {
  const char *text_type = o->text_type ? o->text_type : "q8_0";
  const char *mmproj_type = o->mmproj_type ? o->mmproj_type : "f16";
  qvl_dtype tt, mt;
  if (!dtype_from_name(text_type, &tt) ||
      (tt != QVL_DTYPE_F16 && tt != QVL_DTYPE_BF16 && tt != QVL_DTYPE_Q8_0 && tt != QVL_DTYPE_Q4_0 &&
       tt != QVL_DTYPE_Q4_K && tt != QVL_DTYPE_F32))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "text type '%s' is not one of f32 f16 bf16 q8_0 q4_0 q4_k", text_type);
  if (!dtype_from_name(mmproj_type, &mt) || (mt != QVL_DTYPE_F16 && mt != QVL_DTYPE_Q8_0 && mt != QVL_DTYPE_F32))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "mmproj type '%s' is not one of f32 f16 q8_0", mmproj_type);
  if (o->out_text && !o->tokenizer_from)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "--tokenizer-from GGUF is required for the text model");
  QVL_TRY(kernels_init(NULL, 0));
  random_text_shape ts = random_text_shape_2b();
  random_vision_shape vs = random_vision_shape_2b();
  if (o->tiny) {
    ts.n_embd = 256, ts.n_layer = 2, ts.n_head = 4, ts.n_head_kv = 2, ts.head_dim = 64, ts.n_ff = 512;
    ts.n_deepstack = 1, ts.sections[0] = 12, ts.sections[1] = 10, ts.sections[2] = 10;
    vs.n_embd = 64, vs.n_layer = 2, vs.n_head = 2, vs.n_ff = 128, vs.proj_dim = 256, vs.pos_side = 8;
    vs.n_deepstack = 1, vs.deepstack_layers[0] = 0;
  }
  buf tmpl = {0};
  if (o->chat_template) {
    qvl_status rs = buf_read_file(o->chat_template, 1 << 20, &tmpl);
    if (rs != QVL_OK) {
      buf_free(&tmpl);
      return qvl_error_prefix(rs, "--chat-template");
    }
    ts.chat_template = tmpl.data;
  }
  qvl_status s = QVL_OK;
  if (o->out_text) {
    gguf *g = NULL;
    s = gguf_open(o->tokenizer_from, &g);
    if (s == QVL_OK) {
      int64_t idx = gguf_find_key(g, "tokenizer.ggml.tokens");
      if (idx >= 0)
        ts.n_vocab = (int64_t)gguf_array_len(g, idx);
      fprintf(stderr, "qvl make-random: writing %s (%s)...\n", o->out_text, dtype_name(tt));
      s = random_text_write(&ts, tt, g, o->seed, o->out_text);
    }
    gguf_close(g);
    buf_free(&tmpl);
    if (s != QVL_OK)
      return qvl_error_prefix(s, "make-random (text)");
  }
  buf_free(&tmpl);
  if (o->out_mmproj) {
    fprintf(stderr, "qvl make-random: writing %s (%s)...\n", o->out_mmproj, dtype_name(mt));
    s = random_mmproj_write(&vs, mt, o->seed, o->out_mmproj);
    if (s != QVL_OK)
      return qvl_error_prefix(s, "make-random (mmproj)");
  }
  return QVL_OK;
}
