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

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: qvl run -m MODEL.gguf [--mmproj MMPROJ.gguf] [--image FILE]... [--video FILE]... -p PROMPT [options]\n"
          "       qvl run -m HF_DIR ...   (a Hugging Face model directory: config.json, safetensors, ...)\n"
          "       qvl run --hf REPO[:QUANT] [--offline] ... (download into the cache on first use)\n"
          "  --dtype T               re-encode the weight matrices at load: f32 bf16 f16 q8_0 q4_0 q4_k\n"
          "  -p, --prompt TEXT       the user message ('-' reads it from standard input)\n"
          "  --system TEXT           a system message\n"
          "  --raw                   use the prompt as is, without the chat template (no images)\n"
          "  -n, --max-tokens N      tokens to generate (default 512)\n"
          "  --temp T                temperature (0 = greedy)\n"
          "  --top-k K, --top-p P, --min-p P, --seed S\n"
          "                          sampling options not given take the model's recommendation\n"
          "                          (generation_config.json, GGUF general.sampling.*, else Qwen3-VL's\n"
          "                          temperature 0.7, top-p 0.8, top-k 20)\n"
          "  --repeat-penalty R, --presence-penalty P, --frequency-penalty F\n"
          "  --stop TEXT             stop string (repeatable)\n"
          "  --reasoning-budget N    a reasoning model's thinking tokens (-1 unbounded, 0 none)\n"
          "  --hide-reasoning        do not print the reasoning (shown dimmed on a terminal, else on stderr)\n"
          "  --min-pixels N, --max-pixels N   image size bounds (default max %lld)\n"
          "  --video FILE            a clip (MP4/MOV, MKV/WebM, animated GIF), sent with the images in order\n"
          "  --video-fps F           frames sampled per second of video (default 2)\n"
          "  --video-frames N        sample exactly N frames instead\n"
          "  --video-min-pixels N, --video-max-pixels N   pixels of all sampled frames together\n"
          "                          (default 131072 .. 786432)\n"
          "  -t, --threads N         worker threads (default: physical cores)\n"
          "  --precision exact|fast  vision tower arithmetic (default fast: bf16 dot products on\n"
          "                          F16/BF16 mmproj weights; exact: fp32 as transformers)\n"
          "  --ctx N                 context size (default: prompt + max tokens)\n"
          "  --kv-type f16|f32       KV cache elements (default f16: half the memory; QVL_KV_TYPE)\n"
          "  --json                  print a JSON object with text, ids and timings\n",
          (long long)qvl_default_max_pixels());
}

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

/* The request of the command line: a raw prompt, or a system message and one user message with
 * the images before the text. */
typedef struct video_opts {
  double fps;
  int frames;
  int64_t min_pixels, max_pixels;
} video_opts;

static video_opts g_video; /* --video-fps, --video-frames, --video-max-pixels */
static bool g_is_video[MAX_IMAGES];

static qvl_status build_request(qvl_request *rq, const qvl_model *m, bool raw, const char *system, const char *prompt,
                                const char **images, int n_images, const gen_opts *g, int64_t min_px, int64_t max_px) {
  qvl_status s = gen_opts_apply(g, m, rq);
  qvl_request_set_pixels(rq, min_px, max_px);
  if (s == QVL_OK)
    s = qvl_request_set_video_sampling(rq, g_video.fps, g_video.frames, 0);
  qvl_request_set_video_pixels(rq, g_video.min_pixels, g_video.max_pixels);
  if (s == QVL_OK && raw)
    return qvl_request_set_raw_prompt(rq, prompt, strlen(prompt));
  qvl_request_allow_files(rq, true);
  if (s == QVL_OK && system)
    s = qvl_request_add_message(rq, "system", system);
  for (int i = 0; s == QVL_OK && i < n_images; i++)
    s = g_is_video[i] ? qvl_request_add_video_file(rq, images[i]) : qvl_request_add_image_file(rq, images[i]);
  return s == QVL_OK ? qvl_request_add_message(rq, "user", prompt) : s;
}

