/*
 * qvl loadtest URL — the table the people running an image-question service measure: the same
 * image questions (8 by default) sent to a running server at concurrency 1, 2, 4 and 8 (streamed
 * chat completions over libcurl, one thread per concurrent client), and per level the total time,
 * the average time per request (total / requests, as their table has it), the speedup against
 * concurrency 1, TTFT and end-to-end latency p50/p95, generated tokens per second, the server's
 * resident memory at its peak during the level (sampled from /metrics) and the success rate.
 * --svg FILE draws throughput and latency against concurrency.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "qvl.h"

#define LT_MAX_LEVELS 16
#define LT_MAX_REQUESTS 1024
#define LT_MAX_IMAGE_BYTES (32 << 20)

/* The questions of the seeds' batch test (000: performance_comparison), in their words. */
static const char *const questions[] = {"描述这张图片", "图片中有文字吗", "这是什么场景", "图片的主要颜色是什么",
                                        "图片中有几个人", "这是什么类型的图片", "图片表达了什么情绪",
                                        "用一句话总结这张图片"};
#define N_QUESTIONS (int)(sizeof questions / sizeof questions[0])

/* ---- one streamed request ------------------------------------------------------------------- */

/* Seconds on a monotonic clock. */
static double time_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define LT_MAX_LINE (1u << 20) /* longer SSE lines are cut (the parser then skips them) */
#define LT_MAX_ERRBODY 4096

typedef struct req_stat {
  double t_start, t_first, t_end; /* seconds (time_now_s) */
  int64_t completion_tokens;
  bool ok;
  long http;
  char error[160];
} req_stat;

typedef struct stream_state {
  char *line;     /* partial SSE line [LT_MAX_LINE + 1] */
  size_t line_len;
  req_stat *st;
  bool done_seen;
  char errbody[LT_MAX_ERRBODY + 1]; /* the start of the body, for an HTTP error */
  size_t err_len;
} stream_state;

static void sse_line(stream_state *s, const char *line) {
  if (strncmp(line, "data: ", 6))
    return;
  const char *d = line + 6;
  if (!strcmp(d, "[DONE]")) {
    s->done_seen = true;
    return;
  }
  cJSON *j = cJSON_Parse(d);
  if (!j)
    return;
  const cJSON *err = cJSON_GetObjectItem(j, "error");
  if (err) {
    const cJSON *msg = cJSON_GetObjectItem(err, "message");
    snprintf(s->st->error, sizeof s->st->error, "%s", cJSON_IsString(msg) ? msg->valuestring : "error");
  }
  const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  const cJSON *content = ch ? cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content") : NULL;
  if (cJSON_IsString(content) && content->valuestring[0] && s->st->t_first == 0)
    s->st->t_first = time_now_s();
  const cJSON *ct = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
  if (cJSON_IsNumber(ct))
    s->st->completion_tokens = (int64_t)ct->valuedouble;
  cJSON_Delete(j);
}

static size_t on_body(char *p, size_t size, size_t n, void *user) {
  stream_state *s = user;
  size_t len = size * n;
  size_t keep = LT_MAX_ERRBODY - s->err_len < len ? LT_MAX_ERRBODY - s->err_len : len;
  memcpy(s->errbody + s->err_len, p, keep);
  s->err_len += keep;
  s->errbody[s->err_len] = '\0';
  for (size_t i = 0; i < len; i++) {
    if (p[i] == '\n') {
      if (s->line_len && s->line[s->line_len - 1] == '\r')
        s->line_len--;
      s->line[s->line_len] = '\0';
      if (s->line_len)
        sse_line(s, s->line);
      s->line_len = 0;
    } else if (s->line_len < LT_MAX_LINE) {
      s->line[s->line_len++] = p[i];
    }
  }
  return len;
}

typedef struct config {
  const char *url;           /* base, no trailing slash */
  char *image_url;           /* data URL */
  const char *api_key;
  int64_t max_tokens;
  double temperature;
  long timeout_s;
} config;

