/*
 * Videos in prompts (engine/vlm.c + engine/vlm_video.c) on the micro-a model:
 *   - the H.264 MP4 container case (tests/fixtures/preprocess_video/h264_mp4): frames, indices,
 *     timestamps, grid and the prompt ids of its case.json;
 *   - the embedding-cache key: same bytes and sampling = same key, another sampling = another key;
 *   - a video whose embeddings the caller holds (known_image) is not decoded, and the prompt is the same;
 *   - mixed image + video prompts in both orders: the video's rows are its own wherever it stands;
 *   - request caps: videos per request, sampled frames per request.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/vlm.h"
#include "model/safetensors.h"
#include "test.h"
#include "test_files.h"

#define CASE_DIR "tests/fixtures/preprocess_video/h264_mp4"

static void opts_for(vlm_prompt_opts *o, const char *dir) {
  vlm_prompt_opts_default(o);
  o->source.allow_files = true;
  o->source.base_dir = dir;
  o->video.min_pixels = 4096;
  o->video.max_pixels = 65536;
}

static void test_h264_case(const vlm *m) {
  cJSON *c = test_read_json(CASE_DIR "/case.json");
  if (!c)
    return;
  vlm_prompt_opts o;
  opts_for(&o, CASE_DIR);
  vlm_prompt p;
  qvl_status s = vlm_prompt_build(m, cJSON_GetObjectItem(c, "messages"), &o, &p);
  CHECK(s == QVL_OK, "h264 case: %s", qvl_last_error());
  if (s == QVL_OK) {
    const cJSON *ids = cJSON_GetObjectItem(c, "input_ids");
    CHECK(p.n == cJSON_GetArraySize(ids), "h264 case: %lld ids, expected %d", (long long)p.n,
          cJSON_GetArraySize(ids));
    int bad = 0;
    for (int64_t i = 0; i < p.n && i < cJSON_GetArraySize(ids); i++)
      bad += p.ids[i] != cJSON_GetArrayItem(ids, (int)i)->valueint;
    CHECK(bad == 0, "h264 case: %d prompt ids differ", bad);
    CHECK(p.n_images == 1 && p.n_videos == 1 && p.images[0].is_video, "h264 case: one video");
    const vlm_image *v = &p.images[0];
    CHECK(v->clip.info.total_frames == 24 && v->clip.info.fps == 12.0, "h264 case: %lld frames at %g fps",
          (long long)v->clip.info.total_frames, v->clip.info.fps);
    const cJSON *fi = cJSON_GetObjectItem(c, "frame_indices");
    CHECK(v->clip.n == cJSON_GetArraySize(fi), "h264 case: %d sampled", v->clip.n);
    for (int i = 0; i < v->clip.n && i < cJSON_GetArraySize(fi); i++)
      CHECK(v->clip.indices[i] == cJSON_GetArrayItem(fi, i)->valueint, "h264 case: index %d", i);
    const cJSON *ts = cJSON_GetObjectItem(c, "timestamps");
    for (int g = 0; g < v->grid_t && g < cJSON_GetArraySize(ts); g++)
      CHECK(v->clip.timestamps[g] == cJSON_GetArrayItem(ts, g)->valuedouble, "h264 case: timestamp %d", g);
    const cJSON *grid = cJSON_GetObjectItem(c, "video_grid_thw");
    CHECK(v->grid_t == cJSON_GetArrayItem(grid, 0)->valueint && v->grid_h == cJSON_GetArrayItem(grid, 1)->valueint &&
              v->grid_w == cJSON_GetArrayItem(grid, 2)->valueint,
          "h264 case: grid %d %d %d", v->grid_t, v->grid_h, v->grid_w);
    /* the expected file of the case holds the same integers */
    safetensors *st = NULL;
    if (st_open(CASE_DIR "/expected.safetensors", &st) == QVL_OK) {
      const st_tensor *e = st_find(st, "input_ids");
      CHECK(e && e->shape[0] == p.n && !memcmp(e->data, p.ids, sizeof(int32_t) * (size_t)p.n),
            "h264 case: input_ids of expected.safetensors");
      st_close(st);
    }
    vlm_prompt_free(&p);
  }
  cJSON_Delete(c);
}

static cJSON *video_message(const char *first, const char *second) {
  char text[1024];
  snprintf(text, sizeof text, "[{\"role\":\"user\",\"content\":[%s%s%s,{\"type\":\"text\",\"text\":\"What?\"}]}]", first,
           second ? "," : "", second ? second : "");
  return cJSON_Parse(text);
}

