/* qvl tune -m MODEL.gguf [--mmproj MMPROJ.gguf] — measures the kernels again on this CPU. */
#include <stdio.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct tune_args {
  model_args m;
} tune_args;

static const qvl_opt_bind tune_binds[] = {
    QVL_OPT_FIELD(qvl_opt_model, tune_args, m.model),
    QVL_OPT_FIELD(qvl_opt_mmproj, tune_args, m.mmproj),
    QVL_OPT_FIELD(qvl_opt_threads, tune_args, m.threads),
};

static const qvl_opt_cmd tune_cmd = {
    .name = "qvl tune",
    .usage = "usage: qvl tune -m MODEL.gguf [--mmproj MMPROJ.gguf] [--threads N]\n",
    .notes = "Where the CPU offers several kernels for an operation (e.g. AMX tiles or the VNNI kernel for Q8_0),\n"
             "every start measures them once per CPU model, thread count and qvl version and keeps the result in\n"
             "the cache folder (tuning/). This command forgets that result, measures each weight shape of the model\n"
             "again and prints every candidate's rate and the choice. Run it on an idle machine.\n",
    .opts = tune_binds,
    .n_opts = sizeof tune_binds / sizeof tune_binds[0]};

int cmd_tune(int argc, char **argv) {
  tune_args a = {0};
  int rc = args_parse(&tune_cmd, argc, argv, &a, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (!a.m.model)
    return args_usage_error(&tune_cmd, &a, "-m MODEL.gguf is required");
  qvl_status s = qvl_tune(a.m.model, a.m.mmproj, (int)a.m.threads, stdout);
  return s == QVL_OK ? 0 : report_error("tune", s);
}
