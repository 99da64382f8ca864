/* qvl run — one prompt (optionally with images) through the model, streamed to stdout. It runs
 * through the serving engine (one request on an engine of one), like qvl serve and qvl chat. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "args.h"
#include "gen_args.h"
#include "commands.h"
#include "qvl.h"

#define MAX_IMAGES 16

/* Standard input as one NUL-terminated string (NULL when out of memory). */
static char *read_stdin(void) {
  size_t len = 0, cap = 4096;
  char *p = malloc(cap);
  size_t n;
  while (p && (n = fread(p + len, 1, cap - 1 - len, stdin)) > 0) {
    len += n;
    if (cap - 1 - len == 0) {
      char *q = realloc(p, cap * 2);
      if (!q)
        break;
      p = q;
      cap *= 2;
    }
  }
  if (p)
    p[len] = '\0';
  return p;
}


/* The stop reason as `qvl run --json` has always named it. */
static const char *stop_reason(qvl_finish f) {
  switch (f) {
  case QVL_FINISH_EOS: return "eos";
  case QVL_FINISH_STOP_STRING: return "stop_string";
  case QVL_FINISH_LENGTH: return "max_tokens";
  default: return "error";
  }
}

static void print_json(const answer *a) {
  const qvl_usage *u = &a->usage;
  const qvl_timings *t = &a->t;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "text", a->text ? a->text : "");
  cJSON_AddStringToObject(o, "reasoning", a->reasoning ? a->reasoning : "");
  cJSON *ids = cJSON_AddArrayToObject(o, "ids");
  for (int64_t i = 0; i < a->n_ids; i++)
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(a->ids[i]));
  cJSON_AddStringToObject(o, "stop_reason", a->status == QVL_OK ? stop_reason(a->finish) : "error");
  cJSON *uo = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(uo, "prompt_tokens", (double)u->prompt_tokens);
  cJSON_AddNumberToObject(uo, "image_tokens", (double)u->image_tokens);
  cJSON_AddNumberToObject(uo, "completion_tokens", (double)u->completion_tokens);
  cJSON_AddNumberToObject(uo, "reasoning_tokens", (double)u->reasoning_tokens);
  cJSON *to = cJSON_AddObjectToObject(o, "timings");
  cJSON_AddNumberToObject(to, "preprocess_ms", t->preprocess_ms);
  cJSON_AddNumberToObject(to, "vision_ms", t->vision_ms);
  cJSON_AddNumberToObject(to, "prefill_ms", t->prefill_ms);
  cJSON_AddNumberToObject(to, "ttft_ms", t->ttft_ms);
  cJSON_AddNumberToObject(to, "prefill_tok_s", t->prefill_tok_s);
  cJSON_AddNumberToObject(to, "decode_ms", t->decode_ms);
  cJSON_AddNumberToObject(to, "decode_tok_s", t->decode_tok_s);
  cJSON_AddStringToObject(to, "isa", qvl_isa());
  cJSON_AddNumberToObject(to, "threads", qvl_threads());
  char *js = cJSON_Print(o);
  printf("%s\n", js);
  free(js);
  cJSON_Delete(o);
}

/* The options of qvl run. */
typedef struct run_opts {
  model_args m;
  gen_opts g;
  const char *prompt, *system;
  bool raw, json;
  int64_t ctx;                         /* 0: no cap (the request reserves its prompt + max_tokens) */
  int64_t min_px, max_px;              /* min 0: the default */
  double video_fps;                    /* 0: the default (2) */
  int64_t video_frames, video_min_px, video_max_px;
  const char *media[MAX_IMAGES];       /* --image and --video in the order given */
  bool is_video[MAX_IMAGES];
  int n_media;
} run_opts;

static qvl_status add_media(void *dst, const qvl_opt_bind *b, const char *path, const char *where) {
  run_opts *o = dst;
  if (o->n_media == MAX_IMAGES)
    return qvl_opts_fail("%s: at most %d images and videos", where, MAX_IMAGES);
  o->is_video[o->n_media] = !strcmp(b->opt->key, "video");
  o->media[o->n_media++] = path;
  return QVL_OK;
}

static const qvl_opt o_prompt = {"prompt", "-p", QVL_OPT_STR, .meta = "TEXT",
                                 .help = "the user message ('-' reads it from standard input); required, except "
                                         "that with --image/--video it defaults to \"Describe this image.\" "
                                         "(\"... video.\", \"these ...\")"};
