/*
 * Image decoding and preprocessing against independent expected values:
 *  - tests/fixtures/preprocess/<case>/: decoded RGB, resized RGB, pixel_values, grid_thw from the
 *    NumPy/Pillow reference, byte for byte; the aspect-ratio case must fail with HF's message.
 *  - tests/fixtures/preprocess/smart_resize.json: every row.
 *  - tests/data/images/cases.json: files made by tests/data/images/make_images.py with Pillow 9.4
 *    as the oracle (PNG colour types and bit depths, tRNS, palettes, all alpha pairs, EXIF
 *    orientations, JPEG/WebP variants, bicubic resizes) and bad inputs with the expected status.
 *  - robustness: every prefix of small PNG/JPEG/WebP files, random bytes, EXIF parser bounds.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "base/timing.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "model/safetensors.h"
#include "test.h"
#include "test_files.h"

#define FIXTURES "tests/fixtures/preprocess"
#define DATA "tests/data/images"

static int json_int(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valueint : -1;
}
static double json_num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static qvl_status decode_file(const char *path, const image_limits *lim, image_rgb *img) {
  buf b;
  memset(img, 0, sizeof *img);
  if (!test_read_file(path, &b))
    return QVL_ERR_IO;
  qvl_status s = image_decode(b.data, b.len, lim, img, NULL);
  buf_free(&b);
  return s;
}

/* Compares an image with an expected tensor U8 [H, W, 3]; reports the first differing byte. */
static void check_u8_image(const char *what, const image_rgb *img, const st_tensor *t) {
  CHECK(t != NULL, "%s: tensor missing", what);
  if (!t)
    return;
  int shape_ok = t->dtype == ST_U8 && t->n_dims == 3 && t->shape[0] == img->height &&
                 t->shape[1] == img->width && t->shape[2] == 3;
  CHECK(shape_ok, "%s: expected U8 [%lld,%lld,%lld], got %dx%d (HxW)", what, (long long)t->shape[0],
        (long long)t->shape[1], (long long)t->shape[2], img->height, img->width);
  if (!shape_ok)
    return;
  size_t n = (size_t)img->width * img->height * 3;
  size_t first = n;
  for (size_t i = 0; i < n && first == n; i++)
    if (img->data[i] != ((const uint8_t *)t->data)[i])
      first = i;
  CHECK(first == n, "%s: byte %zu (y %zu x %zu c %zu) is %d, expected %d", what, first,
        first / 3 / img->width, first / 3 % img->width, first % 3, first < n ? img->data[first] : 0,
        first < n ? ((const uint8_t *)t->data)[first] : 0);
}

