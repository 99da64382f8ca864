/*
 * JPEG/PNG/WebP decoding to RGB, matching Pillow 9.4 + HF convert_to_rgb byte for byte.
 *
 * Pillow behaviours reproduced here (each checked against Pillow 9.4 with generated files, see
 * tests/data/images/make_images.py):
 *  - convert_to_rgb: mode RGB is used as is (so an RGB PNG's tRNS colour is ignored); every other
 *    mode goes to RGBA and is composited over opaque white with Pillow's 7-bit fixed point
 *    (composite_white below), then the alpha is dropped.
 *  - PNG 16-bit RGB/RGBA/LA keep the high byte; 16-bit gray becomes Pillow mode "I" whose RGB
 *    conversion clamps the value to 0..255 (so 16-bit gray is mostly white, as in HF).
 *  - PNG gray tRNS compares the *raw* tRNS value with the pixel after 1/2/4-bit gray has been
 *    scaled to 0..255 (Pillow's quirk); 16-bit gray compares the 16-bit value.
 *  - PNG palette entries past the end of PLTE are Pillow's default grey ramp (i, i, i).
 *  - JPEG: libjpeg-turbo with default settings (islow IDCT, fancy upsampling); CMYK JPEGs are
 *    read as Adobe-inverted CMYK and converted with Pillow's cmyk2rgb.
 *  - EXIF orientation from the first APP1 "Exif" segment (JPEG), eXIf (PNG) or EXIF (WebP).
 */
#include "image/decode.h"

#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

#include "base/status.h"

/* Progressive JPEGs with thousands of tiny scans decode very slowly (a known libjpeg DoS); real
 * encoders write at most a few dozen. */
#define JPEG_MAX_SCANS 256
/* Memory libpng may spend on one ancillary chunk (iCCP, zTXt, ...), which it decompresses. */
#define PNG_CHUNK_MALLOC_MAX ((png_alloc_size_t)8 << 20)

void image_rgb_free(image_rgb *img) {
  if (!img)
    return;
  free(img->data);
  img->data = NULL;
  img->width = img->height = 0;
}

qvl_status image_rgb_alloc(image_rgb *img, int width, int height) {
  img->data = NULL;
  img->width = img->height = 0;
  if (width <= 0 || height <= 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image of %dx%d pixels: both sides must be positive",
                      width, height);
  size_t n = (size_t)width * (size_t)height;
  if (n > SIZE_MAX / 3)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "image of %dx%d pixels does not fit in memory", width,
                      height);
  img->data = malloc(n * 3);
  if (!img->data)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory allocating a %dx%d RGB image (%zu bytes)",
                      width, height, n * 3);
  img->width = width;
  img->height = height;
  return QVL_OK;
}

void image_limits_default(image_limits *lim) {
  lim->max_bytes = IMAGE_DEFAULT_MAX_BYTES;
  lim->max_pixels = IMAGE_DEFAULT_MAX_PIXELS;
  lim->max_dim = IMAGE_DEFAULT_MAX_DIM;
}

static image_limits limits_or_default(const image_limits *lim) {
  image_limits l;
  image_limits_default(&l);
  if (lim) {
    if (lim->max_bytes)
      l.max_bytes = lim->max_bytes;
    if (lim->max_pixels > 0)
      l.max_pixels = lim->max_pixels;
    if (lim->max_dim > 0)
      l.max_dim = lim->max_dim;
  }
  return l;
}

/* ---------------------------------------------------------------------------------------------
 * Format sniffing */

static const char *const format_names[IMAGE_FORMAT_COUNT] = {
    [IMAGE_FORMAT_UNKNOWN] = "unknown", [IMAGE_FORMAT_JPEG] = "JPEG",
    [IMAGE_FORMAT_PNG] = "PNG",         [IMAGE_FORMAT_WEBP] = "WebP",
    [IMAGE_FORMAT_GIF] = "GIF",         [IMAGE_FORMAT_BMP] = "BMP",
    [IMAGE_FORMAT_TIFF] = "TIFF",       [IMAGE_FORMAT_ICO] = "ICO",
    [IMAGE_FORMAT_AVIF_HEIF] = "AVIF/HEIF", [IMAGE_FORMAT_JPEG2000] = "JPEG 2000",
    [IMAGE_FORMAT_JPEGXL] = "JPEG XL",  [IMAGE_FORMAT_PNM] = "PNM",
    [IMAGE_FORMAT_QOI] = "QOI",         [IMAGE_FORMAT_PSD] = "PSD",
    [IMAGE_FORMAT_SVG] = "SVG",         [IMAGE_FORMAT_PDF] = "PDF",
};

const char *image_format_name(image_format f) {
  if ((int)f < 0 || f >= IMAGE_FORMAT_COUNT)
    return "unknown";
  return format_names[f];
}