static const qvl_opt o_system = {"system", NULL, QVL_OPT_STR, .meta = "TEXT", .help = "a system message"};
static const qvl_opt o_raw = {"raw", NULL, QVL_OPT_BOOL,
                              .help = "use the prompt as is, without the chat template (no images)"};
static const qvl_opt o_image = {"image", NULL, QVL_OPT_CALL, .meta = "FILE", .help = "an image (repeatable)"};
static const qvl_opt o_video = {"video", NULL, QVL_OPT_CALL, .meta = "FILE",
                                .help = "a clip (MP4/MOV, MKV/WebM, animated GIF), sent with the images in order"};

static const qvl_opt_bind run_binds[] = {
    MODEL_ARGS_BINDS(run_opts, m),
    QVL_OPT_FIELD(o_prompt, run_opts, prompt),
    QVL_OPT_FIELD(o_system, run_opts, system),
    QVL_OPT_FIELD(o_raw, run_opts, raw),
    QVL_OPT_CALL_FN(o_image, add_media),
    QVL_OPT_CALL_FN(o_video, add_media),
    GEN_OPTS_BINDS(run_opts, g),
    QVL_OPT_FIELD(qvl_opt_min_pixels, run_opts, min_px),
    QVL_OPT_FIELD(qvl_opt_max_pixels, run_opts, max_px),
    QVL_OPT_FIELD(qvl_opt_video_fps, run_opts, video_fps),
    QVL_OPT_FIELD(qvl_opt_video_frames, run_opts, video_frames),
    QVL_OPT_FIELD(qvl_opt_video_min_pixels, run_opts, video_min_px),
    QVL_OPT_FIELD(qvl_opt_video_max_pixels, run_opts, video_max_px),
    QVL_OPT_FIELD_HELP(qvl_opt_ctx, run_opts, ctx, "tokens per sequence, prompt + output (default: prompt + max tokens)"),
    PRECISION_BIND(run_opts, m),
    KV_TYPE_BIND(run_opts, m),
    QVL_OPT_FIELD_HELP(qvl_opt_json, run_opts, json, "print a JSON object with text, ids and timings"),
};

static const qvl_opt_cmd run_cmd = {
    .name = "qvl run",
    .usage = "usage: qvl run -m MODEL.gguf [--mmproj MMPROJ.gguf] [--image FILE]... [--video FILE]... -p PROMPT [options]\n"
    "       qvl run -m HF_DIR ...   (a Hugging Face model directory: config.json, safetensors, ...)\n"
    "       qvl run --hf REPO[:QUANT] [--offline] ... (download into the cache on first use)\n",
    .notes = GEN_OPTS_NOTES "Videos are sampled at 2 frames per second, 131072..786432 pixels of all frames together.\n",
    .opts = run_binds,
    .n_opts = sizeof run_binds / sizeof run_binds[0]};

static qvl_status build_request(qvl_request *rq, const qvl_model *m, const run_opts *o, const char *prompt) {
  qvl_status s = gen_opts_apply(&o->g, m, rq);
  qvl_request_set_pixels(rq, o->min_px, o->max_px);
  if (s == QVL_OK)
    s = qvl_request_set_video_sampling(rq, o->video_fps, (int)o->video_frames, 0);
  qvl_request_set_video_pixels(rq, o->video_min_px, o->video_max_px);
  if (s == QVL_OK && o->raw)
    return qvl_request_set_raw_prompt(rq, prompt, strlen(prompt));
  qvl_request_allow_files(rq, true);
  if (s == QVL_OK && o->system)
    s = qvl_request_add_message(rq, "system", o->system);
  for (int i = 0; s == QVL_OK && i < o->n_media; i++)
    s = o->is_video[i] ? qvl_request_add_video_file(rq, o->media[i]) : qvl_request_add_image_file(rq, o->media[i]);
  return s == QVL_OK ? qvl_request_add_message(rq, "user", prompt) : s;
}

