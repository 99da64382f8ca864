/*
 * Load driver for `qvl serve`: streams chat completions from 1, 2, 4, 8 (--clients) concurrent
 * clients and reports aggregate throughput and time to first token (p50/p99, measured by the
 * client: request sent -> first content chunk). With --turns it also measures a conversation's
 * second turn about a fresh image (image cache and prefix cache at work) against its first.
 *
 *   build/rel/bench/load [--url http://127.0.0.1:8080] [--clients 1,2,4,8] [--requests N]
 *                        [--max-tokens N] [--image-size WxH] [--turns N] [--api-key KEY]
 *
 * Every request has its own text (no prefix-cache help between load requests); with --image-size
 * each load request also sends its own random-noise PNG of that size (no image-cache help).
 */
#include <curl/curl.h>
#include <png.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/dataurl.h"
#include "base/timing.h"

static const char *url_base = "http://127.0.0.1:8080";
static const char *api_key = NULL;
static int max_tokens = 32, requests_per_client = 4, img_w = 0, img_h = 0, turns = 0;

/* ---- one streamed request ------------------------------------------------------------------ */

typedef struct stream_stat {
  double t0, ttft_s, total_s;
  long completion_tokens, prompt_tokens, cached_tokens;
  double server_ttft_ms;
  buf line, text;
  long http;
  bool ok;
} stream_stat;

static void on_event(stream_stat *s, const char *data) {
  if (!strcmp(data, "[DONE]"))
    return;
  const char *c = strstr(data, "\"content\":\"");
  if (c && c[11] != '"' && s->ttft_s == 0)
    s->ttft_s = time_now_s() - s->t0;
  if (c) {
    c += 11;
    const char *e = c;
    while (*e && !(*e == '"' && e[-1] != '\\'))
      e++;
    buf_append(&s->text, c, (size_t)(e - c));
  }
  const char *u = strstr(data, "\"usage\":{");
  if (u) {
    const char *p;
    if ((p = strstr(u, "\"completion_tokens\":")))
      s->completion_tokens = atol(p + 20);
    if ((p = strstr(u, "\"prompt_tokens\":")))
      s->prompt_tokens = atol(p + 16);
    if ((p = strstr(data, "\"cached_prompt_tokens\":")))
      s->cached_tokens = atol(p + 23);
    if ((p = strstr(data, "\"ttft_ms\":")))
      s->server_ttft_ms = atof(p + 10);
    s->ok = true;
  }
}

static size_t on_data(char *d, size_t sz, size_t n, void *user) {
  stream_stat *s = user;
  size_t len = sz * n;
  for (size_t i = 0; i < len; i++) {
    if (d[i] == '\n') {
      if (s->line.len > 6 && !strncmp(s->line.data, "data: ", 6))
        on_event(s, s->line.data + 6);
      s->line.len = 0;
    } else {
      buf_append(&s->line, d + i, 1);
    }
  }
  return len;
}

static void post_stream(const char *body, stream_stat *s) {
  memset(s, 0, sizeof *s);
  CURL *c = curl_easy_init();
  char url[512], auth[300];
  snprintf(url, sizeof url, "%s/v1/chat/completions", url_base);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  h = curl_slist_append(h, "Expect:");
  if (api_key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
    h = curl_slist_append(h, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  s->t0 = time_now_s();
  CURLcode rc = curl_easy_perform(c);
  s->total_s = time_now_s() - s->t0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s->http);
  if (rc != CURLE_OK || s->http != 200) {
    s->ok = false;
    fprintf(stderr, "load: request failed: %s, HTTP %ld %.200s\n", curl_easy_strerror(rc), s->http,
            s->line.data ? s->line.data : "");
  }
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
}

/* ---- request bodies ------------------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;

/* A PNG of random noise as a data: URL (so no two requests share an image). */
static char *noise_png_url(int w, int h) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = PNG_FORMAT_RGB;
  size_t n = (size_t)w * (size_t)h * 3;
  unsigned char *px = malloc(n);
  pthread_mutex_lock(&rng_mu);
  for (size_t i = 0; i < n; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    px[i] = (unsigned char)(rng >> 24);
  }
  pthread_mutex_unlock(&rng_mu);
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&im, NULL, &size, 0, px, 0, NULL);
  unsigned char *mem = malloc(size);
  png_image_write_to_memory(&im, mem, &size, 0, px, 0, NULL);
  buf b = {0};
  buf_append_str(&b, "data:image/png;base64,");
  base64_encode(mem, size, &b);
  free(mem);
  free(px);
  return b.data;
}

