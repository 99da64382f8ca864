/*
 * Video: sampling and sizing against the fixture tables, decoding of every fixture clip against the
 * expected frames (tests/fixtures/README.md "Video"), the H.264 MP4 container case, the key-frame
 * seeking path against plain decoding, and bad inputs (every prefix of a clip, random bytes, an image,
 * caps).
 *   - tests/fixtures/preprocess_video/{frame_sampling,smart_resize}.json: every row.
 *   - tests/fixtures/cases/<video cases>/expected.safetensors: video_rgb, video_frame_indices,
 *     video_resized, pixel_values_videos, video_grid_thw (exact).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "image/preprocess.h"
#include "model/safetensors.h"
#include "test.h"
#include "test_files.h"
#include "video/clip.h"
#include "video/decode.h"
#include "video/sample.h"

#define FIX "tests/fixtures"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_frame_sampling(void) {
  cJSON *j = test_read_json(FIX "/preprocess_video/frame_sampling.json");
  if (!j)
    return;
  const cJSON *c;
  int rows = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) {
    video_sampling s;
    video_sampling_default(&s);
    const cJSON *fps = cJSON_GetObjectItemCaseSensitive(c, "fps");
    s.fps = cJSON_IsNumber(fps) ? fps->valuedouble : 0;
    const cJSON *nf = cJSON_GetObjectItemCaseSensitive(c, "num_frames");
    s.num_frames = cJSON_IsNumber(nf) ? nf->valueint : 0;
    s.min_frames = (int)num(c, "min_frames");
    s.max_frames = (int)num(c, "max_frames");
    int64_t total = (int64_t)num(c, "total_num_frames");
    double vfps = num(c, "video_fps");
    int64_t idx[1024];
    int n = 0;
    qvl_status st = video_sample_indices(total, vfps, &s, idx, 1024, &n);
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "frame_indices");
    CHECK(st == QVL_OK && n == cJSON_GetArraySize(exp), "row %d: status %d n %d, expected %d", rows, (int)st, n,
          cJSON_GetArraySize(exp));
    int bad = 0;
    for (int i = 0; st == QVL_OK && i < n && i < cJSON_GetArraySize(exp); i++)
      bad += idx[i] != (int64_t)cJSON_GetArrayItem(exp, i)->valuedouble;
    CHECK(bad == 0, "row %d (total %lld, fps %g): %d indices differ", rows, (long long)total, vfps, bad);
    double ts[512];
    if (st == QVL_OK && n <= 1024) {
      video_timestamps(idx, n, vfps, ts);
      const cJSON *et = cJSON_GetObjectItemCaseSensitive(c, "timestamps");
      const cJSON *tt = cJSON_GetObjectItemCaseSensitive(c, "timestamp_text");
      CHECK(cJSON_GetArraySize(et) == video_n_groups(n), "row %d: %d groups, expected %d", rows, video_n_groups(n),
            cJSON_GetArraySize(et));
      for (int g = 0; g < video_n_groups(n) && g < cJSON_GetArraySize(et); g++) {
        double e = cJSON_GetArrayItem(et, g)->valuedouble;
        CHECK(ts[g] == e, "row %d group %d: timestamp %.17g, expected %.17g", rows, g, ts[g], e);
        char text[64];
        video_timestamp_text(ts[g], text, sizeof text);
        CHECK(!strcmp(text, cJSON_GetArrayItem(tt, g)->valuestring), "row %d group %d: '%s', expected '%s'", rows, g,
              text, cJSON_GetArrayItem(tt, g)->valuestring);
      }
    }
    /* a single sampled frame: the resize refuses it with HF's message */
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(c, "error");
    if (err) {
      int h, w;
      qvl_status rs = video_smart_resize(n, 64, 64, 4096, 65536, &h, &w);
      const char *msg = cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring;
      CHECK(rs == QVL_ERR_INVALID_ARG && !strcmp(qvl_last_error(), msg), "row %d: '%s', expected '%s'", rows,
            qvl_last_error(), msg);
    }
    rows++;
  }
  CHECK(rows >= 10, "only %d frame sampling rows", rows);
  cJSON_Delete(j);
}