static void one_request(const config *c, int q, req_stat *st) {
  memset(st, 0, sizeof *st);
  cJSON *body = cJSON_CreateObject();
  cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
  cJSON *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON *content = cJSON_AddArrayToObject(u, "content");
  cJSON *img = cJSON_CreateObject();
  cJSON_AddStringToObject(img, "type", "image_url");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(img, "image_url"), "url", c->image_url);
  cJSON_AddItemToArray(content, img);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "type", "text");
  cJSON_AddStringToObject(t, "text", questions[q % N_QUESTIONS]);
  cJSON_AddItemToArray(content, t);
  cJSON_AddItemToArray(msgs, u);
  cJSON_AddNumberToObject(body, "max_tokens", (double)c->max_tokens);
  cJSON_AddNumberToObject(body, "temperature", c->temperature);
  cJSON_AddBoolToObject(body, "stream", true);
  cJSON_AddBoolToObject(cJSON_AddObjectToObject(body, "stream_options"), "include_usage", true);
  char *json = cJSON_PrintUnformatted(body);
  cJSON_Delete(body);

  char url[1024], auth[600];
  snprintf(url, sizeof url, "%s/v1/chat/completions", c->url);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  h = curl_slist_append(h, "Expect:");
  if (c->api_key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->api_key);
    h = curl_slist_append(h, auth);
  }
  stream_state ss;
  memset(&ss, 0, sizeof ss);
  ss.st = st;
  if (!(ss.line = malloc(LT_MAX_LINE + 1))) {
    snprintf(st->error, sizeof st->error, "out of memory");
    curl_slist_free_all(h);
    free(json);
    return;
  }
  CURL *cu = curl_easy_init();
  curl_easy_setopt(cu, CURLOPT_URL, url);
  curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(cu, CURLOPT_POSTFIELDS, json);
  curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(cu, CURLOPT_WRITEDATA, &ss);
  curl_easy_setopt(cu, CURLOPT_TIMEOUT, c->timeout_s);
  curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
  st->t_start = time_now_s();
  CURLcode rc = curl_easy_perform(cu);
  st->t_end = time_now_s();
  curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &st->http);
  if (rc != CURLE_OK)
    snprintf(st->error, sizeof st->error, "%s", curl_easy_strerror(rc));
  else if (st->http != 200 && !st->error[0])
    snprintf(st->error, sizeof st->error, "HTTP %ld: %.120s", st->http, ss.errbody);
  st->ok = rc == CURLE_OK && st->http == 200 && ss.done_seen && !st->error[0];
  curl_easy_cleanup(cu);
  curl_slist_free_all(h);
  free(ss.line);
  free(json);
}

/* ---- a level: N requests, C clients ---------------------------------------------------------- */

typedef struct level_run {
  const config *c;
  int n;
  atomic_int next;
  req_stat *stats;
} level_run;

static void *client_main(void *arg) {
  level_run *L = arg;
  for (int i; (i = atomic_fetch_add(&L->next, 1)) < L->n;)
    one_request(L->c, i, &L->stats[i]);
  return NULL;
}

/* The server's memory, sampled from /metrics while a level runs. */
typedef struct sampler {
  const config *c;
  atomic_bool stop;
  double peak_rss, peak_hwm; /* bytes */
  pthread_t tid;
} sampler;

static size_t on_text_body(char *p, size_t size, size_t n, void *user) {
  FILE *f = user; /* an open_memstream */
  if (ftell(f) < (4 << 20))
    fwrite(p, size, n, f);
  return size * n;
}

static double metric_value(const char *text, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (!strncmp(p, name, nl) && p[nl] == ' ')
      return strtod(p + nl + 1, NULL);
  return -1;
}

