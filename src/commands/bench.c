/*
 * qvl_bench (qvl_tools.h), `qvl bench` — stage-by-stage speed of one model on this machine: image decode, preprocessing,
 * vision encode (448x448 and 1024x768 at full resolution), prefill, decode, time to first token
 * for an image question, peak RSS and aggregate decode throughput for several concurrent sequences.
 * Progress goes to stderr; --json prints a machine-readable object on stdout.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/buf.h"
#include "base/dataurl.h"
#include "base/status.h"
#include "base/timing.h"
#include "commands/bench_constrained.h"
#include "commands/bench_gap.h"
#include "commands/bench_image.h"
#include "commands/tune.h"
#include "commands/bench_question.h"
#include "commands/bench_video.h"
#include "engine/generate.h"
#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "text/kv_cache.h"
#include "qvl_tools.h"
#include "vision/vision.h"

typedef qvl_bench_opts bench_opts;

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;
}

static void progress(const char *fmt, const char *what) {
  fprintf(stderr, fmt, what);
  fflush(stderr);
}

/* Token ids for synthetic prompts: plain vocabulary entries, deterministic. */
static void fill_ids(int32_t *ids, int n, uint32_t seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    ids[i] = 1000 + (int32_t)(seed >> 8) % 100000;
  }
}

static qvl_status bench_prefill_decode(const vlm *m, const bench_opts *o, cJSON *out) {
  int np = o->n_prefill, nd = o->n_decode;
  int32_t *ids = malloc(sizeof *ids * (size_t)(np + nd + 1));
  if (!ids)
    return QVL_ERR_NOMEM;
  fill_ids(ids, np + nd + 1, 7);
  decoder_seq *s = NULL;
  decoder_seq_params sp = {.n_ctx = np + nd + 8, .n_batch = np};
  qvl_status st = decoder_seq_init(m->text, &sp, &s);
  const float *logits;
  if (st == QVL_OK) {
    progress("[bench] prefill %s tokens...", "");
    fprintf(stderr, " %d\n", np);
    decoder_input in = {.n_tokens = np, .tokens = ids};
    double t0 = time_now_s();
    st = decoder_prefill(s, &in, NULL, &logits);
    double dt = time_now_s() - t0;
    cJSON_AddNumberToObject(out, "prefill_tok_s", np / dt);
    cJSON_AddNumberToObject(out, "prefill_ms", dt * 1e3);
  }
  if (st == QVL_OK) {
    /* Decode from a one-token context, as llama-bench's tg test does. */
    decoder_seq_reset(s);
    decoder_input in = {.n_tokens = 1, .tokens = ids};
    st = decoder_prefill(s, &in, NULL, &logits);
    fprintf(stderr, "[bench] decode %d tokens...\n", nd);
    double t0 = time_now_s();
    for (int i = 0; st == QVL_OK && i < nd; i++)
      st = decoder_step(s, ids[1 + i], &logits);
    double dt = time_now_s() - t0;
    cJSON_AddNumberToObject(out, "decode_tok_s", nd / dt);
  }
  decoder_seq_free(s);
  free(ids);
  return st;
}

/* --decode-at N,...: decode n_decode tokens after N cached positions (what the KV type changes:
 * each step's attention reads all N rows). The N rows are marked cached without a prefill (zero
 * rows; the attention reads every row whatever it holds), so a 4096 context costs no 4096-token
 * prefill. Reports tokens per second and CPU milliseconds per token (all threads), the latter
 * steadier when other processes share the cores. */
static qvl_status bench_decode_at(const vlm *m, const bench_opts *o, cJSON *out) {
  cJSON *tps = cJSON_AddObjectToObject(out, "decode_tok_s_at_ctx");
  cJSON *cpu = cJSON_AddObjectToObject(out, "decode_cpu_ms_per_tok_at_ctx");
  int nd = o->n_decode;
  int32_t *ids = malloc(sizeof *ids * (size_t)(nd + 1));
  if (!ids)
    return QVL_ERR_NOMEM;
  fill_ids(ids, nd + 1, 11);
  qvl_status st = QVL_OK;
  for (int c = 0; st == QVL_OK && c < o->n_decode_at; c++) {
    int n = o->decode_at[c];
    decoder_seq *s = NULL;
    decoder_seq_params sp = {.n_ctx = n + nd + 8, .n_batch = 16};
    st = decoder_seq_init(m->text, &sp, &s);
    if (st == QVL_OK)
      st = decoder_seq_set_past(s, n, n);
    fprintf(stderr, "[bench] decode %d tokens at context %d...\n", nd, n);
    const float *logits;
    double t0 = time_now_s(), c0 = time_process_cpu_s();
    for (int i = 0; st == QVL_OK && i < nd; i++)
      st = decoder_step(s, ids[i], &logits);
    double dt = time_now_s() - t0, dc = time_process_cpu_s() - c0;
    char key[32];
    snprintf(key, sizeof key, "%d", n);
    cJSON_AddNumberToObject(tps, key, nd / dt);
    cJSON_AddNumberToObject(cpu, key, dc * 1e3 / nd);
    decoder_seq_free(s);
  }
  free(ids);
  return st;
}

