/*
 * A minimal Matroska writer for tests: hostile and unusual clips crafted from the fixtures' FFV1
 * frames (or any bytes), without the ffmpeg CLI. Every element size is written in 8 bytes
 * (0x01 + 7), which EBML allows, so sizes are patched after the children are written.
 *
 *   mkv m; mkv_begin(&m);
 *   mkv_track(&m, &(mkv_track_opts){.codec = "V_FFV1", .width = 96, .height = 64, ...});
 *   mkv_frame(&m, pts_ms, data, len);   // repeat; clusters are cut every 30 s of timestamps
 *   mkv_end(&m); ... m.b.data, m.b.len ... buf_free(&m.b);
 */
#ifndef QVL_TESTS_MKV_WRITE_H
#define QVL_TESTS_MKV_WRITE_H

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "base/buf.h"

typedef struct mkv {
  buf b;
  size_t segment, cluster; /* offsets of their size fields (0: none open) */
  int64_t cluster_ms;
  int zlib;                /* frames are zlib-compressed (ContentCompression) */
} mkv;

typedef struct mkv_track_opts {
  const char *codec;          /* CodecID, e.g. "V_FFV1", "A_PCM/INT/LIT" */
  int audio;                  /* TrackType 2 instead of 1 */
  int width, height;
  const void *priv;           /* CodecPrivate (NULL: none) */
  size_t priv_len;
  uint64_t default_duration;  /* ns per frame (0: none) */
  int zlib;                   /* ContentEncoding: zlib compression of every frame */
} mkv_track_opts;

static void mkv_id(buf *b, uint32_t id) {
  uint8_t t[4];
  int n = id > 0xFFFFFF ? 4 : id > 0xFFFF ? 3 : id > 0xFF ? 2 : 1;
  for (int i = 0; i < n; i++)
    t[i] = (uint8_t)(id >> (8 * (n - 1 - i)));
  buf_append(b, t, (size_t)n);
}

static void mkv_size8(buf *b, uint64_t v) {
  uint8_t t[8] = {0x01};
  for (int i = 1; i < 8; i++)
    t[i] = (uint8_t)(v >> (8 * (7 - i)));
  buf_append(b, t, 8);
}

/* Opens a master element; returns the offset of its size field. */
static size_t mkv_open(buf *b, uint32_t id) {
  mkv_id(b, id);
  size_t at = b->len;
  mkv_size8(b, 0);
  return at;
}

static void mkv_close(buf *b, size_t at) {
  uint64_t v = b->len - at - 8;
  for (int i = 1; i < 8; i++)
    ((uint8_t *)b->data)[at + (size_t)i] = (uint8_t)(v >> (8 * (7 - i)));
}

static void mkv_bytes(buf *b, uint32_t id, const void *p, size_t n) {
  mkv_id(b, id);
  mkv_size8(b, n);
  buf_append(b, p, n);
}

static void mkv_uint(buf *b, uint32_t id, uint64_t v) {
  uint8_t t[8];
  for (int i = 0; i < 8; i++)
    t[i] = (uint8_t)(v >> (8 * (7 - i)));
  mkv_bytes(b, id, t, 8);
}

static void mkv_str(buf *b, uint32_t id, const char *s) { mkv_bytes(b, id, s, strlen(s)); }

static void mkv_begin(mkv *m) {
  memset(m, 0, sizeof *m);
  size_t h = mkv_open(&m->b, 0x1A45DFA3);
  mkv_uint(&m->b, 0x4286, 1);
  mkv_uint(&m->b, 0x42F7, 1);
  mkv_uint(&m->b, 0x42F2, 4);
  mkv_uint(&m->b, 0x42F3, 8);
  mkv_str(&m->b, 0x4282, "matroska");
  mkv_uint(&m->b, 0x4287, 4);
  mkv_uint(&m->b, 0x4285, 2);
  mkv_close(&m->b, h);
  m->segment = mkv_open(&m->b, 0x18538067);
  size_t info = mkv_open(&m->b, 0x1549A966);
  mkv_uint(&m->b, 0x2AD7B1, 1000000); /* timestamps in ms */
  mkv_str(&m->b, 0x4D80, "qvl tests");
  mkv_str(&m->b, 0x5741, "qvl tests");
  mkv_close(&m->b, info);
}

static void mkv_track(mkv *m, const mkv_track_opts *o) {
  size_t tracks = mkv_open(&m->b, 0x1654AE6B);
  size_t te = mkv_open(&m->b, 0xAE);
  mkv_uint(&m->b, 0xD7, 1);
  mkv_uint(&m->b, 0x73C5, 1);
  mkv_uint(&m->b, 0x83, o->audio ? 2 : 1);
  mkv_str(&m->b, 0x86, o->codec);
  if (o->priv)
    mkv_bytes(&m->b, 0x63A2, o->priv, o->priv_len);
  if (o->default_duration)
    mkv_uint(&m->b, 0x23E383, o->default_duration);
  if (o->audio) {
    size_t a = mkv_open(&m->b, 0xE1);
    mkv_uint(&m->b, 0x9F, 1);    /* channels */
    mkv_uint(&m->b, 0x6264, 16); /* bit depth */
    mkv_close(&m->b, a);
  } else {
    size_t v = mkv_open(&m->b, 0xE0);
    mkv_uint(&m->b, 0xB0, (uint64_t)o->width);
    mkv_uint(&m->b, 0xBA, (uint64_t)o->height);
    mkv_close(&m->b, v);
  }
  if (o->zlib) {
    size_t encs = mkv_open(&m->b, 0x6D80);
    size_t enc = mkv_open(&m->b, 0x6240);
    mkv_uint(&m->b, 0x5032, 1); /* scope: frames */
    size_t comp = mkv_open(&m->b, 0x5034);
    mkv_uint(&m->b, 0x4254, 0); /* zlib */
    mkv_close(&m->b, comp);
    mkv_close(&m->b, enc);
    mkv_close(&m->b, encs);
    m->zlib = 1;
  }
  mkv_close(&m->b, te);
  mkv_close(&m->b, tracks);
}

/* One key frame of track 1 at pts_ms (clusters every 30 s of timestamps). */
static void mkv_frame(mkv *m, int64_t pts_ms, const void *data, size_t len) {
  if (!m->cluster || pts_ms - m->cluster_ms > 30000 || pts_ms < m->cluster_ms) {
    if (m->cluster)
      mkv_close(&m->b, m->cluster);
    m->cluster = mkv_open(&m->b, 0x1F43B675);
    m->cluster_ms = pts_ms;
    mkv_uint(&m->b, 0xE7, (uint64_t)pts_ms);
  }
  int16_t rel = (int16_t)(pts_ms - m->cluster_ms);
  uint8_t head[4] = {0x81, (uint8_t)((uint16_t)rel >> 8), (uint8_t)rel, 0x80};
  mkv_id(&m->b, 0xA3);
  mkv_size8(&m->b, 4 + len);
  buf_append(&m->b, head, 4);
  buf_append(&m->b, data, len);
}

static void mkv_end(mkv *m) {
  if (m->cluster)
    mkv_close(&m->b, m->cluster);
  mkv_close(&m->b, m->segment);
}

/* zlib-compresses len bytes (for ContentCompression frames); free with free(). */
static uint8_t *mkv_deflate(const void *data, size_t len, size_t *out_len) {
  uLongf n = compressBound((uLong)len);
  uint8_t *o = malloc(n);
  if (o && compress2(o, &n, data, (uLong)len, 9) != Z_OK) {
    free(o);
    return NULL;
  }
  *out_len = n;
  return o;
}

#endif