static void test_smart_resize(void) {
  cJSON *j = test_read_json(FIX "/preprocess_video/smart_resize.json");
  if (!j)
    return;
  const cJSON *c;
  int rows = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) {
    int n = (int)num(c, "num_frames"), h = (int)num(c, "height"), w = (int)num(c, "width");
    int64_t mn = (int64_t)num(c, "min_pixels"), mx = (int64_t)num(c, "max_pixels");
    int rh = 0, rw = 0;
    qvl_status s = video_smart_resize(n, h, w, mn, mx, &rh, &rw);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(c, "error");
    if (err) {
      const char *msg = cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring;
      CHECK(s == QVL_ERR_INVALID_ARG && !strcmp(qvl_last_error(), msg), "resize row %d: '%s', expected '%s'", rows,
            qvl_last_error(), msg);
    } else {
      CHECK(s == QVL_OK && rh == (int)num(c, "resized_height") && rw == (int)num(c, "resized_width"),
            "resize row %d (%d frames %dx%d): %dx%d, expected %dx%d", rows, n, w, h, rw, rh,
            (int)num(c, "resized_width"), (int)num(c, "resized_height"));
      const cJSON *g = cJSON_GetObjectItemCaseSensitive(c, "video_grid_thw");
      CHECK(video_n_groups(n) == cJSON_GetArrayItem(g, 0)->valueint && rh / 16 == cJSON_GetArrayItem(g, 1)->valueint &&
                rw / 16 == cJSON_GetArrayItem(g, 2)->valueint,
            "resize row %d: grid", rows);
      CHECK((rh / 32) * (rw / 32) == (int)num(c, "tokens_per_temporal_group"), "resize row %d: tokens", rows);
    }
    rows++;
  }
  CHECK(rows >= 8, "only %d resize rows", rows);
  cJSON_Delete(j);
}

static void check_u8(const char *what, const uint8_t *got, size_t n, const st_tensor *t) {
  CHECK(t && t->dtype == ST_U8 && t->nbytes == n, "%s: expected tensor missing or %zu bytes (got %zu)", what,
        t ? t->nbytes : 0, n);
  if (!t || t->nbytes != n)
    return;
  size_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff += got[i] != ((const uint8_t *)t->data)[i];
  CHECK(diff == 0, "%s: %zu of %zu bytes differ", what, diff, n);
}

/* A fixture case's clip: every frame, the sampled indices, the resized frames, pixel_values_videos. */
static void test_case_clip(const char *case_dir, const char *clip, int64_t min_px, int64_t max_px) {
  char path[512];
  buf b;
  snprintf(path, sizeof path, FIX "/videos/%s", clip);
  if (!test_read_file(path, &b))
    return;
  snprintf(path, sizeof path, FIX "/cases/%s/expected.safetensors", case_dir);
  safetensors *st = NULL;
  CHECK(st_open(path, &st) == QVL_OK, "%s: %s", path, qvl_last_error());
  video_sampling smp;
  video_sampling_default(&smp);
  smp.min_pixels = min_px;
  smp.max_pixels = max_px;
  video_clip c;
  qvl_status s = video_clip_open(b.data, b.len, NULL, &smp, NULL, NULL, &c);
  CHECK(s == QVL_OK, "%s: open: %s", clip, qvl_last_error());
  if (s == QVL_OK)
    s = video_clip_decode(&c, true);
  CHECK(s == QVL_OK, "%s: decode: %s", clip, qvl_last_error());
  if (s == QVL_OK && st) {
    CHECK(c.info.fps_rule == VIDEO_FPS_AVG_FRAME_RATE, "%s: fps rule %d", clip, (int)c.info.fps_rule);
    check_u8(clip, c.all_rgb, (size_t)c.info.total_frames * c.info.width * c.info.height * 3,
             st_find(st, "video_rgb.0"));
    const st_tensor *ix = st_find(st, "video_frame_indices.0");
    CHECK(ix && ix->shape[0] == c.n, "%s: %d sampled", clip, c.n);
    for (int i = 0; ix && i < c.n && i < ix->shape[0]; i++)
      CHECK(c.indices[i] == ((const int32_t *)ix->data)[i], "%s: index %d", clip, i);
    check_u8(clip, c.resized, (size_t)c.n * c.width * c.height * 3, st_find(st, "video_resized.0"));
    const st_tensor *pv = st_find(st, "pixel_values_videos.0");
    CHECK(pv && pv->nbytes == sizeof(float) * IMAGE_PATCH_DIM * (size_t)c.n_patches, "%s: pixel_values size", clip);
    if (pv && pv->nbytes == sizeof(float) * IMAGE_PATCH_DIM * (size_t)c.n_patches)
      CHECK(!memcmp(pv->data, c.pixel_values, pv->nbytes), "%s: pixel_values_videos differ", clip);
    const st_tensor *g = st_find(st, "video_grid_thw");
    const int32_t *gd = g ? g->data : NULL;
    CHECK(gd && gd[0] == c.grid_t && gd[1] == c.grid_h && gd[2] == c.grid_w, "%s: grid %d %d %d", clip, c.grid_t,
          c.grid_h, c.grid_w);
  }
  video_clip_free(&c);
  st_close(st);
  buf_free(&b);
}