#define VID "{\"type\":\"video_url\",\"video_url\":{\"url\":\"../../videos/clip_96x64_10f_5fps.mkv\"}}"
#define IMG "{\"type\":\"image_url\",\"image_url\":{\"url\":\"../../images/scene_64x128.png\"}}"

static int counted_known;
static bool known_all(void *user, uint64_t key, vlm_known_image *out) {
  const vlm_image *ref = user;
  counted_known++;
  if (key != ref->bytes_key)
    return false;
  *out = (vlm_known_image){ref->hash, ref->grid_t, ref->grid_h, ref->grid_w, ref->n_tokens};
  return true;
}

static void test_cache_key_and_skip(const vlm *m) {
  cJSON *msg = video_message(VID, NULL);
  vlm_prompt_opts o;
  opts_for(&o, CASE_DIR);
  vlm_prompt a, b, c;
  CHECK(vlm_prompt_build(m, msg, &o, &a) == QVL_OK, "video prompt: %s", qvl_last_error());
  CHECK(vlm_prompt_build(m, msg, &o, &b) == QVL_OK, "video prompt again: %s", qvl_last_error());
  CHECK(a.images[0].hash == b.images[0].hash && a.images[0].bytes_key == b.images[0].bytes_key,
        "the same clip has the same key");
  CHECK(a.n_img == 12 && !memcmp(a.img_embd, b.img_embd, sizeof(float) * (size_t)(a.n_img * m->text->hp.n_embd)),
        "the same clip encodes the same");
  vlm_prompt_opts o2 = o;
  o2.video.fps = 1; /* another sampling: another key (and here fewer frames would be min_frames: 4) */
  o2.video.min_frames = 2;
  CHECK(vlm_prompt_build(m, msg, &o2, &c) == QVL_OK, "video prompt fps 1: %s", qvl_last_error());
  CHECK(c.images[0].bytes_key != a.images[0].bytes_key, "another sampling has another key");
  CHECK(c.images[0].clip.n == 2 && c.images[0].grid_t == 1, "fps 1 on a 2 s clip: 2 frames, %d", c.images[0].clip.n);
  vlm_prompt_free(&c);
  /* known: nothing decoded, the prompt (ids, positions) is the same */
  vlm_prompt_opts o3 = o;
  o3.defer_vision = true;
  o3.known_image = known_all;
  o3.known_user = &a.images[0];
  counted_known = 0;
  vlm_prompt k;
  CHECK(vlm_prompt_build(m, msg, &o3, &k) == QVL_OK, "known video: %s", qvl_last_error());
  /* asked when the decode budget is counted and again when loading (prompt/materialize.c) */
  CHECK(counted_known >= 1 && k.images[0].patches.pixel_values == NULL && k.images[0].encoded && k.images[0].encoded->len > 0,
        "a known video is not decoded (asked %d)", counted_known);
  CHECK(k.n == a.n && !memcmp(k.ids, a.ids, sizeof(int32_t) * (size_t)a.n) &&
            !memcmp(k.pos, a.pos, sizeof(int32_t) * 3 * (size_t)a.n),
        "a known video gives the same prompt");
  /* the rare path: its embeddings are gone, it is decoded after all and encodes the same */
  CHECK(prompt_image_decode_deferred(&o3, &k.images[0], 0) == QVL_OK, "deferred decode: %s", qvl_last_error());
  CHECK(prompt_encode_image(&m->pm, &k, 0, &o3) == QVL_OK, "deferred encode: %s", qvl_last_error());
  CHECK(!memcmp(k.img_embd, a.img_embd, sizeof(float) * (size_t)(a.n_img * m->text->hp.n_embd)),
        "the deferred decode encodes the same");
  vlm_prompt_free(&k);
  vlm_prompt_free(&a);
  vlm_prompt_free(&b);
  cJSON_Delete(msg);
}