/* Loads the model, runs the one request on an engine of one and waits for it. */
static int run_once(const char *model, const char *mmproj, const qvl_model_params *mp, int64_t ctx, bool raw,
                    const char *system, const char *prompt, const char **images, int n_images, const gen_opts *g,
                    int64_t min_px, int64_t max_px, bool json) {
  qvl_model *m = NULL;
  qvl_engine *e = NULL;
  /* --ctx, else no cap: the request reserves the KV of its prompt + max_tokens, as it always did */
  int rc = answer_engine_open(model, mmproj, mp, ctx > 0 ? ctx : INT32_MAX, false, &m, &e);
  if (rc)
    return rc;
  answer a;
  answer_init(&a);
  qvl_request *rq = NULL;
  qvl_status s = qvl_request_new(&rq);
  if (s == QVL_OK)
    s = build_request(rq, m, raw, system, prompt, images, n_images, g, min_px, max_px);
  if (s == QVL_OK) {
    qvl_request_set_callbacks(rq, json ? NULL : gen_show_text, answer_on_done, &a);
    if (!json)
      qvl_request_set_reasoning_callback(rq, gen_show_reasoning);
    gen_show_begin(g);
    s = qvl_engine_submit(e, rq, NULL);
  }
  qvl_request_free(rq);
  if (s != QVL_OK) {
    rc = report_error("building the prompt", s);
  } else {
    answer_wait(&a, e, 0, NULL);
    if (!json)
      gen_show_end();
    if (json)
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

int cmd_run(int argc, char **argv) {
  if (args_take_kv_type(&argc, argv, 2, "qvl run"))
    return 2;
  if (args_take_precision(&argc, argv, 2, "qvl run"))
    return 2;
  const char *model = NULL, *mmproj = NULL, *prompt = NULL, *system = NULL, *v;
  const char *images[MAX_IMAGES];
  int n_images = 0;
  bool raw = false, json = false, offline = false;
  const char *hf = NULL;
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  gen_opts g;
  gen_opts_init(&g);
  int64_t min_px = 0, max_px = 0, ctx = 0;
  int taken;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      model = v;
    else if (arg_value(argc, argv, &i, "--mmproj", NULL, &v))
      mmproj = v;
    else if (arg_value(argc, argv, &i, "--hf", NULL, &v))
      hf = v;
    else if (arg_value(argc, argv, &i, "--dtype", NULL, &v)) {
      if (!qvl_dtype_valid(v)) {
        fprintf(stderr, "qvl run: --dtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k\n", v);
        return 2;
      }
      mp.dtype = v;
    } else if (arg_flag(argv, i, "--offline", NULL))
      offline = true;
    else if (arg_value(argc, argv, &i, "--image", NULL, &v) || arg_value(argc, argv, &i, "--video", NULL, &v)) {
      if (n_images == MAX_IMAGES) {
        fprintf(stderr, "qvl run: at most %d images and videos\n", MAX_IMAGES);
        return 2;
      }
      /* "--video F" or "--video=F" */
      g_is_video[n_images] = (v == argv[i] && !strcmp(argv[i - 1], "--video")) || !strncmp(argv[i], "--video=", 8);
      images[n_images++] = v;
    } else if (arg_value(argc, argv, &i, "--video-fps", NULL, &v)) {
      char *end;
      g_video.fps = strtod(v, &end);
      if (*end || !(g_video.fps > 0 && g_video.fps <= 1000)) {
        fprintf(stderr, "qvl run: --video-fps '%s': expected a number of frames per second in (0, 1000]\n", v);
        return 2;
      }
    } else if (arg_value(argc, argv, &i, "--video-frames", NULL, &v))
      g_video.frames = (int)arg_int("--video-frames", v, 2, 768);
    else if (arg_value(argc, argv, &i, "--video-max-pixels", NULL, &v))
      g_video.max_pixels = arg_int("--video-max-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--video-min-pixels", NULL, &v))
      g_video.min_pixels = arg_int("--video-min-pixels", v, 1, INT64_MAX); else if (arg_value(argc, argv, &i, "--prompt", "-p", &v))
      prompt = v;
    else if (arg_value(argc, argv, &i, "--system", NULL, &v))
      system = v;
    else if ((taken = gen_args_take(argc, argv, &i, &g, "qvl run")) != 0) {
      if (taken == 2)
        return 2;
    } else if (arg_value(argc, argv, &i, "--min-pixels", NULL, &v))
      min_px = arg_int("--min-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--max-pixels", NULL, &v))
      max_px = arg_int("--max-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--threads", "-t", &v))
      mp.threads = (int)arg_int("--threads", v, 1, 1024);
    else if (arg_value(argc, argv, &i, "--ctx", NULL, &v))
      ctx = arg_int("--ctx", v, 1, 1 << 24);
    else if (arg_flag(argv, i, "--raw", NULL))
      raw = true;
    else if (arg_flag(argv, i, "--json", NULL))
      json = true;
    else if (arg_flag(argv, i, "--help", "-h")) {
      run_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "qvl run: unknown option '%s'\n", argv[i]);
      run_usage(stderr);
      return 2;
    }
  }
  if (hf && model) {
    fprintf(stderr, "qvl run: give either -m MODEL.gguf or --hf REPO[:QUANT], not both\n");
    return 2;
  }
  if (hf && prompt) {
    int rc = resolve_hf(hf, offline, &model, &mmproj);
    if (rc)
      return rc;
  }
  if (!model || !prompt) {
    fprintf(stderr, "qvl run: %s is required\n", !model ? "-m MODEL.gguf" : "-p PROMPT");
    run_usage(stderr);
    return 2;
  }
  if (raw && (n_images || system)) {
    fprintf(stderr, "qvl run: --raw takes the prompt as is; it cannot be combined with --image, --video or --system\n");
    return 2;
  }
  if (min_px > (max_px ? max_px : qvl_default_max_pixels())) {
    fprintf(stderr, "qvl run: --min-pixels is larger than --max-pixels\n");
    return 2;
  }
  if (g_video.fps > 0 && g_video.frames > 0) {
    fprintf(stderr, "qvl run: --video-fps and --video-frames exclude each other\n");
    return 2;
  }
  if (n_images && !mmproj && !qvl_path_is_hf_dir(model)) {
    fprintf(stderr, "qvl run: --image and --video need the vision projector: --mmproj MMPROJ.gguf\n");
    return 2;
  }
  char *stdin_prompt = NULL;
  if (!strcmp(prompt, "-") && !(prompt = stdin_prompt = read_stdin()))
    return report_error("reading standard input", QVL_ERR_NOMEM);
  int rc = run_once(model, mmproj, &mp, ctx, raw, system, prompt, images, n_images, &g, min_px, max_px, json);
  free(stdin_prompt);
  return rc;
}
