/*
 * Hostile and unusual videos, crafted here with a small Matroska writer (tests/mkv_write.h) from the
 * fixture clip's FFV1 frames, each answered with a clear status within bounded time and memory:
 * 100,000 frames, 8K frames, a header that lies about the frame size, codecs outside the allow-list,
 * zero and absurd frame rates, audio only, a zlib bomb inside the container; and two legitimate
 * oddities with a defined rule: variable frame rate (rate from the timestamps) and a container
 * without timing. With $QVL_VIDEO_CORPUS_DIR set it writes small versions of these files there
 * instead (the fuzz seed corpus, tests/fuzz/corpus/video) and tests nothing.
 */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/buf.h"
#include "base/timing.h"
#include "mkv_write.h"
#include "test.h"
#include "video/clip.h"

#define CLIP "tests/fixtures/videos/clip_96x64_10f_5fps.mkv"

/* The fixture clip's frames and FFV1 extradata, read with libavformat directly. */
static uint8_t *frames[16];
static size_t frame_len[16];
static int n_frames;
static uint8_t *extradata;
static size_t extradata_len;

static void load_frames(void) {
  AVFormatContext *fc = NULL;
  if (avformat_open_input(&fc, CLIP, NULL, NULL) < 0 || avformat_find_stream_info(fc, NULL) < 0) {
    CHECK(0, "cannot open %s", CLIP);
    return;
  }
  AVCodecParameters *cp = fc->streams[0]->codecpar;
  extradata_len = (size_t)cp->extradata_size;
  extradata = malloc(extradata_len + 1);
  memcpy(extradata, cp->extradata, extradata_len);
  AVPacket *pk = av_packet_alloc();
  while (n_frames < 16 && av_read_frame(fc, pk) >= 0) {
    frames[n_frames] = malloc((size_t)pk->size);
    memcpy(frames[n_frames], pk->data, (size_t)pk->size);
    frame_len[n_frames++] = (size_t)pk->size;
    av_packet_unref(pk);
  }
  av_packet_free(&pk);
  avformat_close_input(&fc);
  CHECK(n_frames == 10 && extradata_len > 0, "%d frames, %zu bytes of extradata", n_frames, extradata_len);
}

static void save(const char *dir, const char *name, const buf *b) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.mkv", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(b->data, 1, b->len, f);
    fclose(f);
  }
}

/* An FFV1 clip: n frames (cycling the fixture's) at pts i * step_ms. */
static void ffv1_clip(mkv *m, int w, int h, const char *codec, int n, int64_t step_ms, uint64_t default_duration) {
  mkv_begin(m);
  mkv_track(m, &(mkv_track_opts){.codec = codec, .width = w, .height = h, .priv = extradata, .priv_len = extradata_len,
                                 .default_duration = default_duration});
  for (int i = 0; i < n; i++)
    mkv_frame(m, (int64_t)i * step_ms, frames[i % n_frames], frame_len[i % n_frames]);
  mkv_end(m);
}

/* Opens and decodes like a request would; returns the status, and the clip's info in *info. */
static qvl_status run(const buf *b, const video_limits *lim, video_info *info, double *secs) {
  double t0 = time_now_s();
  video_sampling smp;
  video_sampling_default(&smp);
  smp.min_pixels = 4096;
  smp.max_pixels = 65536;
  video_clip c;
  qvl_status s = video_clip_open(b->data, b->len, lim, &smp, NULL, NULL, &c);
  if (s == QVL_OK) {
    if (info)
      *info = c.info;
    s = video_clip_decode(&c, false);
  }
  video_clip_free(&c);
  *secs = time_now_s() - t0;
  return s;
}

static long maxrss_mb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

#define EXPECT(name, b, lim, want, needle)                                                                      \
  do {                                                                                                          \
    double secs_;                                                                                               \
    qvl_status s_ = run(b, lim, NULL, &secs_);                                                                  \
    CHECK(s_ == (want) && strstr(qvl_last_error(), needle), "%s: status %d (want %d) '%s' (want '%s')", name,  \
          (int)s_, (int)(want), qvl_last_error(), needle);                                                      \
    CHECK(secs_ < 30, "%s: %.1f s (wall, on a shared machine)", name, secs_);                                                               \
  } while (0)

