/* qvl_request (include/qvl.h): messages, images, sampling and callbacks of one request. */
#include <stdlib.h>
#include <string.h>

#include "capi/api_impl.h"
#include "capi/request_impl.h"
#include "base/status.h"

qvl_status qvl_request_new(qvl_request **out) {
  *out = NULL;
  qvl_request *r = calloc(1, sizeof *r);
  if (!r || !(r->msgs = cJSON_CreateArray()) || !(r->pending = cJSON_CreateArray())) {
    qvl_request_free(r);
    return qvl_errorf(QVL_ERR_NOMEM, "request: out of memory");
  }
  r->gen = gen_params_default();
  vlm_prompt_opts_default(&r->po);
  *out = r;
  return QVL_OK;
}

void qvl_request_free(qvl_request *r) {
  if (!r)
    return;
  cJSON_Delete(r->msgs);
  cJSON_Delete(r->pending);
  free(r->raw);
  for (int i = 0; i < r->n_stops; i++)
    free(r->stops[i]);
  free(r);
}

static qvl_status oom(void) { return qvl_errorf(QVL_ERR_NOMEM, "request: out of memory"); }

qvl_status qvl_request_set_messages(qvl_request *r, const char *json) {
  cJSON *m = json ? cJSON_Parse(json) : NULL;
  if (!cJSON_IsArray(m)) {
    cJSON_Delete(m);
    return qvl_errorf(QVL_ERR_FORMAT, "messages: expected a JSON array of messages");
  }
  cJSON_Delete(r->msgs);
  r->msgs = m;
  return QVL_OK;
}

qvl_status qvl_request_add_message(qvl_request *r, const char *role, const char *text) {
  if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "message role '%s': expected system, user or assistant",
                      role ? role : "(null)");
  bool images = !strcmp(role, "user") && cJSON_GetArraySize(r->pending) > 0;
  cJSON *m = cJSON_CreateObject();
  bool ok = m && cJSON_AddStringToObject(m, "role", role);
  if (ok && !images) {
    ok = cJSON_AddStringToObject(m, "content", text ? text : "") != NULL;
  } else if (ok) {
    /* the images and videos first (in the order added), then the text, as `qvl run --image F -p
     * TEXT` always sent them; pending holds the finished content parts */
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    ok = content != NULL;
    while (ok && cJSON_GetArraySize(r->pending) > 0)
      cJSON_AddItemToArray(content, cJSON_DetachItemFromArray(r->pending, 0));
    cJSON *tp = cJSON_CreateObject();
    ok = ok && tp && cJSON_AddStringToObject(tp, "type", "text") && cJSON_AddStringToObject(tp, "text", text ? text : "");
    if (tp)
      cJSON_AddItemToArray(content, tp);
  }
  if (!ok) {
    cJSON_Delete(m);
    return oom();
  }
  cJSON_AddItemToArray(r->msgs, m);
  if (images) {
    cJSON_Delete(r->pending);
    r->pending = cJSON_CreateArray();
    if (!r->pending)
      return oom();
  }
  return QVL_OK;
}

/* A content part {"type": KIND, KIND: {"url": URL}} for the next user message. */
static qvl_status add_pending_part(qvl_request *r, const char *kind, const char *url) {
  cJSON *part = cJSON_CreateObject();
  cJSON *u = part && cJSON_AddStringToObject(part, "type", kind) ? cJSON_AddObjectToObject(part, kind) : NULL;
  if (!u || !cJSON_AddStringToObject(u, "url", url)) {
    cJSON_Delete(part);
    return oom();
  }
  cJSON_AddItemToArray(r->pending, part);
  return QVL_OK;
}

static qvl_status add_pending(qvl_request *r, const char *url) { return add_pending_part(r, "image_url", url); }

qvl_status qvl_request_add_image_file(qvl_request *r, const char *path) {
  if (!path || !*path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image: empty path");
  QVL_TRY(add_pending(r, path));
  r->po.source.allow_files = true;
  return QVL_OK;
}

qvl_status qvl_request_add_image_bytes(qvl_request *r, const void *data, size_t len) {
  char *url = NULL;
  QVL_TRY(qvl_image_data_url(data, len, &url));
  qvl_status s = add_pending(r, url);
  free(url);
  return s;
}

qvl_status qvl_request_add_video_file(qvl_request *r, const char *path) {
  if (!path || !*path)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "video: empty path");
  QVL_TRY(add_pending_part(r, "video_url", path));
  r->po.source.allow_files = true;
  return QVL_OK;
}

qvl_status qvl_request_add_video_bytes(qvl_request *r, const void *data, size_t len) {
  char *url = NULL;
  QVL_TRY(qvl_video_data_url(data, len, &url));
  qvl_status s = add_pending_part(r, "video_url", url);
  free(url);
  return s;
}

