/* qvl dump — the options of qvl_dump_case (qvl_tools.h). */
#include <stdio.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct dump_opts {
  model_args m; /* --precision and --kv-type */
  bool use_hf;
} dump_opts;

/* A switch here: the case file names its Hugging Face directory (not a repository as in --hf REPO). */
static const qvl_opt o_use_hf = {"hf", NULL, QVL_OPT_BOOL,
                                 .help = "load the case's Hugging Face directory (model.hf_dir) instead of its GGUF files"};

static const qvl_opt_bind dump_binds[] = {QVL_OPT_FIELD(o_use_hf, dump_opts, use_hf), PRECISION_BIND(dump_opts, m),
                                          KV_TYPE_BIND(dump_opts, m)};

static const qvl_opt_cmd dump_cmd = {
    .name = "qvl dump",
    .usage = "usage: qvl dump [--hf] [--precision exact|fast] CASE.json OUT.safetensors\n",
    .notes = NULL,
    .opts = dump_binds,
    .n_opts = sizeof dump_binds / sizeof dump_binds[0],
    .max_args = 2};

int cmd_dump(int argc, char **argv) {
  dump_opts o = {0};
  const char *paths[2] = {0};
  int np = 0;
  int rc = args_parse(&dump_cmd, argc, argv, &o, paths, &np);
  if (rc >= 0)
    return rc;
  if (args_apply_process("qvl dump", o.m.precision, o.m.kv_type))
    return 2;
  if (np != 2)
    return args_usage_error(&dump_cmd, &o, "give CASE.json and OUT.safetensors");
  qvl_status s = qvl_dump_case(paths[0], paths[1], o.use_hf);
  return s == QVL_OK ? 0 : report_error("dump", s);
}