static void sample_once(sampler *s) {
  char url[1024];
  snprintf(url, sizeof url, "%s/metrics", s->c->url);
  char *body = NULL;
  size_t body_len = 0;
  FILE *f = open_memstream(&body, &body_len);
  if (!f)
    return;
  CURL *cu = curl_easy_init();
  curl_easy_setopt(cu, CURLOPT_URL, url);
  curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_text_body);
  curl_easy_setopt(cu, CURLOPT_WRITEDATA, f);
  curl_easy_setopt(cu, CURLOPT_TIMEOUT, 5L);
  curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
  bool ok = curl_easy_perform(cu) == CURLE_OK;
  if (fclose(f) == 0 && ok && body) {
    double rss = metric_value(body, "qvl_process_resident_memory_bytes");
    double hwm = metric_value(body, "qvl_process_resident_memory_peak_bytes");
    if (rss > s->peak_rss)
      s->peak_rss = rss;
    if (hwm > s->peak_hwm)
      s->peak_hwm = hwm;
  }
  curl_easy_cleanup(cu);
  free(body);
}

static void *sampler_main(void *arg) {
  sampler *s = arg;
  while (!atomic_load(&s->stop)) {
    sample_once(s);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
  sample_once(s);
  return NULL;
}

typedef struct level_result {
  int concurrency, n, n_ok;
  double total_s, avg_s, speedup;
  double ttft_p50, ttft_p95, e2e_p50, e2e_p95; /* ms */
  double tok_s;
  int64_t tokens;
  double peak_rss_mb, peak_hwm_mb;
  char first_error[160];
} level_result;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static double percentile(const double *v, int n, double p) {
  if (n == 0)
    return NAN;
  int k = (int)ceil(p / 100.0 * n);
  if (k < 1)
    k = 1;
  return v[k > n ? n - 1 : k - 1];
}

static void run_level(const config *c, int conc, int n, level_result *out) {
  memset(out, 0, sizeof *out);
  out->concurrency = conc;
  out->n = n;
  level_run L = {.c = c, .n = n, .stats = calloc((size_t)n, sizeof(req_stat))};
  atomic_init(&L.next, 0);
  sampler smp = {.c = c};
  atomic_init(&smp.stop, false);
  pthread_create(&smp.tid, NULL, sampler_main, &smp);
  pthread_t tids[LT_MAX_REQUESTS];
  double t0 = time_now_s();
  for (int i = 0; i < conc; i++)
    pthread_create(&tids[i], NULL, client_main, &L);
  for (int i = 0; i < conc; i++)
    pthread_join(tids[i], NULL);
  out->total_s = time_now_s() - t0;
  atomic_store(&smp.stop, true);
  pthread_join(smp.tid, NULL);
  double *ttft = calloc((size_t)n, sizeof *ttft), *e2e = calloc((size_t)n, sizeof *e2e);
  int n_ttft = 0;
  for (int i = 0; i < n; i++) {
    req_stat *r = &L.stats[i];
    if (!r->ok) {
      if (!out->first_error[0])
        snprintf(out->first_error, sizeof out->first_error, "%s", r->error[0] ? r->error : "incomplete stream");
      continue;
    }
    e2e[out->n_ok++] = (r->t_end - r->t_start) * 1e3;
    if (r->t_first > 0)
      ttft[n_ttft++] = (r->t_first - r->t_start) * 1e3;
    out->tokens += r->completion_tokens;
  }
  qsort(ttft, (size_t)n_ttft, sizeof *ttft, cmp_double);
  qsort(e2e, (size_t)out->n_ok, sizeof *e2e, cmp_double);
  out->ttft_p50 = percentile(ttft, n_ttft, 50);
  out->ttft_p95 = percentile(ttft, n_ttft, 95);
  out->e2e_p50 = percentile(e2e, out->n_ok, 50);
  out->e2e_p95 = percentile(e2e, out->n_ok, 95);
  out->avg_s = out->total_s / n;
  out->tok_s = out->total_s > 0 ? (double)out->tokens / out->total_s : 0;
  out->peak_rss_mb = smp.peak_rss / 1048576.0;
  out->peak_hwm_mb = smp.peak_hwm / 1048576.0;
  free(ttft);
  free(e2e);
  free(L.stats);
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_table(FILE *f, const level_result *r, int n) {
  fprintf(f, "| concurrency | total (s) | avg / request (s) | speedup vs 1 | TTFT p50 / p95 (ms) | end-to-end p50 / p95 (ms) "
             "| generated tok/s | server peak RSS (MiB) | success |\n");
  fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++)
    fprintf(f, "| %d | %.2f | %.2f | %.2fx | %.0f / %.0f | %.0f / %.0f | %.1f | %.0f | %d/%d (%.0f%%) |\n",
            r[i].concurrency, r[i].total_s, r[i].avg_s, r[i].speedup, r[i].ttft_p50, r[i].ttft_p95, r[i].e2e_p50,
            r[i].e2e_p95, r[i].tok_s, r[i].peak_rss_mb, r[i].n_ok, r[i].n, 100.0 * r[i].n_ok / r[i].n);
}

static void write_json(const char *path, const level_result *r, int n, const config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "url", c->url);
  cJSON_AddNumberToObject(o, "max_tokens", (double)c->max_tokens);
  cJSON *levels = cJSON_AddArrayToObject(o, "levels");
  for (int i = 0; i < n; i++) {
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "concurrency", r[i].concurrency);
    cJSON_AddNumberToObject(l, "requests", r[i].n);
    cJSON_AddNumberToObject(l, "succeeded", r[i].n_ok);
    cJSON_AddNumberToObject(l, "total_s", r[i].total_s);
    cJSON_AddNumberToObject(l, "avg_s", r[i].avg_s);
    cJSON_AddNumberToObject(l, "speedup", r[i].speedup);
    cJSON_AddNumberToObject(l, "ttft_p50_ms", r[i].ttft_p50);
    cJSON_AddNumberToObject(l, "ttft_p95_ms", r[i].ttft_p95);
    cJSON_AddNumberToObject(l, "e2e_p50_ms", r[i].e2e_p50);
    cJSON_AddNumberToObject(l, "e2e_p95_ms", r[i].e2e_p95);
    cJSON_AddNumberToObject(l, "generated_tokens", (double)r[i].tokens);
    cJSON_AddNumberToObject(l, "tok_s", r[i].tok_s);
    cJSON_AddNumberToObject(l, "peak_rss_mib", r[i].peak_rss_mb);
    cJSON_AddNumberToObject(l, "peak_rss_since_start_mib", r[i].peak_hwm_mb);
    cJSON_AddItemToArray(levels, l);
  }
  char *s = cJSON_Print(o);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%s\n", s);
    fclose(f);
  } else {
    fprintf(stderr, "qvl loadtest: cannot write %s\n", path);
  }
  free(s);
  cJSON_Delete(o);
}