qvl_status qvl_request_set_video_sampling(qvl_request *r, double fps, int num_frames, int max_frames) {
  if (fps < 0 || num_frames < 0 || max_frames < 0 || fps > 1000 || (fps > 0 && num_frames > 0))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "video sampling: fps %g and num_frames %d (one of them, not negative)",
                      fps, num_frames);
  if (num_frames > 0) {
    r->po.video.num_frames = num_frames;
    r->po.video.fps = 0;
  } else if (fps > 0) {
    r->po.video.fps = fps;
    r->po.video.num_frames = 0;
  }
  if (max_frames > 0)
    r->po.video.max_frames = max_frames;
  return QVL_OK;
}

void qvl_request_set_video_pixels(qvl_request *r, int64_t min_pixels, int64_t max_pixels) {
  if (min_pixels > 0)
    r->po.video.min_pixels = min_pixels;
  if (max_pixels > 0)
    r->po.video.max_pixels = max_pixels;
}

qvl_status qvl_request_set_raw_prompt(qvl_request *r, const char *text, size_t len) {
  char *t = malloc(len + 1);
  if (!t)
    return oom();
  if (len)
    memcpy(t, text, len);
  t[len] = '\0';
  free(r->raw);
  r->raw = t;
  r->raw_len = len;
  r->has_raw = true;
  return QVL_OK;
}

void qvl_request_allow_files(qvl_request *r, bool allow) { r->po.source.allow_files = allow; }

static void sampling_from(const sampler_params *p, qvl_sampling *out) {
  out->temperature = p->temperature;
  out->top_k = p->top_k;
  out->top_p = p->top_p;
  out->min_p = p->min_p;
  out->repetition_penalty = p->repetition_penalty;
  out->presence_penalty = p->presence_penalty;
  out->frequency_penalty = p->frequency_penalty;
  out->seed = p->seed;
}

void qvl_sampling_default(qvl_sampling *s) {
  sampler_params p = sampler_default_params();
  sampling_from(&p, s);
}

void qvl_model_sampling(const qvl_model *m, qvl_sampling *out) {
  sampler_params p = m->v->sampling;
  p.seed = 0;
  sampling_from(&p, out);
}

void qvl_request_get_sampling(const qvl_request *r, qvl_sampling *out) { sampling_from(&r->gen.sampling, out); }

void qvl_request_set_sampling(qvl_request *r, const qvl_sampling *s) {
  sampler_params *p = &r->gen.sampling;
  p->temperature = s->temperature;
  p->top_k = s->top_k;
  p->top_p = s->top_p;
  p->min_p = s->min_p;
  p->repetition_penalty = s->repetition_penalty;
  p->presence_penalty = s->presence_penalty;
  p->frequency_penalty = s->frequency_penalty;
  p->seed = s->seed;
}

void qvl_request_set_max_tokens(qvl_request *r, int64_t n) { r->gen.max_tokens = n; }

qvl_status qvl_request_add_stop(qvl_request *r, const char *stop) {
  if (r->n_stops == STOP_MAX_STRINGS)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "at most %d stop strings", STOP_MAX_STRINGS);
  if (!stop || !*stop)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "an empty stop string");
  if (!(r->stops[r->n_stops] = strdup(stop)))
    return oom();
  r->n_stops++;
  return QVL_OK;
}

int64_t qvl_default_max_pixels(void) { return IMAGE_CPU_DEFAULT_MAX_PIXELS; }

void qvl_request_set_pixels(qvl_request *r, int64_t min_pixels, int64_t max_pixels) {
  if (min_pixels > 0)
    r->po.pre.min_pixels = min_pixels;
  if (max_pixels > 0)
    r->po.pre.max_pixels = max_pixels;
}

void qvl_request_set_trim_history(qvl_request *r, bool trim) { r->trim_history = trim; }

void qvl_request_set_callbacks(qvl_request *r, qvl_on_text_fn on_text, qvl_on_done_fn on_done, void *user) {
  r->cb.on_text = on_text;
  r->cb.on_done = on_done;
  r->cb.user = user;
}

void qvl_request_set_reasoning_callback(qvl_request *r, qvl_on_text_fn on_reasoning) { r->cb.on_reasoning = on_reasoning; }

void qvl_request_set_reasoning_budget(qvl_request *r, int64_t n) { r->gen.reasoning_budget = n < 0 ? -1 : n; }

qvl_status request_to_engine(const qvl_request *r, engine_request *out) {
  engine_request_init(out);
  if (cJSON_GetArraySize(r->pending) > 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "request: images or videos were added after the last user message");
  if (r->has_raw) {
    out->raw_text = r->raw;
    out->raw_len = r->raw_len;
  } else {
    out->messages = r->msgs;
  }
  out->prompt = r->po;
  out->gen = r->gen;
  out->gen.stop = (const char *const *)r->stops;
  out->gen.n_stop = r->n_stops;
  return QVL_OK;
}