static int has_prefix(const uint8_t *p, size_t n, const char *s, size_t len) {
  return n >= len && memcmp(p, s, len) == 0;
}

image_format image_sniff(const void *data, size_t size) {
  const uint8_t *p = data;
  if (!p)
    return IMAGE_FORMAT_UNKNOWN;
  if (has_prefix(p, size, "\xFF\xD8\xFF", 3))
    return IMAGE_FORMAT_JPEG;
  if (has_prefix(p, size, "\x89PNG\r\n\x1A\n", 8))
    return IMAGE_FORMAT_PNG;
  if (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
    return IMAGE_FORMAT_WEBP;
  if (has_prefix(p, size, "GIF87a", 6) || has_prefix(p, size, "GIF89a", 6))
    return IMAGE_FORMAT_GIF;
  if (has_prefix(p, size, "BM", 2) && size >= 14)
    return IMAGE_FORMAT_BMP;
  if (has_prefix(p, size, "II*\0", 4) || has_prefix(p, size, "MM\0*", 4))
    return IMAGE_FORMAT_TIFF;
  if (has_prefix(p, size, "\0\0\1\0", 4) && size >= 6)
    return IMAGE_FORMAT_ICO;
  if (size >= 12 && memcmp(p + 4, "ftyp", 4) == 0) {
    static const char *const brands[] = {"avif", "avis", "heic", "heix", "hevc", "hevx",
                                         "heim", "heis", "mif1", "msf1"};
    for (size_t i = 0; i < sizeof brands / sizeof brands[0]; i++)
      if (memcmp(p + 8, brands[i], 4) == 0)
        return IMAGE_FORMAT_AVIF_HEIF;
    if (memcmp(p + 8, "jp2 ", 4) == 0)
      return IMAGE_FORMAT_JPEG2000;
  }
  if (has_prefix(p, size, "\0\0\0\x0CjP  \r\n\x87\n", 12) || has_prefix(p, size, "\xFF\x4F\xFF\x51", 4))
    return IMAGE_FORMAT_JPEG2000;
  if (has_prefix(p, size, "\xFF\x0A", 2) || has_prefix(p, size, "\0\0\0\x0CJXL \r\n\x87\n", 12))
    return IMAGE_FORMAT_JPEGXL;
  if (size >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' &&
      (p[2] == ' ' || p[2] == '\n' || p[2] == '\r' || p[2] == '\t'))
    return IMAGE_FORMAT_PNM;
  if (has_prefix(p, size, "qoif", 4))
    return IMAGE_FORMAT_QOI;
  if (has_prefix(p, size, "8BPS", 4))
    return IMAGE_FORMAT_PSD;
  if (has_prefix(p, size, "%PDF", 4))
    return IMAGE_FORMAT_PDF;
  if (has_prefix(p, size, "<svg", 4) || has_prefix(p, size, "<?xml", 5))
    return IMAGE_FORMAT_SVG;
  return IMAGE_FORMAT_UNKNOWN;
}

/* ---------------------------------------------------------------------------------------------
 * Limits */

static qvl_status check_size(const char *fmt, int64_t w, int64_t h, const image_limits *lim) {
  if (w <= 0 || h <= 0)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "%s header says the image is %lldx%lld pixels; an image needs at least one "
                      "pixel in each direction",
                      fmt, (long long)w, (long long)h);
  if (w > lim->max_dim || h > lim->max_dim)
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "image is %lldx%lld pixels; the longest side allowed is %d pixels "
                      "(scale it down before sending)",
                      (long long)w, (long long)h, lim->max_dim);
  if (w * h > lim->max_pixels)
    return qvl_errorf(QVL_ERR_TOO_LARGE,
                      "image is %lldx%lld = %.1f Mpixel, above the %.1f Mpixel limit "
                      "(scale it down before sending)",
                      (long long)w, (long long)h, (double)(w * h) / 1e6,
                      (double)lim->max_pixels / 1e6);
  return QVL_OK;
}

static qvl_status check_input(const void *data, size_t size, const image_limits *lim) {
  if (!data || size == 0)
    return qvl_errorf(QVL_ERR_FORMAT, "image data is empty (0 bytes)");
  if (size > lim->max_bytes)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "image data is %.1f MiB, above the %.1f MiB limit",
                      (double)size / 1048576.0, (double)lim->max_bytes / 1048576.0);
  return QVL_OK;
}