static qvl_status bench_batch(const vlm *m, const bench_opts *o, cJSON *out) {
  cJSON *tbl = cJSON_AddObjectToObject(out, "batch_decode_tok_s");
  int steps = o->n_batch_steps;
  for (int b = 0; b < o->n_batch_sizes; b++) {
    int n = o->batch_sizes[b];
    fprintf(stderr, "[bench] %d concurrent sequences x %d tokens...\n", n, steps);
    decoder_seq **seqs = calloc((size_t)n, sizeof *seqs);
    int32_t *ids = malloc(sizeof *ids * (size_t)(16 + steps) * (size_t)n);
    const float **logits = calloc((size_t)n, sizeof *logits);
    int32_t *next = malloc(sizeof *next * (size_t)n);
    if (!seqs || !ids || !logits || !next) {
      free(seqs), free(ids), free(logits), free(next);
      return QVL_ERR_NOMEM;
    }
    qvl_status st = QVL_OK;
    for (int i = 0; st == QVL_OK && i < n; i++) {
      fill_ids(ids + (size_t)i * (16 + steps), 16 + steps, 100u + (uint32_t)i);
      decoder_seq_params sp = {.n_ctx = 16 + steps + 8, .n_batch = 16};
      st = decoder_seq_init(m->text, &sp, &seqs[i]);
      decoder_input in = {.n_tokens = 16, .tokens = ids + (size_t)i * (16 + steps)};
      if (st == QVL_OK)
        st = decoder_prefill(seqs[i], &in, NULL, &logits[i]);
    }
    double t0 = time_now_s();
    for (int k = 0; st == QVL_OK && k < steps; k++) {
      for (int i = 0; i < n; i++)
        next[i] = ids[(size_t)i * (16 + steps) + 16 + (size_t)k];
      st = decoder_step_batch(seqs, next, n, logits);
    }
    double dt = time_now_s() - t0;
    char key[16];
    snprintf(key, sizeof key, "%d", n);
    if (st == QVL_OK)
      cJSON_AddNumberToObject(tbl, key, (double)n * steps / dt);
    for (int i = 0; i < n; i++)
      decoder_seq_free(seqs[i]);
    free(seqs), free(ids), free(logits), free(next);
    if (st != QVL_OK)
      return st;
  }
  return QVL_OK;
}

static qvl_status bench_images(const vlm *m, const bench_opts *o, cJSON *out) {
  static const int sizes[2][2] = {{448, 448}, {1024, 768}};
  cJSON *dec = cJSON_AddObjectToObject(out, "image_decode_ms");
  cJSON *pre = cJSON_AddObjectToObject(out, "preprocess_ms");
  cJSON *vis = cJSON_AddObjectToObject(out, "vision_encode_ms");
  cJSON *tok = cJSON_AddObjectToObject(out, "image_tokens");
  int64_t d = m->text->hp.n_embd;
  for (int k = 0; k < 2; k++) {
    int w = sizes[k][0], h = sizes[k][1];
    char key[32];
    snprintf(key, sizeof key, "%dx%d", w, h);
    unsigned char *jpg = NULL;
    unsigned long jsize = 0;
    if (bench_make_jpeg(w, h, &jpg, &jsize) != 0)
      return QVL_ERR_NOMEM;
    image_rgb rgb = {0};
    double t0 = time_now_s();
    int reps = 5;
    qvl_status st = QVL_OK;
    for (int r = 0; st == QVL_OK && r < reps; r++) {
      image_rgb_free(&rgb);
      st = image_decode(jpg, jsize, NULL, &rgb, NULL);
    }
    cJSON_AddNumberToObject(dec, key, (time_now_s() - t0) * 1e3 / reps);
    free(jpg);
    image_patches ip = {0};
    preprocess_opts po = {.min_pixels = 1, .max_pixels = (int64_t)w * h}; /* full resolution */
    t0 = time_now_s();
    if (st == QVL_OK)
      st = image_preprocess(&rgb, &po, &ip);
    cJSON_AddNumberToObject(pre, key, (time_now_s() - t0) * 1e3);
    image_rgb_free(&rgb);
    if (st == QVL_OK && m->vision && !o->skip_vision) {
      cJSON_AddNumberToObject(tok, key, ip.n_tokens);
      fprintf(stderr, "[bench] vision encode %s (%d patches)...\n", key, ip.n_patches);
      float *emb = malloc(sizeof(float) * (size_t)(ip.n_tokens * d));
      float *ds = malloc(sizeof(float) * (size_t)(ip.n_tokens * d * (m->vision->n_deepstack + 1)));
      if (!emb || !ds)
        st = QVL_ERR_NOMEM;
      t0 = time_now_s();
      if (st == QVL_OK)
        st = vision_encode(m->vision, ip.pixel_values, ip.grid_t, ip.grid_h, ip.grid_w, emb, ds, NULL, NULL);
      cJSON_AddNumberToObject(vis, key, (time_now_s() - t0) * 1e3);
      free(emb);
      free(ds);
    }
    image_patches_free(&ip);
    if (st != QVL_OK)
      return st;
  }
  return QVL_OK;
}

