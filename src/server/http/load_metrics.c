/* Prometheus lines for the connection guard and the image budget (see load_metrics.h). */
#include "server/http/load_metrics.h"

#include <stdio.h>

#include "base/status.h"

static qvl_status line(buf *b, const char *name, const char *type, const char *help, const char *labels, double v) {
  char s[512];
  int n = labels ? snprintf(s, sizeof s, "%s%s %.17g\n", name, labels, v)
                 : snprintf(s, sizeof s, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
  return n > 0 && (size_t)n < sizeof s ? buf_append(b, s, (size_t)n) : QVL_OK;
}

qvl_status load_metrics_format(buf *b, const conn_guard_stats *c, const image_budget_stats *im) {
  QVL_TRY(line(b, "qvl_connections_open", "gauge", "Open HTTP connections (reserve ones included)", NULL, c->open));
  QVL_TRY(line(b, "qvl_connections_reserve_open", "gauge", "Open reserve connections (/health and /metrics only)", NULL,
               c->reserve_open));
  QVL_TRY(line(b, "qvl_connections_accepted_total", "counter", "Connections accepted", NULL, (double)c->accepted));
  QVL_TRY(buf_append_str(b, "# HELP qvl_connections_rejected_total Connections answered at once and closed\n"
                            "# TYPE qvl_connections_rejected_total counter\n"));
  QVL_TRY(line(b, "qvl_connections_rejected_total", NULL, NULL, "{reason=\"max_connections\"}", (double)c->rejected_full));
  QVL_TRY(line(b, "qvl_connections_rejected_total", NULL, NULL, "{reason=\"per_client\"}", (double)c->rejected_client));
  QVL_TRY(line(b, "qvl_connections_evicted_total", "counter", "Slow connections closed to make room", NULL, (double)c->evicted));
  QVL_TRY(line(b, "qvl_connections_timed_out_total", "counter", "Connections closed at the header or body deadline", NULL,
               (double)c->timed_out));
  QVL_TRY(line(b, "qvl_image_budget_pixels", "gauge", "Image decoding pool (pixels)", NULL, (double)im->pool_pixels));
  QVL_TRY(line(b, "qvl_image_budget_reserved_pixels", "gauge", "Pixels reserved by decodes in progress", NULL,
               (double)im->reserved_pixels));
  QVL_TRY(line(b, "qvl_image_budget_peak_pixels", "gauge", "Highest reservation since start", NULL, (double)im->peak_pixels));
  QVL_TRY(line(b, "qvl_image_decodes_running", "gauge", "Image decodes running", NULL, im->slots_busy));
  QVL_TRY(line(b, "qvl_image_budget_waiting", "gauge", "Requests waiting for image pixels or a decode slot", NULL, im->waiting));
  return line(b, "qvl_image_budget_refused_total", "counter", "Requests whose images exceed the whole pool", NULL,
              (double)im->refused);
}