/* Loads the model, runs the one request on an engine of one and waits for it. */
static int run_once(const run_opts *o, const char *prompt) {
  qvl_model *m = NULL;
  qvl_engine *e = NULL;
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.dtype = o->m.dtype;
  mp.threads = (int)o->m.threads;
  /* --ctx, else no cap: the request reserves the KV of its prompt + max_tokens, as it always did */
  int rc = answer_engine_open(o->m.model, o->m.mmproj, &mp, o->ctx > 0 ? o->ctx : INT32_MAX, false, &m, &e);
  if (rc)
    return rc;
  answer a;
  answer_init(&a);
  qvl_request *rq = NULL;
  qvl_status s = qvl_request_new(&rq);
  if (s == QVL_OK)
    s = build_request(rq, m, o, prompt);
  if (s == QVL_OK) {
    qvl_request_set_callbacks(rq, o->json ? NULL : gen_show_text, answer_on_done, &a);
    if (!o->json)
      qvl_request_set_reasoning_callback(rq, gen_show_reasoning);
    gen_show_begin(&o->g);
    s = qvl_engine_submit(e, rq, NULL);
  }
  qvl_request_free(rq);
  if (s != QVL_OK) {
    rc = report_error("building the prompt", s);
  } else {
    answer_wait(&a, e, 0, NULL);
    if (!o->json)
      gen_show_end();
    if (o->json)
      print_json(&a);
    else if (a.status == QVL_OK)
      printf("\n");
    rc = 0;
    if (a.status != QVL_OK) {
      fprintf(stderr, "qvl: generating: %s\n", a.error[0] ? a.error : qvl_status_text(a.status));
      rc = 1;
    }
  }
  answer_free(&a);
  qvl_engine_stop(e, false);
  qvl_model_free(m);
  return rc;
}

/*
 * The question when -p is absent. Without images or videos there is none: a made-up one would get
 * a confident answer to something nobody asked, so that stays an error naming -p. With them,
 * describing them is what is meant (examples/describe.c asks the same), and the question is
 * printed on stderr, so it is never a silent guess.
 */
static const char *default_question(const run_opts *o) {
  int videos = 0;
  for (int i = 0; i < o->n_media; i++)
    videos += o->is_video[i];
  if (videos == 0)
    return o->n_media == 1 ? "Describe this image." : "Describe these images.";
  if (videos == o->n_media)
    return o->n_media == 1 ? "Describe this video." : "Describe these videos.";
  return "Describe these images and videos.";
}

int cmd_run(int argc, char **argv) {
  run_opts o = {.max_px = qvl_default_max_pixels()};
  gen_opts_init(&o.g);
  int rc = args_parse(&run_cmd, argc, argv, &o, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (args_apply_process("qvl run", o.m.precision, o.m.kv_type))
    return 2;
  bool asked = o.prompt != NULL;
  if (!o.prompt && o.n_media)
    o.prompt = default_question(&o);
  if (!o.prompt)
    return args_usage_error(&run_cmd, &o,
                            "-p PROMPT is required: the question to ask (-p - reads it from standard input)");
  /* the prompt first: a usage error must not wait for a download */
  if ((rc = args_resolve_model("qvl run", &o.m)) != 0)
    return rc;
  if (!o.m.model)
    return args_usage_error(&run_cmd, &o, "-m MODEL.gguf (or --hf REPO) is required");
  if (o.raw && (o.n_media || o.system)) {
    fprintf(stderr, "qvl run: --raw takes the prompt as is; it cannot be combined with --image, --video or --system\n");
    return 2;
  }
  if (o.min_px > o.max_px) {
    fprintf(stderr, "qvl run: --min-pixels is larger than --max-pixels\n");
    return 2;
  }
  if (o.video_fps > 0 && o.video_frames > 0) {
    fprintf(stderr, "qvl run: --video-fps and --video-frames exclude each other\n");
    return 2;
  }
  if (o.n_media && !o.m.mmproj && !qvl_path_is_hf_dir(o.m.model)) {
    fprintf(stderr, "qvl run: --image and --video need the vision projector: --mmproj MMPROJ.gguf\n");
    return 2;
  }
  if (!asked)
    fprintf(stderr, "qvl run: no -p given; asking \"%s\"\n", o.prompt);
  const char *prompt = o.prompt;
  char *stdin_prompt = NULL;
  if (!strcmp(prompt, "-") && !(prompt = stdin_prompt = read_stdin()))
    return report_error("reading standard input", QVL_ERR_NOMEM);
  rc = run_once(&o, prompt);
  free(stdin_prompt);
  return rc;
}
