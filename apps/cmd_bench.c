/* qvl bench — the options of qvl_bench (qvl_tools.h). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

typedef struct bench_args {
  model_args m;
  qvl_bench_opts o;
  int64_t prefill, decode, batch_steps;
  bool no_constrained;
} bench_args;

/* "1,2,4,8" into up to 8 ints, each in the range of `rule`. */
static qvl_status int_list(const qvl_opt *rule, const char *v, const char *where, int *out, int *n) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s", v);
  *n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(tmp, ",", &save); tok && *n < 8; tok = strtok_r(NULL, ",", &save)) {
    int64_t x;
    qvl_status st = qvl_opt_int(rule, tok, where, &x);
    if (st != QVL_OK)
      return st;
    out[(*n)++] = (int)x;
  }
  return QVL_OK;
}

static const qvl_opt o_decode_at_ctx = {"decode_at", NULL, QVL_OPT_INT, .min = 1, .max = 1 << 20};

static qvl_status set_batch(void *dst, const qvl_opt_bind *b, const char *v, const char *where) {
  bench_args *a = dst;
  return int_list(&qvl_opt_max_batch_size, v, where, a->o.batch_sizes, &a->o.n_batch_sizes);
}

static qvl_status set_decode_at(void *dst, const qvl_opt_bind *b, const char *v, const char *where) {
  bench_args *a = dst;
  return int_list(&o_decode_at_ctx, v, where, a->o.decode_at, &a->o.n_decode_at);
}

static const qvl_opt o_prefill = {"prefill", NULL, QVL_OPT_INT, .min = 1, .max = 1 << 16, .help = "prompt tokens prefilled"};
static const qvl_opt o_decode = {"decode", NULL, QVL_OPT_INT, .min = 1, .max = 1 << 16, .help = "tokens decoded"};
static const qvl_opt o_batch = {"batch", NULL, QVL_OPT_CALL, .meta = "1,2,4,8",
                                .help = "concurrent sequences of the batched decode rows (each 1..64, at most 8)"};
static const qvl_opt o_batch_steps = {"batch_steps", NULL, QVL_OPT_INT, .min = 1, .max = 4096,
                                      .help = "decode steps of each batched row"};
static const qvl_opt o_decode_at = {"decode_at", NULL, QVL_OPT_CALL, .meta = "512,4096",
                                    .help = "also decode --decode tokens after N cached positions (tok/s and CPU ms per token)"};
static const qvl_opt o_skip_vision = {"skip_vision", NULL, QVL_OPT_BOOL, .help = "no image rows"};
static const qvl_opt o_no_constrained = {"no_constrained", NULL, QVL_OPT_BOOL,
                                         .help = "no constrained rows (batch 1 and 8 with and without a nested JSON-schema mask)"};
static const qvl_opt o_image_stages = {
    "image_stages", NULL, QVL_OPT_BOOL,
    .help = "only the image path, both precision tiers: vision encode of 448x448, 1024x768 and 1280x1280 split into "
            "matmul / attention / rest, and the time to first token of a 1024x768 question stage by stage"};
static const qvl_opt o_stream_gap = {
    "stream_gap", NULL, QVL_OPT_BOOL,
    .help = "only the largest gap between two tokens of a stream while another request's 1024x768 image is "
            "encoded: sliced (vision_layers_per_step) vs the whole image in one step"};
static const qvl_opt o_video = {"video", NULL, QVL_OPT_BOOL,
                                .help = "only the video row: a synthetic 10 s 640x360 30 fps H.264 clip sampled at 2 fps: "
                                        "demux, decode of the sampled frames, vision encode, prefill, TTFT"};
static const qvl_opt o_video_file = {"video_file", NULL, QVL_OPT_STR, .meta = "CLIP", .help = "that row on this clip instead"};

static const qvl_opt_bind bench_binds[] = {
    QVL_OPT_FIELD(qvl_opt_model, bench_args, m.model),
    QVL_OPT_FIELD(qvl_opt_mmproj, bench_args, m.mmproj),
    QVL_OPT_FIELD(qvl_opt_threads, bench_args, m.threads),
    QVL_OPT_FIELD(o_prefill, bench_args, prefill),
    QVL_OPT_FIELD(o_decode, bench_args, decode),
    QVL_OPT_CALL_FN(o_batch, set_batch),
    QVL_OPT_FIELD(o_batch_steps, bench_args, batch_steps),
    QVL_OPT_CALL_FN(o_decode_at, set_decode_at),
    QVL_OPT_FIELD(o_skip_vision, bench_args, o.skip_vision),
    QVL_OPT_FIELD(o_no_constrained, bench_args, no_constrained),
    QVL_OPT_FIELD(o_image_stages, bench_args, o.image_stages),
    QVL_OPT_FIELD(o_stream_gap, bench_args, o.stream_gap),
    QVL_OPT_FIELD(o_video, bench_args, o.video_only),
    QVL_OPT_FIELD(o_video_file, bench_args, o.video_file),
    PRECISION_BIND(bench_args, m),
    KV_TYPE_BIND(bench_args, m),
    QVL_OPT_FIELD_HELP(qvl_opt_json, bench_args, o.json, "print a JSON object on stdout"),
};

static const qvl_opt_cmd bench_cmd = {.name = "qvl bench",
                                      .usage = "usage: qvl bench -m MODEL.gguf [--mmproj MMPROJ.gguf] [options]\n",
                                      .opts = bench_binds, .n_opts = sizeof bench_binds / sizeof bench_binds[0]};

int cmd_bench(int argc, char **argv) {
  bench_args a = {0};
  qvl_bench_opts_default(&a.o);
  a.prefill = a.o.n_prefill;
  a.decode = a.o.n_decode;
  a.batch_steps = a.o.n_batch_steps;
  int rc = args_parse(&bench_cmd, argc, argv, &a, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (args_apply_process("qvl bench", a.m.precision, a.m.kv_type))
    return 2;
  if (!a.m.model) {
    fprintf(stderr, "qvl bench: -m MODEL.gguf is required\n");
    return 2;
  }
  a.o.model = a.m.model;
  a.o.mmproj = a.m.mmproj;
  a.o.threads = (int)a.m.threads;
  a.o.n_prefill = (int)a.prefill;
  a.o.n_decode = (int)a.decode;
  a.o.n_batch_steps = (int)a.batch_steps;
  a.o.constrained = !a.no_constrained;
  qvl_status s = qvl_bench(&a.o);
  return s == QVL_OK ? 0 : report_error("bench", s);
}