/* The fuzz seed corpus (tests/fuzz/corpus/video): the same shapes, with 1-3 frames each. */
static void write_corpus(const char *dir) {
  mkv m;
  struct {
    const char *name, *codec;
    int w, h, n;
    int64_t step;
    uint64_t dd;
  } v[] = {{"remux", "V_FFV1", 96, 64, 3, 200, 200000000},     {"8k", "V_FFV1", 7680, 4320, 1, 200, 200000000},
           {"lying-size", "V_FFV1", 192, 128, 2, 200, 200000000}, {"mjpeg", "V_MJPEG", 96, 64, 1, 200, 200000000},
           {"zero-fps", "V_FFV1", 96, 64, 2, 0, 0},             {"absurd-declared", "V_FFV1", 96, 64, 2, 200, 1},
           {"vfr", "V_FFV1", 96, 64, 3, 170, 0}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    ffv1_clip(&m, v[i].w, v[i].h, v[i].codec, v[i].n, v[i].step, v[i].dd);
    save(dir, v[i].name, &m.b);
    buf_free(&m.b);
  }
  mkv_begin(&m);
  mkv_track(&m, &(mkv_track_opts){.codec = "A_PCM/INT/LIT", .audio = 1});
  uint8_t pcm[64] = {0};
  mkv_frame(&m, 0, pcm, sizeof pcm);
  mkv_end(&m);
  save(dir, "audio-only", &m.b);
  buf_free(&m.b);
  size_t big = (size_t)16 << 20, clen = 0;
  uint8_t *zeros = calloc(1, big), *z = zeros ? mkv_deflate(zeros, big, &clen) : NULL;
  if (z) {
    mkv_begin(&m);
    mkv_track(&m, &(mkv_track_opts){.codec = "V_FFV1", .width = 96, .height = 64, .priv = extradata,
                                    .priv_len = extradata_len, .default_duration = 200000000, .zlib = 1});
    mkv_frame(&m, 0, z, clen);
    mkv_frame(&m, 200, z, clen);
    mkv_end(&m);
    save(dir, "zlib-bomb", &m.b);
    buf_free(&m.b);
  }
  free(zeros);
  free(z);
}