static void test_fixture_case(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, FIXTURES "/%s/case.json", name);
  cJSON *c = test_read_json(path);
  if (!c)
    return;
  const char *image = json_str(c, "image");
  snprintf(path, sizeof path, FIXTURES "/%s/expected.safetensors", name);
  safetensors *st = NULL;
  qvl_status s = st_open(path, &st);
  CHECK(s == QVL_OK, "%s: %s", path, qvl_last_error());
  snprintf(path, sizeof path, FIXTURES "/%s/%s", name, image ? image : "");
  image_rgb img;
  s = decode_file(path, NULL, &img);
  CHECK(s == QVL_OK, "%s: decode %s: %s", name, path, qvl_last_error());
  if (s != QVL_OK || !st)
    goto done;
  CHECK(img.height == json_int(c, "decoded_height") && img.width == json_int(c, "decoded_width"),
        "%s: decoded %dx%d (HxW)", name, img.height, img.width);
  char what[256];
  snprintf(what, sizeof what, "%s image_rgb", name);
  check_u8_image(what, &img, st_find(st, "image_rgb"));

  preprocess_opts o = {(int64_t)json_num(c, "min_pixels"), (int64_t)json_num(c, "max_pixels")};
  image_patches p;
  s = image_preprocess(&img, &o, &p);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(c, "expected_error");
  if (err) {
    const char *msg = json_str(err, "message");
    CHECK(s == QVL_ERR_INVALID_ARG, "%s: expected an error, got status %d", name, (int)s);
    CHECK(msg && strcmp(qvl_last_error(), msg) == 0, "%s: message '%s', expected '%s'", name,
          qvl_last_error(), msg ? msg : "?");
    image_patches_free(&p);
    goto done;
  }
  CHECK(s == QVL_OK, "%s: preprocess: %s", name, qvl_last_error());
  if (s != QVL_OK)
    goto done;
  snprintf(what, sizeof what, "%s image_resized", name);
  check_u8_image(what, &p.resized, st_find(st, "image_resized"));

  const st_tensor *pv = st_find(st, "pixel_values");
  CHECK(pv && pv->dtype == ST_F32 && pv->n_dims == 2 && pv->shape[0] == p.n_patches &&
            pv->shape[1] == IMAGE_PATCH_DIM,
        "%s: pixel_values shape: ours [%d,%d]", name, p.n_patches, IMAGE_PATCH_DIM);
  if (pv && pv->nbytes == (size_t)p.n_patches * IMAGE_PATCH_DIM * sizeof(float)) {
    /* tensor data in a safetensors file need not be 4-byte aligned: compare bytes */
    size_t n = (size_t)p.n_patches * IMAGE_PATCH_DIM, first = n;
    const uint8_t *e = pv->data;
    for (size_t i = 0; i < n && first == n; i++)
      if (memcmp(&p.pixel_values[i], e + 4 * i, sizeof(float)) != 0)
        first = i;
    float want = 0;
    if (first < n)
      memcpy(&want, e + 4 * first, sizeof want);
    CHECK(first == n, "%s: pixel_values[%zu][%zu] = %.9g, expected %.9g", name,
          first / IMAGE_PATCH_DIM, first % IMAGE_PATCH_DIM, first < n ? p.pixel_values[first] : 0.0,
          want);
  }
  const st_tensor *g = st_find(st, "image_grid_thw");
  CHECK(g && g->dtype == ST_I32 && g->nbytes == 12, "%s: image_grid_thw missing or not I32 [1,3]", name);
  if (g && g->dtype == ST_I32 && g->nbytes == 12) {
    int32_t gv[3];
    memcpy(gv, g->data, sizeof gv);
    CHECK(gv[0] == p.grid_t && gv[1] == p.grid_h && gv[2] == p.grid_w,
          "%s: grid_thw [%d,%d,%d], expected [%d,%d,%d]", name, p.grid_t, p.grid_h, p.grid_w, gv[0],
          gv[1], gv[2]);
  }
  CHECK(p.n_tokens == json_int(c, "n_image_tokens"), "%s: %d tokens, expected %d", name, p.n_tokens,
        json_int(c, "n_image_tokens"));
  CHECK(p.resized.height == json_int(c, "resized_height") &&
            p.resized.width == json_int(c, "resized_width"),
        "%s: resized %dx%d (HxW)", name, p.resized.height, p.resized.width);
  image_patches_free(&p);
done:
  image_rgb_free(&img);
  st_close(st);
  cJSON_Delete(c);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_fixtures(void) {
  DIR *d = opendir(FIXTURES);
  CHECK(d != NULL, "cannot open %s", FIXTURES);
  if (!d)
    return;
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256) {
    char p[1024];
    snprintf(p, sizeof p, FIXTURES "/%s/case.json", e->d_name);
    FILE *f = e->d_name[0] != '.' ? fopen(p, "rb") : NULL;
    if (f) {
      fclose(f);
      names[n++] = strdup(e->d_name);
    }
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  CHECK(n >= 14, "found %d preprocess fixture cases, expected at least 14", n);
  for (int i = 0; i < n; i++) {
    test_fixture_case(names[i]);
    free(names[i]);
  }
}

static void test_smart_resize_table(void) {
  cJSON *j = test_read_json(FIXTURES "/smart_resize.json");
  if (!j)
    return;
  const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases"), *c;
  int rows = 0;
  cJSON_ArrayForEach(c, cases) {
    int h = json_int(c, "height"), w = json_int(c, "width");
    int64_t mn = (int64_t)json_num(c, "min_pixels"), mx = (int64_t)json_num(c, "max_pixels");
    int rh, rw;
    qvl_status s = image_smart_resize(h, w, mn, mx, IMAGE_FACTOR, &rh, &rw);
    const char *err = json_str(c, "error");
    if (err) {
      CHECK(s == QVL_ERR_INVALID_ARG && strcmp(qvl_last_error(), err) == 0,
            "smart_resize(%d, %d): status %d '%s', expected '%s'", h, w, (int)s, qvl_last_error(), err);
    } else {
      int eh = json_int(c, "resized_height"), ew = json_int(c, "resized_width");
      CHECK(s == QVL_OK && rh == eh && rw == ew,
            "smart_resize(%d, %d, %lld, %lld) = %dx%d, expected %dx%d (%s)", h, w, (long long)mn,
            (long long)mx, rh, rw, eh, ew, s ? qvl_last_error() : "ok");
      CHECK((rh / 32) * (rw / 32) == json_int(c, "n_image_tokens"), "tokens for %dx%d", h, w);
    }
    rows++;
  }
  CHECK(rows >= 30, "smart_resize.json: %d rows", rows);
  cJSON_Delete(j);
}

