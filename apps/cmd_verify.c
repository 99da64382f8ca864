/* qvl verify MODEL|DIR or --hf REPO[:QUANT] — checks model files against their recorded sha256. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct verify_opts {
  const char *hf;
} verify_opts;

static const qvl_opt_bind verify_binds[] = {
    QVL_OPT_FIELD_HELP(qvl_opt_hf, verify_opts, hf, "the cached files of a Hugging Face repository (never downloads)")};

static const qvl_opt_cmd verify_cmd = {
    .name = "qvl verify",
    .usage = "usage: qvl verify MODEL.gguf|DIR   or   qvl verify --hf REPO[:QUANT]\n",
    .notes = "Checks files against qvl-manifest.json (written by downloads), SHA256SUMS or FILE.sha256.\n",
    .opts = verify_binds,
    .n_opts = sizeof verify_binds / sizeof verify_binds[0],
    .max_args = 1};

int cmd_verify(int argc, char **argv) {
  verify_opts o = {0};
  const char *path = NULL;
  int n = 0;
  int rc = args_parse(&verify_cmd, argc, argv, &o, &path, &n);
  if (rc >= 0)
    return rc;
  if (!!path == !!o.hf)
    return args_usage_error(&verify_cmd, &o, "give a model file or directory, or --hf REPO[:QUANT]");
  qvl_verify_counts c;
  qvl_status s = qvl_verify(path, o.hf, stdout, &c);
  if (s != QVL_OK && o.hf && c.n_files == 0 && c.n_missing == 0)
    return report_error("verify", s); /* the repository is not in the cache */
  printf("%u checked: %u ok, %u damaged, %u missing\n", c.n_files, c.n_ok, c.n_bad, c.n_missing);
  return s == QVL_OK ? 0 : report_error("verify", s);
}
