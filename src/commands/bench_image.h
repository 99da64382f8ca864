#ifndef QVL_COMMANDS_BENCH_IMAGE_H
#define QVL_COMMANDS_BENCH_IMAGE_H

#include "base/buf.h"

/* Encodes a width x height synthetic image as JPEG into *out (free with free()). 0 on success. */
int bench_make_jpeg(int width, int height, unsigned char **out, unsigned long *size);
/* The same image as a data: URL appended to url. */
qvl_status bench_jpeg_data_url(int width, int height, buf *url);
#endif
