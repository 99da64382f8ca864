/*
 * qvl bench --stream-gap: the largest pause a streaming answer sees while another request's
 * 1024x768 image goes through the vision tower. The engine runs the tower in slices of
 * vision_layers_per_step blocks between decode steps (docs/ENGINE.md), so a running stream waits
 * for one slice, not for the whole image; this measures both ways on the real engine.
 */
#include "commands/bench_gap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/dataurl.h"
#include "base/status.h"
#include "base/timing.h"
#include "commands/bench_image.h"
#include "commands/bench_question.h"
#include "engine/engine.h"

typedef struct gap_stream {
  pthread_mutex_t mu;
  double last, max_gap; /* token times of the text stream (s); its largest gap in the window */
  bool window;          /* the image request is in flight */
  int64_t tokens;
  bool text_done, image_done;
  qvl_status text_status, image_status;
  double image_vision_ms;
} gap_stream;

static bool on_text(void *user, const char *text, size_t len) {
  (void)text;
  (void)len;
  gap_stream *g = user;
  double now = time_now_s();
  pthread_mutex_lock(&g->mu);
  if (g->window && g->last > 0 && now - g->last > g->max_gap)
    g->max_gap = now - g->last;
  g->last = now;
  g->tokens++;
  bool go_on = !g->image_done; /* the stream ends once the image question is answered */
  pthread_mutex_unlock(&g->mu);
  return go_on;
}

static void on_text_done(void *user, const engine_result *r) {
  gap_stream *g = user;
  pthread_mutex_lock(&g->mu);
  g->text_done = true;
  g->text_status = r->status == QVL_ERR_CANCELLED ? QVL_OK : r->status;
  pthread_mutex_unlock(&g->mu);
}

static void on_image_done(void *user, const engine_result *r) {
  gap_stream *g = user;
  pthread_mutex_lock(&g->mu);
  g->image_done = true;
  g->image_status = r->status;
  g->image_vision_ms = r->t.vision_ms;
  pthread_mutex_unlock(&g->mu);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* One run: a text stream decoding, then the image question submitted; the stream's largest gap
 * from the image's submission until its answer. */
static qvl_status one_run(const vlm *m, int layers_per_step, const char *url, double *gap_ms, double *vision_ms) {
  engine_config c;
  engine_config_default(&c);
  c.vision_layers_per_step = layers_per_step;
  c.kv_cache_mb = 2048;
  c.image_cache_mb = 0; /* every run encodes the image */
  c.prefix_cache_mb = 0;
  engine *e = NULL;
  QVL_TRY(engine_start(m, &c, &e));
  gap_stream g = {.text_status = QVL_OK, .image_status = QVL_OK};
  pthread_mutex_init(&g.mu, NULL);
  cJSON *tmsg = bench_question_messages("image_url", NULL, "Write a long story about a lighthouse keeper.");
  cJSON *imsg = bench_question_messages("image_url", url, "What is in this image? Answer briefly.");
  engine_request tr = {.messages = tmsg, .on_text = on_text, .on_done = on_text_done, .user = &g};
  vlm_prompt_opts_default(&tr.prompt);
  tr.gen = gen_params_default();
  tr.gen.max_tokens = 4096;
  tr.gen.ignore_eos = true;
  tr.gen.sampling.temperature = 0;
  engine_request ir = tr;
  ir.messages = imsg;
  ir.on_text = NULL;
  ir.on_done = on_image_done;
  ir.gen.max_tokens = 1;
  ir.prompt.pre.min_pixels = 1;
  ir.prompt.pre.max_pixels = 1024 * 768;
  qvl_status st = engine_submit(e, &tr, NULL);
  /* Wait for a few tokens: the stream is in its steady decode. */
  for (bool ready = false; st == QVL_OK && !ready; sleep_ms(5)) {
    pthread_mutex_lock(&g.mu);
    ready = g.tokens >= 3 || g.text_done;
    pthread_mutex_unlock(&g.mu);
  }
  if (st == QVL_OK) {
    pthread_mutex_lock(&g.mu);
    g.window = true;
    pthread_mutex_unlock(&g.mu);
    st = engine_submit(e, &ir, NULL);
    if (st != QVL_OK) {
      pthread_mutex_lock(&g.mu);
      g.image_done = true;
      pthread_mutex_unlock(&g.mu);
    }
  }
  /* The stream cancels itself at its first token after the image's answer (on_text). */
  for (bool done = false; !done; sleep_ms(10)) {
    pthread_mutex_lock(&g.mu);
    done = g.image_done && g.text_done;
    pthread_mutex_unlock(&g.mu);
  }
  engine_stop(e, false);
  cJSON_Delete(tmsg);
  cJSON_Delete(imsg);
  pthread_mutex_destroy(&g.mu);
  if (st == QVL_OK)
    st = g.image_status != QVL_OK ? g.image_status : g.text_status;
  *gap_ms = g.max_gap * 1e3;
  *vision_ms = g.image_vision_ms;
  return st;
}

qvl_status bench_stream_gap(const vlm *m, cJSON *out) {
  buf url = {0};
  qvl_status st = bench_jpeg_data_url(1024, 768, &url);
  engine_config d;
  engine_config_default(&d);
  cJSON *gap = cJSON_AddObjectToObject(out, "stream_gap_ms");
  cJSON *vis = cJSON_AddObjectToObject(out, "stream_gap_vision_ms");
  char key[48];
  double g = 0, v = 0;
  fprintf(stderr, "[bench] stream gap while a 1024x768 image is encoded (%d layers per step)...\n",
          d.vision_layers_per_step);
  if (st == QVL_OK && (st = one_run(m, d.vision_layers_per_step, url.data, &g, &v)) == QVL_OK) {
    snprintf(key, sizeof key, "sliced, %d layers per step", d.vision_layers_per_step);
    cJSON_AddNumberToObject(gap, key, g);
    cJSON_AddNumberToObject(vis, key, v);
  }
  fprintf(stderr, "[bench] stream gap while a 1024x768 image is encoded (whole image in one step)...\n");
  if (st == QVL_OK && (st = one_run(m, 0, url.data, &g, &v)) == QVL_OK) {
    cJSON_AddNumberToObject(gap, "whole image in one step", g);
    cJSON_AddNumberToObject(vis, "whole image in one step", v);
  }
  buf_free(&url);
  return st;
}
