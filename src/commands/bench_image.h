#ifndef QVL_API_TOOLS_BENCH_IMAGE_H
#define QVL_API_TOOLS_BENCH_IMAGE_H
/* Encodes a width x height synthetic image as JPEG into *out (free with free()). 0 on success. */
int bench_make_jpeg(int width, int height, unsigned char **out, unsigned long *size);
#endif
