/* safetensors reader and writer: every fixture expected.safetensors against its case.json
 * ("tensors": dtype, shape, max_abs; input_ids), the HF checkpoints against config.json, a
 * write/read round trip, and malformed headers. */
#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "model/safetensors.h"
#include "test.h"
#include "corpus_test.h"
#include "test_files.h"

static bool contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static float load_f32(const void *p, size_t i) {
  float f;
  memcpy(&f, (const uint8_t *)p + 4 * i, 4);
  return f;
}

static int32_t load_i32(const void *p, size_t i) {
  int32_t v;
  memcpy(&v, (const uint8_t *)p + 4 * i, 4);
  return v;
}

static bool shape_matches(const st_tensor *t, const cJSON *shape) {
  if (!t || cJSON_GetArraySize(shape) != t->n_dims)
    return false;
  int d = 0;
  for (const cJSON *c = shape->child; c; c = c->next, d++)
    if ((double)t->shape[d] != c->valuedouble)
      return false;
  return true;
}

static int check_case(const char *case_json) {
  cJSON *cj = test_read_json(case_json);
  if (!cj)
    return 0;
  char path[1024];
  snprintf(path, sizeof path, "%s", case_json);
  char *slash = strrchr(path, '/');
  snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "expected.safetensors");
  safetensors *st = NULL;
  qvl_status s = st_open(path, &st);
  CHECK(s == QVL_OK, "%s: %s", path, qvl_last_error());
  const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(cj, "tensors");
  CHECK(cJSON_IsObject(tensors), "%s has tensors", case_json);
  if (!st || !tensors) {
    st_close(st);
    cJSON_Delete(cj);
    return 0;
  }
  CHECK(st_n_tensors(st) == cJSON_GetArraySize(tensors), "%s: %lld tensors vs %d", path, (long long)st_n_tensors(st),
        cJSON_GetArraySize(tensors));
  for (const cJSON *e = tensors->child; e; e = e->next) {
    const st_tensor *t = st_find(st, e->string);
    CHECK(t != NULL, "%s: tensor %s missing", path, e->string);
    if (!t)
      continue;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    CHECK(cJSON_IsString(dt) && strcmp(st_dtype_name(t->dtype), dt->valuestring) == 0, "%s: %s dtype %s", path,
          e->string, st_dtype_name(t->dtype));
    CHECK(shape_matches(t, cJSON_GetObjectItemCaseSensitive(e, "shape")), "%s: %s shape", path, e->string);
    size_t nel = 1;
    for (int d = 0; d < t->n_dims; d++)
      nel *= (size_t)t->shape[d];
    CHECK(t->nbytes == nel * st_dtype_size(t->dtype), "%s: %s nbytes", path, e->string);
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(e, "max_abs");
    if (cJSON_IsNumber(ma) && t->dtype == ST_F32) {
      double m = 0;
      for (size_t i = 0; i < nel; i++)
        m = fmax(m, fabs((double)load_f32(t->data, i)));
      /* case.json rounds max_abs to 6 significant digits */
      CHECK(fabs(m - ma->valuedouble) <= 1e-5 * fmax(1.0, ma->valuedouble), "%s: %s max_abs %g vs %g", path,
            e->string, m, ma->valuedouble);
    }
  }
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cj, "input_ids");
  const st_tensor *ti = st_find(st, "input_ids");
  if (cJSON_IsArray(ids) && ti) {
    bool same = ti->dtype == ST_I32 && ti->n_dims == 1 && ti->shape[0] == cJSON_GetArraySize(ids);
    int i = 0;
    for (const cJSON *c = ids->child; same && c; c = c->next, i++)
      same = load_i32(ti->data, (size_t)i) == (int32_t)c->valuedouble;
    CHECK(same, "%s: input_ids differ from case.json", path);
  }
  st_close(st);
  cJSON_Delete(cj);
  return 1;
}

