#include "video/decode.h"

#include <ctype.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"

/* Demuxers we open (names as libavformat spells them; a demuxer's name is a comma list) */
static const char *const allowed_formats[] = {"matroska", "webm", "mov", "mp4", "gif"};
#define VIDEO_CONTAINERS "MP4/MOV, Matroska/WebM, animated GIF"
/* Decoders we run (libdav1d / libaom-av1 are Debian's AV1 decoders) */
static const char *const allowed_decoders[] = {"h264", "hevc", "vp8", "vp9", "libvpx", "libvpx-vp9", "av1",
                                               "libdav1d", "libaom-av1", "ffv1", "gif"};
#define CODEC_WHITELIST "h264,hevc,vp8,vp9,libvpx,libvpx-vp9,av1,libdav1d,libaom-av1,ffv1,gif"
/* Probing reads at most this much (bytes / microseconds of stream) before the header is known */
#define PROBE_BYTES (4 << 20)
#define ANALYZE_US (5 * (int64_t)AV_TIME_BASE)
#define AVIO_BUF 65536
/* Packets between two polls of the stop callback */
#define STOP_EVERY 64

void video_limits_default(video_limits *l) {
  *l = (video_limits){.max_bytes = VIDEO_DEFAULT_MAX_BYTES,
                      .max_frame_pixels = VIDEO_DEFAULT_MAX_FRAME_PIXELS,
                      .max_dim = VIDEO_DEFAULT_MAX_DIM,
                      .max_frames = VIDEO_DEFAULT_MAX_FRAMES,
                      .max_seconds = VIDEO_DEFAULT_MAX_SECONDS,
                      .max_decoded = VIDEO_DEFAULT_MAX_DECODED,
                      .max_decoded_pixels = VIDEO_DEFAULT_MAX_DECODED_PIXELS};
}

typedef struct pkt_entry {
  int64_t pts, dts;
  int key;
} pkt_entry;

struct video_reader {
  const uint8_t *data;
  size_t size;
  int64_t pos; /* read position of the AVIO callbacks */
  AVFormatContext *fc;
  AVCodecContext *cc;
  int vs; /* video stream index */
  video_info info;
  video_limits lim;
  qvl_stop_fn stop;
  void *stop_user;
  /* presentation order: pts of frame i, and the key frame each frame starts decoding from */
  int64_t *pts;     /* [total_frames] ascending */
  int64_t *key_of;  /* [total_frames] presentation index of the last key frame at or before i */
  int64_t *key_dts; /* [total_frames] dts (else pts) of frame i when it is a key frame */
  bool by_pts;      /* pts are present and distinct: frames are identified by them */
  int64_t seek_gap, seeks;
  bool used; /* a read ran: the next one starts from a fresh demuxer and decoder */
  AVFrame *frame;
  AVPacket *pkt;
  struct SwsContext *sws;
  uint8_t *rgb; /* [height][width][3] + padding */
};

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
/* libav* would print to stderr; every failure reaches the caller as a status instead */
static void quiet_logs(void) { av_log_set_level(AV_LOG_QUIET); }

static int io_read(void *opaque, uint8_t *buf, int n) {
  video_reader *r = opaque;
  if (r->pos >= (int64_t)r->size)
    return AVERROR_EOF;
  int64_t left = (int64_t)r->size - r->pos;
  int k = n < left ? n : (int)left;
  memcpy(buf, r->data + r->pos, (size_t)k);
  r->pos += k;
  return k;
}

static int64_t io_seek(void *opaque, int64_t off, int whence) {
  video_reader *r = opaque;
  int64_t base;
  switch (whence & ~AVSEEK_FORCE) {
  case AVSEEK_SIZE: return (int64_t)r->size;
  case SEEK_SET: base = 0; break;
  case SEEK_CUR: base = r->pos; break;
  case SEEK_END: base = (int64_t)r->size; break;
  default: return AVERROR(EINVAL);
  }
  if (off > INT64_MAX - base || base + off < 0 || base + off > (int64_t)r->size)
    return AVERROR(EINVAL);
  r->pos = base + off;
  return r->pos;
}

/* A container may name other files (MOV data references, HLS-like playlists): never opened. */
static int deny_io_open(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                        AVDictionary **options) {
  (void)s, (void)pb, (void)url, (void)flags, (void)options;
  return AVERROR(EPERM);
}

