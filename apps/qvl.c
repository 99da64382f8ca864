/* qvl command line: run, tokenize, dump, bench, serve. The only code that exits the process. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "qvl.h"
#include "qvl_tools.h"

static void usage(FILE *f) {
  fprintf(f,
          "qvl %s — Qwen3-VL on CPUs\n"
          "usage: qvl <command> [options]\n"
          "commands:\n"
          "  run       generate a reply: qvl run -m MODEL.gguf|HF_DIR [--mmproj MMPROJ.gguf] [--image F] -p PROMPT\n"
          "  chat      conversation in the terminal: qvl chat -m MODEL.gguf [--mmproj MMPROJ.gguf]\n"
          "  serve     OpenAI-compatible HTTP service: qvl serve -m MODEL.gguf [--mmproj MMPROJ.gguf] [--port P]\n"
          "  tokenize  print token ids: qvl tokenize -m MODEL.gguf TEXT|-\n"
          "  dump      run a fixture case: qvl dump [--hf] CASE.json OUT.safetensors\n"
          "  convert   HF directory to llama.cpp GGUF: qvl convert --hf-dir DIR --outtype q8_0 --out-text T.gguf "
          "--out-mmproj M.gguf\n"
          "  verify    check model files against recorded sha256: qvl verify MODEL|--hf REPO[:QUANT]\n"
          "  loadtest  concurrency table of a running server: qvl loadtest http://HOST:PORT --image F [--svg F]\n"
          "  make-random  write a random-weight model with the 2B shapes (benchmarks)\n"
          "  bench     stage-by-stage speed and batched decode throughput: qvl bench -m MODEL.gguf [--mmproj F]\n"
          "  tune      measure the kernels' choices on this CPU again: qvl tune -m MODEL.gguf [--mmproj F]\n"
          "  batch     one prompt over a folder of images/videos, resumable: qvl batch -m M --mmproj F -p P -o OUT.jsonl DIR\n",
          QVL_VERSION);
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  /* Every command that loads weights reuses (or writes) the kernels' tuning in the cache folder;
   * without a cache folder (no HOME) the process just measures for itself. */
  (void)qvl_tune_use_cache();
  if (!strcmp(argv[1], "tune"))
    return cmd_tune(argc, argv);
  if (!strcmp(argv[1], "batch"))
    return cmd_batch(argc, argv);
  if (!strcmp(argv[1], "run"))
    return cmd_run(argc, argv);
  if (!strcmp(argv[1], "chat"))
    return cmd_chat(argc, argv);
  if (!strcmp(argv[1], "loadtest"))
    return cmd_loadtest(argc, argv);
  if (!strcmp(argv[1], "serve"))
    return cmd_serve(argc, argv);
  if (!strcmp(argv[1], "tokenize"))
    return cmd_tokenize(argc, argv);
  if (!strcmp(argv[1], "make-random"))
    return cmd_make_random(argc, argv);
  if (!strcmp(argv[1], "verify"))
    return cmd_verify(argc, argv);
  if (!strcmp(argv[1], "dump"))
    return cmd_dump(argc, argv);
  if (!strcmp(argv[1], "bench"))
    return cmd_bench(argc, argv);
  if (!strcmp(argv[1], "convert"))
    return cmd_convert(argc, argv);
  fprintf(stderr, "qvl: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