static void test_fixture_cases(void) {
  const char *patterns[] = {"tests/fixtures/cases/*/*/*/case.json", "tests/fixtures/preprocess/*/case.json"};
  int n = 0;
  for (int p = 0; p < 2; p++) {
    glob_t gl;
    if (glob(patterns[p], 0, NULL, &gl) != 0)
      continue;
    for (size_t i = 0; i < gl.gl_pathc; i++)
      n += check_case(gl.gl_pathv[i]);
    globfree(&gl);
  }
  CHECK(n >= 40, "checked %d fixture cases", n);
}

static int cfg_int(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? v->valueint : -1;
}

static bool shape_is(const st_tensor *t, int nd, const int64_t *want) {
  if (!t || t->n_dims != nd)
    return false;
  for (int d = 0; d < nd; d++)
    if (t->shape[d] != want[d])
      return false;
  return true;
}

static void test_hf_checkpoint(const char *family, st_dtype want_dtype) {
  char path[256];
  snprintf(path, sizeof path, "tests/fixtures/models/%s/hf/config.json", family);
  cJSON *cfg = test_read_json(path);
  if (!cfg)
    return;
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
  const cJSON *vc = cJSON_GetObjectItemCaseSensitive(cfg, "vision_config");
  int64_t vocab = cfg_int(tc, "vocab_size"), hidden = cfg_int(tc, "hidden_size");
  int64_t vh = cfg_int(vc, "hidden_size"), npos = cfg_int(vc, "num_position_embeddings");
  int64_t ps = cfg_int(vc, "patch_size"), tps = cfg_int(vc, "temporal_patch_size");
  bool tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings"));
  snprintf(path, sizeof path, "tests/fixtures/models/%s/hf/model.safetensors", family);
  safetensors *st = NULL;
  qvl_status s = st_open(path, &st);
  CHECK(s == QVL_OK, "%s: %s", path, qvl_last_error());
  if (st) {
    const st_tensor *t = st_find(st, "model.language_model.embed_tokens.weight");
    CHECK(shape_is(t, 2, (int64_t[]){vocab, hidden}) && t->dtype == want_dtype, "%s embed_tokens", family);
    t = st_find(st, "model.visual.patch_embed.proj.weight");
    CHECK(shape_is(t, 5, (int64_t[]){vh, 3, tps, ps, ps}), "%s patch_embed", family);
    CHECK(shape_is(st_find(st, "model.visual.pos_embed.weight"), 2, (int64_t[]){npos, vh}), "%s pos_embed", family);
    CHECK((st_find(st, "lm_head.weight") != NULL) == !tied, "%s lm_head iff untied", family);
    for (int64_t i = 0; i < st_n_tensors(st); i++)
      CHECK(st_tensor_at(st, i)->dtype == want_dtype, "%s: %s dtype", family, st_tensor_at(st, i)->name);
    st_close(st);
  }
  cJSON_Delete(cfg);
}