static void test_smart_resize_extra(void) {
  int rh, rw;
  /* exactly 200:1 is allowed; 1:200.5 is not (and the message prints Python's repr) */
  CHECK(image_smart_resize(1, 200, 4096, 65536, 32, &rh, &rw) == QVL_OK, "200:1 allowed");
  CHECK(image_smart_resize(2, 401, 4096, 65536, 32, &rh, &rw) == QVL_ERR_INVALID_ARG &&
            strcmp(qvl_last_error(), "absolute aspect ratio must be smaller than 200, got 200.5") == 0,
        "200.5: %s", qvl_last_error());
  CHECK(image_smart_resize(3, 700, 4096, 65536, 32, &rh, &rw) == QVL_ERR_INVALID_ARG &&
            strcmp(qvl_last_error(),
                   "absolute aspect ratio must be smaller than 200, got 233.33333333333334") == 0,
        "700/3: %s", qvl_last_error());
  CHECK(image_smart_resize(0, 10, 4096, 65536, 32, &rh, &rw) == QVL_ERR_INVALID_ARG, "0 height");
  CHECK(image_smart_resize(10, 10, 70000, 65536, 32, &rh, &rw) == QVL_ERR_INVALID_ARG, "min > max");
  CHECK(image_smart_resize(10, 10, 0, 65536, 32, &rh, &rw) == QVL_ERR_INVALID_ARG, "empty result");
  /* the CPU default: a 12 Mpixel photo lands at 1152x864 = 972 tokens */
  preprocess_opts o;
  preprocess_opts_default(&o);
  CHECK(image_smart_resize(3024, 4032, o.min_pixels, o.max_pixels, 32, &rh, &rw) == QVL_OK &&
            rh == 864 && rw == 1152,
        "default cap on 4032x3024: %dx%d", rw, rh);
}

static int status_from_name(const char *s) {
#define X(name, http, type, code, text) \
  if (s && strcmp(s, #name) == 0) \
    return QVL_##name;
  QVL_STATUS_LIST(X)
#undef X
  return -1;
}

static void test_data_cases(void) {
  cJSON *j = test_read_json(DATA "/cases.json");
  if (!j)
    return;
  char path[1024];
  const cJSON *c;
  int n_dec = 0, n_res = 0, n_err = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "decode")) {
    const char *file = json_str(c, "file"), *exp = json_str(c, "expected");
    image_rgb img, want;
    snprintf(path, sizeof path, DATA "/%s", file);
    qvl_status s = decode_file(path, NULL, &img);
    CHECK(s == QVL_OK, "%s: %s", file, qvl_last_error());
    snprintf(path, sizeof path, DATA "/%s", exp);
    qvl_status s2 = decode_file(path, NULL, &want);
    CHECK(s2 == QVL_OK, "%s: %s", exp, qvl_last_error());
    if (s == QVL_OK && s2 == QVL_OK) {
      int same_size = img.width == want.width && img.height == want.height;
      CHECK(same_size, "%s: %dx%d, expected %dx%d (WxH)", file, img.width, img.height, want.width,
            want.height);
      if (same_size) {
        size_t n = (size_t)img.width * img.height * 3, bad = 0, first = n;
        for (size_t i = 0; i < n; i++)
          if (img.data[i] != want.data[i]) {
            bad++;
            if (first == n)
              first = i;
          }
        CHECK(bad == 0, "%s (%s): %zu of %zu bytes differ, first at pixel %zu: %d vs %d", file,
              json_str(c, "note"), bad, n, first / 3, img.data[first], want.data[first]);
      }
    }
    image_rgb_free(&img);
    image_rgb_free(&want);
    n_dec++;
  }
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "resize")) {
    image_rgb src, want, got;
    snprintf(path, sizeof path, DATA "/%s", json_str(c, "file"));
    qvl_status s = decode_file(path, NULL, &src);
    snprintf(path, sizeof path, DATA "/%s", json_str(c, "expected"));
    s = s ? s : decode_file(path, NULL, &want);
    CHECK(s == QVL_OK, "resize case files: %s", qvl_last_error());
    if (s != QVL_OK) {
      image_rgb_free(&src);
      continue;
    }
    int w = json_int(c, "width"), h = json_int(c, "height");
    s = image_resize_bicubic(&src, w, h, &got);
    CHECK(s == QVL_OK && got.width == want.width && got.height == want.height &&
              memcmp(got.data, want.data, (size_t)w * h * 3) == 0,
          "bicubic %dx%d -> %dx%d differs from Pillow", src.width, src.height, w, h);
    image_rgb_free(&src);
    image_rgb_free(&want);
    image_rgb_free(&got);
    n_res++;
  }
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "error")) {
    const char *file = json_str(c, "file"), *contains = json_str(c, "contains");
    image_limits lim = {0};
    if (json_num(c, "max_pixels") > 0)
      lim.max_pixels = (int64_t)json_num(c, "max_pixels");
    if (json_num(c, "max_dim") > 0)
      lim.max_dim = json_int(c, "max_dim");
    if (json_num(c, "max_bytes") > 0)
      lim.max_bytes = (size_t)json_num(c, "max_bytes");
    image_rgb img;
    snprintf(path, sizeof path, DATA "/%s", file);
    qvl_status s = decode_file(path, &lim, &img);
    int want = status_from_name(json_str(c, "status"));
    CHECK((int)s == want && img.data == NULL, "%s (%s): status %d (%s), expected %s", file,
          json_str(c, "note"), (int)s, qvl_last_error(), json_str(c, "status"));
    CHECK(contains && strstr(qvl_last_error(), contains), "%s: message '%s' lacks '%s'", file,
          qvl_last_error(), contains ? contains : "?");
    image_rgb_free(&img);
    n_err++;
  }
  CHECK(n_dec >= 40 && n_res >= 10 && n_err >= 15, "cases.json: %d decode, %d resize, %d error", n_dec,
        n_res, n_err);
  cJSON_Delete(j);
}