/* The whole path a user waits for: JPEG in a data: URL -> prompt with the image -> first token. */
static qvl_status bench_ttft(const vlm *m, cJSON *out) {
  buf url = {0};
  qvl_status st = bench_jpeg_data_url(1024, 768, &url);
  fprintf(stderr, "[bench] time to first token, 1024x768 image question...\n");
  vlm_prompt_opts po;
  vlm_prompt_opts_default(&po);
  po.pre.min_pixels = 1;
  po.pre.max_pixels = 1024 * 768;
  bench_question_times t;
  if (st == QVL_OK)
    st = bench_first_token(m, "image_url", url.data, "What is in this image? Answer briefly.", &po, &t);
  buf_free(&url);
  if (st == QVL_OK) {
    cJSON_AddNumberToObject(out, "ttft_ms", t.total_ms);
    cJSON *parts = cJSON_AddObjectToObject(out, "ttft_parts_ms");
    cJSON_AddNumberToObject(parts, "decode_and_preprocess", t.preprocess_ms);
    cJSON_AddNumberToObject(parts, "vision", t.vision_ms);
    cJSON_AddNumberToObject(parts, "prefill", t.prefill_ms);
    cJSON_AddNumberToObject(out, "ttft_prompt_tokens", (double)t.prompt_tokens);
  }
  return st;
}

/* --image-stages: for each precision tier, vision encode of 448x448, 1024x768 and 1280x1280 split
 * into matmuls, attention and the rest, then the time to first token of a 1024x768 question with
 * its parts. The tier the model was not loaded with is loaded from the mmproj file for the
 * occasion (a GGUF mmproj is needed; an HF directory measures its loaded tier only). */
static qvl_status bench_image_stages(vlm *m, const bench_opts *o, cJSON *out) {
  static const int sizes[3][2] = {{448, 448}, {1024, 768}, {1280, 1280}};
  if (!m->vision)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "--image-stages needs a vision tower (--mmproj)");
  vision_model *loaded = m->vision;
  qvl_status st = QVL_OK;
  for (int tier = 0; st == QVL_OK && tier < 2; tier++) {
    kn_precision prec = tier == 0 ? KN_PREC_EXACT : KN_PREC_FAST;
    vision_model *vm = loaded;
    if (loaded->precision != prec) {
      if (!o->mmproj) {
        fprintf(stderr, "[bench] %s tier skipped: the tower comes from a directory, not a GGUF mmproj\n",
                kn_precision_name(prec));
        continue;
      }
      st = vision_load_gguf_prec(o->mmproj, prec, &vm);
      if (st != QVL_OK)
        break;
    }
    m->vision = vm;
    cJSON *t = cJSON_AddObjectToObject(out, kn_precision_name(prec));
    int64_t d = m->text->hp.n_embd;
    for (int k = 0; st == QVL_OK && k < 3; k++) {
      int w = sizes[k][0], h = sizes[k][1];
      char key[32];
      snprintf(key, sizeof key, "%dx%d", w, h);
      unsigned char *jpg = NULL;
      unsigned long jsize = 0;
      if (bench_make_jpeg(w, h, &jpg, &jsize) != 0) {
        st = QVL_ERR_NOMEM;
        break;
      }
      image_rgb rgb = {0};
      image_patches ip = {0};
      st = image_decode(jpg, jsize, NULL, &rgb, NULL);
      free(jpg);
      preprocess_opts po = {.min_pixels = 1, .max_pixels = (int64_t)w * h}; /* full resolution */
      if (st == QVL_OK)
        st = image_preprocess(&rgb, &po, &ip);
      image_rgb_free(&rgb);
      float *emb = NULL, *ds = NULL;
      if (st == QVL_OK) {
        emb = malloc(sizeof(float) * (size_t)(ip.n_tokens * d));
        ds = malloc(sizeof(float) * (size_t)(ip.n_tokens * d * (vm->n_deepstack + 1)));
        if (!emb || !ds)
          st = QVL_ERR_NOMEM;
      }
      vision_stage_ms ms = {0};
      double t0 = time_now_s();
      if (st == QVL_OK) {
        fprintf(stderr, "[bench] %s tier: vision encode %s (%d patches)...\n", kn_precision_name(prec), key,
                ip.n_patches);
        st = vision_encode_stages(vm, ip.pixel_values, ip.grid_t, ip.grid_h, ip.grid_w, emb, ds, NULL, NULL, &ms);
      }
      double total = (time_now_s() - t0) * 1e3;
      if (st == QVL_OK) {
        cJSON *e = cJSON_AddObjectToObject(t, key);
        cJSON_AddNumberToObject(e, "patches", ip.n_patches);
        cJSON_AddNumberToObject(e, "vision_ms", total);
        cJSON_AddNumberToObject(e, "gemm_ms", ms.gemm);
        cJSON_AddNumberToObject(e, "attention_ms", ms.attn);
        cJSON_AddNumberToObject(e, "rest_ms", ms.rest);
      }
      free(emb);
      free(ds);
      image_patches_free(&ip);
    }
    if (st == QVL_OK) {
      cJSON *tt = cJSON_AddObjectToObject(t, "ttft_1024x768");
      st = bench_ttft(m, tt);
    }
    m->vision = loaded;
    if (vm != loaded)
      vision_free(vm);
  }
  return st;
}