static bool name_in(const char *names, const char *const *list, size_t n) {
  /* names is libav's comma list ("matroska,webm") */
  char copy[128];
  snprintf(copy, sizeof copy, "%s", names);
  for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
    for (size_t i = 0; i < n; i++)
      if (!strcmp(t, list[i]))
        return true;
  return false;
}

/* FFmpeg reads a still image through a demuxer named after its format ("jpeg_pipe", "png_pipe"):
 * that format in capitals ("JPEG") into out, or false when name is no such demuxer. */
static bool image_demuxer(const char *name, char *out, size_t cap) {
  size_t n = strlen(name);
  const char *suffix = "_pipe";
  if (n <= strlen(suffix) || strcmp(name + n - strlen(suffix), suffix) != 0 || cap == 0)
    return false;
  n -= strlen(suffix);
  size_t i = 0;
  for (; i < n && i + 1 < cap; i++)
    out[i] = (char)toupper((unsigned char)name[i]);
  out[i] = 0;
  return true;
}

static qvl_status av_fail(qvl_status st, int err, const char *what) {
  char msg[AV_ERROR_MAX_STRING_SIZE] = "";
  av_strerror(err, msg, sizeof msg);
  return qvl_errorf(st, "%s (%s)", what, msg);
}

static void close_fmt(video_reader *r) {
  if (r->fc) {
    AVIOContext *io = r->fc->pb;
    avformat_close_input(&r->fc);
    if (io) {
      av_freep(&io->buffer);
      avio_context_free(&io);
    }
  }
}

/* Opens the demuxer over the buffer: probe (bounded), allow-list, header, stream info. */
static qvl_status open_fmt(video_reader *r) {
  r->pos = 0;
  uint8_t *iobuf = av_malloc(AVIO_BUF);
  AVIOContext *io = iobuf ? avio_alloc_context(iobuf, AVIO_BUF, 0, r, io_read, NULL, io_seek) : NULL;
  if (!io) {
    av_free(iobuf);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the video reader");
  }
  const AVInputFormat *fmt = NULL;
  int e = av_probe_input_buffer2(io, &fmt, "", NULL, 0, PROBE_BYTES);
  if (e < 0 || !fmt) {
    av_freep(&io->buffer);
    avio_context_free(&io);
    return qvl_errorf(QVL_ERR_FORMAT, "not a video file (no container format recognised in the first bytes)");
  }
  if (!name_in(fmt->name, allowed_formats, sizeof allowed_formats / sizeof *allowed_formats)) {
    av_freep(&io->buffer);
    avio_context_free(&io);
    char image[32];
    /* FFmpeg's demuxer name means nothing to whoever sent a photo as a video */
    if (image_demuxer(fmt->name, image, sizeof image))
      return qvl_errorf(QVL_ERR_UNSUPPORTED,
                        "this is a %s image, not a video: send it as an image (an image_url part; --image or /image "
                        "on the command line). Accepted video containers: " VIDEO_CONTAINERS,
                        image);
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "the container '%s' (%s) is not accepted (accepted: " VIDEO_CONTAINERS ")",
                      fmt->name, fmt->long_name ? fmt->long_name : "?");
  }
  AVFormatContext *fc = avformat_alloc_context();
  if (!fc) {
    av_freep(&io->buffer);
    avio_context_free(&io);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the video reader");
  }
  fc->pb = io;
  fc->flags |= AVFMT_FLAG_CUSTOM_IO;
  fc->probesize = PROBE_BYTES;
  fc->max_analyze_duration = ANALYZE_US;
  fc->io_open = deny_io_open;
  fc->max_streams = 32;
  fc->codec_whitelist = av_strdup(CODEC_WHITELIST);
  fc->protocol_whitelist = av_strdup("none");
  e = avformat_open_input(&fc, NULL, fmt, NULL);
  if (e < 0) {
    /* avformat_open_input freed fc; the custom AVIO is ours */
    av_freep(&io->buffer);
    avio_context_free(&io);
    return av_fail(QVL_ERR_FORMAT, e, "the video's container header cannot be read: truncated or corrupt");
  }
  r->fc = fc;
  e = avformat_find_stream_info(fc, NULL);
  if (e < 0)
    return av_fail(QVL_ERR_FORMAT, e, "the video's streams cannot be read: truncated or corrupt");
  return QVL_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int cmp_pkt_pts(const void *a, const void *b) {
  const pkt_entry *x = a, *y = b;
  return (x->pts > y->pts) - (x->pts < y->pts);
}