/* JSON-escapes plain ASCII text from this program (quotes and backslashes only). */
static void add_text(buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      buf_append(b, "\\", 1);
    buf_append(b, s, 1);
  }
}

static char *chat_body(const char *history_json, const char *text, const char *image_url, int max_tok) {
  buf b = {0};
  buf_printf(&b, "{\"model\":\"qvl\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":%d,"
                 "\"temperature\":0,\"messages\":[%s%s{\"role\":\"user\",\"content\":[",
             max_tok, history_json ? history_json : "", history_json ? "," : "");
  if (image_url)
    buf_printf(&b, "{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}},", image_url);
  buf_append_str(&b, "{\"type\":\"text\",\"text\":\"");
  add_text(&b, text);
  buf_append_str(&b, "\"}]}]}");
  return b.data;
}

/* ---- the load levels ------------------------------------------------------------------------- */

typedef struct client_ctx {
  int id, level;
  stream_stat *stats; /* [requests_per_client] */
} client_ctx;

static void *client_main(void *arg) {
  client_ctx *c = arg;
  for (int r = 0; r < requests_per_client; r++) {
    char text[256];
    snprintf(text, sizeof text,
             "Load level %d, client %d, request %d: write a short story about a lighthouse keeper and a fox.",
             c->level, c->id, r);
    char *img = img_w ? noise_png_url(img_w, img_h) : NULL;
    char *body = chat_body(NULL, text, img, max_tokens);
    post_stream(body, &c->stats[r]);
    free(body);
    free(img);
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static double pct(const double *v, int n, double p) {
  if (n == 0)
    return 0;
  int k = (int)(p / 100.0 * n + 0.999999) - 1;
  return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static void run_level(int clients) {
  pthread_t th[64];
  client_ctx cc[64];
  stream_stat *all = calloc((size_t)(clients * requests_per_client), sizeof *all);
  double t0 = time_now_s();
  for (int i = 0; i < clients; i++) {
    cc[i] = (client_ctx){i, clients, all + i * requests_per_client};
    pthread_create(&th[i], NULL, client_main, &cc[i]);
  }
  for (int i = 0; i < clients; i++)
    pthread_join(th[i], NULL);
  double wall = time_now_s() - t0;
  int n = clients * requests_per_client, ok = 0;
  long tokens = 0, prompt = 0;
  double *ttft = calloc((size_t)n, sizeof *ttft), *lat = calloc((size_t)n, sizeof *lat);
  for (int i = 0; i < n; i++) {
    if (!all[i].ok)
      continue;
    ttft[ok] = all[i].ttft_s;
    lat[ok] = all[i].total_s;
    ok++;
    tokens += all[i].completion_tokens;
    prompt += all[i].prompt_tokens;
  }
  qsort(ttft, (size_t)ok, sizeof *ttft, cmp_double);
  qsort(lat, (size_t)ok, sizeof *lat, cmp_double);
  printf("%7d %8d/%-3d %8.1f %9.2f %10.2f %9.3f %9.3f %9.3f %9.3f %8ld\n", clients, ok, n, wall, tokens / wall,
         (tokens / wall) / clients, pct(ttft, ok, 50), pct(ttft, ok, 99), pct(lat, ok, 50), pct(lat, ok, 99),
         ok ? prompt / ok : 0);
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    buf_free(&all[i].line);
    buf_free(&all[i].text);
  }
  free(all);
  free(ttft);
  free(lat);
}

/* Turn 1 about a fresh image, then turn 2 with the history: the image embeddings and the first
 * turn's KV should be reused, so turn 2's TTFT is a fraction of turn 1's. */
static void run_turns(void) {
  int w = img_w ? img_w : 448, h = img_h ? img_h : 448;
  printf("\nsecond turn about the same image (%dx%d random PNG), %d conversations, TTFT in seconds:\n", w, h, turns);
  printf("%4s %10s %10s %14s %8s %12s %10s\n", "conv", "turn1_ttft", "turn2_ttft", "turn2/turn1", "prompt2",
         "cached2", "server2_ms");
  double sum1 = 0, sum2 = 0;
  for (int t = 0; t < turns; t++) {
    char *img = noise_png_url(w, h);
    char text[128];
    snprintf(text, sizeof text, "Conversation %d: describe this picture.", t);
    char *b1 = chat_body(NULL, text, img, 16);
    stream_stat s1, s2;
    post_stream(b1, &s1);
    buf hist = {0};
    buf_printf(&hist, "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}},"
                      "{\"type\":\"text\",\"text\":\"",
               img);
    add_text(&hist, text);
    buf_append_str(&hist, "\"}]},{\"role\":\"assistant\",\"content\":\"");
    buf_append(&hist, s1.text.data ? s1.text.data : "", s1.text.len); /* already JSON-escaped */
    buf_append_str(&hist, "\"}");
    char *b2 = chat_body(hist.data, "What else can you see in it?", NULL, 16);
    post_stream(b2, &s2);
    printf("%4d %10.3f %10.3f %13.1f%% %8ld %12ld %10.1f\n", t, s1.ttft_s, s2.ttft_s,
           s1.ttft_s > 0 ? 100.0 * s2.ttft_s / s1.ttft_s : 0, s2.prompt_tokens, s2.cached_tokens, s2.server_ttft_ms);
    sum1 += s1.ttft_s;
    sum2 += s2.ttft_s;
    buf_free(&hist);
    free(b1);
    free(b2);
    free(img);
    buf_free(&s1.line);
    buf_free(&s1.text);
    buf_free(&s2.line);
    buf_free(&s2.text);
  }
  if (turns)
    printf("mean: turn 1 %.3f s, turn 2 %.3f s (%.1f%%)\n", sum1 / turns, sum2 / turns, sum1 > 0 ? 100 * sum2 / sum1 : 0);
}

static void usage(void) {
  fprintf(stderr, "usage: load [--url URL] [--clients 1,2,4,8] [--requests N] [--max-tokens N] [--image-size WxH]\n"
                  "            [--turns N] [--api-key KEY]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *clients = "1,2,4,8";
  for (int i = 1; i + 1 < argc || (i < argc && (usage(), 0)); i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--url"))
      url_base = v;
    else if (!strcmp(a, "--clients"))
      clients = v;
    else if (!strcmp(a, "--requests"))
      requests_per_client = atoi(v);
    else if (!strcmp(a, "--max-tokens"))
      max_tokens = atoi(v);
    else if (!strcmp(a, "--image-size")) {
      if (sscanf(v, "%dx%d", &img_w, &img_h) != 2 || img_w < 1 || img_h < 1)
        usage();
    } else if (!strcmp(a, "--turns"))
      turns = atoi(v);
    else if (!strcmp(a, "--api-key"))
      api_key = v;
    else
      usage();
  }
  if (requests_per_client < 1 || max_tokens < 1)
    usage();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  printf("qvl serve load: %s, %d requests per client, max_tokens %d, %s\n", url_base, requests_per_client, max_tokens,
         img_w ? "with a fresh image per request" : "text only");
  printf("%7s %12s %8s %9s %10s %9s %9s %9s %9s %8s\n", "clients", "ok/sent", "wall_s", "tok/s", "tok/s/cli",
         "ttft_p50", "ttft_p99", "lat_p50", "lat_p99", "prompt");
  char *list = strdup(clients), *save = NULL;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int c = atoi(t);
    if (c >= 1 && c <= 64)
      run_level(c);
  }
  free(list);
  if (turns > 0)
    run_turns();
  curl_global_cleanup();
  return 0;
}