static void print_stages(const cJSON *o) {
  for (int tier = 0; tier < 2; tier++) {
    const char *name = tier == 0 ? "exact" : "fast";
    const cJSON *t = cJSON_GetObjectItem(o, name);
    if (!t)
      continue;
    printf("  %s tier:\n", name);
    for (const cJSON *e = t->child; e; e = e->next) {
      if (!strcmp(e->string, "ttft_1024x768")) {
        const cJSON *p = cJSON_GetObjectItem(e, "ttft_parts_ms");
        printf("    TTFT 1024x768 %9.1f ms = decode+preprocess %.1f + vision %.1f + prefill %.1f (%d prompt tokens)\n",
               cJSON_GetObjectItem(e, "ttft_ms") ? cJSON_GetObjectItem(e, "ttft_ms")->valuedouble : 0,
               p ? cJSON_GetObjectItem(p, "decode_and_preprocess")->valuedouble : 0,
               p ? cJSON_GetObjectItem(p, "vision")->valuedouble : 0,
               p ? cJSON_GetObjectItem(p, "prefill")->valuedouble : 0,
               cJSON_GetObjectItem(e, "ttft_prompt_tokens") ? (int)cJSON_GetObjectItem(e, "ttft_prompt_tokens")->valuedouble : 0);
        continue;
      }
      double v = cJSON_GetObjectItem(e, "vision_ms")->valuedouble;
      double g = cJSON_GetObjectItem(e, "gemm_ms")->valuedouble, a = cJSON_GetObjectItem(e, "attention_ms")->valuedouble;
      double r = cJSON_GetObjectItem(e, "rest_ms")->valuedouble;
      printf("    vision %-9s (%5d patches) %9.1f ms: matmul %.1f (%.0f%%), attention %.1f (%.0f%%), rest %.1f (%.0f%%)\n",
             e->string, (int)cJSON_GetObjectItem(e, "patches")->valuedouble, v, g, 100 * g / v, a, 100 * a / v,
             r, 100 * r / v);
    }
  }
}

static void print_table(const cJSON *o) {
  printf("qvl bench: isa %s, %d threads, KV cache %s\n", cJSON_GetObjectItem(o, "isa")->valuestring,
         (int)cJSON_GetObjectItem(o, "threads")->valuedouble, cJSON_GetObjectItem(o, "kv_type")->valuestring);
  for (const cJSON *c = o->child; c; c = c->next) {
    if (cJSON_IsNumber(c))
      printf("  %-24s %10.2f\n", c->string, c->valuedouble);
    else if (cJSON_IsObject(c))
      for (const cJSON *e = c->child; e; e = e->next)
        printf("  %-24s %10.2f  [%s]\n", c->string, e->valuedouble, e->string);
  }
}