static void test_h264_mp4(void) {
  buf b;
  if (!test_read_file(FIX "/videos/clip_96x64_24f_12fps_h264.mp4", &b))
    return;
  video_sampling smp;
  video_sampling_default(&smp);
  smp.min_pixels = 4096;
  smp.max_pixels = 65536;
  video_clip c;
  qvl_status s = video_clip_open(b.data, b.len, NULL, &smp, NULL, NULL, &c);
  CHECK(s == QVL_OK, "h264: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(c.info.total_frames == 24 && c.info.fps == 12.0 && !strcmp(c.info.codec, "h264") &&
              !strcmp(c.info.container, "mp4"),
          "h264: %lld frames at %g fps, %s in %s", (long long)c.info.total_frames, c.info.fps, c.info.codec,
          c.info.container);
    int64_t want[4] = {0, 8, 15, 23};
    CHECK(c.n == 4 && !memcmp(c.indices, want, sizeof want), "h264: indices");
    CHECK(c.timestamps[0] == 0.3333333333333333 && c.timestamps[1] == 1.5833333333333335, "h264: timestamps");
    CHECK(c.grid_t == 2 && c.grid_h == 4 && c.grid_w == 6 && c.n_tokens == 12, "h264: grid");
    s = video_clip_decode(&c, false);
    CHECK(s == QVL_OK, "h264 decode: %s", qvl_last_error());
  }
  video_clip_free(&c);
  buf_free(&b);
}

/* The decode budget (issue 31): sampling frames 0, 8, 15, 23 of the H.264 clip (key frames rare)
 * means decoding every frame up to 23, which the plan knows before decoding anything; a budget
 * below that refuses the clip at video_clip_open with a message naming the estimate, one just
 * above lets it through, and a reader held to a budget its read exceeds decodes nothing. */
static int counted_frames;
static qvl_status count_frame(void *user, int k, int64_t index, const image_rgb *rgb) {
  (void)user, (void)k, (void)index, (void)rgb;
  counted_frames++;
  return QVL_OK;
}

static void test_decode_budget(void) {
  buf b;
  if (!test_read_file(FIX "/videos/clip_96x64_24f_12fps_h264.mp4", &b))
    return;
  video_reader *r = NULL;
  int64_t idx[4] = {0, 8, 15, 23}, frames = 0;
  CHECK(video_reader_open(b.data, b.len, NULL, NULL, NULL, &r) == QVL_OK, "open: %s", qvl_last_error());
  if (r) {
    video_reader_set_seek_gap(r, 1000000); /* never seek: every frame up to 23 */
    CHECK(video_reader_plan(r, idx, 4, &frames) == QVL_OK && frames == 24, "plan: %lld frames", (long long)frames);
    video_reader_close(r);
  }
  video_limits lim;
  video_limits_default(&lim);
  lim.max_decoded_pixels = (int64_t)96 * 64 * 4; /* four frames' worth */
  video_sampling smp;
  video_sampling_default(&smp);
  video_clip c;
  qvl_status s = video_clip_open(b.data, b.len, &lim, &smp, NULL, NULL, &c);
  CHECK(s == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "gigapixels") && strstr(qvl_last_error(), "sample fewer"),
        "refused at open: %d %s", s, qvl_last_error());
  if (s == QVL_OK)
    video_clip_free(&c);
  lim.max_decoded_pixels = (int64_t)96 * 64 * 24;
  s = video_clip_open(b.data, b.len, &lim, &smp, NULL, NULL, &c);
  CHECK(s == QVL_OK, "a budget of every frame: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(video_clip_decode(&c, false) == QVL_OK, "decoded within the budget: %s", qvl_last_error());
    video_clip_free(&c);
  }
  lim.max_decoded_pixels = (int64_t)96 * 64 * 10;
  CHECK(video_reader_open(b.data, b.len, &lim, NULL, NULL, &r) == QVL_OK, "open");
  if (r) {
    video_reader_set_seek_gap(r, 1000000);
    counted_frames = 0;
    CHECK(video_reader_read(r, idx, 4, count_frame, NULL) == QVL_ERR_TOO_LARGE && counted_frames == 0,
          "a read over the budget decodes nothing: %d frames", counted_frames);
    video_reader_close(r);
  }
  buf_free(&b);
}