/* Every prefix of a valid file must fail cleanly or decode (a JPEG missing only its EOI), never
 * crash; the prefixes that cut the pixel data must fail with ERR_FORMAT. */
static void test_prefixes(const char *file) {
  buf b;
  char path[512];
  snprintf(path, sizeof path, DATA "/%s", file);
  if (!test_read_file(path, &b))
    return;
  int crashes = 0, wrong = 0;
  for (size_t n = 0; n < b.len; n++) {
    image_rgb img;
    qvl_status s = image_decode(b.data, n, NULL, &img, NULL);
    if (s == QVL_OK)
      image_rgb_free(&img);
    else if (s != QVL_ERR_FORMAT && s != QVL_ERR_UNSUPPORTED)
      wrong++;
    if (n + 16 < b.len && s == QVL_OK)
      crashes++; /* not a crash, but a silently accepted truncation */
  }
  CHECK(wrong == 0, "%s: %d prefixes gave a status other than FORMAT/UNSUPPORTED", file, wrong);
  CHECK(crashes == 0, "%s: %d truncated prefixes decoded without an error", file, crashes);
  buf_free(&b);
}

static void test_random_bytes(void) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  uint8_t data[512];
  int ok = 0;
  for (int iter = 0; iter < 2000; iter++) {
    size_t n = (size_t)(iter % 512);
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      data[i] = (uint8_t)x;
    }
    /* a third of them get a valid magic so the decoders' header parsers see them */
    if (n >= 12 && iter % 3 == 1)
      memcpy(data, iter % 2 ? "\x89PNG\r\n\x1A\n" : "\xFF\xD8\xFF\xE0", iter % 2 ? 8 : 4);
    if (n >= 12 && iter % 3 == 2)
      memcpy(data, "RIFF\x10\0\0\0WEBPVP8 ", 16 <= n ? 16 : 12);
    image_rgb img;
    qvl_status s = image_decode(data, n, NULL, &img, NULL);
    if (s == QVL_OK) {
      image_rgb_free(&img);
      ok++;
    }
  }
  CHECK(ok == 0, "%d random inputs decoded as images", ok);
}