static void test_round_trip(const char *dir) {
  st_writer *w = st_writer_init();
  const double f64[] = {1.5, -2.25};
  const float f32[2][3] = {{1, 2, 3}, {4, 5, 6}};
  const uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0};
  const int64_t i64[] = {-1, INT64_MAX};
  const int32_t i32[] = {7};
  const int16_t i16[] = {-300, 300, 1};
  const int8_t i8[] = {-128};
  const uint8_t u8[2][2][2] = {{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}};
  const uint8_t bools[] = {1, 0, 1};
  qvl_status s = QVL_OK;
  s |= st_writer_add(w, "f64", ST_F64, 1, (int64_t[]){2}, f64);
  s |= st_writer_add(w, "f32", ST_F32, 2, (int64_t[]){2, 3}, f32);
  s |= st_writer_add(w, "f16", ST_F16, 2, (int64_t[]){2, 2}, h);
  s |= st_writer_add(w, "bf16", ST_BF16, 1, (int64_t[]){4}, h);
  s |= st_writer_add(w, "i64", ST_I64, 1, (int64_t[]){2}, i64);
  s |= st_writer_add(w, "scalar.i32", ST_I32, 0, NULL, i32);
  s |= st_writer_add(w, "i16", ST_I16, 1, (int64_t[]){3}, i16);
  s |= st_writer_add(w, "i8", ST_I8, 1, (int64_t[]){1}, i8);
  s |= st_writer_add(w, "u8", ST_U8, 3, (int64_t[]){2, 2, 2}, u8);
  s |= st_writer_add(w, "bool", ST_BOOL, 1, (int64_t[]){3}, bools);
  s |= st_writer_add(w, "empty", ST_F32, 2, (int64_t[]){0, 5}, NULL);
  s |= st_writer_add(w, "we\"ird\\name\n\xc3\xa9", ST_U8, 1, (int64_t[]){1}, u8);
  s |= st_writer_set_metadata(w, "format", "np");
  s |= st_writer_set_metadata(w, "format", "pt");
  s |= st_writer_set_metadata(w, "note", "quote \" and \\ and \t");
  CHECK(s == QVL_OK, "writer: %s", qvl_last_error());
  CHECK(st_writer_add(w, "f32", ST_F32, 1, (int64_t[]){1}, f32) == QVL_ERR_INVALID_ARG, "duplicate rejected");
  CHECK(st_writer_add(w, "__metadata__", ST_F32, 1, (int64_t[]){1}, f32) == QVL_ERR_INVALID_ARG, "reserved name");
  CHECK(st_writer_add(w, "neg", ST_F32, 1, (int64_t[]){-1}, f32) == QVL_ERR_INVALID_ARG, "negative dim");
  CHECK(st_writer_add(w, "nine", ST_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, f32) == QVL_ERR_INVALID_ARG,
        "9 dims");

  char path[512];
  snprintf(path, sizeof path, "%s/rt.safetensors", dir);
  CHECK(st_writer_save(w, path) == QVL_OK, "save: %s", qvl_last_error());
  void *mem = NULL;
  size_t size = 0;
  CHECK(st_writer_save_mem(w, &mem, &size) == QVL_OK, "save_mem");
  buf file = {0};
  CHECK(buf_read_file(path, 1 << 20, &file) == QVL_OK && file.len == size && memcmp(file.data, mem, size) == 0,
        "file and memory images agree");
  buf_free(&file);
  uint64_t hlen;
  memcpy(&hlen, mem, 8);
  CHECK((8 + hlen) % 8 == 0 && ((char *)mem)[8 + hlen - 1] != 0, "header padded to 8");
  /* the header must be plain JSON that an independent parser accepts */
  cJSON *j = cJSON_ParseWithLength((const char *)mem + 8, (size_t)hlen);
  CHECK(j && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "__metadata__")), "cJSON reads our header");
  cJSON_Delete(j);
  free(mem);

  safetensors *st = NULL;
  s = st_open(path, &st);
  CHECK(s == QVL_OK, "open: %s", qvl_last_error());
  if (st) {
    CHECK(st_n_tensors(st) == 12, "n %lld", (long long)st_n_tensors(st));
    CHECK(strcmp(st_tensor_at(st, 0)->name, "f64") == 0 && strcmp(st_tensor_at(st, 11)->name, "we\"ird\\name\n\xc3\xa9") == 0,
          "order and escaped name");
    const st_tensor *t = st_find(st, "f32");
    CHECK(t && t->dtype == ST_F32 && shape_is(t, 2, (int64_t[]){2, 3}) && t->nbytes == 24 &&
              memcmp(t->data, f32, 24) == 0,
          "f32");
    t = st_find(st, "f64");
    CHECK(t && t->dtype == ST_F64 && memcmp(t->data, f64, 16) == 0 && (uintptr_t)t->data % 8 == 0, "f64 aligned");
    t = st_find(st, "scalar.i32");
    CHECK(t && t->n_dims == 0 && t->nbytes == 4 && load_i32(t->data, 0) == 7, "0-dim scalar");
    t = st_find(st, "empty");
    CHECK(t && t->nbytes == 0 && shape_is(t, 2, (int64_t[]){0, 5}), "empty tensor");
    t = st_find(st, "u8");
    CHECK(t && shape_is(t, 3, (int64_t[]){2, 2, 2}) && memcmp(t->data, u8, 8) == 0, "u8");
    t = st_find(st, "bool");
    CHECK(t && t->dtype == ST_BOOL && memcmp(t->data, bools, 3) == 0, "bool");
    t = st_find(st, "i64");
    CHECK(t && memcmp(t->data, i64, 16) == 0, "i64");
    CHECK(st_find(st, "i16") && memcmp(st_find(st, "i16")->data, i16, 6) == 0, "i16");
    CHECK(st_find(st, "i8") && st_find(st, "bf16") && st_find(st, "f16"), "others");
    CHECK(st_find(st, "nope") == NULL && st_find(st, "__metadata__") == NULL, "absent");
    CHECK(st_metadata(st, "format") && strcmp(st_metadata(st, "format"), "pt") == 0, "metadata replaced");
    CHECK(st_metadata(st, "note") && strcmp(st_metadata(st, "note"), "quote \" and \\ and \t") == 0, "escaped meta");
    CHECK(st_metadata(st, "missing") == NULL, "missing meta");
    st_close(st);
  }
  unlink(path);
  st_writer_free(w);
  CHECK(st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8 && st_dtype_size(ST_BOOL) == 1, "sizes");
}

