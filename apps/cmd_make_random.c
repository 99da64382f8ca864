/*
 * qvl make-random — writes a random-weight Qwen3-VL model with the exact 2B shapes (or a tiny one)
 * as llama.cpp-layout GGUF: the benchmark model, loadable by qvl and llama.cpp alike.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct random_opts {
  const char *tokenizer_from, *out_text, *out_mmproj, *text_type, *mmproj_type, *chat_template;
  int64_t seed;
  bool tiny;
} random_opts;

static const qvl_opt o_tokenizer_from = {
    "tokenizer_from", NULL, QVL_OPT_STR, .meta = "GGUF",
    .help = "a GGUF whose tokenizer.* keys are copied (the real Qwen3 tokenizer is in "
            "tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf)"};
static const qvl_opt o_text_type = {"text_type", NULL, QVL_OPT_STR, .meta = "T",
                                    .help = "text matrices: f32 f16 bf16 q8_0 q4_0 q4_k (checked by qvl_make_random)"};
static const qvl_opt o_mmproj_type = {"mmproj_type", NULL, QVL_OPT_STR, .meta = "T",
                                      .help = "vision matrices: f32 f16 q8_0"};
static const qvl_opt o_tiny = {"tiny", NULL, QVL_OPT_BOOL, .help = "2 layers of 256 instead of the 2B shapes (for tests)"};
static const qvl_opt o_chat_template = {
    "chat_template", NULL, QVL_OPT_STR, .meta = "FILE",
    .help = "the text model's tokenizer.chat_template (e.g. the Qwen3-VL Thinking template: a reasoning model)"};

static const qvl_opt_bind random_binds[] = {
    QVL_OPT_FIELD(o_tokenizer_from, random_opts, tokenizer_from), QVL_OPT_FIELD(o_text_type, random_opts, text_type),
    QVL_OPT_FIELD(qvl_opt_out_text, random_opts, out_text),             QVL_OPT_FIELD(o_mmproj_type, random_opts, mmproj_type),
    QVL_OPT_FIELD(qvl_opt_out_mmproj, random_opts, out_mmproj),         QVL_OPT_FIELD(o_tiny, random_opts, tiny),
    QVL_OPT_FIELD(qvl_opt_seed, random_opts, seed),               QVL_OPT_FIELD(o_chat_template, random_opts, chat_template),
};

static const qvl_opt_cmd random_cmd = {
    .name = "qvl make-random",
    .usage = "usage: qvl make-random --tokenizer-from GGUF [--text-type T --out-text FILE] [--mmproj-type T --out-mmproj FILE]\n"
    "                       [--tiny] [--seed N] [--chat-template FILE]\n",
    .notes = NULL,
    .opts = random_binds,
    .n_opts = sizeof random_binds / sizeof random_binds[0]};

int cmd_make_random(int argc, char **argv) {
  random_opts a = {.text_type = "q8_0", .mmproj_type = "f16", .seed = 42};
  int rc = args_parse(&random_cmd, argc, argv, &a, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (!a.out_text && !a.out_mmproj)
    return args_usage_error(&random_cmd, &a, "give --out-text and/or --out-mmproj");
  qvl_random_opts o = {.tokenizer_from = a.tokenizer_from, .out_text = a.out_text, .out_mmproj = a.out_mmproj,
                       .text_type = a.text_type, .mmproj_type = a.mmproj_type, .seed = (uint64_t)a.seed,
                       .tiny = a.tiny, .chat_template = a.chat_template};
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
