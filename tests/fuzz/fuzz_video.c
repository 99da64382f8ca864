/*
 * Fuzz target for the video path: bounded probe -> allow-list -> demux (frame count, rate rule) ->
 * sampling (indices, timestamps) -> video smart_resize -> decode of the sampled frames (seeking
 * forced on every other input) -> resize -> normalise -> patchify. Caps are small so that each input
 * stays fast; any crash, sanitizer report, leak or broken invariant (abort) is a finding.
 * Corpus: tests/fuzz/corpus/video/ (crafted by tests/unit/test_video_hostile with
 * QVL_VIDEO_CORPUS_DIR, plus the fixtures' H.264 MP4), replayed by make test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "image/preprocess.h"
#include "video/clip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  video_limits lim = {.max_bytes = 1 << 20,
                      .max_frame_pixels = 256 * 256,
                      .max_dim = 1024,
                      .max_frames = 2000,
                      .max_seconds = 600,
                      .max_decoded = 300};
  video_sampling smp;
  video_sampling_default(&smp);
  smp.min_pixels = 4096;
  smp.max_pixels = 65536;
  smp.max_frames = 16;
  video_clip c;
  qvl_status s = video_clip_open(data, size, &lim, &smp, NULL, NULL, &c);
  if (s != QVL_OK) {
    FUZZ_ASSERT(s != QVL_ERR_INTERNAL && c.reader == NULL && c.indices == NULL);
    return 0;
  }
  const video_info *in = &c.info;
  FUZZ_ASSERT(in->width > 0 && in->height > 0 && (int64_t)in->width * in->height <= lim.max_frame_pixels);
  FUZZ_ASSERT(in->total_frames >= 1 && in->total_frames <= lim.max_frames);
  FUZZ_ASSERT(in->fps >= VIDEO_MIN_FPS && in->fps <= VIDEO_MAX_FPS);
  FUZZ_ASSERT(c.n >= 2 && c.n <= smp.max_frames && c.n <= in->total_frames);
  for (int i = 0; i < c.n; i++)
    FUZZ_ASSERT(c.indices[i] >= 0 && c.indices[i] < in->total_frames && (i == 0 || c.indices[i] > c.indices[i - 1]));
  FUZZ_ASSERT(c.grid_t == (c.n + 1) / 2 && c.width % 32 == 0 && c.height % 32 == 0);
  FUZZ_ASSERT(c.n_tokens * 4 == c.n_patches);
  for (int g = 1; g < c.grid_t; g++)
    FUZZ_ASSERT(c.timestamps[g] >= c.timestamps[g - 1]);
  if (size % 2)
    video_reader_set_seek_gap(c.reader, 0);
  s = video_clip_decode(&c, false);
  FUZZ_ASSERT(s != QVL_ERR_INTERNAL);
  if (s == QVL_OK) {
    FUZZ_ASSERT(c.pixel_values != NULL && c.resized != NULL);
    for (int64_t i = 0; i < c.n_patches * IMAGE_PATCH_DIM; i += 97)
      FUZZ_ASSERT(c.pixel_values[i] >= -1.0f && c.pixel_values[i] <= 1.0f);
  }
  video_clip_free(&c);
  return 0;
}