static void test_exif_parser(void) {
  static const uint8_t le6[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 1, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};
  CHECK(image_exif_orientation(le6, sizeof le6) == 6, "LE orientation 6");
  for (size_t n = 0; n < 22; n++) /* 22 = header 8 + count 2 + one entry 12 */
    CHECK(image_exif_orientation(le6, n) == 1, "truncated to %zu bytes must give 1", n);
  CHECK(image_exif_orientation(le6, 22) == 6, "the entry without the next-IFD offset is complete");
  uint8_t bad[sizeof le6];
  memcpy(bad, le6, sizeof le6);
  bad[4] = 0xF0; /* IFD offset past the end */
  CHECK(image_exif_orientation(bad, sizeof bad) == 1, "IFD offset out of range");
  memcpy(bad, le6, sizeof le6);
  bad[8] = 0xFF, bad[9] = 0xFF; /* 65535 entries claimed */
  CHECK(image_exif_orientation(bad, sizeof bad) == 6, "entry count larger than the data");
  memcpy(bad, le6, sizeof le6);
  bad[18] = 9; /* orientation 9 is invalid */
  CHECK(image_exif_orientation(bad, sizeof bad) == 1, "orientation 9 ignored");
  CHECK(image_exif_orientation(NULL, 0) == 1, "NULL");

  /* orientation on a 3x2 image with distinct pixels, against hand-derived layouts */
  static const char *const want[9] = {NULL, "abcdef", "cbafed", "fedcba", "defabc",
                                      "adbecf", "daebfc", "fcebda", "cfbead"};
  for (int o = 1; o <= 8; o++) {
    image_rgb img;
    image_rgb_alloc(&img, 3, 2);
    for (int i = 0; i < 6; i++)
      img.data[3 * i] = img.data[3 * i + 1] = img.data[3 * i + 2] = (uint8_t)('a' + i);
    CHECK(image_apply_orientation(&img, o) == QVL_OK, "orientation %d", o);
    char got[7] = {0};
    for (int i = 0; i < 6; i++)
      got[i] = (char)img.data[3 * i];
    int sides_ok = o >= 5 ? (img.width == 2 && img.height == 3) : (img.width == 3 && img.height == 2);
    CHECK(sides_ok && strcmp(got, want[o]) == 0, "orientation %d: %dx%d %s, expected %s", o,
          img.width, img.height, got, want[o]);
    image_rgb_free(&img);
  }
}

static void test_probe_and_sniff(void) {
  buf b;
  if (!test_read_file(DATA "/exif8.jpg", &b))
    return;
  image_info info;
  CHECK(image_probe(b.data, b.len, NULL, &info) == QVL_OK && info.format == IMAGE_FORMAT_JPEG &&
            info.width == 40 && info.height == 24 && info.orientation == 8,
        "probe exif8.jpg: %s %dx%d o%d", image_format_name(info.format), info.width, info.height,
        info.orientation);
  buf_free(&b);
  if (!test_read_file(DATA "/lossy_alpha.webp", &b))
    return;
  CHECK(image_probe(b.data, b.len, NULL, &info) == QVL_OK && info.format == IMAGE_FORMAT_WEBP &&
            info.has_alpha && info.width == 61 && info.height == 37,
        "probe lossy_alpha.webp");
  buf_free(&b);
  if (!test_read_file(DATA "/bomb_20000x20000.png", &b))
    return;
  CHECK(image_probe(b.data, b.len, NULL, &info) == QVL_ERR_TOO_LARGE && info.width == 20000,
        "probe bomb: %s", qvl_last_error());
  buf_free(&b);
  CHECK(image_sniff("GIF89a", 6) == IMAGE_FORMAT_GIF, "sniff GIF");
  CHECK(image_sniff("\0\0\0\x18" "ftypheic", 12) == IMAGE_FORMAT_AVIF_HEIF, "sniff HEIC");
  CHECK(image_sniff("\xFF\xD8", 2) == IMAGE_FORMAT_UNKNOWN, "2 bytes are not a JPEG");
  image_rgb img;
  CHECK(image_decode("", 0, NULL, &img, NULL) == QVL_ERR_FORMAT && strstr(qvl_last_error(), "empty"),
        "empty input: %s", qvl_last_error());
  CHECK(image_decode("\0\0\0\x18" "ftypavif....", 16, NULL, &img, NULL) == QVL_ERR_UNSUPPORTED &&
            strstr(qvl_last_error(), "AVIF"),
        "AVIF: %s", qvl_last_error());
  /* the first bytes in hex that cannot be read as decimal, all eight of them (issue 36) */
  CHECK(image_decode("# qvl\n\nhello", 13, NULL, &img, NULL) == QVL_ERR_FORMAT &&
            strstr(qvl_last_error(), "13 bytes starting with 0x23 0x20 0x71 0x76 0x6c 0x0a 0x0a 0x68;"),
        "unknown bytes: %s", qvl_last_error());
  CHECK(image_decode("ab", 2, NULL, &img, NULL) == QVL_ERR_FORMAT &&
            strstr(qvl_last_error(), "2 bytes starting with 0x61 0x62;"),
        "two unknown bytes: %s", qvl_last_error());
}

