/* The access log (see request_log.h). */
#include "server/http/request_log.h"

#include <stdio.h>
#include <time.h>

#include "base/logsink.h"
#include "base/timing.h"
#include "base/finish.h"

static double now_ms(double t0) { return (time_now_s() - t0) * 1e3; }

void request_log_timestamp(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* One line per request, logfmt. */
void request_log_write(const req_log *l) {
  char ts[40], line[1024];
  request_log_timestamp(ts, sizeof ts);
  int n = snprintf(line, sizeof line, "ts=%s level=info msg=request id=%s method=%s path=%s status=%d total_ms=%.1f",
                   ts, l->id, l->method, l->path, l->status, now_ms(l->t0));
  if (l->chat && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, " stream=%d", l->stream);
  const api_result *r = l->res;
  if (r && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n,
                  " prompt_tokens=%lld completion_tokens=%lld image_tokens=%lld cached_prompt_tokens=%lld "
                  "image_cache_hits=%d image_cache_misses=%d queue_ms=%.1f ttft_ms=%.1f decode_tok_s=%.2f finish=%s",
                  (long long)r->prompt_tokens, (long long)r->completion_tokens, (long long)r->image_tokens,
                  (long long)r->cached_prompt_tokens, r->image_cache_hits, r->image_cache_misses, r->t.queue_ms,
                  r->t.ttft_ms, r->t.decode_tok_s, qvl_finish_name(r->finish_reason));
  if (n < 0)
    return;
  if ((size_t)n >= sizeof line - 1)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  logsink_write(line, (size_t)n); /* one write(2); JSON with --log-format json */
}