/* Picks the video stream and checks its header against the allow-list and the caps. */
static qvl_status check_stream(video_reader *r) {
  AVFormatContext *fc = r->fc;
  int vs = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
  if (vs < 0) {
    bool audio = av_find_best_stream(fc, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0) >= 0;
    return qvl_errorf(QVL_ERR_FORMAT, "the file has no video stream%s", audio ? " (audio only)" : "");
  }
  r->vs = vs;
  AVStream *st = fc->streams[vs];
  /* attached pictures (cover art) are single images, not clips */
  if (st->disposition & AV_DISPOSITION_ATTACHED_PIC)
    return qvl_errorf(QVL_ERR_FORMAT, "the file's only video stream is a still picture (cover art)");
  const AVCodecParameters *cp = st->codecpar;
  const AVCodec *dec = avcodec_find_decoder(cp->codec_id);
  const char *cname = avcodec_get_name(cp->codec_id);
  if (!dec || !name_in(dec->name, allowed_decoders, sizeof allowed_decoders / sizeof *allowed_decoders))
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "the video codec '%s' is not accepted (accepted: H.264, H.265, VP8, VP9, AV1, FFV1, GIF)",
                      cname);
  const char *fmt_name = fc->iformat->name;
  snprintf(r->info.container, sizeof r->info.container, "%s",
           strstr(fmt_name, "matroska") ? "matroska" : strstr(fmt_name, "mov") ? "mp4" : fmt_name);
  snprintf(r->info.codec, sizeof r->info.codec, "%s", cname);
  int w = cp->width, h = cp->height;
  if (w <= 0 || h <= 0)
    return qvl_errorf(QVL_ERR_FORMAT, "the video stream declares a frame size of %dx%d (WxH)", w, h);
  if (w > r->lim.max_dim || h > r->lim.max_dim || (int64_t)w * h > r->lim.max_frame_pixels)
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "the video's frames are %dx%d (WxH); at most %lld pixels and %d a side are accepted", w, h,
                      (long long)r->lim.max_frame_pixels, r->lim.max_dim);
  r->info.width = w;
  r->info.height = h;
  r->info.fps_num = st->avg_frame_rate.num;
  r->info.fps_den = st->avg_frame_rate.den;
  return QVL_OK;
}