/* The pipeline on a 1xN strip, and patch order checked against an index formula written out
 * separately from image_patchify. */
static void test_patch_order(void) {
  image_rgb img;
  image_rgb_alloc(&img, 64, 96);
  for (int y = 0; y < 96; y++)
    for (int x = 0; x < 64; x++)
      for (int c = 0; c < 3; c++)
        img.data[((size_t)y * 64 + x) * 3 + c] = (uint8_t)(y * 2 + x + c * 50);
  float *pv = malloc(sizeof(float) * 24 * IMAGE_PATCH_DIM);
  CHECK(image_patchify(&img, pv) == QVL_OK, "patchify");
  int bad = 0;
  int gw = 64 / 16;
  for (int n = 0; n < 24; n++) {
    int win = n / 4, bh = win / (gw / 2), bw = win % (gw / 2), mh = (n % 4) / 2, mw = n % 2;
    for (int e = 0; e < IMAGE_PATCH_DIM; e++) {
      int c = e / 512, py = (e / 16) % 16, px = e % 16;
      int y = (2 * bh + mh) * 16 + py, x = (2 * bw + mw) * 16 + px;
      uint8_t v = img.data[((size_t)y * 64 + x) * 3 + c];
      float want = ((float)(v / 255.0) - 0.5f) / 0.5f;
      if (memcmp(&want, &pv[(size_t)n * IMAGE_PATCH_DIM + e], 4) != 0)
        bad++;
    }
  }
  CHECK(bad == 0, "patch order: %d values differ", bad);
  CHECK(image_normalize_u8(0) == -1.0f && image_normalize_u8(255) == 1.0f, "normalise ends");
  image_rgb_free(&img);
  free(pv);

  image_rgb strip;
  image_rgb_alloc(&strip, 150, 1);
  memset(strip.data, 200, 150 * 3);
  image_patches p;
  preprocess_opts o = {4096, 65536};
  CHECK(image_preprocess(&strip, &o, &p) == QVL_OK && p.resized.height == 32 && p.resized.width > 150,
        "1x150 strip: %s", qvl_last_error());
  CHECK(p.n_tokens * 4 == p.n_patches && p.grid_t == 1, "token count");
  image_patches_free(&p);
  /* zero fields take the defaults; a max below the default min lowers the min */
  preprocess_opts only_max = {0, 4096};
  CHECK(image_preprocess(&strip, &only_max, &p) == QVL_OK && p.resized.height == 32,
        "max only: %s", qvl_last_error());
  image_patches_free(&p);
  preprocess_opts inverted = {8192, 4096};
  CHECK(image_preprocess(&strip, &inverted, &p) == QVL_ERR_INVALID_ARG && p.pixel_values == NULL &&
            strstr(qvl_last_error(), "min_pixels (8192) is larger than max_pixels (4096)"),
        "min > max: %s", qvl_last_error());
  image_rgb_free(&strip);
}

/* Not a pass/fail check: the resize of a 12 Mpixel photo to the CPU default, for the record. */
static void time_big_resize(void) {
  image_rgb img;
  if (image_rgb_alloc(&img, 4032, 3024) != QVL_OK)
    return;
  for (size_t i = 0; i < (size_t)4032 * 3024 * 3; i++)
    img.data[i] = (uint8_t)(i * 2654435761u >> 24);
  double t0 = time_now_s();
  image_patches p;
  qvl_status s = image_preprocess(&img, NULL, &p);
  double t1 = time_now_s();
  CHECK(s == QVL_OK && p.n_tokens == 972, "4032x3024 with the defaults: %d tokens", p.n_tokens);
  printf("preprocess 4032x3024 -> %dx%d (%d tokens): %.1f ms\n", p.resized.width, p.resized.height,
         p.n_tokens, (t1 - t0) * 1e3);
  image_patches_free(&p);
  image_rgb_free(&img);
}

int main(void) {
  test_fixtures();
  test_smart_resize_table();
  test_smart_resize_extra();
  test_data_cases();
  test_prefixes("q75_420.jpg");
  test_prefixes("progressive.jpg");
  test_prefixes("exif6.png");
  test_prefixes("lossy_alpha.webp");
  test_prefixes("lossless.webp");
  test_random_bytes();
  test_exif_parser();
  test_probe_and_sniff();
  test_patch_order();
  time_big_resize();
  return TEST_SUMMARY("test_image");
}