typedef struct frames_copy {
  uint8_t *data;
  size_t frame;
  int got;
} frames_copy;

static qvl_status copy_frame(void *user, int k, int64_t index, const image_rgb *rgb) {
  (void)index;
  frames_copy *f = user;
  memcpy(f->data + (size_t)k * f->frame, rgb->data, f->frame);
  f->got++;
  return QVL_OK;
}

/* The seeking path gives the same frames as decoding every frame in between (H.264 with B-frames,
 * where the key frames are rare, and FFV1, where every frame is one). */
static void test_seek_equals_linear(const char *clip) {
  char path[256];
  snprintf(path, sizeof path, FIX "/videos/%s", clip);
  buf b;
  if (!test_read_file(path, &b))
    return;
  video_reader *r = NULL;
  qvl_status s = video_reader_open(b.data, b.len, NULL, NULL, NULL, &r);
  CHECK(s == QVL_OK, "%s: %s", clip, qvl_last_error());
  if (s != QVL_OK) {
    buf_free(&b);
    return;
  }
  const video_info *in = video_reader_info(r);
  int64_t idx[3] = {1, in->total_frames / 2 + 1, in->total_frames - 1};
  size_t fb = (size_t)in->width * in->height * 3;
  frames_copy lin = {malloc(3 * fb), fb, 0}, sk = {malloc(3 * fb), fb, 0};
  video_reader_set_seek_gap(r, 1000000);
  s = video_reader_read(r, idx, 3, copy_frame, &lin);
  CHECK(s == QVL_OK && lin.got == 3 && video_reader_seeks(r) == 0, "%s linear: %s", clip, qvl_last_error());
  video_reader_set_seek_gap(r, 0);
  s = video_reader_read(r, idx, 3, copy_frame, &sk);
  CHECK(s == QVL_OK && sk.got == 3, "%s seeking: %s", clip, qvl_last_error());
  if (!strcmp(clip, "clip_96x64_10f_5fps.mkv"))
    CHECK(video_reader_seeks(r) >= 2, "%s: %lld seeks", clip, (long long)video_reader_seeks(r));
  CHECK(!memcmp(lin.data, sk.data, 3 * fb), "%s: seeking gave other frames than decoding through", clip);
  free(lin.data);
  free(sk.data);
  video_reader_close(r);
  buf_free(&b);
}

/* Skipping the frames nothing refers to (H.264 B-frames between sampled ones) leaves the sampled
 * frames bit-identical to decoding every frame. */
static void test_skip_equals_all(void) {
  buf b;
  if (!test_read_file(FIX "/videos/clip_96x64_24f_12fps_h264.mp4", &b))
    return;
  video_reader *r = NULL;
  if (video_reader_open(b.data, b.len, NULL, NULL, NULL, &r) != QVL_OK) {
    CHECK(0, "h264: %s", qvl_last_error());
    buf_free(&b);
    return;
  }
  size_t fb = 96 * 64 * 3;
  int64_t all[24], some[4] = {0, 8, 15, 23};
  for (int i = 0; i < 24; i++)
    all[i] = i;
  frames_copy a = {malloc(24 * fb), fb, 0}, s4 = {malloc(4 * fb), fb, 0};
  CHECK(video_reader_read(r, all, 24, copy_frame, &a) == QVL_OK && a.got == 24, "all frames: %s", qvl_last_error());
  CHECK(video_reader_read(r, some, 4, copy_frame, &s4) == QVL_OK && s4.got == 4, "sampled: %s", qvl_last_error());
  int same = 0;
  for (int k = 0; k < 4; k++)
    same += !memcmp(s4.data + (size_t)k * fb, a.data + (size_t)some[k] * fb, fb);
  CHECK(same == 4, "h264: %d of 4 sampled frames equal the full decode's", same);
  free(a.data);
  free(s4.data);
  video_reader_close(r);
  buf_free(&b);
}

/* Every prefix of a clip, a flipped byte anywhere, random bytes, an image: an error or a clip, never a
 * crash (ASan runs this too). */