/* One demux pass: every packet of the video stream, no decoding. */
static qvl_status count_frames(video_reader *r) {
  AVStream *st = r->fc->streams[r->vs];
  int64_t cap = r->lim.max_frames, n = 0, alloc = 256;
  int64_t max_pkt = (int64_t)r->info.width * r->info.height * 4 + ((int64_t)1 << 20);
  pkt_entry *e = malloc(sizeof *e * (size_t)alloc);
  if (!e)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  qvl_status s = QVL_OK;
  for (int64_t seen = 0; s == QVL_OK; seen++) {
    if (seen % STOP_EVERY == 0 && (s = qvl_stop_poll(r->stop, r->stop_user)) != QVL_OK)
      break;
    int rc = av_read_frame(r->fc, r->pkt);
    if (rc == AVERROR_EOF)
      break;
    if (rc < 0) {
      s = av_fail(QVL_ERR_FORMAT, rc, "the video is truncated or corrupt");
      break;
    }
    if (r->pkt->stream_index == r->vs && r->pkt->size > 0 && !(r->pkt->flags & AV_PKT_FLAG_DISCARD)) {
      if (r->pkt->size > max_pkt) {
        s = qvl_errorf(QVL_ERR_FORMAT, "a video packet of %d bytes for %dx%d frames", r->pkt->size, r->info.width,
                       r->info.height);
      } else if (n >= cap) {
        s = qvl_errorf(QVL_ERR_TOO_LARGE, "the video has more than %lld frames; at most %lld are accepted",
                       (long long)cap, (long long)cap);
      } else {
        if (n == alloc) {
          alloc *= 2;
          pkt_entry *g = realloc(e, sizeof *e * (size_t)alloc);
          if (!g) {
            s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
            av_packet_unref(r->pkt);
            break;
          }
          e = g;
        }
        e[n++] = (pkt_entry){r->pkt->pts, r->pkt->dts, (r->pkt->flags & AV_PKT_FLAG_KEY) != 0};
      }
    }
    av_packet_unref(r->pkt);
  }
  if (s == QVL_OK && n == 0)
    s = qvl_errorf(QVL_ERR_FORMAT, "the video stream has no frames");
  if (s != QVL_OK) {
    free(e);
    return s;
  }
  r->info.total_frames = n;
  bool by_pts = true;
  for (int64_t i = 0; i < n && by_pts; i++)
    by_pts = e[i].pts != AV_NOPTS_VALUE;
  if (by_pts) {
    qsort(e, (size_t)n, sizeof *e, cmp_pkt_pts);
    for (int64_t i = 1; i < n && by_pts; i++)
      by_pts = e[i].pts > e[i - 1].pts;
  }
  r->by_pts = by_pts;
  r->pts = malloc(sizeof *r->pts * (size_t)n);
  r->key_of = malloc(sizeof *r->key_of * (size_t)n);
  r->key_dts = malloc(sizeof *r->key_dts * (size_t)n);
  if (!r->pts || !r->key_of || !r->key_dts) {
    free(e);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  int64_t key = 0;
  for (int64_t i = 0; i < n; i++) {
    r->pts[i] = e[i].pts;
    if (e[i].key)
      key = i;
    r->key_of[i] = key;
    r->key_dts[i] = e[i].dts != AV_NOPTS_VALUE ? e[i].dts : e[i].pts;
  }
  /* the frame rate (see decode.h for the rule) */
  AVRational a = st->avg_frame_rate;
  double avg = a.num > 0 && a.den > 0 ? (double)a.num / a.den : 0;
  bool pts_all = true;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int64_t i = 0; i < n; i++) {
    if (e[i].pts == AV_NOPTS_VALUE) {
      pts_all = false;
      break;
    }
    lo = e[i].pts < lo ? e[i].pts : lo;
    hi = e[i].pts > hi ? e[i].pts : hi;
  }
  qvl_status fs = QVL_OK;
  if (avg >= VIDEO_MIN_FPS && avg <= VIDEO_MAX_FPS) {
    r->info.fps = avg;
    r->info.fps_rule = VIDEO_FPS_AVG_FRAME_RATE;
  } else if (avg > 0) {
    fs = qvl_errorf(QVL_ERR_FORMAT, "the video declares an absurd frame rate (%d/%d = %g fps; accepted: %g to %g)",
                    a.num, a.den, avg, VIDEO_MIN_FPS, VIDEO_MAX_FPS);
  } else if (pts_all && n > 1) {
    /* no average rate (variable rate, missing metadata): the frames over their timestamp span */
    double span = (double)(hi - lo) * av_q2d(st->time_base) * (double)n / (double)(n - 1);
    double f = span > 0 ? (double)n / span : 0;
    if (span <= 0)
      fs = qvl_errorf(QVL_ERR_FORMAT, "the video's %lld frames all carry the same timestamp (a zero frame rate)",
                      (long long)n);
    else if (!(f >= VIDEO_MIN_FPS && f <= VIDEO_MAX_FPS))
      fs = qvl_errorf(QVL_ERR_FORMAT, "the video's timestamps give an absurd frame rate (%g fps; accepted: %g to %g)",
                      f, VIDEO_MIN_FPS, VIDEO_MAX_FPS);
    r->info.fps = f;
    r->info.fps_rule = VIDEO_FPS_FROM_TIMESTAMPS;
  } else {
    r->info.fps = 24.0;
    r->info.fps_rule = VIDEO_FPS_FALLBACK;
  }
  if (fs != QVL_OK) {
    free(e);
    return fs;
  }
  free(e);
  r->info.duration_s = (double)n / r->info.fps;
  if (r->lim.max_seconds > 0 && r->info.duration_s > r->lim.max_seconds)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "the video lasts %.1f s (%lld frames at %.3g fps); at most %.0f s are accepted",
                      r->info.duration_s, (long long)n, r->info.fps, r->lim.max_seconds);
  return QVL_OK;
}

