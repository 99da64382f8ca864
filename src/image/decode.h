/*
 * Image decoding: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) from memory, to 8-bit RGB
 * exactly as Hugging Face's loader sees it: PIL.Image.open -> ImageOps.exif_transpose ->
 * convert_to_rgb (RGB kept as is; every other mode -> RGBA -> alpha-composited over opaque white ->
 * RGB), with Pillow 9.4's arithmetic, so the bytes equal what the Python processor starts from.
 *
 * The format is sniffed from the magic bytes, never from a file name. Every limit in image_limits is
 * checked from the header, before any pixel is decompressed, so a small file that claims to be a
 * 20000x20000 image (a decompression bomb) costs nothing. Truncated, corrupt, zero-sized and
 * unknown inputs return an error with a message a user can act on; nothing aborts or hangs.
 *
 * Errors: QVL_ERR_FORMAT (not an image, truncated, corrupt), QVL_ERR_UNSUPPORTED (a known format or
 * feature we do not decode: GIF, BMP, TIFF, AVIF/HEIC, 12-bit JPEG), QVL_ERR_TOO_LARGE
 * (over a limit), QVL_ERR_NOMEM.
 *
 * Thread safety: all functions are reentrant (no global state); the error message is per thread.
 */
#ifndef QVL_IMAGE_DECODE_H
#define QVL_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

/* A decoded image, 8-bit RGB, row-major, no padding. */
typedef struct image_rgb {
  int width, height;
  uint8_t *data; /* [height][width][3] */
} image_rgb;

/* Frees the pixels and zeroes the struct; safe on a zeroed struct and on NULL. */
void image_rgb_free(image_rgb *img);
/* Allocates a width x height image (contents undefined). */
qvl_status image_rgb_alloc(image_rgb *img, int width, int height);

/* Caps applied before decoding. A zero field means "use the default". */
typedef struct image_limits {
  size_t max_bytes;   /* encoded input size */
  int64_t max_pixels; /* width * height of the decoded image */
  int max_dim;        /* largest width or height */
} image_limits;

/* 32 MiB of encoded data, 50 Mpixel (150 MB of RGB), 32768 pixels a side: far above any photo a
 * client sends, low enough that one request cannot take the server's memory. */
#define IMAGE_DEFAULT_MAX_BYTES ((size_t)32 << 20)
#define IMAGE_DEFAULT_MAX_PIXELS ((int64_t)50000000)
#define IMAGE_DEFAULT_MAX_DIM 32768

typedef enum image_format {
  IMAGE_FORMAT_UNKNOWN = 0,
  IMAGE_FORMAT_JPEG,
  IMAGE_FORMAT_PNG,
  IMAGE_FORMAT_WEBP,
  /* recognised only to say so in the error message */
  IMAGE_FORMAT_GIF,
  IMAGE_FORMAT_BMP,
  IMAGE_FORMAT_TIFF,
  IMAGE_FORMAT_ICO,
  IMAGE_FORMAT_AVIF_HEIF,
  IMAGE_FORMAT_JPEG2000,
  IMAGE_FORMAT_JPEGXL,
  IMAGE_FORMAT_PNM,
  IMAGE_FORMAT_QOI,
  IMAGE_FORMAT_PSD,
  IMAGE_FORMAT_SVG,
  IMAGE_FORMAT_PDF,
  IMAGE_FORMAT_COUNT
} image_format;

/* What the header says, before decoding (see image_probe). */
typedef struct image_info {
  image_format format;
  int width, height; /* as stored, before EXIF orientation */
  int orientation;   /* EXIF orientation 1..8 (1 = none, also when absent or invalid) */
  int has_alpha;     /* the source has an alpha channel or a transparent colour */
  int channels;      /* colour channels as stored: 1 gray, 3 colour, 4 CMYK (alpha excluded) */
  int bit_depth;     /* bits per sample as stored (8 or 16; 1..4 for low-depth PNG) */
} image_info;

/* Format from the first bytes (needs at most 16). */
image_format image_sniff(const void *data, size_t size);
/* "JPEG", "PNG", "WebP", "GIF", ... ("unknown" for IMAGE_FORMAT_UNKNOWN). */
const char *image_format_name(image_format f);

/* Fills the limits with the defaults. */
void image_limits_default(image_limits *lim);

/* Reads only the header (and the EXIF orientation) and checks the limits; cheap. lim may be NULL
 * (defaults). Size and orientation in *info are valid on success and on ERR_TOO_LARGE. */
qvl_status image_probe(const void *data, size_t size, const image_limits *lim, image_info *info);

/* Decodes to RGB with EXIF orientation applied and alpha composited over white. lim may be NULL
 * (defaults); info may be NULL. On failure *out is left zeroed. */
qvl_status image_decode(const void *data, size_t size, const image_limits *lim, image_rgb *out,
                        image_info *info);

/* Orientation helpers, exposed for tests. image_exif_orientation parses a TIFF-structured EXIF
 * block (starting at "II*\0" or "MM\0*", i.e. after the "Exif\0\0" prefix of a JPEG APP1) and
 * returns the orientation tag of IFD0, or 1 when absent, malformed or out of range. */
int image_exif_orientation(const uint8_t *tiff, size_t size);
/* Applies orientation o (1..8, as PIL.ImageOps.exif_transpose) in place (the buffer is replaced). */
qvl_status image_apply_orientation(image_rgb *img, int orientation);

#endif
