/* Prometheus text for GET /metrics (see metrics.h). */
#include "server/http/metrics.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"

static qvl_status metric(buf *b, const char *name, const char *type, const char *help, double v) {
  return buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* counts[i] are cumulative counts of observations <= bounds[i] / unit; counts[n] is the total (+Inf).
 * unit converts the engine's values to the series' unit (1e3: milliseconds to seconds). */
static qvl_status histogram_in(buf *b, const char *name, const char *help, const double *bounds,
                               const uint64_t *counts, int n, double sum, double unit) {
  QVL_TRY(buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name));
  for (int i = 0; i < n; i++)
    QVL_TRY(buf_printf(b, "%s_bucket{le=\"%.6g\"} %llu\n", name, bounds[i] / unit, (unsigned long long)counts[i]));
  QVL_TRY(buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)counts[n]));
  QVL_TRY(buf_printf(b, "%s_sum %.17g\n", name, sum / unit));
  return buf_printf(b, "%s_count %llu\n", name, (unsigned long long)counts[n]);
}

static qvl_status histogram(buf *b, const char *name, const char *help, const double *bounds_ms,
                            const uint64_t *counts, int n, double sum_ms) {
  return histogram_in(b, name, help, bounds_ms, counts, n, sum_ms, 1e3);
}

qvl_status metrics_format(buf *b, const engine_stats *st, const metrics_server *s) {
  engine_stats zero;
  if (!st) {
    memset(&zero, 0, sizeof zero);
    /* the engine's bucket bounds are unknown before it runs; a plain ladder keeps the series stable */
    static const double bounds[ENGINE_HIST_BUCKETS] = {50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000};
    memcpy(zero.hist_bounds_ms, bounds, sizeof bounds);
    static const double tok[ENGINE_HIST_BUCKETS] = {16, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384};
    memcpy(zero.img_tok_bounds, tok, sizeof tok);
    st = &zero;
  }
  QVL_TRY(metric(b, "qvl_model_loaded", "gauge", "1 once the model is loaded and requests are served", s->loaded));
  QVL_TRY(metric(b, "qvl_uptime_seconds", "gauge", "Seconds since the server started", s->uptime_s));
  QVL_TRY(metric(b, "qvl_queue_length", "gauge", "Requests waiting in the engine queue", st->queued));
  QVL_TRY(metric(b, "qvl_running_sequences", "gauge", "Sequences being prefilled or decoded", st->running));
  QVL_TRY(metric(b, "qvl_kv_cache_used_bytes", "gauge", "KV cache memory in use", (double)st->kv_used_bytes));
  QVL_TRY(metric(b, "qvl_kv_cache_total_bytes", "gauge", "KV cache memory available", (double)st->kv_total_bytes));
  QVL_TRY(metric(b, "qvl_kv_cache_usage_ratio", "gauge", "KV cache use (0..1)",
                 st->kv_total_bytes > 0 ? (double)st->kv_used_bytes / (double)st->kv_total_bytes : 0.0));
  QVL_TRY(metric(b, "qvl_image_cache_hits_total", "counter", "Images whose embeddings came from the image cache",
                 (double)st->image_cache_hits));
  QVL_TRY(metric(b, "qvl_image_cache_misses_total", "counter", "Images encoded by the vision tower",
                 (double)st->image_cache_misses));
  QVL_TRY(metric(b, "qvl_image_cache_bytes", "gauge", "Memory held by the image cache", (double)st->image_cache_bytes));
  QVL_TRY(metric(b, "qvl_prefix_cache_hits_total", "counter", "Requests that reused cached prefix KV",
                 (double)st->prefix_cache_hits));
  QVL_TRY(metric(b, "qvl_prefix_cache_misses_total", "counter", "Requests that found no cached prefix",
                 (double)st->prefix_cache_misses));
  QVL_TRY(metric(b, "qvl_prefix_cache_bytes", "gauge", "Memory held by the prefix cache", (double)st->prefix_cache_bytes));
  QVL_TRY(buf_printf(b, "# HELP qvl_requests_total Requests finished by the engine\n# TYPE qvl_requests_total counter\n"
                        "qvl_requests_total{result=\"ok\"} %llu\nqvl_requests_total{result=\"failed\"} %llu\n",
                     (unsigned long long)st->requests_done, (unsigned long long)st->requests_failed));
  QVL_TRY(metric(b, "qvl_generated_tokens_total", "counter", "Tokens generated", (double)st->tokens_generated));
  QVL_TRY(metric(b, "qvl_prompt_tokens_total", "counter", "Prompt tokens processed", (double)st->prompt_tokens));
  QVL_TRY(metric(b, "qvl_decode_tokens_per_second", "gauge", "Recent aggregate decode speed", st->decode_tok_s));
  QVL_TRY(histogram(b, "qvl_ttft_seconds", "Time from request to first token", st->hist_bounds_ms, st->ttft_hist,
                    ENGINE_HIST_BUCKETS, st->ttft_sum_ms));
  QVL_TRY(histogram(b, "qvl_request_latency_seconds", "Time from request to last token", st->hist_bounds_ms,
                    st->latency_hist, ENGINE_HIST_BUCKETS, st->latency_sum_ms));
  QVL_TRY(histogram(b, "qvl_vision_encode_seconds", "Vision-tower time of each image it encoded (cache misses)",
                    st->hist_bounds_ms, st->vision_hist, ENGINE_HIST_BUCKETS, st->vision_sum_ms));
  QVL_TRY(histogram_in(b, "qvl_image_tokens", "LLM tokens of each image of a finished request", st->img_tok_bounds,
                       st->img_tok_hist, ENGINE_HIST_BUCKETS, st->img_tok_sum, 1));
  QVL_TRY(buf_printf(b, "# HELP qvl_http_responses_total HTTP responses by status class\n"
                        "# TYPE qvl_http_responses_total counter\n"));
  for (int c = 1; c <= 5; c++)
    QVL_TRY(buf_printf(b, "qvl_http_responses_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)s->http_responses[c]));
  QVL_TRY(metric(b, "qvl_rejected_busy_total", "counter", "Requests answered 503 because the queue was full",
                 (double)s->rejected_busy));
  QVL_TRY(metric(b, "qvl_client_disconnects_total", "counter", "Requests cancelled because the client disconnected",
                 (double)s->disconnects));
  QVL_TRY(metric(b, "qvl_slow_reader_cancels_total", "counter",
                 "Streams cancelled because the client read nothing for write_timeout_s", (double)s->slow_readers));
  QVL_TRY(metric(b, "qvl_jobs_stored", "gauge", "Async jobs stored (finished or not)", (double)s->jobs_stored));
  QVL_TRY(metric(b, "qvl_jobs_pending", "gauge", "Async jobs queued or running", (double)s->jobs_pending));
  if (s->rss_peak_bytes > 0)
    QVL_TRY(metric(b, "qvl_process_resident_memory_peak_bytes", "gauge", "Peak resident memory of the process",
                   (double)s->rss_peak_bytes));
  return metric(b, "qvl_process_resident_memory_bytes", "gauge", "Resident memory of the process", (double)s->rss_bytes);
}

int64_t metrics_rss_peak_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6) && sscanf(line + 6, "%lld", &kb) == 1)
      break;
  fclose(f);
  return kb >= 0 ? (int64_t)kb * 1024 : -1;
}

int64_t metrics_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f)
    return -1;
  long long size = 0, resident = 0;
  int n = fscanf(f, "%lld %lld", &size, &resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (int64_t)resident * page : -1;
}