static qvl_status open_decoder(video_reader *r) {
  const AVCodecParameters *cp = r->fc->streams[r->vs]->codecpar;
  const AVCodec *dec = avcodec_find_decoder(cp->codec_id);
  r->cc = avcodec_alloc_context3(dec);
  if (!r->cc)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory for the video decoder");
  int e = avcodec_parameters_to_context(r->cc, cp);
  if (e < 0)
    return av_fail(QVL_ERR_FORMAT, e, "the video's codec parameters are invalid");
  r->cc->thread_count = 1;
  r->cc->max_pixels = r->lim.max_frame_pixels; /* the decoder refuses bigger frames itself too */
  r->cc->pkt_timebase = r->fc->streams[r->vs]->time_base;
  e = avcodec_open2(r->cc, dec, NULL);
  if (e < 0)
    return av_fail(QVL_ERR_FORMAT, e, "the video decoder cannot start on this stream");
  return QVL_OK;
}

void video_reader_close(video_reader *r) {
  if (!r)
    return;
  close_fmt(r);
  avcodec_free_context(&r->cc);
  av_frame_free(&r->frame);
  av_packet_free(&r->pkt);
  sws_freeContext(r->sws);
  FREE_EACH(r->pts, r->key_of, r->key_dts, r->rgb, r);
}

qvl_status video_reader_open(const void *data, size_t size, const video_limits *lim, qvl_stop_fn stop,
                             void *stop_user, video_reader **out) {
  *out = NULL;
  pthread_once(&log_once, quiet_logs);
  video_reader *r = calloc(1, sizeof *r);
  if (!r)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  if (lim)
    r->lim = *lim;
  video_limits def;
  video_limits_default(&def);
  if (!r->lim.max_bytes) r->lim.max_bytes = def.max_bytes;
  if (!r->lim.max_frame_pixels) r->lim.max_frame_pixels = def.max_frame_pixels;
  if (!r->lim.max_dim) r->lim.max_dim = def.max_dim;
  if (!r->lim.max_frames) r->lim.max_frames = def.max_frames;
  if (!(r->lim.max_seconds > 0)) r->lim.max_seconds = def.max_seconds;
  if (!r->lim.max_decoded) r->lim.max_decoded = def.max_decoded;
  if (!r->lim.max_decoded_pixels) r->lim.max_decoded_pixels = def.max_decoded_pixels;
  r->data = data;
  r->size = size;
  r->stop = stop;
  r->stop_user = stop_user;
  r->seek_gap = 48;
  qvl_status s = QVL_OK;
  if (size == 0)
    s = qvl_errorf(QVL_ERR_FORMAT, "the video is empty (0 bytes)");
  else if (size > r->lim.max_bytes)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the video has %zu bytes; at most %zu are accepted", size, r->lim.max_bytes);
  if (s == QVL_OK) {
    r->pkt = av_packet_alloc();
    r->frame = av_frame_alloc();
    if (!r->pkt || !r->frame)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  if (s == QVL_OK)
    s = open_fmt(r);
  if (s == QVL_OK)
    s = check_stream(r);
  if (s == QVL_OK)
    s = count_frames(r);
  /* the decode pass starts from a fresh demuxer at the beginning */
  close_fmt(r);
  if (s == QVL_OK)
    s = open_fmt(r);
  if (s == QVL_OK)
    s = open_decoder(r);
  if (s == QVL_OK) {
    r->rgb = malloc((size_t)r->info.width * r->info.height * 3 + 64);
    if (!r->rgb)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory for a %dx%d frame", r->info.width, r->info.height);
  }
  if (s != QVL_OK) {
    video_reader_close(r);
    return s;
  }
  *out = r;
  return QVL_OK;
}

const video_info *video_reader_info(const video_reader *r) { return &r->info; }
void video_reader_set_seek_gap(video_reader *r, int64_t frames) { r->seek_gap = frames < 0 ? 0 : frames; }
int64_t video_reader_seeks(const video_reader *r) { return r->seeks; }

/* Presentation index of a decoded frame (by pts), or -1 when it is none of the counted frames. */
static int64_t frame_index(const video_reader *r, int64_t pts) {
  const int64_t *p = bsearch(&pts, r->pts, (size_t)r->info.total_frames, sizeof *r->pts, cmp_i64);
  return p ? p - r->pts : -1;
}

static qvl_status to_rgb(video_reader *r, const AVFrame *f, image_rgb *out) {
  int w = r->info.width, h = r->info.height;
  if (f->width != w || f->height != h)
    return qvl_errorf(QVL_ERR_FORMAT, "a frame decodes to %dx%d (WxH) in a stream that declares %dx%d", f->width,
                      f->height, w, h);
  r->sws = sws_getCachedContext(r->sws, w, h, f->format, w, h, AV_PIX_FMT_RGB24,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_BITEXACT, NULL, NULL,
                                NULL);
  if (!r->sws)
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "the video's pixel format '%s' cannot be converted to RGB",
                      av_get_pix_fmt_name(f->format) ? av_get_pix_fmt_name(f->format) : "?");
  /* YUV -> RGB with the stream's own matrix and range (BT.601 limited when unspecified) */
  int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : (int)f->colorspace;
  const int *coef = sws_getCoefficients(cs);
  int *inv, *fwd, src_range, dst_range, bri, con, sat;
  if (sws_getColorspaceDetails(r->sws, &inv, &src_range, &fwd, &dst_range, &bri, &con, &sat) >= 0)
    sws_setColorspaceDetails(r->sws, coef, f->color_range == AVCOL_RANGE_JPEG, fwd, 1, bri, con, sat);
  uint8_t *dst[4] = {r->rgb, NULL, NULL, NULL};
  int dst_ls[4] = {w * 3, 0, 0, 0};
  if (sws_scale(r->sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, dst_ls) != h)
    return qvl_errorf(QVL_ERR_FORMAT, "a video frame could not be converted to RGB");
  *out = (image_rgb){.width = w, .height = h, .data = r->rgb};
  return QVL_OK;
}

