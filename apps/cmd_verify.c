/* qvl verify MODEL|DIR or --hf REPO[:QUANT] — checks model files against their recorded sha256. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "model/hub.h"
#include "model/verify.h"

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
  hub_files f = {0};
  if (hf) {
    hub_opts o = {0};
    o.offline = 1; /* verify what is in the cache; never download */
    qvl_status s = hub_resolve(&o, hf, &f);
    if (s != QVL_OK)
      return report_error("verify", s);
    path = f.dir;
  }
  verify_report rep = {.out = stdout};
  qvl_status s = verify_model(path, &rep);
  printf("%u checked: %u ok, %u damaged, %u missing\n", rep.n_files, rep.n_ok, rep.n_bad, rep.n_missing);
  hub_files_free(&f);
  return s == QVL_OK ? 0 : report_error("verify", s);
}
