/* The inside of a qvl_request (src/api/ only). */
#ifndef QVL_CAPI_REQUEST_IMPL_H
#define QVL_CAPI_REQUEST_IMPL_H

#include <cjson/cJSON.h>

#include "engine/engine.h"
#include "qvl.h"
#include "text/stop.h"

/* What a request calls back, kept by the engine side from submit to the end of on_done. */
typedef struct request_callbacks {
  qvl_on_text_fn on_text;
  qvl_on_text_fn on_reasoning;
  qvl_on_done_fn on_done;
  void *user;
} request_callbacks;

struct qvl_request {
  cJSON *msgs;                 /* OpenAI messages array */
  cJSON *pending;              /* image URLs for the next user message */
  char *raw;                   /* raw prompt (has_raw) */
  size_t raw_len;
  bool has_raw;
  char *stops[STOP_MAX_STRINGS];
  int n_stops;
  gen_params gen;
  vlm_prompt_opts po;
  bool trim_history;
  request_callbacks cb;
};

/* The engine request for r (pointers into r; callbacks and history left for the caller). */
qvl_status request_to_engine(const qvl_request *r, engine_request *out);

#endif
