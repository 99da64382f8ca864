#include "commands/bench_video.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dataurl.h"
#include "base/status.h"
#include "base/timing.h"
#include "commands/bench_question.h"
#include "engine/generate.h"
#include "video/clip.h"

/* The muxer writes through this into a growable buffer (Matroska needs no seeking back). */
#if LIBAVFORMAT_VERSION_MAJOR >= 61 /* the write callback takes const data from FFmpeg 7 on */
static int write_buf(void *opaque, const uint8_t *data, int n) {
#else
static int write_buf(void *opaque, uint8_t *data, int n) {
#endif
  return buf_append(opaque, data, (size_t)n) == QVL_OK ? n : AVERROR(ENOMEM);
}

/* A frame of moving gradients and blocks: inter frames have real motion to code. */
static void paint(AVFrame *f, int t) {
  for (int y = 0; y < f->height; y++)
    for (int x = 0; x < f->width; x++)
      f->data[0][y * f->linesize[0] + x] = (uint8_t)(x + y * 2 + t * 3 + (((x + t * 4) / 40 + y / 40) & 1) * 60);
  for (int p = 1; p < 3; p++)
    for (int y = 0; y < f->height / 2; y++)
      for (int x = 0; x < f->width / 2; x++)
        f->data[p][y * f->linesize[p] + x] = (uint8_t)(128 + (p == 1 ? x - t : y + t) % 64);
}

qvl_status bench_make_video(int width, int height, int fps, int seconds, buf *out, const char **codec) {
  const AVCodec *enc = avcodec_find_encoder_by_name("libx264");
  if (!enc)
    enc = avcodec_find_encoder(AV_CODEC_ID_FFV1);
  if (!enc)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "bench: this libavcodec has neither libx264 nor an FFV1 encoder");
  *codec = enc->name;
  memset(out, 0, sizeof *out);
  qvl_status s = QVL_OK;
  AVFormatContext *fc = NULL;
  AVCodecContext *cc = avcodec_alloc_context3(enc);
  AVFrame *fr = av_frame_alloc();
  AVPacket *pk = av_packet_alloc();
  uint8_t *iobuf = av_malloc(65536);
  AVIOContext *io = iobuf ? avio_alloc_context(iobuf, 65536, 1, out, NULL, write_buf, NULL) : NULL;
  if (!cc || !fr || !pk || !io || avformat_alloc_output_context2(&fc, NULL, "matroska", NULL) < 0)
    s = qvl_errorf(QVL_ERR_NOMEM, "bench: out of memory for the synthetic video");
  if (s == QVL_OK) {
    fc->pb = io;
    cc->width = width;
    cc->height = height;
    cc->time_base = (AVRational){1, fps};
    cc->framerate = (AVRational){fps, 1};
    cc->pix_fmt = AV_PIX_FMT_YUV420P;
    cc->gop_size = fps * 2; /* a key frame every 2 s, as phone and camera files have */
    cc->max_b_frames = 2;
    if (fc->oformat->flags & AVFMT_GLOBALHEADER)
      cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (!strcmp(enc->name, "libx264"))
      av_opt_set(cc->priv_data, "preset", "veryfast", 0);
    AVStream *st = avformat_new_stream(fc, NULL);
    if (!st || avcodec_open2(cc, enc, NULL) < 0 || avcodec_parameters_from_context(st->codecpar, cc) < 0)
      s = qvl_errorf(QVL_ERR_INTERNAL, "bench: cannot start the %s encoder", enc->name);
    else {
      st->time_base = cc->time_base;
      st->avg_frame_rate = cc->framerate;
    }
  }
  if (s == QVL_OK && avformat_write_header(fc, NULL) < 0)
    s = qvl_errorf(QVL_ERR_INTERNAL, "bench: cannot write the Matroska header");
  fr->format = AV_PIX_FMT_YUV420P;
  fr->width = width;
  fr->height = height;
  if (s == QVL_OK && av_frame_get_buffer(fr, 0) < 0)
    s = qvl_errorf(QVL_ERR_NOMEM, "bench: out of memory");
  for (int t = 0; s == QVL_OK && t <= fps * seconds; t++) {
    bool flush = t == fps * seconds;
    if (!flush) {
      av_frame_make_writable(fr);
      paint(fr, t);
      fr->pts = t;
    }
    if (avcodec_send_frame(cc, flush ? NULL : fr) < 0)
      s = qvl_errorf(QVL_ERR_INTERNAL, "bench: encoding failed");
    while (s == QVL_OK && avcodec_receive_packet(cc, pk) == 0) {
      av_packet_rescale_ts(pk, cc->time_base, fc->streams[0]->time_base);
      pk->stream_index = 0;
      if (av_interleaved_write_frame(fc, pk) < 0)
        s = qvl_errorf(QVL_ERR_INTERNAL, "bench: muxing failed");
    }
  }
  if (s == QVL_OK && av_write_trailer(fc) < 0)
    s = qvl_errorf(QVL_ERR_INTERNAL, "bench: cannot finish the Matroska file");
  if (io)
    avio_flush(io);
  if (fc)
    avformat_free_context(fc);
  if (io) {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
  avcodec_free_context(&cc);
  av_frame_free(&fr);
  av_packet_free(&pk);
  if (s != QVL_OK)
    buf_free(out);
  return s;
}

qvl_status bench_video(const vlm *m, const char *path, cJSON *out) {
  buf clip = {0};
  const char *codec = "file";
  qvl_status st = path ? buf_read_file(path, VIDEO_DEFAULT_MAX_BYTES, &clip) : bench_make_video(640, 360, 30, 10, &clip, &codec);
  if (st != QVL_OK)
    return st;
  cJSON *v = cJSON_AddObjectToObject(out, "video_ms");
  /* the stages alone: demux + plan, then decode + resize + patchify of the sampled frames */
  video_sampling smp;
  video_sampling_default(&smp);
  video_clip c;
  /* CPU time too: on a shared machine the wall times swell with the load, the CPU-seconds much less */
  cJSON *vc = cJSON_AddObjectToObject(out, "video_cpu_ms");
  double t0 = time_now_s(), c0 = time_process_cpu_s();
  st = video_clip_open(clip.data, clip.len, NULL, &smp, NULL, NULL, &c);
  double t_open = time_now_s(), c_open = time_process_cpu_s();
  if (st == QVL_OK)
    st = video_clip_decode(&c, false);
  double t_dec = time_now_s(), c_dec = time_process_cpu_s() - c0;
  if (st == QVL_OK) {
    cJSON_AddNumberToObject(v, "demux_plan", (t_open - t0) * 1e3);
    cJSON_AddNumberToObject(v, "decode_sample", (t_dec - t_open) * 1e3);
    cJSON_AddNumberToObject(vc, "demux_plan", (c_open - c0) * 1e3);
    cJSON_AddNumberToObject(vc, "decode_sample", (c_dec - (c_open - c0)) * 1e3);
    char desc[160];
    snprintf(desc, sizeof desc, "%dx%d %s, %lld frames at %g fps -> %d sampled, %dx%d, grid %dx%dx%d, %lld tokens",
             c.info.width, c.info.height, codec, (long long)c.info.total_frames, c.info.fps, c.n, c.width, c.height,
             c.grid_t, c.grid_h, c.grid_w, (long long)c.n_tokens);
    cJSON_AddStringToObject(out, "video_clip", desc);
    cJSON_AddNumberToObject(out, "video_tokens", (double)c.n_tokens);
  }
  video_clip_free(&c);
  /* the whole question: data: URL -> prompt (decode, vision) -> prefill -> first token */
  buf url = {0};
  if (st == QVL_OK)
    st = dataurl_encode("video/x-matroska", clip.data, clip.len, &url);
  buf_free(&clip);
  fprintf(stderr, "[bench] time to first token, 10 s 640x360 video question...\n");
  bench_question_times t;
  if (st == QVL_OK)
    st = bench_first_token(m, "video_url", url.data ? url.data : "", "What happens in this video? Answer briefly.",
                           NULL, &t);
  buf_free(&url);
  if (st == QVL_OK) {
    cJSON_AddNumberToObject(v, "vision_encode", t.vision_ms);
    cJSON_AddNumberToObject(v, "prefill", t.prefill_ms);
    cJSON_AddNumberToObject(v, "ttft", t.total_ms);
    cJSON_AddNumberToObject(v, "ttft_decode_and_preprocess", t.preprocess_ms);
    cJSON_AddNumberToObject(out, "video_decode_share_of_ttft", t.total_ms > 0 ? t.preprocess_ms / t.total_ms : 0);
    /* the same decode alone (above) against the question's CPU time, every thread counted */
    cJSON_AddNumberToObject(vc, "ttft", t.total_cpu_ms);
    cJSON_AddNumberToObject(out, "video_decode_cpu_share_of_ttft", t.total_cpu_ms > 0 ? c_dec * 1e3 / t.total_cpu_ms : 0);
    cJSON_AddNumberToObject(out, "video_prompt_tokens", (double)t.prompt_tokens);
  }
  return st;
}
