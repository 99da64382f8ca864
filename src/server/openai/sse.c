/* SSE framing (see sse.h). */
#include "server/openai/sse.h"

#include <string.h>

#include "base/status.h"
#include "text/unicode.h"

qvl_status sse_append(buf *out, const char *json) {
  QVL_TRY(buf_append_str(out, "data: "));
  size_t n = strlen(json);
  /* every event is valid UTF-8, whatever bytes a message copied (utf8_append_lossy: U+FFFD) */
  QVL_TRY(utf8_valid_prefix(json, n) == n ? buf_append(out, json, n) : utf8_append_lossy(out, json, n));
  return buf_append_str(out, "\n\n");
}

qvl_status sse_append_event(buf *out, const char *type, const char *json) {
  QVL_TRY(buf_printf(out, "event: %s\n", type));
  return sse_append(out, json);
}

qvl_status sse_append_done(buf *out) { return buf_append_str(out, "data: [DONE]\n\n"); }