static qvl_status unknown_format(const uint8_t *p, size_t size, image_format f) {
  if (f != IMAGE_FORMAT_UNKNOWN)
    return qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "%s images are not supported; send JPEG, PNG or WebP", image_format_name(f));
  /* each byte as 0xNN: a bare "23" reads as the decimal number */
  char hex[5 * 8 + 1] = "";
  size_t n = size < 8 ? size : 8, len = 0;
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(hex + len, sizeof hex - len, "%s0x%02x", i ? " " : "", p[i]);
  const char *hint = "";
  if (size && (p[0] == '<' || p[0] == '{' || p[0] == '['))
    hint = " (it looks like text, perhaps an HTML error page or JSON instead of the image)";
  else if (size >= 4 && memcmp(p, "data", 4) == 0)
    hint = " (it looks like a data: URL that was not base64-decoded)";
  return qvl_errorf(QVL_ERR_FORMAT,
                    "not a recognised image: %zu bytes starting with %s%s; supported formats are "
                    "JPEG, PNG and WebP",
                    size, hex, hint);
}

/* ---------------------------------------------------------------------------------------------
 * EXIF orientation */

static uint32_t rd16(const uint8_t *p, int le) {
  return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}
static uint32_t rd32(const uint8_t *p, int le) {
  return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
            : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int image_exif_orientation(const uint8_t *tiff, size_t size) {
  if (!tiff)
    return 1;
  /* Pillow accepts the block with or without the "Exif\0\0" prefix (PNG eXIf and WebP EXIF
   * chunks are written both ways). */
  if (size >= 6 && memcmp(tiff, "Exif\0\0", 6) == 0) {
    tiff += 6;
    size -= 6;
  }
  if (size < 8)
    return 1;
  int le;
  if (memcmp(tiff, "II*\0", 4) == 0)
    le = 1;
  else if (memcmp(tiff, "MM\0*", 4) == 0)
    le = 0;
  else
    return 1;
  uint32_t ifd = rd32(tiff + 4, le);
  if (ifd > size - 2)
    return 1;
  uint32_t n = rd16(tiff + ifd, le);
  size_t pos = (size_t)ifd + 2;
  for (uint32_t i = 0; i < n && size - pos >= 12; i++, pos += 12) {
    const uint8_t *e = tiff + pos;
    if (rd16(e, le) != 0x0112)
      continue;
    uint32_t type = rd16(e + 2, le), count = rd32(e + 4, le);
    if (count != 1)
      return 1;
    uint32_t v;
    switch (type) {
    case 1: /* BYTE */
    case 6: /* SBYTE */
      v = e[8];
      break;
    case 3: /* SHORT */
    case 8: /* SSHORT */
      v = rd16(e + 8, le);
      break;
    case 4: /* LONG */
    case 9: /* SLONG */
      v = rd32(e + 8, le);
      break;
    default:
      return 1;
    }
    return v >= 1 && v <= 8 ? (int)v : 1;
  }
  return 1;
}

qvl_status image_apply_orientation(image_rgb *img, int o) {
  if (o <= 1 || o > 8)
    return QVL_OK;
  int W = img->width, H = img->height;
  int swap = o >= 5; /* transpose, rotations by 90 and transverse exchange the sides */
  image_rgb r;
  QVL_TRY(image_rgb_alloc(&r, swap ? H : W, swap ? W : H));
  const uint8_t *src = img->data;
  for (int y = 0; y < r.height; y++) {
    uint8_t *d = r.data + (size_t)y * r.width * 3;
    for (int x = 0; x < r.width; x++, d += 3) {
      int sx, sy; /* source pixel of output (x, y), as PIL.Image.transpose defines it */
      switch (o) {
      case 2: sx = W - 1 - x; sy = y; break;         /* FLIP_LEFT_RIGHT */
      case 3: sx = W - 1 - x; sy = H - 1 - y; break; /* ROTATE_180 */
      case 4: sx = x; sy = H - 1 - y; break;         /* FLIP_TOP_BOTTOM */
      case 5: sx = y; sy = x; break;                 /* TRANSPOSE */
      case 6: sx = y; sy = H - 1 - x; break;         /* ROTATE_270 (clockwise) */
      case 7: sx = W - 1 - y; sy = H - 1 - x; break; /* TRANSVERSE */
      default: sx = W - 1 - y; sy = x; break;        /* 8: ROTATE_90 (counter-clockwise) */
      }
      const uint8_t *s = src + ((size_t)sy * W + sx) * 3;
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  image_rgb_free(img);
  *img = r;
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Pillow arithmetic */

/* Pillow's alpha_composite(white, (c, a)) followed by convert("RGB"), one channel. With an opaque
 * white destination Pillow's coefficients reduce to src weight a*128 and dst weight (255-a)*128
 * (7 fractional bits), its division by 255 being the ((x >> 8) + x) >> 8 approximation with
 * rounding offset 0x80 << 7. Checked for all 65536 (c, a) pairs against Pillow 9.4. */
static inline uint8_t composite_white(uint32_t c, uint32_t a) {
  uint32_t t = (c * a + 255u * (255u - a)) * 128u + (0x80u << 7);
  return (uint8_t)((((t >> 8) + t) >> 8) >> 7);
}

static inline uint8_t clip8(int v) { return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v; }

/* Pillow's cmyk2rgb on Adobe-inverted samples: nk = 255 - k; c' = nk - c*nk/255 (rounded). */
static inline uint8_t cmyk_channel(int c, int nk) {
  int t = c * nk + 128;
  return clip8(nk - (((t >> 8) + t) >> 8));
}

/* ---------------------------------------------------------------------------------------------
 * JPEG */

typedef struct jpeg_err_ctx {
  struct jpeg_error_mgr mgr;
  jmp_buf jmp;
  int eof; /* libjpeg hit the end of the data and padded with a fake EOI */
  int code; /* libjpeg message code of the fatal error */
  char msg[JMSG_LENGTH_MAX];
} jpeg_err_ctx;

static void jpeg_on_error(j_common_ptr cinfo) {
  jpeg_err_ctx *e = (jpeg_err_ctx *)cinfo->err;
  e->mgr.format_message(cinfo, e->msg);
  e->code = e->mgr.msg_code;
  longjmp(e->jmp, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
  jpeg_err_ctx *e = (jpeg_err_ctx *)cinfo->err;
  /* Pillow ignores libjpeg's corrupt-data warnings but fails on truncation; do the same. */
  if (level < 0 && e->mgr.msg_code == JWRN_JPEG_EOF)
    e->eof = 1;
}

static void jpeg_on_progress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > JPEG_MAX_SCANS) {
      jpeg_err_ctx *e = (jpeg_err_ctx *)cinfo->err;
      snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", JPEG_MAX_SCANS);
      longjmp(e->jmp, 1);
    }
  }
}

/* First APP1 segment holding EXIF (Pillow keeps the first one). */
static int jpeg_orientation(j_decompress_ptr d) {
  for (jpeg_saved_marker_ptr m = d->marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0)
      return image_exif_orientation(m->data + 6, m->data_length - 6);
  return 1;
}

typedef struct jpeg_job {
  struct jpeg_decompress_struct d;
  jpeg_err_ctx err;
  struct jpeg_progress_mgr progress;
  uint8_t *row; /* [width][components] */
  image_rgb img;
} jpeg_job;

/* A reader's image goes to *out when decoding was asked for and succeeded; otherwise it is freed. */
static qvl_status hand_over(qvl_status s, int decode, image_rgb *img, image_rgb *out) {
  if (s == QVL_OK && decode)
    *out = *img;
  else
    image_rgb_free(img);
  return s;
}

static qvl_status jpeg_run(const uint8_t *data, size_t size, const image_limits *lim, int decode,
                           jpeg_job *job, image_info *info) {
  j_decompress_ptr d = &job->d;
  d->err = jpeg_std_error(&job->err.mgr);
  job->err.mgr.error_exit = jpeg_on_error;
  job->err.mgr.emit_message = jpeg_on_message;
  if (setjmp(job->err.jmp)) {
    if (job->err.eof)
      return qvl_errorf(QVL_ERR_FORMAT, "truncated JPEG: the data ends before the image is complete (%s)",
                        job->err.msg);
    if (job->err.code == JERR_BAD_PRECISION)
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "JPEG not supported: %s (only 8-bit JPEG)", job->err.msg);
    return qvl_errorf(QVL_ERR_FORMAT, "corrupt JPEG: %s", job->err.msg);
  }
  jpeg_create_decompress(d);
  job->progress.progress_monitor = jpeg_on_progress;
  d->progress = &job->progress;
  jpeg_save_markers(d, JPEG_APP0 + 1, 0xFFFF);
  if (size > ULONG_MAX)
    return qvl_errorf(QVL_ERR_TOO_LARGE, "JPEG data too large");
  jpeg_mem_src(d, data, (unsigned long)size);
  jpeg_read_header(d, TRUE);
  if (job->err.eof)
    return qvl_errorf(QVL_ERR_FORMAT, "truncated JPEG: the data ends inside the header");
  info->width = (int)d->image_width;
  info->height = (int)d->image_height;
  info->orientation = jpeg_orientation(d);
  info->channels = d->num_components;
  info->bit_depth = d->data_precision;
  info->has_alpha = 0;
  QVL_TRY(check_size("JPEG", d->image_width, d->image_height, lim));
  switch (d->num_components) {
  case 1:
    d->out_color_space = JCS_GRAYSCALE;
    break;
  case 3:
    d->out_color_space = JCS_RGB;
    break;
  case 4:
    d->out_color_space = JCS_CMYK; /* YCCK is converted to CMYK by libjpeg, as Pillow asks */
    break;
  default:
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "JPEG with %d colour components is not supported (1, 3 or 4)",
                      d->num_components);
  }
  if (!decode)
    return QVL_OK;
  jpeg_start_decompress(d);
  if (job->err.eof)
    return qvl_errorf(QVL_ERR_FORMAT, "truncated JPEG: the data ends before the image is complete");
  int w = (int)d->output_width, h = (int)d->output_height, nc = d->output_components;
  if (w != info->width || h != info->height || (nc != 1 && nc != 3 && nc != 4))
    return qvl_errorf(QVL_ERR_INTERNAL, "libjpeg output %dx%dx%d differs from the header %dx%d",
                      w, h, nc, info->width, info->height);
  QVL_TRY(image_rgb_alloc(&job->img, w, h));
  job->row = malloc((size_t)w * (size_t)nc);
  if (!job->row)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory decoding a %dx%d JPEG", w, h);
  while (d->output_scanline < d->output_height) {
    int y = (int)d->output_scanline;
    JSAMPROW rows[1] = {nc == 3 ? job->img.data + (size_t)y * w * 3 : job->row};
    if (jpeg_read_scanlines(d, rows, 1) != 1 || job->err.eof)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "truncated JPEG: the data ends at row %d of %d", y, h);
    uint8_t *out = job->img.data + (size_t)y * w * 3;
    const uint8_t *in = job->row;
    if (nc == 1) {
      for (int x = 0; x < w; x++, out += 3)
        out[0] = out[1] = out[2] = in[x];
    } else if (nc == 4) {
      for (int x = 0; x < w; x++, out += 3, in += 4) {
        int nk = in[3]; /* 255 - (255 - k): the stored samples are inverted */
        out[0] = cmyk_channel(255 - in[0], nk);
        out[1] = cmyk_channel(255 - in[1], nk);
        out[2] = cmyk_channel(255 - in[2], nk);
      }
    }
  }
  return QVL_OK;
}