typedef struct read_state {
  const int64_t *idx;
  int n, k;         /* next wanted: idx[k] */
  int64_t out_seq;  /* frames output so far (sequential mode) */
  int64_t last_out; /* presentation index of the last frame output (-1: none yet) */
  int64_t decoded;
  video_frame_fn fn;
  void *user;
} read_state;

/* Takes every frame the decoder has ready. */
static qvl_status drain(video_reader *r, read_state *rs) {
  for (;;) {
    int e = avcodec_receive_frame(r->cc, r->frame);
    if (e == AVERROR(EAGAIN) || e == AVERROR_EOF)
      return QVL_OK;
    if (e < 0)
      return av_fail(QVL_ERR_FORMAT, e, "the video stream is corrupt");
    if (++rs->decoded > r->lim.max_decoded ||
        (double)rs->decoded * r->info.width * r->info.height > (double)r->lim.max_decoded_pixels) {
      av_frame_unref(r->frame);
      return qvl_errorf(QVL_ERR_TOO_LARGE,
                        "reading the sampled frames would decode more than %lld frames or %.0f gigapixels of "
                        "%dx%d video; sample fewer frames (fps or num_frames), or send a shorter or smaller clip",
                        (long long)r->lim.max_decoded, (double)r->lim.max_decoded_pixels / 1e9, r->info.width,
                        r->info.height);
    }
    int64_t i = r->by_pts ? frame_index(r, r->frame->best_effort_timestamp != AV_NOPTS_VALUE
                                                  ? r->frame->best_effort_timestamp
                                                  : r->frame->pts)
                          : rs->out_seq++;
    qvl_status s = QVL_OK;
    if (r->frame->width != r->info.width || r->frame->height != r->info.height)
      s = qvl_errorf(QVL_ERR_FORMAT, "a frame decodes to %dx%d (WxH) in a stream that declares %dx%d",
                     r->frame->width, r->frame->height, r->info.width, r->info.height);
    if (s == QVL_OK && i >= 0) {
      rs->last_out = i;
      if (rs->k < rs->n && i == rs->idx[rs->k]) {
        image_rgb rgb;
        s = to_rgb(r, r->frame, &rgb);
        if (s == QVL_OK)
          s = rs->fn(rs->user, rs->k, i, &rgb);
        rs->k++;
      }
    }
    av_frame_unref(r->frame);
    if (s != QVL_OK)
      return s;
  }
}

/* Seeks to the key frame of the next wanted frame when that saves decoding. */
static qvl_status maybe_seek(video_reader *r, read_state *rs) {
  if (!r->by_pts || rs->k >= rs->n)
    return QVL_OK;
  int64_t key = r->key_of[rs->idx[rs->k]];
  if (key <= rs->last_out + 1 + r->seek_gap)
    return QVL_OK;
  int e = av_seek_frame(r->fc, r->vs, r->key_dts[key], AVSEEK_FLAG_BACKWARD);
  if (e < 0)
    return QVL_OK; /* not seekable here: decoding on reaches the frame all the same */
  avcodec_flush_buffers(r->cc);
  r->seeks++;
  rs->last_out = key - 1;
  return QVL_OK;
}

