/*
 * Fuzz target for the whole image path: sniff -> probe -> decode (JPEG/PNG/WebP, EXIF, alpha)
 * -> smart_resize -> Pillow bicubic -> normalise -> patchify. Caps are small so that each input
 * stays fast; any crash, sanitizer report, leak or broken invariant (abort) is a finding.
 * Corpus: tests/fuzz/corpus/image/ (made by tests/fuzz/make_image_corpus.py), replayed by make test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "image/decode.h"
#include "image/preprocess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 18, .max_dim = 4096};
  image_info probe, info;
  qvl_status ps = image_probe(data, size, &lim, &probe);
  image_rgb img;
  qvl_status s = image_decode(data, size, &lim, &img, &info);
  if (s != QVL_OK) {
    FUZZ_ASSERT(img.data == NULL && img.width == 0);
    FUZZ_ASSERT(s != QVL_ERR_INTERNAL);
    return 0;
  }
  /* a decodable image passes the probe, with the same header */
  FUZZ_ASSERT(ps == QVL_OK && probe.format == info.format && probe.width == info.width &&
              probe.height == info.height);
  int swap = info.orientation >= 5;
  FUZZ_ASSERT(img.width == (swap ? info.height : info.width));
  FUZZ_ASSERT(img.height == (swap ? info.width : info.height));
  FUZZ_ASSERT((int64_t)img.width * img.height <= lim.max_pixels);

  preprocess_opts o = {.min_pixels = 1024, .max_pixels = 16384};
  image_patches p;
  s = image_preprocess(&img, &o, &p);
  if (s == QVL_OK) {
    FUZZ_ASSERT(p.n_patches == p.grid_t * p.grid_h * p.grid_w && p.n_tokens * 4 == p.n_patches);
    FUZZ_ASSERT((int64_t)p.resized.width * p.resized.height <= 16384 || p.resized.width == 32 ||
                p.resized.height == 32);
    for (size_t i = 0; i < (size_t)p.n_patches * IMAGE_PATCH_DIM; i++)
      FUZZ_ASSERT(p.pixel_values[i] >= -1.0f && p.pixel_values[i] <= 1.0f);
  } else {
    FUZZ_ASSERT(s == QVL_ERR_INVALID_ARG && p.pixel_values == NULL); /* aspect ratio over 200 */
  }
  image_patches_free(&p);
  image_rgb_free(&img);
  return 0;
}
