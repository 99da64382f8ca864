/*
 * The web page's frame strip (POST /video/frames): thumbnails of the sampled frames
 * (video/thumbs.h) against the fixture's decoded frames, and the endpoint's wire
 * (server/openai/video_frames_wire.h): what it accepts, what it refuses, and its reply for the
 * fixture H.264 clip (tests/fixtures/preprocess_video/h264_mp4/case.json).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "base/dataurl.h"
#include "image/preprocess.h"
#include "model/safetensors.h"
#include "server/openai/video_frames_wire.h"
#include "test.h"
#include "test_files.h"
#include "video/thumbs.h"

#define FIX "tests/fixtures"

static void test_thumb_size(void) {
  static const int rows[][6] = {
      /* w, h, box w, box h, want w, want h */
      {96, 64, 160, 90, 96, 64},    /* fits: never scaled up */
      {640, 360, 160, 90, 160, 90}, /* 16:9 fills the box */
      {64, 128, 160, 90, 45, 90},   /* portrait: the height limits */
      {1280, 200, 160, 90, 160, 25},
      {10000, 1, 160, 90, 160, 1},  /* at least one pixel */
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int w, h;
    video_thumb_size(rows[i][0], rows[i][1], rows[i][2], rows[i][3], &w, &h);
    CHECK(w == rows[i][4] && h == rows[i][5], "thumb of %dx%d in %dx%d: %dx%d", rows[i][0], rows[i][1], rows[i][2],
          rows[i][3], w, h);
  }
}

/* The lossless clip of micro-a/f32/video_basic: a thumbnail that fits unscaled is the decoded frame
 * itself, a smaller one the image path's bicubic of it. */
static void test_thumbnails_are_the_sampled_frames(void) {
  buf b;
  if (!test_read_file(FIX "/videos/clip_96x64_10f_5fps.mkv", &b))
    return;
  safetensors *st = NULL;
  CHECK(st_open(FIX "/cases/micro-a/f32/video_basic/expected.safetensors", &st) == QVL_OK, "expected: %s",
        qvl_last_error());
  const st_tensor *rgb = st ? st_find(st, "video_rgb.0") : NULL;
  const st_tensor *ix = st ? st_find(st, "video_frame_indices.0") : NULL;
  CHECK(rgb && ix, "fixture tensors");
  const int W = 96, H = 64;
  const size_t fb = (size_t)W * H * 3;
  for (int box = 0; rgb && ix && box < 2; box++) {
    video_clip c;
    video_thumbs t;
    qvl_status s = video_clip_open(b.data, b.len, NULL, NULL, NULL, NULL, &c);
    CHECK(s == QVL_OK, "open: %s", qvl_last_error());
    if (s != QVL_OK)
      break;
    s = video_clip_thumbnails(&c, box ? 48 : 160, box ? 48 : 90, &t);
    CHECK(s == QVL_OK, "thumbnails: %s", qvl_last_error());
    CHECK(!c.reader, "the reader is closed afterwards");
    CHECK(s != QVL_OK || (t.n == c.n && t.n == ix->shape[0]), "%d thumbnails for %d sampled", t.n, c.n);
    CHECK(s != QVL_OK || (box ? t.width == 48 && t.height == 32 : t.width == W && t.height == H), "thumb %dx%d",
          t.width, t.height);
    for (int k = 0; s == QVL_OK && k < t.n && k < ix->shape[0]; k++) {
      int32_t idx = ((const int32_t *)ix->data)[k];
      const uint8_t *frame = (const uint8_t *)rgb->data + (size_t)idx * fb;
      size_t tb = (size_t)t.width * t.height * 3;
      if (!box) {
        CHECK(!memcmp(t.rgb + (size_t)k * tb, frame, tb), "thumbnail %d is not frame %d", k, idx);
        continue;
      }
      image_rgb src = {W, H, (uint8_t *)frame}, small = {0};
      CHECK(image_resize_bicubic(&src, t.width, t.height, &small) == QVL_OK, "resize");
      CHECK(small.data && !memcmp(t.rgb + (size_t)k * tb, small.data, tb), "small thumbnail %d is not frame %d", k,
            idx);
      image_rgb_free(&small);
    }
    video_thumbs_free(&t);
    video_clip_free(&c);
  }
  st_close(st);
  buf_free(&b);
}