/* Adds the peak RSS and prints the result: as JSON, or the stages or the main table. */
static void print_result(cJSON *out, bool json, bool stages) {
  cJSON_AddNumberToObject(out, "peak_rss_mb", peak_rss_mb());
  if (json) {
    char *js = cJSON_Print(out);
    printf("%s\n", js);
    free(js);
  } else if (stages) {
    printf("qvl bench --image-stages: isa %s, %d threads\n", kernels_isa(), kernels_threads());
    print_stages(out);
  } else {
    print_table(out);
  }
}

void qvl_bench_opts_default(qvl_bench_opts *o) {
  *o = (qvl_bench_opts){.n_prefill = 512, .n_decode = 128, .n_batch_steps = 32,
                        .batch_sizes = {1, 2, 4, 8}, .n_batch_sizes = 4, .constrained = true};
}

qvl_status qvl_bench(const qvl_bench_opts *opts) {
  const bench_opts o = *opts;
  if (!o.model)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "bench: no model");
  qvl_status st = kernels_init(NULL, o.threads);
  if (st != QVL_OK)
    return st;
  fprintf(stderr, "[bench] loading %s...\n", o.model);
  vlm *m = NULL;
  vlm_paths paths = {.model = o.model, .mmproj = o.mmproj};
  double t0 = time_now_s();
  st = vlm_load(&paths, &m);
  if (st != QVL_OK)
    return qvl_error_prefix(st, "loading the model");
  cJSON *out = cJSON_CreateObject();
  cJSON_AddStringToObject(out, "isa", kernels_isa());
  /* The kernel each operation runs and why (the per-operation dispatch of docs/KERNELS.md). */
  kn_dispatch_row rows[16];
  int n_rows = kernels_dispatch(rows, 16);
  cJSON *disp = cJSON_AddArrayToObject(out, "kernels");
  for (int r = 0; r < n_rows; r++) {
    cJSON *row = cJSON_CreateObject();
    cJSON_AddStringToObject(row, "op", rows[r].op);
    cJSON_AddStringToObject(row, "kernel", rows[r].kernel);
    cJSON_AddStringToObject(row, "why", rows[r].why);
    cJSON_AddItemToArray(disp, row);
  }
  cJSON_AddItemToObject(out, "tuning", tune_json());
  if (!o.json) {
    printf("kernels (isa %s):\n", kernels_isa());
    for (int r = 0; r < n_rows; r++)
      printf("  %-28s %-24s %s\n", rows[r].op, rows[r].kernel, rows[r].why);
    tune_print(stdout);
  }
  cJSON_AddNumberToObject(out, "threads", kernels_threads());
  cJSON_AddNumberToObject(out, "load_ms", (time_now_s() - t0) * 1e3);
  cJSON_AddStringToObject(out, "precision", m->vision ? kn_precision_name(m->vision->precision) : "-");
  const decoder_hparams *hp = &m->text->hp;
  cJSON_AddStringToObject(out, "kv_type", kv_type_name(kv_default_type()));
  cJSON_AddNumberToObject(out, "kv_bytes_per_token",
                          (double)kv_cache_bytes_type(hp->n_layer, 1, hp->n_head_kv * hp->head_dim, kv_default_type()));
  if (o.image_stages) {
    st = bench_image_stages(m, &o, out);
    print_result(out, o.json, true);
    cJSON_Delete(out);
    vlm_free(m);
    return st;
  }
  if (o.stream_gap) { /* only this row: it costs two encodes of the image */
    st = m->vision ? bench_stream_gap(m, out)
                   : qvl_errorf(QVL_ERR_INVALID_ARG, "--stream-gap needs a vision tower (--mmproj)");
  } else if (o.video_only) {
    st = m->vision ? bench_video(m, o.video_file, out)
                   : qvl_errorf(QVL_ERR_INVALID_ARG, "--video needs a vision tower (--mmproj)");
  } else {
    st = bench_images(m, &o, out);
    if (st == QVL_OK && o.n_decode_at > 0)
      st = bench_decode_at(m, &o, out);
    if (st == QVL_OK)
      st = bench_prefill_decode(m, &o, out);
    if (st == QVL_OK && m->vision && !o.skip_vision)
      st = bench_ttft(m, out);
    if (st == QVL_OK && m->vision && !o.skip_vision)
      st = bench_video(m, o.video_file, out);
    if (st == QVL_OK)
      st = bench_batch(m, &o, out);
    if (st == QVL_OK && o.constrained) {
      static const int sizes[2] = {1, 8};
      st = bench_constrained(m, sizes, 2, o.n_batch_steps, out);
    }
  }
  print_result(out, o.json, false);
  cJSON_Delete(out);
  vlm_free(m);
  return st;
}
