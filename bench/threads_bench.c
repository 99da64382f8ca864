/*
 * threads_bench — thread scaling of the three stages, by wall time and by CPU time, so that it
 * can be read on a loaded machine too (CPU time does not count the time a thread waits for a
 * core; wall time does). For each thread count of --threads, in one process and on one model load:
 *   vision   one encode of a synthetic JPEG (--image WxH, default 448x448) through the tower;
 *   prefill  --prefill text tokens (default 64) into a fresh sequence;
 *   decode   --decode steps (default 16) after them.
 * Prints one JSON object per thread count: wall ms, process CPU ms, and CPU / wall (the cores the
 * stage kept busy on average; equal to the thread count when it scales and nothing else runs).
 * Usage: make bench; build/rel/bench/threads_bench -m TEXT.gguf --mmproj MMPROJ.gguf [--threads 1,2]
 *        [--image 448x448] [--prefill 64] [--decode 16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands/bench_image.h"
#include "base/timing.h"
#include "engine/vlm.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "kernels/kernels.h"
#include "text/decoder.h"
#include "vision/vision.h"

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double loadavg(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f && fscanf(f, "%lf", &l) != 1)
    l = -1;
  if (f)
    fclose(f);
  return l;
}

typedef struct stage_clock {
  double wall0, cpu0;
} stage_clock;

static stage_clock stage_start(void) { return (stage_clock){time_now_s(), cpu_s()}; }

static void stage_print(const char *name, stage_clock c, int per, const char *comma) {
  double wall = (time_now_s() - c.wall0) * 1e3 / per, cpu = (cpu_s() - c.cpu0) * 1e3 / per;
  printf("\"%s\": {\"wall_ms\": %.1f, \"cpu_ms\": %.1f, \"cores_busy\": %.2f}%s", name, wall, cpu,
         wall > 0 ? cpu / wall : 0, comma);
}

static qvl_status vision_once(const vlm *m, int w, int h) {
  unsigned char *jpg = NULL;
  unsigned long size = 0;
  if (bench_make_jpeg(w, h, &jpg, &size) != 0)
    return QVL_ERR_NOMEM;
  image_rgb rgb = {0};
  image_patches ip = {0};
  preprocess_opts po = {.min_pixels = 1, .max_pixels = (int64_t)w * h};
  qvl_status st = image_decode(jpg, size, NULL, &rgb, NULL);
  free(jpg);
  if (st == QVL_OK)
    st = image_preprocess(&rgb, &po, &ip);
  image_rgb_free(&rgb);
  int64_t d = m->text->hp.n_embd;
  float *emb = NULL, *ds = NULL;
  if (st == QVL_OK) {
    emb = malloc(sizeof(float) * (size_t)(ip.n_tokens * d));
    ds = malloc(sizeof(float) * (size_t)(ip.n_tokens * d * (m->vision->n_deepstack + 1)));
    st = emb && ds ? QVL_OK : QVL_ERR_NOMEM;
  }
  stage_clock c = stage_start();
  if (st == QVL_OK)
    st = vision_encode(m->vision, ip.pixel_values, ip.grid_t, ip.grid_h, ip.grid_w, emb, ds, NULL, NULL);
  stage_print("vision", c, 1, ", ");
  free(emb);
  free(ds);
  image_patches_free(&ip);
  return st;
}

static qvl_status text_once(const vlm *m, int np, int nd) {
  int32_t *ids = malloc(sizeof *ids * (size_t)(np + nd));
  if (!ids)
    return QVL_ERR_NOMEM;
  for (int i = 0; i < np + nd; i++)
    ids[i] = 1000 + (i * 7919) % 30000; /* ordinary text ids; speed does not depend on them */
  decoder_seq *s = NULL;
  decoder_seq_params sp = {.n_ctx = np + nd + 8, .n_batch = np};
  qvl_status st = decoder_seq_init(m->text, &sp, &s);
  const float *logits;
  decoder_input in = {.n_tokens = np, .tokens = ids};
  stage_clock c = stage_start();
  if (st == QVL_OK)
    st = decoder_prefill(s, &in, NULL, &logits);
  stage_print("prefill", c, 1, ", ");
  c = stage_start();
  for (int i = 0; st == QVL_OK && i < nd; i++)
    st = decoder_step(s, ids[np + i], &logits);
  stage_print("decode_per_token", c, nd, "");
  decoder_seq_free(s);
  free(ids);
  return st;
}

int main(int argc, char **argv) {
  const char *model = NULL, *mmproj = NULL, *threads = "1,2";
  int w = 448, h = 448, np = 64, nd = 16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-m") && v)
      model = v, i++;
    else if (!strcmp(a, "--mmproj") && v)
      mmproj = v, i++;
    else if (!strcmp(a, "--threads") && v)
      threads = v, i++;
    else if (!strcmp(a, "--image") && v && sscanf(v, "%dx%d", &w, &h) == 2 && w > 0 && h > 0)
      i++;
    else if (!strcmp(a, "--prefill") && v && (np = atoi(v)) > 0)
      i++;
    else if (!strcmp(a, "--decode") && v && (nd = atoi(v)) > 0)
      i++;
    else {
      fprintf(stderr, "usage: %s -m TEXT.gguf [--mmproj MMPROJ.gguf] [--threads 1,2] [--image 448x448] "
                      "[--prefill 64] [--decode 16]\n", argv[0]);
      return 2;
    }
  }
  if (!model) {
    fprintf(stderr, "%s: -m TEXT.gguf is required\n", argv[0]);
    return 2;
  }
  vlm *m = NULL;
  vlm_paths paths = {.model = model, .mmproj = mmproj};
  if (kernels_init(NULL, 1) != QVL_OK || vlm_load(&paths, &m) != QVL_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], qvl_last_error());
    return 1;
  }
  qvl_status st = QVL_OK;
  for (const char *t = threads; st == QVL_OK && *t;) {
    int n = atoi(t);
    if (n < 1 || kernels_init(NULL, n) != QVL_OK) {
      fprintf(stderr, "%s: bad thread count in '%s'\n", argv[0], threads);
      st = QVL_ERR_INVALID_ARG;
      break;
    }
    printf("{\"threads\": %d, \"loadavg_1min\": %.2f, ", n, loadavg());
    if (m->vision)
      st = vision_once(m, w, h);
    if (st == QVL_OK)
      st = text_once(m, np, nd);
    printf("}\n");
    fflush(stdout);
    t = strchr(t, ',') ? strchr(t, ',') + 1 : t + strlen(t);
  }
  if (st != QVL_OK)
    fprintf(stderr, "%s: %s\n", argv[0], qvl_last_error());
  vlm_free(m);
  return st == QVL_OK ? 0 : 1;
}