static char *clip_body(const char *clip_path, const char *extra) {
  buf b, url = {0}, body = {0};
  if (!test_read_file(clip_path, &b))
    return NULL;
  CHECK(base64_encode(b.data, b.len, &url) == QVL_OK && buf_append(&url, "", 1) == QVL_OK, "base64");
  CHECK(buf_printf(&body, "{\"video_url\":{\"url\":\"data:video/mp4;base64,%s\"}%s}", url.data, extra) == QVL_OK,
        "body");
  buf_free(&b);
  buf_free(&url);
  return body.data;
}

static void test_parse(void) {
  api_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.video_max_frames = 64;
  lim.video_max_pixels = 786432;
  video_frames_request r;
  api_error e;
  static const char *good[] = {
      "{\"video_url\":{\"url\":\"data:video/mp4;base64,AAAA\"}}",
      "{\"video_url\":\"data:video/mp4;base64,AAAA\",\"video\":{\"fps\":1}}",
      "{\"type\":\"video_url\",\"video_url\":\"data:video/mp4;base64,AAAA\",\"thumbnail\":{\"width\":48,\"height\":320}}",
      "{\"type\":\"input_video\",\"input_video\":{\"data\":\"AAAA\",\"format\":\"webm\"}}",
      "{\"input_video\":{\"data\":\"AAAA\"}}",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    bool ok = video_frames_parse(good[i], strlen(good[i]), &lim, &r, &e);
    CHECK(ok, "refused %s: %s", good[i], e.message);
    if (!ok)
      continue;
    CHECK(r.url && !strncmp(r.url, "data:video/", 11), "url of %s: %s", good[i], r.url ? r.url : "(null)");
    CHECK(r.sampling.max_frames == 64, "the server's frame cap lowers max_frames: %d", r.sampling.max_frames);
    if (i == 1)
      CHECK(r.sampling.fps == 1.0, "fps %g", r.sampling.fps);
    if (i == 2)
      CHECK(r.thumb_width == 48 && r.thumb_height == 320, "thumbnail box %dx%d", r.thumb_width, r.thumb_height);
    else
      CHECK(r.thumb_width == VIDEO_FRAMES_THUMB_WIDTH && r.thumb_height == VIDEO_FRAMES_THUMB_HEIGHT, "default box");
    if (i == 3)
      CHECK(!strncmp(r.url, "data:video/webm;base64,", 23), "input_video format: %s", r.url);
    video_frames_request_free(&r);
  }
  static const struct {
    const char *body, *param;
  } bad[] = {
      {"[]", ""},
      {"not json", ""},
      {"{}", "video_url"},
      {"{\"video_url\":{\"url\":\"\"}}", "video_url"},
      {"{\"type\":\"video\",\"video\":\"data:video/mp4;base64,AAAA\"}", "type"},
      {"{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}}", "type"},
      {"{\"video_url\":{\"url\":\"data:,x\"},\"video\":{\"num_frames\":65}}", "video.num_frames"},
      {"{\"video_url\":{\"url\":\"data:,x\"},\"video\":{\"fps\":2,\"num_frames\":8}}", "video"},
      {"{\"video_url\":{\"url\":\"data:,x\"},\"thumbnail\":{\"width\":8}}", "thumbnail.width"},
      {"{\"video_url\":{\"url\":\"data:,x\"},\"thumbnail\":{\"height\":321}}", "thumbnail.height"},
      {"{\"video_url\":{\"url\":\"data:,x\"},\"thumbnail\":160}", "thumbnail"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&e, 0, sizeof e);
    bool ok = video_frames_parse(bad[i].body, strlen(bad[i].body), &lim, &r, &e);
    CHECK(!ok, "accepted %s", bad[i].body);
    if (ok) {
      video_frames_request_free(&r);
      continue;
    }
    CHECK(e.http == 400 && e.message[0], "%s: http %d", bad[i].body, e.http);
    CHECK(!strcmp(e.param, bad[i].param), "%s: param '%s', want '%s' (%s)", bad[i].body, e.param, bad[i].param,
          e.message);
  }
}