/* A "nice" axis maximum: 1, 2 or 5 times a power of ten, at or above v. */
static double nice_max(double v) {
  if (!(v > 0) || !isfinite(v))
    return 1;
  double p = pow(10, floor(log10(v)));
  for (int i = 0; i < 3; i++) {
    double m = (i == 0 ? 1 : i == 1 ? 2 : 5) * p;
    if (m >= v)
      return m;
  }
  return 10 * p;
}

/* One panel: series[k][i] over the levels, x positions evenly spaced (concurrency 1, 2, 4, 8). */
static void svg_panel(FILE *f, double x0, double y0, double w, double h, const char *title, const char *unit,
                      const level_result *r, int n, const double *const *series, const char *const *names,
                      const char *const *colors, int n_series) {
  double vmax = 0;
  for (int k = 0; k < n_series; k++)
    for (int i = 0; i < n; i++)
      if (isfinite(series[k][i]) && series[k][i] > vmax)
        vmax = series[k][i];
  vmax = nice_max(vmax * 1.05);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", x0, y0 - 12, title);
  fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, w, h);
  for (int g = 0; g <= 5; g++) {
    double y = y0 + h - h * g / 5.0;
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x0, y, x0 + w, y);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%g</text>\n", x0 - 6, y + 4,
            vmax * g / 5.0);
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" transform=\"rotate(-90 %.0f %.0f)\" text-anchor=\"middle\">%s</text>\n",
          x0 - 46, y0 + h / 2, x0 - 46, y0 + h / 2, unit);
  for (int i = 0; i < n; i++) {
    double x = n > 1 ? x0 + 30 + (w - 60) * i / (n - 1) : x0 + w / 2;
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">%d</text>\n", x, y0 + h + 18,
            r[i].concurrency);
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">concurrent clients</text>\n",
          x0 + w / 2, y0 + h + 36);
  for (int k = 0; k < n_series; k++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"", colors[k]);
    for (int i = 0; i < n; i++) {
      if (!isfinite(series[k][i]))
        continue;
      double x = n > 1 ? x0 + 30 + (w - 60) * i / (n - 1) : x0 + w / 2;
      fprintf(f, "%.1f,%.1f ", x, y0 + h - h * series[k][i] / vmax);
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < n; i++) {
      if (!isfinite(series[k][i]))
        continue;
      double x = n > 1 ? x0 + 30 + (w - 60) * i / (n - 1) : x0 + w / 2;
      double y = y0 + h - h * series[k][i] / vmax;
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", x, y, colors[k]);
      /* odd series label below their points, so that close lines (p50 and p95) stay readable */
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"%s\">%.3g</text>\n", x,
              k % 2 ? y + 17 : y - 8, colors[k], series[k][i]);
    }
    /* the legend under the axis, clear of the lines */
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"4\" fill=\"%s\"/>\n", x0 + 10, y0 + h + 52 + 18 * k,
            colors[k]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">%s</text>\n", x0 + 30, y0 + h + 58 + 18 * k, names[k]);
  }
}