int main(void) {
  load_frames();
  if (n_frames != 10)
    return TEST_SUMMARY("video_hostile");
  if (getenv("QVL_VIDEO_CORPUS_DIR")) {
    write_corpus(getenv("QVL_VIDEO_CORPUS_DIR"));
    return 0;
  }
  mkv m;
  video_info info;
  double secs;

  /* the writer itself: the fixture's frames re-muxed decode as the fixture (a control) */
  ffv1_clip(&m, 96, 64, "V_FFV1", 10, 200, 200000000);
  CHECK(run(&m.b, NULL, &info, &secs) == QVL_OK && info.total_frames == 10 && info.fps == 5.0 &&
            info.fps_rule == VIDEO_FPS_AVG_FRAME_RATE,
        "control remux: %s (%lld frames, %g fps)", qvl_last_error(), (long long)info.total_frames, info.fps);
  buf_free(&m.b);

  /* 100,000 frames (one byte each): refused while counting, long before the end */
  mkv_begin(&m);
  mkv_track(&m, &(mkv_track_opts){.codec = "V_FFV1", .width = 96, .height = 64, .priv = extradata,
                                  .priv_len = extradata_len, .default_duration = 40000000});
  for (int i = 0; i < 100000; i++)
    mkv_frame(&m, (int64_t)i * 40, "x", 1);
  mkv_end(&m);
  EXPECT("100k-frames", &m.b, NULL, QVL_ERR_TOO_LARGE, "more than 36000 frames");
  video_limits lim;
  video_limits_default(&lim);
  lim.max_frames = 200000; /* a server that allows that many: the duration cap (4000 s) answers */
  EXPECT("100k-frames-duration", &m.b, &lim, QVL_ERR_TOO_LARGE, "at most 1200 s");
  buf_free(&m.b);

  /* 8K frames: refused from the header */
  ffv1_clip(&m, 7680, 4320, "V_FFV1", 4, 200, 200000000);
  EXPECT("8k", &m.b, NULL, QVL_ERR_TOO_LARGE, "7680x4320");
  buf_free(&m.b);

  /* a header that lies about the size: 192x128 declared, 96x64 coded frames. FFV1 codes no size
   * of its own, so the decoder works at the declared size: garbage pixels but bounded ones; a
   * codec that does code its size (H.264's SPS) is checked frame by frame (decode.c) */
  ffv1_clip(&m, 192, 128, "V_FFV1", 10, 200, 200000000);
  {
    qvl_status s = run(&m.b, NULL, &info, &secs);
    CHECK(s == QVL_ERR_FORMAT || (s == QVL_OK && info.width == 192 && info.height == 128),
          "lying size: status %d '%s'", (int)s, qvl_last_error());
    CHECK(secs < 30, "lying size: %.1f s", secs);
  }
  buf_free(&m.b);

  /* 96x64 clips refused for their codec or their timing */
  static const struct {
    const char *name, *codec;
    int frames;
    int64_t step_ms;
    uint64_t default_duration;
    qvl_status want;
    const char *needle;
  } refused[] = {
      /* codecs outside the allow-list */
      {"mjpeg", "V_MJPEG", 4, 200, 200000000, QVL_ERR_UNSUPPORTED, "codec 'mjpeg' is not accepted"},
      {"theora", "V_THEORA", 4, 200, 200000000, QVL_ERR_UNSUPPORTED, "is not accepted"},
      /* zero frame rate: every frame at 0 s, no rate declared */
      {"zero-fps", "V_FFV1", 10, 0, 0, QVL_ERR_FORMAT, "same timestamp"},
      /* absurd rates: declared (1 ns per frame) and measured (1000 s apart) */
      {"absurd-declared", "V_FFV1", 10, 200, 1, QVL_ERR_FORMAT, "absurd frame rate"},
      {"absurd-measured", "V_FFV1", 10, 1000000, 0, QVL_ERR_FORMAT, "absurd frame rate"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    ffv1_clip(&m, 96, 64, refused[i].codec, refused[i].frames, refused[i].step_ms, refused[i].default_duration);
    EXPECT(refused[i].name, &m.b, NULL, refused[i].want, refused[i].needle);
    buf_free(&m.b);
  }

  /* audio only */
  mkv_begin(&m);
  mkv_track(&m, &(mkv_track_opts){.codec = "A_PCM/INT/LIT", .audio = 1});
  uint8_t pcm[512] = {0};
  for (int i = 0; i < 20; i++)
    mkv_frame(&m, i * 10, pcm, sizeof pcm);
  mkv_end(&m);
  EXPECT("audio-only", &m.b, NULL, QVL_ERR_FORMAT, "audio only");
  buf_free(&m.b);

  /* a zlib bomb: frames that inflate to 256 MiB each, in a ~260 kB file */
  {
    size_t big = (size_t)256 << 20, clen = 0;
    uint8_t *zeros = calloc(1, big);
    uint8_t *z = zeros ? mkv_deflate(zeros, big, &clen) : NULL;
    free(zeros);
    CHECK(z != NULL, "deflate");
    if (z) {
      mkv_begin(&m);
      mkv_track(&m, &(mkv_track_opts){.codec = "V_FFV1", .width = 96, .height = 64, .priv = extradata,
                                      .priv_len = extradata_len, .default_duration = 200000000, .zlib = 1});
      for (int i = 0; i < 4; i++)
        mkv_frame(&m, i * 200, z, clen);
      mkv_end(&m);
      free(z);
      long before = maxrss_mb();
      double t0 = time_now_s();
      qvl_status s = run(&m.b, NULL, NULL, &secs);
      CHECK(s == QVL_ERR_FORMAT, "zlib bomb: status %d '%s'", (int)s, qvl_last_error());
      CHECK(time_now_s() - t0 < 30, "zlib bomb: %.1f s", time_now_s() - t0);
      CHECK(maxrss_mb() - before < 128, "zlib bomb: peak memory grew by %ld MiB", maxrss_mb() - before);
      buf_free(&m.b);
    }
  }

  /* variable frame rate: no declared rate, irregular timestamps -> frames over their span */
  mkv_begin(&m);
  mkv_track(&m, &(mkv_track_opts){.codec = "V_FFV1", .width = 96, .height = 64, .priv = extradata,
                                  .priv_len = extradata_len});
  int64_t vfr[10] = {0, 100, 150, 400, 500, 900, 1000, 1100, 1600, 1800};
  for (int i = 0; i < 10; i++)
    mkv_frame(&m, vfr[i], frames[i], frame_len[i]);
  mkv_end(&m);
  {
    qvl_status s = run(&m.b, NULL, &info, &secs);
    /* ffmpeg may still report an average rate for it; either rule is a defined one */
    CHECK(s == QVL_OK && info.total_frames == 10 && info.fps > 4 && info.fps < 6,
          "variable rate: %s (%lld frames at %g fps, rule %d)", qvl_last_error(), (long long)info.total_frames,
          info.fps, (int)info.fps_rule);
  }
  buf_free(&m.b);

  for (int i = 0; i < n_frames; i++)
    free(frames[i]);
  free(extradata);
  return TEST_SUMMARY("video_hostile");
}
