/* A synthetic photo-like JPEG for `qvl bench`, encoded in memory with libjpeg so the benchmark
 * needs no image files. Smooth gradients plus texture, so the decoder does realistic work. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h> /* needs stdio.h and stddef types first */

#include "commands/bench_image.h"

#include "base/dataurl.h"

int bench_make_jpeg(int width, int height, unsigned char **out, unsigned long *size) {
  unsigned char *rgb = malloc((size_t)width * (size_t)height * 3);
  if (!rgb)
    return -1;
  uint32_t state = 12345;
  for (int y = 0; y < height; y++)
    for (int x = 0; x < width; x++) {
      state = state * 1664525u + 1013904223u;
      unsigned char noise = (unsigned char)(state >> 27);
      unsigned char *p = rgb + ((size_t)y * (size_t)width + (size_t)x) * 3;
      p[0] = (unsigned char)((x * 255 / width + noise) & 255);
      p[1] = (unsigned char)((y * 255 / height + ((x / 32 + y / 32) & 1) * 40) & 255);
      p[2] = (unsigned char)(((x + y) * 255 / (width + height)) ^ noise);
    }
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  *out = NULL;
  *size = 0;
  jpeg_mem_dest(&c, out, size);
  c.image_width = (JDIMENSION)width;
  c.image_height = (JDIMENSION)height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = rgb + (size_t)c.next_scanline * (size_t)width * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(rgb);
  return 0;
}

qvl_status bench_jpeg_data_url(int width, int height, buf *url) {
  unsigned char *jpg = NULL;
  unsigned long jsize = 0;
  if (bench_make_jpeg(width, height, &jpg, &jsize) != 0)
    return QVL_ERR_NOMEM;
  qvl_status st = dataurl_encode("image/jpeg", jpg, jsize, url);
  free(jpg);
  return st;
}