static void write_svg(const char *path, const level_result *r, int n, const char *subtitle) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "qvl loadtest: cannot write %s\n", path);
    return;
  }
  double tok[LT_MAX_LEVELS], rps[LT_MAX_LEVELS], p50[LT_MAX_LEVELS], p95[LT_MAX_LEVELS], tt[LT_MAX_LEVELS];
  for (int i = 0; i < n; i++) {
    tok[i] = r[i].tok_s;
    rps[i] = r[i].total_s > 0 ? 60.0 * r[i].n_ok / r[i].total_s : 0;
    p50[i] = r[i].e2e_p50 / 1e3;
    p95[i] = r[i].e2e_p95 / 1e3;
    tt[i] = r[i].ttft_p50 / 1e3;
  }
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"480\" font-family=\"sans-serif\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"20\" y=\"26\" font-size=\"18\" font-weight=\"bold\">qvl loadtest: the same image questions at "
             "rising concurrency</text>\n<text x=\"20\" y=\"46\" font-size=\"12\" fill=\"#555\">%s</text>\n",
          subtitle);
  const double *s1[] = {tok, rps};
  const char *n1[] = {"generated tokens / s", "requests / minute"}, *c1[] = {"#1f77b4", "#2ca02c"};
  svg_panel(f, 80, 100, 360, 250, "Throughput", "per second / per minute", r, n, s1, n1, c1, 2);
  const double *s2[] = {p95, p50, tt};
  const char *n2[] = {"end-to-end p95", "end-to-end p50", "time to first token p50"},
             *c2[] = {"#d62728", "#ff7f0e", "#9467bd"};
  svg_panel(f, 580, 100, 360, 250, "Latency", "seconds", r, n, s2, n2, c2, 3);
  fprintf(f, "</svg>\n");
  fclose(f);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* The --image file as a data: URL (qvl_image_data_url); 0, or an exit code after a message. */
