/* qvl dump — the options of qvl_dump_case (qvl_tools.h). */
#include <stdio.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

int cmd_dump(int argc, char **argv) {
  if (args_take_kv_type(&argc, argv, 2, "qvl dump"))
    return 2;
  if (args_take_precision(&argc, argv, 2, "qvl dump"))
    return 2;
  const char *paths[2] = {0};
  int np = 0;
  bool use_hf = false;
  for (int i = 2; i < argc; i++) {
    if (arg_flag(argv, i, "--help", "-h")) {
      printf("usage: qvl dump [--hf] [--precision exact|fast] CASE.json OUT.safetensors\n"
             "  --hf   load the case's Hugging Face directory (model.hf_dir) instead of its GGUF files\n"
             "  --precision   vision tower tier (default fast; QVL_PRECISION)\n");
      return 0;
    }
    if (arg_flag(argv, i, "--hf", NULL)) {
      use_hf = true;
      continue;
    }
    if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "qvl dump: unknown option '%s'\n", argv[i]);
      return 2;
    }
    if (np == 2) {
      fprintf(stderr, "qvl dump: too many arguments\n");
      return 2;
    }
    paths[np++] = argv[i];
  }
  if (np != 2) {
    fprintf(stderr, "usage: qvl dump [--hf] CASE.json OUT.safetensors\n");
    return 2;
  }
  qvl_status s = qvl_dump_case(paths[0], paths[1], use_hf);
  return s == QVL_OK ? 0 : report_error("dump", s);
}
