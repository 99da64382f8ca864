/* qvl bench — the options of qvl_bench (qvl_tools.h). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

static int parse_sizes(const char *v, qvl_bench_opts *o) {
  o->n_batch_sizes = 0;
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s", v);
  for (char *tok = strtok(tmp, ","); tok && o->n_batch_sizes < 8; tok = strtok(NULL, ","))
    o->batch_sizes[o->n_batch_sizes++] = (int)arg_int("--batch", tok, 1, 64);
  return o->n_batch_sizes;
}

int cmd_bench(int argc, char **argv) {
  if (args_take_kv_type(&argc, argv, 2, "qvl bench"))
    return 2;
  if (args_take_precision(&argc, argv, 2, "qvl bench"))
    return 2;
  qvl_bench_opts o;
  qvl_bench_opts_default(&o);
  const char *v;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      o.model = v;
    else if (arg_value(argc, argv, &i, "--mmproj", NULL, &v))
      o.mmproj = v;
    else if (arg_value(argc, argv, &i, "--threads", "-t", &v))
      o.threads = (int)arg_int("--threads", v, 1, 1024);
    else if (arg_value(argc, argv, &i, "--prefill", NULL, &v))
      o.n_prefill = (int)arg_int("--prefill", v, 1, 1 << 16);
    else if (arg_value(argc, argv, &i, "--decode", NULL, &v))
      o.n_decode = (int)arg_int("--decode", v, 1, 1 << 16);
    else if (arg_value(argc, argv, &i, "--batch", NULL, &v))
      parse_sizes(v, &o);
    else if (arg_value(argc, argv, &i, "--decode-at", NULL, &v)) {
      char tmp[128];
      snprintf(tmp, sizeof tmp, "%s", v);
      o.n_decode_at = 0;
      for (char *tok = strtok(tmp, ","); tok && o.n_decode_at < 8; tok = strtok(NULL, ","))
        o.decode_at[o.n_decode_at++] = (int)arg_int("--decode-at", tok, 1, 1 << 20);
    } else if (arg_value(argc, argv, &i, "--batch-steps", NULL, &v))
      o.n_batch_steps = (int)arg_int("--batch-steps", v, 1, 4096);
    else if (arg_flag(argv, i, "--json", NULL))
      o.json = true;
    else if (arg_flag(argv, i, "--skip-vision", NULL))
      o.skip_vision = true;
    else if (arg_flag(argv, i, "--no-constrained", NULL))
      o.constrained = false;
    else if (arg_flag(argv, i, "--image-stages", NULL))
      o.image_stages = true;
    else if (arg_flag(argv, i, "--stream-gap", NULL))
      o.stream_gap = true;
    else if (arg_flag(argv, i, "--video", NULL))
      o.video_only = true;
    else if (arg_value(argc, argv, &i, "--video-file", NULL, &v))
      o.video_file = v;
    else if (arg_flag(argv, i, "--help", "-h")) {
      printf("usage: qvl bench -m MODEL.gguf [--mmproj MMPROJ.gguf] [-t N] [--prefill 512] [--decode 128]\n"
             "                 [--batch 1,2,4,8] [--batch-steps 32] [--skip-vision] [--no-constrained] [--json]\n"
             "                 [--precision exact|fast] [--kv-type f16|f32] [--decode-at 512,4096] [--image-stages]\n"
             "                 [--stream-gap] [--video] [--video-file CLIP]\n"
             "  --decode-at     also decode --decode tokens after N cached positions (tok/s and CPU ms per token)\n"
             "  the constrained rows decode batch 1 and 8 with and without a nested JSON-schema mask\n"
             "  --image-stages  only the image path, both precision tiers: vision encode of 448x448,\n"
             "                  1024x768 and 1280x1280 split into matmul / attention / rest, and the\n"
             "                  time to first token of a 1024x768 question stage by stage\n"
             "  --stream-gap    only the largest gap between two tokens of a stream while another\n"
             "                  request's 1024x768 image is encoded: sliced (vision_layers_per_step) vs\n"
             "                  the whole image in one step\n"
             "  --video         only the video row: a synthetic 10 s 640x360 30 fps H.264 clip sampled at\n"
             "                  2 fps: demux, decode of the sampled frames, vision encode, prefill, TTFT\n"
             "  --video-file F  that row on the clip F instead\n");
      return 0;
    } else {
      fprintf(stderr, "qvl bench: unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!o.model) {
    fprintf(stderr, "qvl bench: -m MODEL.gguf is required\n");
    return 2;
  }
  qvl_status s = qvl_bench(&o);
  return s == QVL_OK ? 0 : report_error("bench", s);
}