static int read_image_url(const char *path, char **url) {
  FILE *f = fopen(path, "rb");
  long size = -1;
  if (f && fseek(f, 0, SEEK_END) == 0)
    size = ftell(f);
  unsigned char *data = NULL;
  bool ok = f && size >= 0 && size <= LT_MAX_IMAGE_BYTES && fseek(f, 0, SEEK_SET) == 0 &&
            (data = malloc(size ? (size_t)size : 1)) && fread(data, 1, (size_t)size, f) == (size_t)size;
  if (!ok) {
    fprintf(stderr, "qvl loadtest: --image %s: %s\n", path,
            !f ? strerror(errno) : size > LT_MAX_IMAGE_BYTES ? "larger than 32 MiB" : "cannot read it");
    if (f)
      fclose(f);
    free(data);
    return 2;
  }
  fclose(f);
  qvl_status s = qvl_image_data_url(data, (size_t)size, url);
  free(data);
  if (s != QVL_OK) {
    fprintf(stderr, "qvl loadtest: out of memory\n");
    return 2;
  }
  return 0;
}

typedef struct loadtest_opts {
  const char *image, *svg, *json, *levels, *api_key;
  int64_t requests, max_tokens, timeout_s;
  double temp;
  bool no_warmup;
} loadtest_opts;

static const qvl_opt o_image = {"image", NULL, QVL_OPT_STR, .meta = "FILE", .help = "the picture asked about (png, jpeg, webp)"};
static const qvl_opt o_levels = {"levels", NULL, QVL_OPT_STR, .meta = "LIST", .help = "concurrency levels"};
static const qvl_opt o_requests = {"requests", NULL, QVL_OPT_INT, .min = 1, .max = LT_MAX_REQUESTS,
                                   .help = "requests per level (default: the 8 questions)"};
static const qvl_opt o_api_key = {"api_key", NULL, QVL_OPT_STR, .meta = "KEY", .help = "sent as Authorization: Bearer KEY"};
static const qvl_opt o_timeout = {"timeout", NULL, QVL_OPT_INT, .min = 1, .max = 86400, .meta = "S", .help = "per request, seconds"};
static const qvl_opt o_no_warmup = {"no_warmup", NULL, QVL_OPT_BOOL,
                                    .help = "skip the one request sent before the first level"};
static const qvl_opt o_svg = {"svg", NULL, QVL_OPT_STR, .meta = "FILE", .help = "draw throughput and latency against concurrency"};
/* a file here, where run and bench take a switch */
static const qvl_opt o_json = {"json", NULL, QVL_OPT_STR, .meta = "FILE", .help = "write the results as JSON"};

static const qvl_opt_bind loadtest_binds[] = {
    QVL_OPT_FIELD(o_image, loadtest_opts, image),
    QVL_OPT_FIELD(o_levels, loadtest_opts, levels),
    QVL_OPT_FIELD(o_requests, loadtest_opts, requests),
    QVL_OPT_FIELD_HELP(qvl_opt_max_tokens, loadtest_opts, max_tokens, "tokens per answer"),
    QVL_OPT_FIELD(qvl_opt_temp, loadtest_opts, temp),
    QVL_OPT_FIELD(o_api_key, loadtest_opts, api_key),
    QVL_OPT_FIELD(o_timeout, loadtest_opts, timeout_s),
    QVL_OPT_FIELD(o_no_warmup, loadtest_opts, no_warmup),
    QVL_OPT_FIELD(o_svg, loadtest_opts, svg),
    QVL_OPT_FIELD(o_json, loadtest_opts, json),
};

