#include "server/openai/video_frames_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/dataurl.h"
#include "server/openai/video_wire.h"

static bool bad(api_error *e, const char *param, const char *what) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param, "%s", what);
  return false;
}

static bool thumb_field(const cJSON *box, const char *name, int *out, api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(box, name);
  if (!j)
    return true;
  if (!cJSON_IsNumber(j) || j->valuedouble < 16 || j->valuedouble > VIDEO_FRAMES_THUMB_MAX ||
      j->valuedouble != (int)j->valuedouble) {
    char p[48];
    snprintf(p, sizeof p, "thumbnail.%s", name);
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", p, "'%s' must be an integer in [16, %d]", p,
                     VIDEO_FRAMES_THUMB_MAX);
    return false;
  }
  *out = (int)j->valuedouble;
  return true;
}

bool video_frames_parse(const char *body, size_t len, const api_limits *lim, video_frames_request *out,
                        api_error *e) {
  memset(out, 0, sizeof *out);
  out->thumb_width = VIDEO_FRAMES_THUMB_WIDTH;
  out->thumb_height = VIDEO_FRAMES_THUMB_HEIGHT;
  out->root = cJSON_ParseWithLength(body, len);
  if (!cJSON_IsObject(out->root)) {
    video_frames_request_free(out);
    return bad(e, NULL,
               "the body must be a JSON object such as {\"video_url\": {\"url\": \"data:video/mp4;base64,...\"}}");
  }
  cJSON *root = out->root;
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
  const char *t = cJSON_IsString(type)                                   ? type->valuestring
                  : cJSON_GetObjectItemCaseSensitive(root, "input_video") ? "input_video"
                                                                          : "video_url";
  bool ok = true;
  /* not the chat template's {"type": "video", "video": URL}: "video" is the sampling here */
  if (strcmp(t, "video_url") && strcmp(t, "input_video"))
    ok = bad(e, "type", "'type' must be \"video_url\" or \"input_video\"");
  if (ok)
    ok = api_video_part_check(root, t, t, e);
  if (ok) { /* input_video is a video_url part now */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "video_url");
    const cJSON *url = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "url") : v;
    out->url = url->valuestring;
  }
  if (ok)
    ok = api_video_parse(root, lim, &out->sampling, e);
  const cJSON *box = cJSON_GetObjectItemCaseSensitive(root, "thumbnail");
  if (ok && box && !cJSON_IsObject(box))
    ok = bad(e, "thumbnail", "'thumbnail' must be an object such as {\"width\": 160, \"height\": 90}");
  if (ok && box)
    ok = thumb_field(box, "width", &out->thumb_width, e) && thumb_field(box, "height", &out->thumb_height, e);
  if (!ok)
    video_frames_request_free(out);
  return ok;
}

void video_frames_request_free(video_frames_request *r) {
  cJSON_Delete(r->root);
  memset(r, 0, sizeof *r);
}

static const char *fps_rule_name(video_fps_rule r) {
  static const char *const names[] = {[VIDEO_FPS_AVG_FRAME_RATE] = "avg_frame_rate",
                                      [VIDEO_FPS_FROM_TIMESTAMPS] = "timestamps",
                                      [VIDEO_FPS_FALLBACK] = "fallback"};
  return (unsigned)r < sizeof names / sizeof names[0] && names[r] ? names[r] : "unknown";
}

static bool add_thumbnails(cJSON *o, const video_thumbs *t) {
  cJSON *th = cJSON_AddObjectToObject(o, "thumbnails");
  cJSON *data = th ? cJSON_AddArrayToObject(th, "data") : NULL;
  if (!data || !cJSON_AddNumberToObject(th, "width", t->width) || !cJSON_AddNumberToObject(th, "height", t->height) ||
      !cJSON_AddStringToObject(th, "format", "rgb24"))
    return false;
  size_t fb = (size_t)t->width * t->height * 3;
  for (int k = 0; k < t->n; k++) {
    buf b64 = {0};
    bool ok = base64_encode(t->rgb + (size_t)k * fb, fb, &b64) == QVL_OK && buf_append(&b64, "", 1) == QVL_OK;
    cJSON *s = ok ? cJSON_CreateString(b64.data) : NULL;
    buf_free(&b64);
    if (!s || !cJSON_AddItemToArray(data, s)) {
      cJSON_Delete(s);
      return false;
    }
  }
  return true;
}

char *video_frames_json(const video_clip *c, const video_thumbs *t) {
  const video_info *in = &c->info;
  cJSON *o = cJSON_CreateObject();
  bool ok = o && cJSON_AddStringToObject(o, "object", "video.frames") &&
            cJSON_AddStringToObject(o, "container", in->container) && cJSON_AddStringToObject(o, "codec", in->codec) &&
            cJSON_AddNumberToObject(o, "width", in->width) && cJSON_AddNumberToObject(o, "height", in->height) &&
            cJSON_AddNumberToObject(o, "fps", in->fps) &&
            cJSON_AddStringToObject(o, "fps_rule", fps_rule_name(in->fps_rule)) &&
            cJSON_AddNumberToObject(o, "total_frames", (double)in->total_frames) &&
            cJSON_AddNumberToObject(o, "duration_s", in->duration_s) &&
            cJSON_AddNumberToObject(o, "resized_width", c->width) &&
            cJSON_AddNumberToObject(o, "resized_height", c->height) &&
            cJSON_AddNumberToObject(o, "video_tokens", (double)c->n_tokens);
  int thw[3] = {c->grid_t, c->grid_h, c->grid_w};
  cJSON *grid = ok ? cJSON_CreateIntArray(thw, 3) : NULL;
  ok = grid && cJSON_AddItemToObject(o, "video_grid_thw", grid);
  cJSON *frames = ok ? cJSON_AddArrayToObject(o, "frames") : NULL;
  for (int k = 0; frames && ok && k < c->n; k++) {
    cJSON *f = cJSON_CreateObject();
    ok = f && cJSON_AddItemToArray(frames, f) && cJSON_AddNumberToObject(f, "index", (double)c->indices[k]) &&
         cJSON_AddNumberToObject(f, "time_s", (double)c->indices[k] / in->fps) &&
         cJSON_AddNumberToObject(f, "group", k / VIDEO_TEMPORAL_PATCH);
  }
  cJSON *groups = ok && frames ? cJSON_AddArrayToObject(o, "groups") : NULL;
  for (int g = 0; groups && ok && g < c->grid_t; g++) {
    char text[64];
    int pair[VIDEO_TEMPORAL_PATCH], np = 0;
    for (int k = g * VIDEO_TEMPORAL_PATCH; k < c->n && np < VIDEO_TEMPORAL_PATCH; k++)
      pair[np++] = k;
    cJSON *gr = cJSON_CreateObject();
    ok = gr && cJSON_AddItemToArray(groups, gr); /* from here on gr belongs to o */
    cJSON *members = ok ? cJSON_CreateIntArray(pair, np) : NULL;
    if (!ok || !members || !cJSON_AddItemToObject(gr, "frames", members)) {
      if (!ok)
        cJSON_Delete(gr);
      cJSON_Delete(members);
      ok = false;
      break;
    }
    ok = video_timestamp_text(c->timestamps[g], text, sizeof text) >= 0 &&
         cJSON_AddNumberToObject(gr, "time_s", c->timestamps[g]) && cJSON_AddStringToObject(gr, "text", text);
  }
  ok = ok && groups && add_thumbnails(o, t);
  char *json = ok ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return json;
}
