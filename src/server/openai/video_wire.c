#include "server/openai/video_wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

bool api_is_video_part(const char *type) {
  return !strcmp(type, "video_url") || !strcmp(type, "video") || !strcmp(type, "input_video");
}

static bool fail_part(api_error *e, const char *param, const char *what) {
  api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", param,
                   "%s: %s (expected {\"type\":\"video_url\",\"video_url\":{\"url\":\"data:video/mp4;base64,...\"}})",
                   param, what);
  return false;
}

/* llama-server's input_video {"data": BASE64, "format": "mp4"} -> video_url {"url": "data:video/mp4;base64,..."} */
static bool input_video_to_url(cJSON *part, const char *param, api_error *e) {
  const cJSON *iv = cJSON_GetObjectItemCaseSensitive(part, "input_video");
  if (!cJSON_IsObject(iv))
    return fail_part(e, param, "'input_video' must be an object with 'data' (base64) or 'url'");
  const cJSON *url = cJSON_GetObjectItemCaseSensitive(iv, "url");
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(iv, "data");
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(iv, "format");
  buf u = {0};
  qvl_status s = QVL_OK;
  if (cJSON_IsString(url) && url->valuestring[0]) {
    s = buf_append(&u, url->valuestring, strlen(url->valuestring) + 1);
  } else if (cJSON_IsString(data) && data->valuestring[0]) {
    const char *f = cJSON_IsString(fmt) ? fmt->valuestring : "mp4";
    for (const char *c = f; *c; c++)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-') || c - f > 16)
        return fail_part(e, param, "'input_video.format' must be a short name such as \"mp4\"");
    /* a data: URL already (as some clients send) stays as it is */
    if (!strncmp(data->valuestring, "data:", 5))
      s = buf_append(&u, data->valuestring, strlen(data->valuestring) + 1);
    else
      s = buf_printf(&u, "data:video/%s;base64,%s", f, data->valuestring);
  } else {
    return fail_part(e, param, "'input_video' needs 'data' (base64) or 'url' as a string");
  }
  cJSON *obj = s == QVL_OK ? cJSON_CreateObject() : NULL;
  if (!obj || !cJSON_AddStringToObject(obj, "url", u.data)) {
    cJSON_Delete(obj);
    buf_free(&u);
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
    return false;
  }
  buf_free(&u);
  cJSON_DeleteItemFromObjectCaseSensitive(part, "input_video");
  cJSON_AddItemToObject(part, "video_url", obj);
  cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(part, "type"), "video_url");
  return true;
}

bool api_video_part_check(cJSON *part, const char *type, const char *param, api_error *e) {
  if (!strcmp(type, "input_video"))
    return input_video_to_url(part, param, e);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(part, type);
  const cJSON *url = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "url") : v;
  if (!cJSON_IsString(url) || !url->valuestring[0])
    return fail_part(e, param, "a video part needs its URL");
  return true;
}

static bool num_field(const cJSON *o, const char *name, const char *param, double lo, double hi, bool integer,
                      double *out, api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!j || cJSON_IsNull(j))
    return true;
  char p[96];
  snprintf(p, sizeof p, "%s.%s", param, name);
  if (!cJSON_IsNumber(j) || (integer && j->valuedouble != floor(j->valuedouble)) || !(j->valuedouble >= lo) ||
      !(j->valuedouble <= hi)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", p, "'%s' must be %s in [%.17g, %.17g]", p,
                     integer ? "an integer" : "a number", lo, hi);
    return false;
  }
  *out = j->valuedouble;
  return true;
}

bool api_video_parse(const cJSON *root, const api_limits *lim, video_sampling *out, api_error *e) {
  video_sampling_default(out);
  int64_t cap_frames = lim->video_max_frames > 0 ? lim->video_max_frames : VIDEO_HF_MAX_FRAMES;
  int64_t cap_pixels = lim->video_max_pixels > 0 ? lim->video_max_pixels : VIDEO_HF_MAX_PIXELS;
  if (out->max_frames > cap_frames)
    out->max_frames = (int)cap_frames;
  if (out->max_pixels > cap_pixels)
    out->max_pixels = cap_pixels;
  if (out->min_pixels > out->max_pixels)
    out->min_pixels = out->max_pixels;
  double fps = -1, nf = -1, mxf = -1, mnp = -1, mxp = -1;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "video");
  const cJSON *mpk = cJSON_GetObjectItemCaseSensitive(root, "mm_processor_kwargs");
  const cJSON *mio = cJSON_GetObjectItemCaseSensitive(root, "media_io_kwargs");
  const cJSON *miov = cJSON_IsObject(mio) ? cJSON_GetObjectItemCaseSensitive(mio, "video") : NULL;
  if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "video",
                     "'video' must be an object such as {\"fps\": 2} or {\"num_frames\": 8}");
    return false;
  }
  if (!num_field(v, "fps", "video", 0.01, 1000, false, &fps, e) ||
      !num_field(v, "num_frames", "video", 2, (double)cap_frames, true, &nf, e) ||
      !num_field(v, "max_frames", "video", 2, (double)cap_frames, true, &mxf, e) ||
      !num_field(v, "min_pixels", "video", 1024, (double)cap_pixels, true, &mnp, e) ||
      !num_field(v, "max_pixels", "video", 1024, (double)cap_pixels, true, &mxp, e) ||
      !num_field(mpk, "fps", "mm_processor_kwargs", 0.01, 1000, false, &fps, e) ||
      !num_field(miov, "num_frames", "media_io_kwargs.video", 2, (double)cap_frames, true, &nf, e))
    return false;
  if (fps > 0 && nf > 0) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "video",
                     "'fps' and 'num_frames' exclude each other: give one");
    return false;
  }
  if (fps > 0)
    out->fps = fps;
  if (nf > 0) {
    out->num_frames = (int)nf;
    out->fps = 0;
  }
  if (mxf > 0)
    out->max_frames = (int)mxf;
  if (out->min_frames > out->max_frames)
    out->min_frames = out->max_frames;
  if (mxp > 0)
    out->max_pixels = (int64_t)mxp;
  if (mnp > 0)
    out->min_pixels = (int64_t)mnp;
  else if (out->min_pixels > out->max_pixels)
    out->min_pixels = out->max_pixels; /* a low max_pixels lowers the default minimum */
  if (out->min_pixels > out->max_pixels) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "video.min_pixels",
                     "video min_pixels %lld is larger than max_pixels %lld", (long long)out->min_pixels,
                     (long long)out->max_pixels);
    return false;
  }
  return true;
}