static const qvl_opt_cmd loadtest_cmd = {
    .name = "qvl loadtest",
    .usage = "usage: qvl loadtest URL --image FILE [options]\n"
    "Sends the same image questions to a running qvl serve (URL: http://host:port) at each concurrency\n"
    "level and prints total time, average per request, speedup against concurrency 1, TTFT and end-to-end\n"
    "p50/p95, generated tok/s, the server's peak RSS (from /metrics) and the success rate.\n",
    .notes = NULL,
    .opts = loadtest_binds,
    .n_opts = sizeof loadtest_binds / sizeof loadtest_binds[0],
    .max_args = 1};

int cmd_loadtest(int argc, char **argv) {
  loadtest_opts o = {.levels = "1,2,4,8", .requests = N_QUESTIONS, .max_tokens = 64, .timeout_s = 600};
  const char *url = NULL;
  int n_args = 0;
  int rc = args_parse(&loadtest_cmd, argc, argv, &o, &url, &n_args);
  if (rc >= 0)
    return rc;
  if (!url || !o.image)
    return args_usage_error(&loadtest_cmd, &o, !url ? "the server URL is required" : "--image FILE is required");
  const char *image = o.image, *svg = o.svg, *json = o.json, *levels_s = o.levels;
  config c = {.max_tokens = o.max_tokens, .temperature = o.temp, .timeout_s = (long)o.timeout_s, .api_key = o.api_key};
  int n_req = (int)o.requests;
  bool warmup = !o.no_warmup;
  if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
    fprintf(stderr, "qvl loadtest: URL '%s' must start with http:// or https://\n", url);
    return 2;
  }
  int levels[LT_MAX_LEVELS], n_levels = 0;
  for (const char *p = levels_s; *p;) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p || x < 1 || x > LT_MAX_REQUESTS || n_levels == LT_MAX_LEVELS || (*end && *end != ',')) {
      fprintf(stderr, "qvl loadtest: --levels '%s': expected up to %d numbers 1..%d, comma-separated\n", levels_s,
              LT_MAX_LEVELS, LT_MAX_REQUESTS);
      return 2;
    }
    levels[n_levels++] = (int)x;
    p = *end ? end + 1 : end;
  }
  char base[1024];
  snprintf(base, sizeof base, "%s", url);
  size_t bl = strlen(base);
  while (bl > 8 && base[bl - 1] == '/')
    base[--bl] = '\0';
  c.url = base;
  char *du = NULL;
  rc = read_image_url(image, &du);
  if (rc)
    return rc;
  c.image_url = du;

  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (warmup) {
    req_stat w;
    one_request(&c, 0, &w);
    if (!w.ok) {
      fprintf(stderr, "qvl loadtest: the warm-up request failed: %s\n", w.error[0] ? w.error : "incomplete stream");
      free(du);
      curl_global_cleanup();
      return 1;
    }
  }
  level_result res[LT_MAX_LEVELS];
  for (int i = 0; i < n_levels; i++) {
    fprintf(stderr, "qvl loadtest: %d requests at concurrency %d ...\n", n_req, levels[i]);
    run_level(&c, levels[i], n_req, &res[i]);
    res[i].speedup = res[i].total_s > 0 ? res[0].total_s / res[i].total_s : 0;
    if (res[i].first_error[0])
      fprintf(stderr, "qvl loadtest: concurrency %d: %d failed, e.g. %s\n", levels[i], res[i].n - res[i].n_ok,
              res[i].first_error);
  }
  print_table(stdout, res, n_levels);
  char sub[1200]; /* the URL (up to 1023 bytes) and the settings */
  snprintf(sub, sizeof sub, "%s, %d requests per level (the same image, %d questions), max_tokens %lld", base, n_req,
           N_QUESTIONS, (long long)c.max_tokens);
  if (svg)
    write_svg(svg, res, n_levels, sub);
  if (json)
    write_json(json, res, n_levels, &c);
  int bad = 0;
  for (int i = 0; i < n_levels; i++)
    bad |= res[i].n_ok != res[i].n;
  free(du);
  curl_global_cleanup();
  return bad ? 1 : 0;
}