static void test_bad_inputs(void) {
  buf b;
  if (!test_read_file(FIX "/videos/clip_96x64_10f_5fps.mkv", &b))
    return;
  int errors = 0;
  for (size_t len = 0; len < b.len; len += len < 512 ? 7 : 997) {
    video_clip c;
    qvl_status s = video_clip_open(b.data, len, NULL, NULL, NULL, NULL, &c);
    if (s == QVL_OK)
      s = video_clip_decode(&c, false);
    errors += s != QVL_OK;
    CHECK(s == QVL_OK || s == QVL_ERR_FORMAT || s == QVL_ERR_INVALID_ARG, "prefix %zu: status %d '%s'", len, (int)s,
          qvl_last_error());
    video_clip_free(&c);
  }
  CHECK(errors > 10, "only %d prefixes failed", errors);
  uint8_t *mut = malloc(b.len);
  uint32_t x = 12345;
  for (int k = 0; k < 40; k++) {
    memcpy(mut, b.data, b.len);
    for (int f = 0; f < 8; f++) {
      x = x * 1664525u + 1013904223u;
      mut[(x >> 8) % b.len] ^= (uint8_t)(1u << (x & 7));
    }
    video_clip c;
    qvl_status s = video_clip_open(mut, b.len, NULL, NULL, NULL, NULL, &c);
    if (s == QVL_OK)
      s = video_clip_decode(&c, false);
    CHECK(s == QVL_OK || s == QVL_ERR_FORMAT || s == QVL_ERR_INVALID_ARG || s == QVL_ERR_UNSUPPORTED ||
              s == QVL_ERR_TOO_LARGE,
          "mutation %d: status %d", k, (int)s);
    video_clip_free(&c);
  }
  for (size_t i = 0; i < b.len; i++) {
    x = x * 1664525u + 1013904223u;
    mut[i] = (uint8_t)(x >> 24);
  }
  video_reader *r = NULL;
  CHECK(video_reader_open(mut, b.len, NULL, NULL, NULL, &r) == QVL_ERR_FORMAT, "random bytes: %s", qvl_last_error());
  free(mut);
  /* caps: frames, duration, bytes, frame size */
  video_limits lim;
  video_limits_default(&lim);
  lim.max_frames = 9;
  CHECK(video_reader_open(b.data, b.len, &lim, NULL, NULL, &r) == QVL_ERR_TOO_LARGE, "frame cap: %s", qvl_last_error());
  video_limits_default(&lim);
  lim.max_seconds = 1.5;
  CHECK(video_reader_open(b.data, b.len, &lim, NULL, NULL, &r) == QVL_ERR_TOO_LARGE, "seconds cap: %s",
        qvl_last_error());
  video_limits_default(&lim);
  lim.max_bytes = 100;
  CHECK(video_reader_open(b.data, b.len, &lim, NULL, NULL, &r) == QVL_ERR_TOO_LARGE, "byte cap");
  video_limits_default(&lim);
  lim.max_frame_pixels = 96 * 64 - 1;
  CHECK(video_reader_open(b.data, b.len, &lim, NULL, NULL, &r) == QVL_ERR_TOO_LARGE, "pixel cap");
  buf_free(&b);
  if (test_read_file(FIX "/images/scene_64x128.png", &b)) {
    qvl_status s = video_reader_open(b.data, b.len, NULL, NULL, NULL, &r);
    CHECK(s == QVL_ERR_FORMAT || s == QVL_ERR_UNSUPPORTED, "a PNG as a video: %d %s", (int)s, qvl_last_error());
    buf_free(&b);
  }
}

int main(void) {
  test_decode_budget();
  test_frame_sampling();
  test_smart_resize();
  test_case_clip("micro-a/f32/video_basic", "clip_96x64_10f_5fps.mkv", 4096, 65536);
  test_case_clip("micro-b/f32/video_odd_frames_resized", "clip_70x50_11f_4fps.mkv", 8192, 20000);
  test_case_clip("e2e/bf16/image_and_video", "clip_64x128_16f_8fps.mkv", 4096, 65536);
  test_h264_mp4();
  test_seek_equals_linear("clip_96x64_24f_12fps_h264.mp4");
  test_seek_equals_linear("clip_96x64_10f_5fps.mkv");
  test_skip_equals_all();
  test_bad_inputs();
  return TEST_SUMMARY("video");
}