static qvl_status decode_jpeg(const uint8_t *data, size_t size, const image_limits *lim, int decode,
                              image_rgb *out, image_info *info) {
  jpeg_job *job = calloc(1, sizeof *job);
  if (!job)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  qvl_status s = jpeg_run(data, size, lim, decode, job, info);
  jpeg_destroy_decompress(&job->d);
  free(job->row);
  s = hand_over(s, decode, &job->img, out);
  free(job);
  return s;
}

/* ---------------------------------------------------------------------------------------------
 * PNG */

typedef struct png_job {
  const uint8_t *data;
  size_t size, pos;
  int truncated;
  char msg[256];
  uint8_t *pixels;    /* [height][rowbytes] as libpng writes them */
  png_bytep *rows;    /* [height] */
  image_rgb img;
} png_job;

static void png_on_error(png_structp png, png_const_charp msg) {
  png_job *job = png_get_error_ptr(png);
  snprintf(job->msg, sizeof job->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static void png_on_read(png_structp png, png_bytep out, size_t n) {
  png_job *job = png_get_io_ptr(png);
  if (n > job->size - job->pos) {
    job->truncated = 1;
    png_error(png, "unexpected end of data");
  }
  memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

/* Walks the chunk list without decoding; used by the probe to find eXIf without libpng. */
static int png_scan_orientation(const uint8_t *p, size_t size) {
  size_t pos = 8;
  while (size - pos >= 12) {
    uint32_t len = rd32(p + pos, 0);
    if (len > size - pos - 12)
      break;
    if (memcmp(p + pos + 4, "eXIf", 4) == 0)
      return image_exif_orientation(p + pos + 8, len);
    if (memcmp(p + pos + 4, "IEND", 4) == 0)
      break;
    pos += 12 + (size_t)len;
  }
  return 1;
}

static qvl_status png_run(png_structp png, png_infop pi, png_job *job, const image_limits *lim,
                          int decode, image_info *info) {
  if (setjmp(png_jmpbuf(png))) {
    if (job->truncated)
      return qvl_errorf(QVL_ERR_FORMAT,
                        "truncated PNG: the data ends before the image is complete (%zu bytes)",
                        job->size);
    return qvl_errorf(QVL_ERR_FORMAT, "corrupt PNG: %s", job->msg);
  }
  png_set_read_fn(png, job, png_on_read);
  png_set_chunk_malloc_max(png, PNG_CHUNK_MALLOC_MAX);
  png_set_benign_errors(png, 1);
  png_set_check_for_invalid_index(png, 0); /* out-of-range indices map to Pillow's grey ramp */
  png_read_info(png, pi);
  png_uint_32 w = png_get_image_width(png, pi), h = png_get_image_height(png, pi);
  int depth = png_get_bit_depth(png, pi), ctype = png_get_color_type(png, pi);
  int has_trns = png_get_valid(png, pi, PNG_INFO_tRNS) != 0;
  info->width = (int)w;
  info->height = (int)h;
  info->bit_depth = depth;
  info->channels = (ctype & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  info->has_alpha = (ctype & PNG_COLOR_MASK_ALPHA) || (has_trns && ctype != PNG_COLOR_TYPE_RGB);
  info->orientation = png_scan_orientation(job->data, job->size);
  QVL_TRY(check_size("PNG", w, h, lim));
  if (!decode)
    return QVL_OK;

  /* Copy the tRNS and PLTE data now: libpng rescales its own copies for the transforms. */
  int key = -1; /* gray value that is transparent */
  uint8_t pal[256][4];
  if (ctype == PNG_COLOR_TYPE_PALETTE) {
    png_colorp plte = NULL;
    int n_plte = 0;
    if (!png_get_PLTE(png, pi, &plte, &n_plte) || !plte)
      n_plte = 0;
    for (int i = 0; i < 256; i++) {
      pal[i][0] = pal[i][1] = pal[i][2] = (uint8_t)i; /* Pillow's default palette */
      pal[i][3] = 255;
    }
    for (int i = 0; i < n_plte && i < 256; i++) {
      pal[i][0] = plte[i].red;
      pal[i][1] = plte[i].green;
      pal[i][2] = plte[i].blue;
    }
  }
  if (has_trns) {
    png_bytep trns_alpha = NULL;
    int n_trns = 0;
    png_color_16p trns_color = NULL;
    png_get_tRNS(png, pi, &trns_alpha, &n_trns, &trns_color);
    if (ctype == PNG_COLOR_TYPE_PALETTE && trns_alpha)
      for (int i = 0; i < n_trns && i < 256; i++)
        pal[i][3] = trns_alpha[i];
    if (ctype == PNG_COLOR_TYPE_GRAY && trns_color)
      key = trns_color->gray;
  }

  /* Keep gray 16-bit whole (Pillow clamps it, see the top comment); everything else 8-bit. */
  int gray16 = depth == 16 && ctype == PNG_COLOR_TYPE_GRAY;
  if (depth == 16 && !gray16)
    png_set_strip_16(png);
  if (depth < 8) {
    if (ctype == PNG_COLOR_TYPE_GRAY)
      png_set_expand_gray_1_2_4_to_8(png);
    else
      png_set_packing(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, pi);
  size_t rowbytes = png_get_rowbytes(png, pi);
  int ch = png_get_channels(png, pi);
  size_t bps = gray16 ? 2 : 1;
  if (rowbytes != (size_t)w * (size_t)ch * bps)
    return qvl_errorf(QVL_ERR_INTERNAL, "libpng row of %zu bytes, expected %u x %d x %zu", rowbytes,
                      (unsigned)w, ch, bps);
  job->pixels = malloc(rowbytes * h);
  job->rows = malloc(sizeof(png_bytep) * h);
  if (!job->pixels || !job->rows)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory decoding a %ux%u PNG", (unsigned)w, (unsigned)h);
  for (png_uint_32 y = 0; y < h; y++)
    job->rows[y] = job->pixels + rowbytes * y;
  png_read_image(png, job->rows);

  QVL_TRY(image_rgb_alloc(&job->img, (int)w, (int)h));
  uint8_t *out = job->img.data;
  const uint8_t *in = job->pixels;
  size_t n = (size_t)w * h;
  if (ctype == PNG_COLOR_TYPE_PALETTE) {
    for (size_t i = 0; i < n; i++, out += 3) {
      const uint8_t *e = pal[in[i]];
      out[0] = composite_white(e[0], e[3]);
      out[1] = composite_white(e[1], e[3]);
      out[2] = composite_white(e[2], e[3]);
    }
  } else if (ctype == PNG_COLOR_TYPE_GRAY) {
    for (size_t i = 0; i < n; i++, out += 3) {
      int v = gray16 ? (in[2 * i] << 8 | in[2 * i + 1]) : in[i];
      uint8_t g = v == key ? 255 : clip8(v);
      out[0] = out[1] = out[2] = g;
    }
  } else if (ctype == PNG_COLOR_TYPE_GRAY_ALPHA) {
    for (size_t i = 0; i < n; i++, out += 3, in += 2)
      out[0] = out[1] = out[2] = composite_white(in[0], in[1]);
  } else if (ctype == PNG_COLOR_TYPE_RGB) {
    memcpy(out, in, n * 3);
  } else if (ctype == PNG_COLOR_TYPE_RGB_ALPHA) {
    for (size_t i = 0; i < n; i++, out += 3, in += 4) {
      out[0] = composite_white(in[0], in[3]);
      out[1] = composite_white(in[1], in[3]);
      out[2] = composite_white(in[2], in[3]);
    }
  } else {
    return qvl_errorf(QVL_ERR_FORMAT, "PNG colour type %d is not valid", ctype);
  }
  return QVL_OK;
}

static qvl_status decode_png(const uint8_t *data, size_t size, const image_limits *lim, int decode,
                             image_rgb *out, image_info *info) {
  png_job *job = calloc(1, sizeof *job);
  if (!job)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  job->data = data;
  job->size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, png_on_error, png_on_warning);
  png_infop pi = png ? png_create_info_struct(png) : NULL;
  qvl_status s;
  if (!png || !pi)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory creating the PNG reader");
  else
    s = png_run(png, pi, job, lim, decode, info);
  png_destroy_read_struct(png ? &png : NULL, pi ? &pi : NULL, NULL);
  free(job->pixels);
  free(job->rows);
  s = hand_over(s, decode, &job->img, out);
  free(job);
  return s;
}

/* ---------------------------------------------------------------------------------------------
 * WebP */

/* Finds the EXIF chunk in the RIFF container (libwebp's decoder ignores it). */
static int webp_orientation(const uint8_t *p, size_t size) {
  size_t pos = 12;
  while (size - pos >= 8) {
    uint32_t len = rd32(p + pos + 4, 1);
    if (len > size - pos - 8)
      break;
    if (memcmp(p + pos, "EXIF", 4) == 0)
      return image_exif_orientation(p + pos + 8, len);
    pos += 8 + (size_t)len + (len & 1);
    if (pos > size)
      break;
  }
  return 1;
}

/* Animated WebP: the first frame, as Pillow's WebPAnimDecoder gives it. The canvas starts fully
 * transparent black and the first frame (always a key frame) is decoded into it at its offset,
 * without blending. Pillow then reads the canvas as RGBA when the VP8X alpha flag is set
 * (so uncovered canvas becomes white after convert_to_rgb) and as RGBX otherwise (black). */
static qvl_status decode_webp_first_frame(const uint8_t *p, size_t size,
                                          const WebPBitstreamFeatures *f, image_rgb *out) {
  size_t pos = 12;
  const uint8_t *frame = NULL;
  uint32_t frame_len = 0;
  while (size - pos >= 8 && !frame) {
    uint32_t len = rd32(p + pos + 4, 1);
    if (len > size - pos - 8)
      break;
    if (memcmp(p + pos, "ANMF", 4) == 0) {
      frame = p + pos + 8;
      frame_len = len;
    }
    pos += 8 + (size_t)len + (len & 1);
    if (pos > size)
      break;
  }
  if (!frame || frame_len < 16 + 8)
    return qvl_errorf(QVL_ERR_FORMAT, "corrupt or truncated animated WebP: no complete first frame");
  uint32_t fx = 2 * (frame[0] | frame[1] << 8 | (uint32_t)frame[2] << 16);
  uint32_t fy = 2 * (frame[3] | frame[4] << 8 | (uint32_t)frame[5] << 16);
  uint32_t fw = 1 + (frame[6] | frame[7] << 8 | (uint32_t)frame[8] << 16);
  uint32_t fh = 1 + (frame[9] | frame[10] << 8 | (uint32_t)frame[11] << 16);
  if (fx + fw > (uint32_t)f->width || fy + fh > (uint32_t)f->height)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "corrupt animated WebP: first frame %ux%u at (%u, %u) outside the %dx%d canvas",
                      fw, fh, fx, fy, f->width, f->height);
  size_t n = (size_t)f->width * f->height;
  uint8_t *canvas = calloc(n, 4); /* [height][width][4], transparent black */
  if (!canvas)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory decoding a %dx%d WebP", f->width, f->height);
  /* The frame payload (optional ALPH + VP8/VP8L chunks) is a bitstream libwebp decodes as is. */
  uint8_t *dst = canvas + ((size_t)fy * f->width + fx) * 4;
  WebPDecoderConfig cfg;
  qvl_status s = QVL_OK;
  if (!WebPInitDecoderConfig(&cfg)) {
    s = qvl_errorf(QVL_ERR_INTERNAL, "libwebp version mismatch");
  } else {
    cfg.output.colorspace = MODE_RGBA;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = dst;
    cfg.output.u.RGBA.stride = f->width * 4;
    cfg.output.u.RGBA.size = n * 4 - (size_t)(dst - canvas);
    VP8StatusCode st = WebPDecode(frame + 16, frame_len - 16, &cfg);
    if (st == VP8_STATUS_OK && (cfg.input.width != (int)fw || cfg.input.height != (int)fh))
      st = VP8_STATUS_BITSTREAM_ERROR;
    if (st != VP8_STATUS_OK)
      s = qvl_errorf(QVL_ERR_FORMAT, "corrupt or truncated animated WebP: first frame (libwebp status %d)",
                     (int)st);
    WebPFreeDecBuffer(&cfg.output);
  }
  image_rgb img = {0};
  if (s == QVL_OK)
    s = image_rgb_alloc(&img, f->width, f->height);
  if (s == QVL_OK) {
    const uint8_t *in = canvas;
    uint8_t *o = img.data;
    for (size_t i = 0; i < n; i++, in += 4, o += 3) {
      if (f->has_alpha) {
        o[0] = composite_white(in[0], in[3]);
        o[1] = composite_white(in[1], in[3]);
        o[2] = composite_white(in[2], in[3]);
      } else {
        o[0] = in[0];
        o[1] = in[1];
        o[2] = in[2];
      }
    }
    *out = img;
  }
  free(canvas);
  return s;
}

static qvl_status decode_webp(const uint8_t *data, size_t size, const image_limits *lim, int decode,
                              image_rgb *out, image_info *info) {
  WebPBitstreamFeatures f;
  VP8StatusCode st = WebPGetFeatures(data, size, &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA)
    return qvl_errorf(QVL_ERR_FORMAT, "truncated WebP: the data ends inside the header (%zu bytes)", size);
  if (st != VP8_STATUS_OK)
    return qvl_errorf(QVL_ERR_FORMAT, "corrupt WebP header (libwebp status %d)", (int)st);
  info->width = f.width;
  info->height = f.height;
  info->has_alpha = f.has_alpha;
  info->channels = 3;
  info->bit_depth = 8;
  info->orientation = webp_orientation(data, size);
  QVL_TRY(check_size("WebP", f.width, f.height, lim));
  if (!decode)
    return QVL_OK;
  if (f.has_animation)
    return decode_webp_first_frame(data, size, &f, out);
  image_rgb img;
  QVL_TRY(image_rgb_alloc(&img, f.width, f.height));
  size_t n = (size_t)f.width * f.height;
  if (!f.has_alpha) {
    if (!WebPDecodeRGBInto(data, size, img.data, n * 3, f.width * 3)) {
      image_rgb_free(&img);
      return qvl_errorf(QVL_ERR_FORMAT, "corrupt or truncated WebP: libwebp could not decode the %dx%d image",
                        f.width, f.height);
    }
  } else {
    uint8_t *rgba = malloc(n * 4);
    if (!rgba) {
      image_rgb_free(&img);
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory decoding a %dx%d WebP", f.width, f.height);
    }
    if (!WebPDecodeRGBAInto(data, size, rgba, n * 4, f.width * 4)) {
      free(rgba);
      image_rgb_free(&img);
      return qvl_errorf(QVL_ERR_FORMAT, "corrupt or truncated WebP: libwebp could not decode the %dx%d image",
                        f.width, f.height);
    }
    const uint8_t *in = rgba;
    uint8_t *o = img.data;
    for (size_t i = 0; i < n; i++, in += 4, o += 3) {
      o[0] = composite_white(in[0], in[3]);
      o[1] = composite_white(in[1], in[3]);
      o[2] = composite_white(in[2], in[3]);
    }
    free(rgba);
  }
  *out = img;
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points */

static qvl_status run(const void *data, size_t size, const image_limits *lim_in, int decode,
                      image_rgb *out, image_info *info) {
  image_limits lim = limits_or_default(lim_in);
  image_info tmp;
  if (!info)
    info = &tmp;
  memset(info, 0, sizeof *info);
  info->orientation = 1;
  QVL_TRY(check_input(data, size, &lim));
  const uint8_t *p = data;
  info->format = image_sniff(p, size);
  switch (info->format) {
  case IMAGE_FORMAT_JPEG:
    return decode_jpeg(p, size, &lim, decode, out, info);
  case IMAGE_FORMAT_PNG:
    return decode_png(p, size, &lim, decode, out, info);
  case IMAGE_FORMAT_WEBP:
    return decode_webp(p, size, &lim, decode, out, info);
  default:
    return unknown_format(p, size, info->format);
  }
}

qvl_status image_probe(const void *data, size_t size, const image_limits *lim, image_info *info) {
  return run(data, size, lim, 0, NULL, info);
}

qvl_status image_decode(const void *data, size_t size, const image_limits *lim, image_rgb *out,
                        image_info *info) {
  memset(out, 0, sizeof *out);
  image_info tmp;
  if (!info)
    info = &tmp;
  qvl_status s = run(data, size, lim, 1, out, info);
  if (s == QVL_OK)
    s = image_apply_orientation(out, info->orientation);
  if (s != QVL_OK)
    image_rgb_free(out);
  return s;
}