/* The reply for the fixture H.264 clip: its case.json's indices, timestamps and grid. */
static void test_reply(void) {
  char *body = clip_body(FIX "/videos/clip_96x64_24f_12fps_h264.mp4",
                         ",\"video\":{\"min_pixels\":4096,\"max_pixels\":65536},\"thumbnail\":{\"width\":48,\"height\":48}");
  if (!body)
    return;
  api_limits lim;
  memset(&lim, 0, sizeof lim);
  video_frames_request r;
  api_error e;
  bool ok = video_frames_parse(body, strlen(body), &lim, &r, &e);
  CHECK(ok, "parse: %s", e.message);
  free(body);
  if (!ok)
    return;
  buf bytes = {0};
  CHECK(dataurl_decode(r.url, (size_t)16 << 20, NULL, 0, &bytes) == QVL_OK, "data URL: %s", qvl_last_error());
  video_clip c;
  video_thumbs t = {0};
  qvl_status s = video_clip_open(bytes.data, bytes.len, NULL, &r.sampling, NULL, NULL, &c);
  CHECK(s == QVL_OK, "open: %s", qvl_last_error());
  if (s == QVL_OK)
    s = video_clip_thumbnails(&c, r.thumb_width, r.thumb_height, &t);
  CHECK(s == QVL_OK, "thumbnails: %s", qvl_last_error());
  char *json = s == QVL_OK ? video_frames_json(&c, &t) : NULL;
  cJSON *j = json ? cJSON_Parse(json) : NULL;
  CHECK(j != NULL, "reply is JSON");
  if (j) {
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(j, "frames");
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(j, "groups");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(j, "video_grid_thw");
    static const int want_idx[4] = {0, 8, 15, 23};
    static const char *want_text[2] = {"<0.3 seconds>", "<1.6 seconds>"};
    CHECK(cJSON_GetArraySize(frames) == 4 && cJSON_GetArraySize(groups) == 2, "4 frames in 2 groups");
    for (int k = 0; k < 4 && k < cJSON_GetArraySize(frames); k++) {
      const cJSON *f = cJSON_GetArrayItem(frames, k);
      CHECK(cJSON_GetObjectItem(f, "index")->valueint == want_idx[k], "frame %d index", k);
      CHECK(cJSON_GetObjectItem(f, "time_s")->valuedouble == want_idx[k] / 12.0, "frame %d time", k);
      CHECK(cJSON_GetObjectItem(f, "group")->valueint == k / 2, "frame %d group", k);
    }
    for (int g = 0; g < 2 && g < cJSON_GetArraySize(groups); g++) {
      const cJSON *gr = cJSON_GetArrayItem(groups, g);
      CHECK(!strcmp(cJSON_GetObjectItem(gr, "text")->valuestring, want_text[g]), "group %d text", g);
      CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(gr, "frames")) == 2, "group %d has 2 frames", g);
    }
    CHECK(cJSON_GetArrayItem(grid, 0)->valueint == 2 && cJSON_GetArrayItem(grid, 1)->valueint == 4 &&
              cJSON_GetArrayItem(grid, 2)->valueint == 6,
          "grid");
    CHECK(cJSON_GetObjectItem(j, "video_tokens")->valueint == 12 && cJSON_GetObjectItem(j, "total_frames")->valueint == 24,
          "tokens and frame count");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(j, "thumbnails");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(th, "data");
    CHECK(cJSON_GetObjectItem(th, "width")->valueint == 48 && cJSON_GetObjectItem(th, "height")->valueint == 32,
          "thumbnail size");
    CHECK(cJSON_GetArraySize(data) == 4, "one thumbnail per frame");
    for (int k = 0; k < cJSON_GetArraySize(data); k++) {
      buf px = {0};
      const char *b64 = cJSON_GetArrayItem(data, k)->valuestring;
      CHECK(base64_decode(b64, strlen(b64), 1 << 20, &px) == QVL_OK && px.len == 48 * 32 * 3 &&
                !memcmp(px.data, t.rgb + (size_t)k * px.len, px.len),
            "thumbnail %d round-trips", k);
      buf_free(&px);
    }
  }
  cJSON_Delete(j);
  free(json);
  video_thumbs_free(&t);
  video_clip_free(&c);
  buf_free(&bytes);
  video_frames_request_free(&r);
}

int main(void) {
  test_thumb_size();
  test_thumbnails_are_the_sampled_frames();
  test_parse();
  test_reply();
  return TEST_SUMMARY("video_frames");
}
