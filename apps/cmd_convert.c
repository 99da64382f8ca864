/* qvl convert — a Hugging Face Qwen3-VL directory to llama.cpp GGUF files (text + mmproj). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct convert_opts {
  const char *hf_dir, *outtype, *out_text, *out_mmproj, *name;
} convert_opts;

static const qvl_opt o_hf_dir = {"hf_dir", NULL, QVL_OPT_STR, .meta = "DIR",
                                 .help = "Hugging Face model directory (config.json, model.safetensors[.index.json], ...)"};
static const qvl_opt o_outtype = {"outtype", NULL, QVL_OPT_STR, .choices = qvl_opt_dtype_names, .meta = "TYPE",
                                  .help = "matrix type: f32 bf16 f16 q8_0 q4_0 q4_k (default f16); norms stay F32"};
static const qvl_opt o_name = {"name", NULL, QVL_OPT_STR, .meta = "NAME", .help = "general.name (default: the directory's name)"};

static const qvl_opt_bind convert_binds[] = {
    QVL_OPT_FIELD(o_hf_dir, convert_opts, hf_dir),         QVL_OPT_FIELD(o_outtype, convert_opts, outtype),
    QVL_OPT_FIELD(qvl_opt_out_text, convert_opts, out_text),     QVL_OPT_FIELD(qvl_opt_out_mmproj, convert_opts, out_mmproj),
    QVL_OPT_FIELD(o_name, convert_opts, name),
};

static const qvl_opt_cmd convert_cmd = {
    .name = "qvl convert",
    .usage = "usage: qvl convert --hf-dir DIR [--outtype TYPE] [--out-text TEXT.gguf] [--out-mmproj MMPROJ.gguf]\n",
    .notes = "The files use llama.cpp's layout (convert_hf_to_gguf.py): llama.cpp and qvl load them.\n",
    .opts = convert_binds,
    .n_opts = sizeof convert_binds / sizeof convert_binds[0]};

int cmd_convert(int argc, char **argv) {
  convert_opts o = {0};
  int rc = args_parse(&convert_cmd, argc, argv, &o, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (!o.hf_dir || (!o.out_text && !o.out_mmproj))
    return args_usage_error(&convert_cmd, &o, !o.hf_dir ? "--hf-dir DIR is required" : "give --out-text and/or --out-mmproj");
  qvl_status s = qvl_convert(o.hf_dir, o.outtype, o.out_text, o.out_mmproj, o.name);
  if (s != 0)
    return report_error("convert", s);
  if (o.out_text)
    fprintf(stderr, "qvl convert: wrote %s\n", o.out_text);
  if (o.out_mmproj)
    fprintf(stderr, "qvl convert: wrote %s\n", o.out_mmproj);
  return 0;
}
