/* qvl convert — a Hugging Face Qwen3-VL directory to llama.cpp GGUF files (text + mmproj). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

static void convert_usage(FILE *f) {
  fprintf(f, "usage: qvl convert --hf-dir DIR [--outtype TYPE] [--out-text TEXT.gguf] [--out-mmproj MMPROJ.gguf]\n"
             "  --hf-dir DIR        Hugging Face model directory (config.json, model.safetensors[.index.json], ...)\n"
             "  --outtype TYPE      matrix type: f32 bf16 f16 q8_0 q4_0 q4_k (default f16); norms stay F32\n"
             "  --out-text FILE     text model GGUF (arch qwen3vl)\n"
             "  --out-mmproj FILE   vision projector GGUF (arch clip, projector qwen3vl_merger)\n"
             "  --name NAME         general.name (default: the directory's name)\n"
             "The files use llama.cpp's layout (convert_hf_to_gguf.py): llama.cpp and qvl load them.\n");
}

int cmd_convert(int argc, char **argv) {
  const char *dir = NULL, *v;
  struct {
    const char *outtype, *out_text, *out_mmproj, *name;
  } o = {NULL, NULL, NULL, NULL};
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--hf-dir", NULL, &v)) {
      dir = v;
    } else if (arg_value(argc, argv, &i, "--outtype", NULL, &v)) {
      if (!qvl_dtype_valid(v)) {
        fprintf(stderr, "qvl convert: --outtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k\n", v);
        return 2;
      }
      o.outtype = v;
    } else if (arg_value(argc, argv, &i, "--out-text", NULL, &v)) {
      o.out_text = v;
    } else if (arg_value(argc, argv, &i, "--out-mmproj", NULL, &v)) {
      o.out_mmproj = v;
    } else if (arg_value(argc, argv, &i, "--name", NULL, &v)) {
      o.name = v;
    } else if (arg_flag(argv, i, "--help", "-h")) {
      convert_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "qvl convert: unknown option '%s'\n", argv[i]);
      convert_usage(stderr);
      return 2;
    }
  }
  if (!dir || (!o.out_text && !o.out_mmproj)) {
    fprintf(stderr, "qvl convert: %s\n", !dir ? "--hf-dir DIR is required" : "give --out-text and/or --out-mmproj");
    convert_usage(stderr);
    return 2;
  }
  qvl_status s = qvl_convert(dir, o.outtype, o.out_text, o.out_mmproj, o.name);
  if (s != 0)
    return report_error("convert", s);
  if (o.out_text)
    fprintf(stderr, "qvl convert: wrote %s\n", o.out_text);
  if (o.out_mmproj)
    fprintf(stderr, "qvl convert: wrote %s\n", o.out_mmproj);
  return 0;
}