static qvl_status check_indices(const video_reader *r, const int64_t *idx, int n) {
  for (int i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= r->info.total_frames || (i > 0 && idx[i] <= idx[i - 1]))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "frame index %lld (position %d) is out of order or outside 0..%lld",
                        (long long)idx[i], i, (long long)r->info.total_frames - 1);
  return QVL_OK;
}

/* The read of video_reader_read replayed on the frame table: from the last frame output, a
 * wanted frame costs the frames up to it, or those from its key frame when the reader would seek
 * there (maybe_seek's rule); without timestamps everything up to the last wanted frame. An upper
 * bound: frames nothing refers to are skipped when nobody wants them. */
qvl_status video_reader_plan(const video_reader *r, const int64_t *idx, int n, int64_t *frames_out) {
  QVL_TRY(check_indices(r, idx, n));
  int64_t frames = 0, last = -1;
  if (!r->by_pts)
    frames = n > 0 ? idx[n - 1] + 1 : 0;
  for (int k = 0; r->by_pts && k < n; k++) {
    int64_t key = r->key_of[idx[k]];
    if (key > last + 1 + r->seek_gap)
      last = key - 1;
    frames += idx[k] - last;
    last = idx[k];
  }
  if (frames_out)
    *frames_out = frames;
  double px = (double)frames * r->info.width * r->info.height;
  if (frames > r->lim.max_decoded || px > (double)r->lim.max_decoded_pixels)
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "sampling %d frames from this %dx%d video means decoding about %lld frames (%.1f gigapixels: "
                      "its key frames are far apart), more than one request may cost here (%lld frames, %.0f "
                      "gigapixels); sample fewer frames (fps or num_frames), or send a shorter or smaller clip",
                      n, r->info.width, r->info.height, (long long)frames, px / 1e9, (long long)r->lim.max_decoded,
                      (double)r->lim.max_decoded_pixels / 1e9);
  return QVL_OK;
}

qvl_status video_reader_read(video_reader *r, const int64_t *idx, int n, video_frame_fn fn, void *user) {
  QVL_TRY(video_reader_plan(r, idx, n, NULL));
  if (r->used) {
    close_fmt(r);
    avcodec_free_context(&r->cc);
    QVL_TRY(open_fmt(r));
    QVL_TRY(open_decoder(r));
  }
  r->used = true;
  read_state rs = {.idx = idx, .n = n, .last_out = -1, .fn = fn, .user = user};
  qvl_status s = QVL_OK;
  bool eof = false;
  for (int64_t seen = 0; s == QVL_OK && rs.k < n && !eof; seen++) {
    if (seen % STOP_EVERY == 0 && (s = qvl_stop_poll(r->stop, r->stop_user)) != QVL_OK)
      break;
    s = maybe_seek(r, &rs);
    if (s != QVL_OK)
      break;
    int rc = av_read_frame(r->fc, r->pkt);
    if (rc == AVERROR_EOF) {
      eof = true;
      rc = avcodec_send_packet(r->cc, NULL);
    } else if (rc < 0) {
      s = av_fail(QVL_ERR_FORMAT, rc, "the video is truncated or corrupt");
      break;
    } else if (r->pkt->stream_index != r->vs || r->pkt->size == 0) {
      av_packet_unref(r->pkt);
      continue;
    } else {
      /* a frame nothing refers to and nobody wants is not decoded at all (H.264/H.265 B-frames:
       * most of the frames between two sampled ones) */
      if (r->by_pts) {
        int64_t i = frame_index(r, r->pkt->pts);
        bool wanted = i < 0 || bsearch(&i, idx + rs.k, (size_t)(n - rs.k), sizeof *idx, cmp_i64) != NULL;
        r->cc->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
      }
      rc = avcodec_send_packet(r->cc, r->pkt);
      av_packet_unref(r->pkt);
    }
    if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_EOF) {
      s = av_fail(QVL_ERR_FORMAT, rc, "the video stream is corrupt");
      break;
    }
    s = drain(r, &rs);
  }
  if (s == QVL_OK && rs.k < n)
    s = qvl_errorf(QVL_ERR_FORMAT, "the video ends before frame %lld of %lld (truncated or corrupt)",
                   (long long)idx[rs.k], (long long)r->info.total_frames);
  return s;
}
