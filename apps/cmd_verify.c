/* qvl verify MODEL|DIR or --hf REPO[:QUANT] — checks model files against their recorded sha256. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

int cmd_verify(int argc, char **argv) {
  const char *path = NULL, *hf = NULL, *v;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--hf", NULL, &v))
      hf = v;
    else if (arg_flag(argv, i, "--help", "-h")) {
      printf("usage: qvl verify MODEL.gguf|DIR   or   qvl verify --hf REPO[:QUANT]\n"
             "  Checks files against qvl-manifest.json (written by downloads), SHA256SUMS or FILE.sha256.\n");
      return 0;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "qvl verify: unknown option '%s'\n", argv[i]);
      return 2;
    } else
      path = argv[i];
  }
  if (!!path == !!hf) {
    fprintf(stderr, "usage: qvl verify MODEL.gguf|DIR   or   qvl verify --hf REPO[:QUANT]\n");
    return 2;
  }
  qvl_verify_counts c;
  qvl_status s = qvl_verify(path, hf, stdout, &c);
  if (s != QVL_OK && hf && c.n_files == 0 && c.n_missing == 0)
    return report_error("verify", s); /* the repository is not in the cache */
  printf("%u checked: %u ok, %u damaged, %u missing\n", c.n_files, c.n_ok, c.n_bad, c.n_missing);
  return s == QVL_OK ? 0 : report_error("verify", s);
}
