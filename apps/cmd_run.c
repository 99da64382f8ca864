/* qvl run — one prompt (optionally with images) through the model, streamed to stdout. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gen_args.h"
#include "base/buf.h"
#include "commands.h"
#include "engine/generate.h"
#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "engine/hf_model.h"
#include "model/wtable.h"

#define MAX_IMAGES 16
#define MAX_STOPS 8

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: qvl run -m MODEL.gguf [--mmproj MMPROJ.gguf] [--image FILE]... -p PROMPT [options]\n"
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
          "  --min-pixels N, --max-pixels N   image size bounds (default max %lld)\n"
          "  -t, --threads N         worker threads (default: physical cores)\n"
          "  --precision exact|fast  vision tower arithmetic (default fast: bf16 dot products on\n"
          "                          F16/BF16 mmproj weights; exact: fp32 as transformers)\n"
          "  --ctx N                 context size (default: prompt + max tokens)\n"
          "  --json                  print a JSON object with text, ids and timings\n",
          (long long)IMAGE_CPU_DEFAULT_MAX_PIXELS);
}

static bool print_piece(void *user, const char *text, size_t len) {
  (void)user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return true;
}

static char *read_stdin(void) {
  buf b = {0};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
    if (buf_append(&b, chunk, n) != QVL_OK)
      break;
  if (!b.data)
    buf_append(&b, "", 0);
  return b.data;
}

static cJSON *build_messages(const char *system, const char *prompt, const char **images, int n_images) {
  cJSON *msgs = cJSON_CreateArray();
  if (system) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", system);
    cJSON_AddItemToArray(msgs, m);
  }
  cJSON *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON *content = cJSON_AddArrayToObject(u, "content");
  for (int i = 0; i < n_images; i++) {
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "image_url");
    cJSON *iu = cJSON_AddObjectToObject(part, "image_url");
    cJSON_AddStringToObject(iu, "url", images[i]);
    cJSON_AddItemToArray(content, part);
  }
  cJSON *tp = cJSON_CreateObject();
  cJSON_AddStringToObject(tp, "type", "text");
  cJSON_AddStringToObject(tp, "text", prompt);
  cJSON_AddItemToArray(content, tp);
  cJSON_AddItemToArray(msgs, u);
  return msgs;
}

static void print_json(const vlm_prompt *p, const gen_result *r, qvl_status s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "text", r->text.data ? r->text.data : "");
  cJSON *ids = cJSON_AddArrayToObject(o, "ids");
  for (int64_t i = 0; i < r->n_ids; i++)
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->ids[i]));
  cJSON_AddStringToObject(o, "stop_reason", s == QVL_OK ? stop_reason_name(r->reason) : "error");
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)p->n);
  cJSON_AddNumberToObject(u, "image_tokens", (double)p->n_img);
  cJSON_AddNumberToObject(u, "completion_tokens", (double)r->n_ids);
  cJSON *t = cJSON_AddObjectToObject(o, "timings");
  cJSON_AddNumberToObject(t, "preprocess_ms", p->preprocess_ms);
  cJSON_AddNumberToObject(t, "vision_ms", p->vision_ms);
  cJSON_AddNumberToObject(t, "prefill_ms", r->prefill_ms);
  cJSON_AddNumberToObject(t, "ttft_ms", r->ttft_ms + p->vision_ms);
  cJSON_AddNumberToObject(t, "prefill_tok_s", r->prefill_ms > 0 ? p->n / (r->prefill_ms / 1e3) : 0);
  cJSON_AddNumberToObject(t, "decode_ms", r->decode_ms);
  cJSON_AddNumberToObject(t, "decode_tok_s", r->decode_ms > 0 && r->n_ids > 1 ? (r->n_ids - 1) / (r->decode_ms / 1e3) : 0);
  cJSON_AddStringToObject(t, "isa", kernels_isa());
  cJSON_AddNumberToObject(t, "threads", kernels_threads());
  char *js = cJSON_Print(o);
  printf("%s\n", js);
  free(js);
  cJSON_Delete(o);
}

int cmd_run(int argc, char **argv) {
  if (args_take_precision(&argc, argv, 2, "qvl run"))
    return 2;
  const char *model = NULL, *mmproj = NULL, *prompt = NULL, *system = NULL, *v;
  const char *images[MAX_IMAGES], *stops[MAX_STOPS];
  int n_images = 0, n_stops = 0, threads = 0;
  bool raw = false, json = false, offline = false;
  const char *hf = NULL, *dtype = NULL;
  gen_params gp = gen_params_default();
  gen_args_unset_sampling(&gp);
  vlm_prompt_opts po;
  vlm_prompt_opts_default(&po);
  int taken;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      model = v;
    else if (arg_value(argc, argv, &i, "--mmproj", NULL, &v))
      mmproj = v;
    else if (arg_value(argc, argv, &i, "--hf", NULL, &v))
      hf = v;
    else if (arg_value(argc, argv, &i, "--dtype", NULL, &v)) {
      qvl_dtype dt;
      if (!wtable_parse_dtype(v, &dt)) {
        fprintf(stderr, "qvl run: --dtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k\n", v);
        return 2;
      }
      dtype = v;
    } else if (arg_flag(argv, i, "--offline", NULL))
      offline = true;
    else if (arg_value(argc, argv, &i, "--image", NULL, &v)) {
      if (n_images == MAX_IMAGES) {
        fprintf(stderr, "qvl run: at most %d images\n", MAX_IMAGES);
        return 2;
      }
      images[n_images++] = v;
    } else if (arg_value(argc, argv, &i, "--prompt", "-p", &v))
      prompt = v;
    else if (arg_value(argc, argv, &i, "--system", NULL, &v))
      system = v;
    else if ((taken = gen_args_take(argc, argv, &i, &gp, stops, &n_stops, MAX_STOPS, "qvl run")) != 0) {
      if (taken == 2)
        return 2;
    } else if (arg_value(argc, argv, &i, "--min-pixels", NULL, &v))
      po.pre.min_pixels = arg_int("--min-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--max-pixels", NULL, &v))
      po.pre.max_pixels = arg_int("--max-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--threads", "-t", &v))
      threads = (int)arg_int("--threads", v, 1, 1024);
    else if (arg_value(argc, argv, &i, "--ctx", NULL, &v))
      gp.n_ctx = arg_int("--ctx", v, 1, 1 << 24);
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
    fprintf(stderr, "qvl run: --raw takes the prompt as is; it cannot be combined with --image or --system\n");
    return 2;
  }
  if (po.pre.min_pixels > po.pre.max_pixels) {
    fprintf(stderr, "qvl run: --min-pixels is larger than --max-pixels\n");
    return 2;
  }
  if (n_images && !mmproj && !hf_model_is_dir(model)) {
    fprintf(stderr, "qvl run: --image needs the vision projector: --mmproj MMPROJ.gguf\n");
    return 2;
  }
  char *stdin_prompt = NULL;
  if (!strcmp(prompt, "-"))
    prompt = stdin_prompt = read_stdin();
  gp.stop = stops;
  gp.n_stop = n_stops;
  qvl_status s = kernels_init(NULL, threads);
  if (s != QVL_OK)
    return report_error("kernels", s);
  vlm *m = NULL;
  vlm_paths paths = {model, mmproj};
  vlm_load_opts lo = {.hf_dir = NULL, .dtype = dtype};
  s = vlm_load_with(&paths, &lo, &m);
  if (s != QVL_OK) {
    free(stdin_prompt);
    return report_error("loading the model", s);
  }
  gen_args_model_defaults(&gp, &m->sampling);
  vlm_prompt p;
  if (raw) {
    s = vlm_prompt_from_text(m, prompt, strlen(prompt), &p);
  } else {
    cJSON *msgs = build_messages(system, prompt, images, n_images);
    po.source.allow_files = true;
    s = vlm_prompt_build(m, msgs, &po, &p);
    cJSON_Delete(msgs);
  }
  free(stdin_prompt);
  if (s != QVL_OK) {
    vlm_free(m);
    return report_error("building the prompt", s);
  }
  gen_result r;
  s = generate(m, &p, &gp, json ? NULL : print_piece, NULL, &r);
  if (json)
    print_json(&p, &r, s);
  else if (s == QVL_OK)
    printf("\n");
  int rc = s == QVL_OK ? 0 : report_error("generating", s);
  gen_result_free(&r);
  vlm_prompt_free(&p);
  vlm_free(m);
  return rc;
}
