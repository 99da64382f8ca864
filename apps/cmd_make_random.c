/*
 * qvl make-random — writes a random-weight Qwen3-VL model with the exact 2B shapes (or a tiny one)
 * as llama.cpp-layout GGUF: the benchmark model, loadable by qvl and llama.cpp alike.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: qvl make-random --tokenizer-from GGUF [--text-type T --out-text FILE] "
          "[--mmproj-type T --out-mmproj FILE] [--tiny] [--seed N] [--chat-template FILE]\n"
          "  Text types: f16 bf16 q8_0 q4_0 q4_k; mmproj types: f16 q8_0.\n"
          "  --tokenizer-from: a GGUF whose tokenizer.* keys are copied (the real Qwen3 tokenizer is in\n"
          "                    tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf)\n"
          "  --tiny: 2 layers of 256 instead of the 2B shapes (for tests)\n"
          "  --chat-template FILE: the text model's tokenizer.chat_template (e.g. the Qwen3-VL Thinking\n"
          "                    template: a reasoning model)\n");
}

int cmd_make_random(int argc, char **argv) {
  const char *tok_path = NULL, *out_text = NULL, *out_mmproj = NULL, *v;
  const char *text_type = "q8_0", *mmproj_type = "f16", *chat_template = NULL;
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
    else if (arg_value(argc, argv, &i, "--chat-template", NULL, &v))
      chat_template = v;
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
  qvl_random_opts o = {.tokenizer_from = tok_path, .out_text = out_text, .out_mmproj = out_mmproj,
                       .text_type = text_type, .mmproj_type = mmproj_type, .seed = seed, .tiny = tiny,
                       .chat_template = chat_template};
  qvl_status s = qvl_make_random(&o);
  if (s == QVL_ERR_INVALID_ARG) {
    fprintf(stderr, "qvl make-random: %s\n", qvl_last_error());
    return 2;
  }
  if (s != QVL_OK) {
    fprintf(stderr, "qvl: %s\n", qvl_last_error());
    return 1;
  }
  return 0;
}
