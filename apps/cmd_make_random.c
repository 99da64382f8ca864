/*
 * qvl make-random — writes a random-weight Qwen3-VL model with the exact 2B shapes (or a tiny one)
 * as llama.cpp-layout GGUF: the benchmark model, loadable by qvl and llama.cpp alike.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/random_model.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: qvl make-random --tokenizer-from GGUF [--text-type T --out-text FILE] "
          "[--mmproj-type T --out-mmproj FILE] [--tiny] [--seed N]\n"
          "  Text types: f16 bf16 q8_0 q4_0 q4_k; mmproj types: f16 q8_0.\n"
          "  --tokenizer-from: a GGUF whose tokenizer.* keys are copied (the real Qwen3 tokenizer is in\n"
          "                    tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf)\n"
          "  --tiny: 2 layers of 256 instead of the 2B shapes (for tests)\n");
}

int cmd_make_random(int argc, char **argv) {
  const char *tok_path = NULL, *out_text = NULL, *out_mmproj = NULL, *v;
  const char *text_type = "q8_0", *mmproj_type = "f16";
  bool tiny = false;
  uint64_t seed = 42;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--tokenizer-from", NULL, &v))
      tok_path = v;
    else if (arg_value(argc, argv, &i, "--out-text", NULL, &v))
      out_text = v;
    else if (arg_value(argc, argv, &i, "--out-mmproj", NULL, &v))
      out_mmproj = v;
    else if (arg_value(argc, argv, &i, "--text-type", NULL, &v))
      text_type = v;
    else if (arg_value(argc, argv, &i, "--mmproj-type", NULL, &v))
      mmproj_type = v;
    else if (arg_value(argc, argv, &i, "--seed", NULL, &v))
      seed = (uint64_t)arg_int("--seed", v, 0, INT64_MAX);
    else if (arg_flag(argv, i, "--tiny", NULL))
      tiny = true;
    else if (arg_flag(argv, i, "--help", "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "qvl make-random: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!out_text && !out_mmproj) {
    usage(stderr);
    return 2;
  }
  qvl_dtype tt, mt;
  if (!dtype_from_name(text_type, &tt) ||
      (tt != QVL_DTYPE_F16 && tt != QVL_DTYPE_BF16 && tt != QVL_DTYPE_Q8_0 && tt != QVL_DTYPE_Q4_0 &&
       tt != QVL_DTYPE_Q4_K && tt != QVL_DTYPE_F32)) {
    fprintf(stderr, "qvl make-random: text type '%s' is not one of f32 f16 bf16 q8_0 q4_0 q4_k\n", text_type);
    return 2;
  }
  if (!dtype_from_name(mmproj_type, &mt) || (mt != QVL_DTYPE_F16 && mt != QVL_DTYPE_Q8_0 && mt != QVL_DTYPE_F32)) {
    fprintf(stderr, "qvl make-random: mmproj type '%s' is not one of f32 f16 q8_0\n", mmproj_type);
    return 2;
  }
  qvl_status s = kernels_init(NULL, 0);
  if (s != QVL_OK)
    return report_error("kernels", s);
  random_text_shape ts = random_text_shape_2b();
  random_vision_shape vs = random_vision_shape_2b();
  if (tiny) {
    ts.n_embd = 256, ts.n_layer = 2, ts.n_head = 4, ts.n_head_kv = 2, ts.head_dim = 64, ts.n_ff = 512;
    ts.n_deepstack = 1, ts.sections[0] = 12, ts.sections[1] = 10, ts.sections[2] = 10;
    vs.n_embd = 64, vs.n_layer = 2, vs.n_head = 2, vs.n_ff = 128, vs.proj_dim = 256, vs.pos_side = 8;
    vs.n_deepstack = 1, vs.deepstack_layers[0] = 0;
  }
  if (out_text) {
    if (!tok_path) {
      fprintf(stderr, "qvl make-random: --tokenizer-from GGUF is required for the text model\n");
      return 2;
    }
    gguf *g = NULL;
    s = gguf_open(tok_path, &g);
    if (s == QVL_OK) {
      int64_t idx = gguf_find_key(g, "tokenizer.ggml.tokens");
      if (idx >= 0)
        ts.n_vocab = (int64_t)gguf_array_len(g, idx);
      fprintf(stderr, "qvl make-random: writing %s (%s)...\n", out_text, dtype_name(tt));
      s = random_text_write(&ts, tt, g, seed, out_text);
    }
    gguf_close(g);
    if (s != QVL_OK)
      return report_error("make-random (text)", s);
  }
  if (out_mmproj) {
    fprintf(stderr, "qvl make-random: writing %s (%s)...\n", out_mmproj, dtype_name(mt));
    s = random_mmproj_write(&vs, mt, seed, out_mmproj);
    if (s != QVL_OK)
      return report_error("make-random (mmproj)", s);
  }
  return 0;
}