/* ---- malformed -------------------------------------------------------------------------------- */

/* An image with the given JSON header (not padded) followed by data_len zero bytes. */
static uint8_t *make(const char *json, size_t data_len, size_t *size) {
  size_t n = strlen(json);
  *size = 8 + n + data_len;
  uint8_t *m = calloc(1, *size);
  uint64_t h = n;
  memcpy(m, &h, 8);
  memcpy(m + 8, json, n);
  return m;
}

static void bad(const char *json, size_t data_len, qvl_status want, const char *sub) {
  size_t size;
  uint8_t *m = make(json, data_len, &size);
  safetensors *st = NULL;
  qvl_status s = st_open_memory(m, size, "bad.safetensors", &st);
  CHECK(s == want && st == NULL && contains(qvl_last_error(), "bad.safetensors") && contains(qvl_last_error(), sub),
        "%s: status %d, message: %s", json, (int)s, qvl_last_error());
  st_close(st);
  free(m);
}

static void test_malformed(void) {
  const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
  size_t size;
  uint8_t *m = make(ok, 11, &size);
  safetensors *st = NULL;
  CHECK(st_open_memory(m, size, "ok", &st) == QVL_OK && st_n_tensors(st) == 2, "base: %s", qvl_last_error());
  st_close(st);
  /* every truncation fails */
  int rejected = 0;
  for (size_t n = 0; n < size; n++) {
    st = NULL;
    qvl_status s = st_open_memory(m, n, "cut", &st);
    rejected += s != QVL_OK && st == NULL;
    st_close(st);
  }
  CHECK(rejected == (int)size, "%d of %zu truncations rejected", rejected, size);
  /* header length beyond the file / the cap */
  uint64_t h = (uint64_t)size;
  memcpy(m, &h, 8);
  CHECK(st_open_memory(m, size, "bad.safetensors", &st) == QVL_ERR_FORMAT && contains(qvl_last_error(), "past the end"),
        "%s", qvl_last_error());
  h = 200000000;
  memcpy(m, &h, 8);
  CHECK(st_open_memory(m, size, "bad.safetensors", &st) == QVL_ERR_TOO_LARGE && contains(qvl_last_error(), "limit"),
        "%s", qvl_last_error());
  h = UINT64_MAX;
  memcpy(m, &h, 8);
  CHECK(st_open_memory(m, size, "bad.safetensors", &st) == QVL_ERR_TOO_LARGE, "%s", qvl_last_error());
  free(m);

  /* trailing spaces after the JSON are padding; a NUL is not */
  m = make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}   \n", 1, &size);
  CHECK(st_open_memory(m, size, "pad", &st) == QVL_OK, "%s", qvl_last_error());
  st_close(st);
  m[8 + 10] = 0;
  CHECK(st_open_memory(m, size, "bad.safetensors", &st) == QVL_ERR_FORMAT && contains(qvl_last_error(), "NUL"),
        "%s", qvl_last_error());
  free(m);
  m = make("{}", 0, &size);
  CHECK(st_open_memory(m, size, "empty", &st) == QVL_OK && st_n_tensors(st) == 0, "empty header");
  st_close(st);
  free(m);

  bad("[1,2]", 0, QVL_ERR_FORMAT, "'{'");
  bad("{\"a\":", 0, QVL_ERR_FORMAT, "not valid JSON");
  bad("{\"a\":{}} x", 0, QVL_ERR_FORMAT, "trailing");
  bad("{\"a\":{}}{}", 0, QVL_ERR_FORMAT, "trailing");
  bad("{\"a\":5}", 0, QVL_ERR_FORMAT, "tensor 'a': entry is not an object");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, QVL_ERR_FORMAT, "tensor 'a': missing field 'data_offsets'");
  bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "missing field 'dtype'");
  bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "missing field 'shape'");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, QVL_ERR_FORMAT,
      "tensor 'a': unknown field 'x'");
  bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT,
      "duplicate field 'dtype'");
  bad("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, QVL_ERR_UNSUPPORTED,
      "tensor 'a' has dtype 'F8_E4M3'");
  bad("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, QVL_ERR_FORMAT, "dtype is not a string");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "tensor 'a': shape[0]");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "shape[0]");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "shape[0]");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "shape[0]");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT, "shape is not an array");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, QVL_ERR_UNSUPPORTED,
      "9 dims");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496,4503599627370496],"
      "\"data_offsets\":[0,4]}}",
      4, QVL_ERR_FORMAT, "overflows");
  bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[4503599627370496,4096],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT,
      "tensor 'a'");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, QVL_ERR_FORMAT, "data_offsets is not");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, QVL_ERR_FORMAT, "data_offsets is not");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, QVL_ERR_FORMAT, "ends before it begins");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, QVL_ERR_FORMAT,
      "hold 4 bytes, expected 8");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2, QVL_ERR_FORMAT, "past the end");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9007199254740988,9007199254740992]}}", 4,
      QVL_ERR_FORMAT, "tensor 'a'");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, QVL_ERR_FORMAT, "leave a gap");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
      6, QVL_ERR_FORMAT, "overlap");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 5, QVL_ERR_FORMAT, "cover 4 bytes");
  bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
      2, QVL_ERR_FORMAT, "duplicate tensor name 'a'");
  bad("{\"__metadata__\":{\"k\":1}}", 0, QVL_ERR_FORMAT, "'k' is not a string");
  bad("{\"__metadata__\":[]}", 0, QVL_ERR_FORMAT, "__metadata__");
  bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, QVL_ERR_FORMAT, "duplicate \"__metadata__\"");
  bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, QVL_ERR_FORMAT, "duplicate \"__metadata__\" key 'k'");
  CHECK(st_open("tests/fixtures/no/such.safetensors", &st) == QVL_ERR_NOT_FOUND, "missing file");
  CHECK(st_open("tests/fixtures/README.md", &st) != QVL_OK, "text file rejected: %s", qvl_last_error());
}

/* The fuzz seeds of the safetensors reader (tests/corpus_test.h). */
static qvl_status open_close(const char *path, bool *opened) {
  safetensors *g = NULL;
  qvl_status s = st_open(path, &g);
  *opened = g != NULL;
  st_close(g);
  return s;
}

int main(void) {
  char dir[] = "/tmp/qvl_test_st_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_fixture_cases();
  test_hf_checkpoint("micro-a", ST_F32);
  test_hf_checkpoint("micro-b", ST_F32);
  test_hf_checkpoint("e2e", ST_BF16);
  test_round_trip(dir);
  test_malformed();
  check_corpus("tests/fuzz/corpus/safetensors", open_close, 5, 30);
  rmdir(dir);
  return TEST_SUMMARY("test_safetensors");
}