/* Image then video and video then image: each item's rows are the same as alone, in prompt order. */
static void test_mixed_order(const vlm *m) {
  vlm_prompt_opts o;
  opts_for(&o, CASE_DIR);
  o.pre.min_pixels = 4096;
  int64_t d = m->text->hp.n_embd;
  cJSON *mv = video_message(VID, NULL), *mi = video_message(IMG, NULL), *iv = video_message(IMG, VID),
        *vi = video_message(VID, IMG);
  vlm_prompt pv, pi, piv, pvi;
  CHECK(vlm_prompt_build(m, mv, &o, &pv) == QVL_OK, "%s", qvl_last_error());
  CHECK(vlm_prompt_build(m, mi, &o, &pi) == QVL_OK, "%s", qvl_last_error());
  CHECK(vlm_prompt_build(m, iv, &o, &piv) == QVL_OK, "%s", qvl_last_error());
  CHECK(vlm_prompt_build(m, vi, &o, &pvi) == QVL_OK, "%s", qvl_last_error());
  CHECK(piv.n_images == 2 && !piv.images[0].is_video && piv.images[1].is_video, "image then video");
  CHECK(pvi.n_images == 2 && pvi.images[0].is_video && !pvi.images[1].is_video, "video then image");
  int64_t nv = pv.n_img, ni = pi.n_img;
  size_t bv = sizeof(float) * (size_t)(nv * d), bi = sizeof(float) * (size_t)(ni * d);
  CHECK(piv.images[1].row0 == ni && !memcmp(piv.img_embd + ni * d, pv.img_embd, bv) &&
            !memcmp(piv.img_embd, pi.img_embd, bi),
        "image then video: rows in prompt order");
  CHECK(pvi.images[1].row0 == nv && !memcmp(pvi.img_embd, pv.img_embd, bv) &&
            !memcmp(pvi.img_embd + nv * d, pi.img_embd, bi),
        "video then image: rows in prompt order");
  /* every pad position is a row; the video's rows lie at <|video_pad|> tokens */
  int ok = 1;
  for (int64_t r = 0; r < pvi.n_img; r++)
    ok &= pvi.ids[pvi.img_idx[r]] == (r < nv ? m->video_pad_id : m->image_pad_id);
  CHECK(ok, "video then image: pad rows");
  vlm_prompt_free(&pv);
  vlm_prompt_free(&pi);
  vlm_prompt_free(&piv);
  vlm_prompt_free(&pvi);
  cJSON_Delete(mv);
  cJSON_Delete(mi);
  cJSON_Delete(iv);
  cJSON_Delete(vi);
}

static void test_caps(const vlm *m) {
  cJSON *two = video_message(VID, VID);
  vlm_prompt_opts o;
  opts_for(&o, CASE_DIR);
  vlm_prompt p;
  o.max_videos = 1;
  CHECK(vlm_prompt_build(m, two, &o, &p) == QVL_ERR_TOO_LARGE, "max_videos: %s", qvl_last_error());
  o.max_videos = 0;
  o.max_video_frames = 7; /* 4 + 4 sampled */
  CHECK(vlm_prompt_build(m, two, &o, &p) == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "8 frames"),
        "max_video_frames: %s", qvl_last_error());
  o.max_video_frames = 8;
  CHECK(vlm_prompt_build(m, two, &o, &p) == QVL_OK, "8 frames: %s", qvl_last_error());
  vlm_prompt_free(&p);
  o.video_limits.max_seconds = 1.0;
  CHECK(vlm_prompt_build(m, two, &o, &p) == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "video 1"),
        "max_seconds: %s", qvl_last_error());
  cJSON_Delete(two);
  cJSON *bad = video_message("{\"type\":\"video\",\"video\":\"../../images/scene_64x128.png\"}", NULL);
  opts_for(&o, CASE_DIR);
  CHECK(vlm_prompt_build(m, bad, &o, &p) == QVL_ERR_UNSUPPORTED && strstr(qvl_last_error(), "PNG image, not a video"), "an image as a video: %s",
        qvl_last_error());
  cJSON_Delete(bad);
  /* a raw prompt cannot smuggle video pads in */
  int32_t ids[2] = {1, m->video_pad_id};
  CHECK(vlm_prompt_from_ids(m, ids, 2, &p) == QVL_ERR_INVALID_ARG, "raw video pad");
}

int main(void) {
  vlm *m = NULL;
  vlm_paths paths = {"tests/fixtures/models/micro-a/hf", NULL};
  qvl_status s = vlm_load(&paths, &m);
  CHECK(s == QVL_OK, "micro-a: %s", qvl_last_error());
  if (s == QVL_OK) {
    CHECK(m->video_pad_id == 509, "video pad id %d", m->video_pad_id);
    test_h264_case(m);
    test_cache_key_and_skip(m);
    test_mixed_order(m);
    test_caps(m);
  }
  vlm_free(m);
  return TEST_SUMMARY("video_prompt");
}
