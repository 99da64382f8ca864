/*
 * Regenerates the hand-made seed corpora of fuzz_gguf and fuzz_safetensors: small valid files made
 * with our writers, plus malformed variants (truncations, bad magic and versions, huge counts and
 * lengths, bad dims and types, misaligned or out-of-range offsets, duplicates, bad JSON ...).
 * Files found by libFuzzer are kept next to these under their hash names.
 *
 *   make BUILD=build/rel
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc tests/fuzz/make_corpus.c build/rel/libqvl.a \
 *      $(pkg-config --libs libcjson) -lm -pthread -o build/make_corpus
 *   build/make_corpus tests/fuzz/corpus
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../gguf_bytes.h"
#include "model/gguf_write.h"
#include "model/safetensors.h"

static const char *out_dir;

static void save(const char *sub, const char *name, const void *p, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", out_dir, sub);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", out_dir, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static void must(qvl_status s) {
  if (s != QVL_OK) {
    fprintf(stderr, "make_corpus: %s\n", qvl_last_error());
    exit(1);
  }
}

static void fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (uint8_t)(seed >> 24);
  }
}

/* ---- GGUF ------------------------------------------------------------------------------------- */

static uint8_t blob[4096];

static gguf_writer *model_like(void) {
  gguf_writer *w = gguf_writer_init();
  must(gguf_writer_set_str(w, "general.architecture", "qwen3vl"));
  must(gguf_writer_set_u32(w, "qwen3vl.block_count", 1));
  must(gguf_writer_set_u32(w, "qwen3vl.embedding_length", 32));
  must(gguf_writer_set_f32(w, "qwen3vl.rope.freq_base", 5e6f));
  must(gguf_writer_set_array(w, "qwen3vl.rope.dimension_sections", GGUF_TYPE_INT32, (const int32_t[]){4, 2, 2, 0}, 4));
  const char *toks[] = {"!", "\"", "a", "b", "ab", "<|im_end|>", "\xc4\xa0t", ""};
  must(gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, NULL, 8));
  must(gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32,
                             (const int32_t[]){1, 1, 1, 1, 1, 3, 1, 5}, 8));
  const char *merges[] = {"a b", "\xc4\xa0 t"};
  must(gguf_writer_set_str_array(w, "tokenizer.ggml.merges", merges, NULL, 2));
  must(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false));
  must(gguf_writer_add_tensor(w, "token_embd.weight", QVL_DTYPE_Q8_0, 2, (int64_t[]){32, 8}, blob));
  must(gguf_writer_add_tensor(w, "output_norm.weight", QVL_DTYPE_F32, 1, (int64_t[]){32}, blob));
  must(gguf_writer_add_tensor(w, "blk.0.attn_q.weight", QVL_DTYPE_F16, 2, (int64_t[]){32, 4}, blob));
  must(gguf_writer_add_tensor(w, "blk.0.attn_k.weight", QVL_DTYPE_BF16, 2, (int64_t[]){32, 2}, blob));
  must(gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", QVL_DTYPE_Q4_0, 2, (int64_t[]){64, 2}, blob));
  must(gguf_writer_add_tensor(w, "blk.0.ffn_gate.weight", QVL_DTYPE_Q4_K, 2, (int64_t[]){256, 2}, blob));
  must(gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", QVL_DTYPE_Q6_K, 1, (int64_t[]){256}, blob));
  must(gguf_writer_add_tensor(w, "v.patch_embd.weight", QVL_DTYPE_F32, 4, (int64_t[]){2, 2, 3, 2}, blob));
  return w;
}

static uint8_t *to_mem(gguf_writer *w, size_t *n) {
  void *mem = NULL;
  must(gguf_writer_save_mem(w, &mem, n));
  return mem;
}

/* gguf_after_str, or the end of the program: every string asked for is in the base file. */
static size_t after_str(const uint8_t *m, size_t size, const char *s) {
  size_t at = gguf_after_str(m, size, s);
  if (!at) {
    fprintf(stderr, "make_corpus: '%s' not found\n", s);
    exit(1);
  }
  return at;
}

static uint8_t *base;
static size_t base_n;
static uint8_t *work;

static uint8_t *fresh(void) {
  memcpy(work, base, base_n);
  return work;
}

static void bad_gguf(const char *name) { save("gguf", name, work, base_n); }

static void make_gguf(void) {
  fill(blob, sizeof blob, 7);
  gguf_writer *w = model_like();
  base = to_mem(w, &base_n);
  save("gguf", "valid_model.gguf", base, base_n);

  /* every value type, empty arrays, strings with NULs */
  gguf_writer *t = gguf_writer_init();
  must(gguf_writer_set_u8(t, "t.u8", 255));
  must(gguf_writer_set_i8(t, "t.i8", -1));
  must(gguf_writer_set_u16(t, "t.u16", 65535));
  must(gguf_writer_set_i16(t, "t.i16", -2));
  must(gguf_writer_set_u32(t, "t.u32", 4000000000u));
  must(gguf_writer_set_i32(t, "t.i32", -3));
  must(gguf_writer_set_u64(t, "t.u64", UINT64_MAX));
  must(gguf_writer_set_i64(t, "t.i64", INT64_MIN));
  must(gguf_writer_set_f32(t, "t.f32", -0.0f));
  must(gguf_writer_set_f64(t, "t.f64", 1e300));
  must(gguf_writer_set_bool(t, "t.bool", true));
  must(gguf_writer_set_strn(t, "t.str", "a\0b", 3));
  must(gguf_writer_set_str(t, "t.empty", ""));
  const gguf_type types[] = {GGUF_TYPE_UINT8,  GGUF_TYPE_INT8,   GGUF_TYPE_UINT16, GGUF_TYPE_INT16,
                             GGUF_TYPE_UINT32, GGUF_TYPE_INT32,  GGUF_TYPE_FLOAT32, GGUF_TYPE_UINT64,
                             GGUF_TYPE_INT64,  GGUF_TYPE_FLOAT64};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    char key[64];
    snprintf(key, sizeof key, "a.%s", gguf_type_name(types[i]));
    must(gguf_writer_set_array(t, key, types[i], blob, 3));
    snprintf(key, sizeof key, "a.empty.%s", gguf_type_name(types[i]));
    must(gguf_writer_set_array(t, key, types[i], NULL, 0));
  }
  must(gguf_writer_set_array(t, "a.bool", GGUF_TYPE_BOOL, (const uint8_t[]){0, 1, 1}, 3));
  must(gguf_writer_set_str_array(t, "a.str.empty", NULL, NULL, 0));
  must(gguf_writer_set_str_array(t, "a.str", (const char *[]){"x", "y\0z"}, (const size_t[]){1, 3}, 2));
  must(gguf_writer_add_tensor(t, "x", QVL_DTYPE_F32, 1, (int64_t[]){1}, blob));
  size_t n;
  uint8_t *m = to_mem(t, &n);
  save("gguf", "valid_all_types.gguf", m, n);
  free(m);
  gguf_writer_free(t);

  /* alignments 1 and 256, no tensors, no keys, version 2 */
  must(gguf_writer_set_u32(w, "general.alignment", 1));
  m = to_mem(w, &n);
  save("gguf", "valid_align1.gguf", m, n);
  free(m);
  must(gguf_writer_set_u32(w, "general.alignment", 256));
  m = to_mem(w, &n);
  save("gguf", "valid_align256.gguf", m, n);
  free(m);
  gguf_writer_free(w);
  w = gguf_writer_init();
  must(gguf_writer_set_str(w, "general.architecture", "clip"));
  m = to_mem(w, &n);
  save("gguf", "valid_no_tensors.gguf", m, n);
  free(m);
  gguf_writer_free(w);
  const uint8_t empty[24] = {'G', 'G', 'U', 'F', 3};
  save("gguf", "valid_empty.gguf", empty, sizeof empty);
  work = malloc(base_n);
  put_u32(fresh(), 4, 2);
  save("gguf", "valid_v2.gguf", work, base_n);

  /* truncations */
  const size_t cuts[] = {0, 3, 4, 7, 8, 15, 16, 23, 24, 30, 60, 120, 200, 300, 400, 500, 600, 700, 800, 1000, 1100, 1500, 2000, 2500};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "bad_trunc_%zu.gguf", cuts[i]);
    if (cuts[i] < base_n)
      save("gguf", name, base, cuts[i]);
  }
  save("gguf", "bad_trunc_last_byte.gguf", base, base_n - 1);

  size_t arch = after_str(base, base_n, "general.architecture");
  size_t bc = after_str(base, base_n, "qwen3vl.block_count");
  size_t ds = after_str(base, base_n, "qwen3vl.rope.dimension_sections") + 4;
  size_t tk = after_str(base, base_n, "tokenizer.ggml.tokens") + 4;
  size_t ab = after_str(base, base_n, "tokenizer.ggml.add_bos_token") + 4;
  size_t te = after_str(base, base_n, "token_embd.weight"); /* n_dims, ne0, ne1, type, offset */
  size_t on = after_str(base, base_n, "output_norm.weight"); /* n_dims, ne0, type, offset */

  memcpy(fresh(), "GGUX", 4), bad_gguf("bad_magic.gguf");
  memcpy(fresh(), "FUGG", 4), bad_gguf("bad_magic_reversed.gguf");
  put_u32(fresh(), 4, 1), bad_gguf("bad_version1.gguf");
  put_u32(fresh(), 4, 4), bad_gguf("bad_version4.gguf");
  put_u32(fresh(), 4, 0x03000000), bad_gguf("bad_version_bigendian.gguf");
  put_u64(fresh(), 8, 1ull << 62), bad_gguf("bad_huge_n_tensors.gguf");
  put_u64(fresh(), 16, 1ull << 62), bad_gguf("bad_huge_n_kv.gguf");
  put_u64(fresh(), 16, 100), bad_gguf("bad_n_kv_too_many.gguf");
  put_u64(fresh(), 8, 9), bad_gguf("bad_n_tensors_too_many.gguf");
  put_u64(fresh(), 16, 3), bad_gguf("bad_n_kv_too_few.gguf");
  put_u64(fresh(), 24, 1ull << 62), bad_gguf("bad_huge_key_len.gguf");
  put_u64(fresh(), 24, 0), bad_gguf("bad_empty_key.gguf");
  fresh()[arch - 3] = 0, bad_gguf("bad_key_nul.gguf");
  put_u64(fresh(), arch + 4, 1ull << 62), bad_gguf("bad_huge_string_value.gguf");
  put_u64(fresh(), arch + 4, base_n), bad_gguf("bad_string_value_past_end.gguf");
  put_u32(fresh(), bc, 13), bad_gguf("bad_value_type.gguf");
  put_u32(fresh(), bc, GGUF_TYPE_UINT64), bad_gguf("bad_value_type_shift.gguf");
  put_u32(fresh(), ds, GGUF_TYPE_ARRAY), bad_gguf("bad_nested_array.gguf");
  put_u32(fresh(), ds, 99), bad_gguf("bad_array_elem_type.gguf");
  put_u64(fresh(), ds + 4, 1ull << 61), bad_gguf("bad_huge_int_array.gguf");
  put_u64(fresh(), ds + 4, 100000), bad_gguf("bad_int_array_past_end.gguf");
  put_u64(fresh(), tk + 4, 1ull << 60), bad_gguf("bad_huge_string_array.gguf");
  put_u64(fresh(), tk + 12, 1ull << 60), bad_gguf("bad_huge_string_in_array.gguf");
  put_u64(fresh(), tk + 12, 5000), bad_gguf("bad_string_in_array_past_end.gguf");
  fresh()[ab] = 2, bad_gguf("bad_bool_value.gguf");
  put_u32(fresh(), te, 0), bad_gguf("bad_n_dims_0.gguf");
  put_u32(fresh(), te, 5), bad_gguf("bad_n_dims_5.gguf");
  put_u32(fresh(), te, 0xffffffffu), bad_gguf("bad_n_dims_huge.gguf");
  put_u64(fresh(), te + 4, 0), bad_gguf("bad_dim_zero.gguf");
  put_u64(fresh(), te + 12, UINT64_MAX), bad_gguf("bad_dim_negative.gguf");
  put_u64(fresh(), te + 4, 1ull << 40), put_u64(work, te + 12, 1ull << 40), bad_gguf("bad_dims_overflow.gguf");
  put_u64(fresh(), te + 4, 1ull << 31), put_u64(work, te + 12, 1ull << 31), bad_gguf("bad_dims_past_end.gguf");
  put_u64(fresh(), te + 4, 33), bad_gguf("bad_dim_not_block_multiple.gguf");
  put_u32(fresh(), te + 20, 7), bad_gguf("bad_type_q5_1.gguf");
  put_u32(fresh(), te + 20, 15), bad_gguf("bad_type_q8_k.gguf");
  put_u32(fresh(), te + 20, 4), bad_gguf("bad_type_removed_id.gguf");
  put_u32(fresh(), te + 20, 1000), bad_gguf("bad_type_unknown.gguf");
  put_u64(fresh(), te + 24, 1), bad_gguf("bad_offset_misaligned.gguf");
  put_u64(fresh(), te + 24, 1ull << 40), bad_gguf("bad_offset_past_end.gguf");
  put_u64(fresh(), te + 24, UINT64_MAX - 31), bad_gguf("bad_offset_wraps.gguf");
  put_u64(fresh(), on + 16, base_n / 32 * 32), bad_gguf("bad_offset_at_end.gguf");
  memcpy(fresh() + on - 18, "token_embd.weight", 17), put_u64(work, on - 26, 17),
      bad_gguf("bad_duplicate_tensor_shorter.gguf");
  fresh()[te - 1] = 0, bad_gguf("bad_tensor_name_nul.gguf");
  {
    /* a duplicate with an equal-length name, so the rest of the file stays well-formed */
    gguf_writer *d = gguf_writer_init();
    must(gguf_writer_add_tensor(d, "aa", QVL_DTYPE_F32, 1, (int64_t[]){8}, blob));
    must(gguf_writer_add_tensor(d, "ab", QVL_DTYPE_F32, 1, (int64_t[]){8}, blob));
    m = to_mem(d, &n);
    m[after_str(m, n, "ab") - 1] = 'a';
    save("gguf", "bad_duplicate_tensor.gguf", m, n);
    free(m);
    gguf_writer_free(d);
  }
  {
    gguf_writer *d = gguf_writer_init();
    must(gguf_writer_set_u32(d, "k.aa", 1));
    must(gguf_writer_set_str(d, "k.ab", "x"));
    m = to_mem(d, &n);
    m[after_str(m, n, "k.ab") - 1] = 'a';
    save("gguf", "bad_duplicate_key.gguf", m, n);
    free(m);
    gguf_writer_free(d);
  }
  /* general.alignment: bad values and type */
  const uint32_t aligns[] = {0, 3, 48, 0x80000001u};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    gguf_writer *a = gguf_writer_init();
    must(gguf_writer_set_u32(a, "general.alignment", 64));
    must(gguf_writer_add_tensor(a, "x", QVL_DTYPE_F32, 1, (int64_t[]){4}, blob));
    m = to_mem(a, &n);
    put_u32(m, after_str(m, n, "general.alignment") + 4, aligns[i]);
    char name[64];
    snprintf(name, sizeof name, "bad_alignment_%u.gguf", aligns[i]);
    save("gguf", name, m, n);
    free(m);
    gguf_writer_free(a);
  }
  {
    gguf_writer *a = gguf_writer_init();
    must(gguf_writer_set_u64(a, "general.alignmenX", 32));
    m = to_mem(a, &n);
    m[after_str(m, n, "general.alignmenX") - 1] = 't';
    save("gguf", "bad_alignment_u64.gguf", m, n);
    free(m);
    gguf_writer_free(a);
  }
  free(work);
  free(base);
}

/* ---- safetensors ------------------------------------------------------------------------------ */

static void st_raw(const char *name, const char *json, size_t data_len) {
  size_t n = strlen(json);
  uint8_t *m = calloc(1, 8 + n + data_len);
  uint64_t h = n;
  memcpy(m, &h, 8);
  memcpy(m + 8, json, n);
  fill(m + 8 + n, data_len, 3);
  save("safetensors", name, m, 8 + n + data_len);
  free(m);
}

static void make_safetensors(void) {
  st_writer *w = st_writer_init();
  must(st_writer_set_metadata(w, "format", "pt"));
  must(st_writer_add(w, "model.embed_tokens.weight", ST_F32, 2, (int64_t[]){8, 4}, blob));
  must(st_writer_add(w, "model.norm.weight", ST_BF16, 1, (int64_t[]){4}, blob));
  must(st_writer_add(w, "f16", ST_F16, 3, (int64_t[]){2, 1, 3}, blob));
  must(st_writer_add(w, "f64", ST_F64, 1, (int64_t[]){2}, blob));
  must(st_writer_add(w, "i64", ST_I64, 1, (int64_t[]){1}, blob));
  must(st_writer_add(w, "i32", ST_I32, 2, (int64_t[]){1, 3}, blob));
  must(st_writer_add(w, "i16", ST_I16, 1, (int64_t[]){2}, blob));
  must(st_writer_add(w, "i8", ST_I8, 1, (int64_t[]){5}, blob));
  must(st_writer_add(w, "u8", ST_U8, 3, (int64_t[]){2, 2, 3}, blob));
  must(st_writer_add(w, "bool", ST_BOOL, 1, (int64_t[]){2}, (const uint8_t[]){0, 1}));
  must(st_writer_add(w, "scalar", ST_F32, 0, NULL, blob));
  must(st_writer_add(w, "zero", ST_F32, 2, (int64_t[]){0, 3}, NULL));
  must(st_writer_add(w, "8d", ST_U8, 8, (int64_t[]){1, 2, 1, 2, 1, 1, 1, 2}, blob));
  must(st_writer_add(w, "esc\"aped\\\x01name", ST_U8, 1, (int64_t[]){1}, blob));
  void *m;
  size_t n;
  must(st_writer_save_mem(w, &m, &n));
  save("safetensors", "valid_all_dtypes.safetensors", m, n);
  for (size_t cut = 0; cut < n; cut += n / 12 + 1) {
    char name[64];
    snprintf(name, sizeof name, "bad_trunc_%zu.safetensors", cut);
    save("safetensors", name, m, cut);
  }
  save("safetensors", "bad_trunc_last_byte.safetensors", m, n - 1);
  free(m);
  st_writer_free(w);
  st_raw("valid_empty.safetensors", "{}", 0);
  st_raw("valid_unpadded.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", 12);
  st_raw("valid_trailing_ws.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} \t\r\n", 1);
  st_raw("valid_unordered.safetensors",
         "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"__metadata__\":{\"k\":\"v\"}}",
         3);

  struct {
    const char *name, *json;
    size_t data;
  } bad[] = {
      {"bad_not_object", "[1,2,3]", 0},
      {"bad_json", "{\"a\":{\"dtype\":", 0},
      {"bad_json_trailing", "{} garbage", 0},
      {"bad_json_two_objects", "{}{}", 0},
      {"bad_deep_nesting", "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0},
      {"bad_entry_not_object", "{\"a\":\"x\"}", 0},
      {"bad_missing_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4},
      {"bad_unknown_field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"z\":0}}", 4},
      {"bad_duplicate_field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
      {"bad_dtype", "{\"a\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
      {"bad_dtype_type", "{\"a\":{\"dtype\":[],\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
      {"bad_shape_negative", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4},
      {"bad_shape_fraction", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0.5],\"data_offsets\":[0,4]}}", 4},
      {"bad_shape_huge", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", 4},
      {"bad_shape_9_dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1},
      {"bad_shape_overflow",
       "{\"a\":{\"dtype\":\"F64\",\"shape\":[9007199254740991,9007199254740991],\"data_offsets\":[0,8]}}", 8},
      {"bad_offsets_short", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4},
      {"bad_offsets_reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4},
      {"bad_offsets_size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4},
      {"bad_offsets_past_end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 3},
      {"bad_offsets_huge", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9007199254740991,9007199254740992]}}", 1},
      {"bad_gap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2},
      {"bad_overlap",
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],"
       "\"data_offsets\":[1,3]}}",
       3},
      {"bad_trailing_data", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 9},
      {"bad_duplicate_name",
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
       "\"data_offsets\":[1,2]}}",
       2},
      {"bad_metadata_value", "{\"__metadata__\":{\"k\":{}}}", 0},
      {"bad_metadata_array", "{\"__metadata__\":[\"k\"]}", 0},
      {"bad_metadata_duplicate", "{\"__metadata__\":{},\"__metadata__\":{}}", 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s.safetensors", bad[i].name);
    st_raw(name, bad[i].json, bad[i].data);
  }
  /* header length fields that lie */
  const uint64_t lens[] = {0, 1, 1000, 200000000, UINT64_MAX};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint8_t m2[16] = {0};
    memcpy(m2, &lens[i], 8);
    memcpy(m2 + 8, "{}      ", 8);
    char name[64];
    snprintf(name, sizeof name, "bad_header_len_%zu.safetensors", i);
    save("safetensors", name, m2, sizeof m2);
  }
  /* nesting deeper than cJSON's limit (1000) */
  {
    char deep[2200 + 16];
    size_t k = 0;
    deep[k++] = '{', memcpy(deep + k, "\"a\":", 4), k += 4;
    for (int i = 0; i < 1100; i++)
      deep[k++] = '[';
    for (int i = 0; i < 1100; i++)
      deep[k++] = ']';
    deep[k++] = '}', deep[k] = 0;
    st_raw("bad_nesting_limit.safetensors", deep, 0);
  }
  /* a nul byte in the header (st_raw stops at the first NUL of the literal) */
  uint8_t m3[8 + 6] = {6, 0, 0, 0, 0, 0, 0, 0, '{', '"', 0, '"', ':', '}'};
  save("safetensors", "bad_header_nul.safetensors", m3, sizeof m3);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <corpus dir, e.g. tests/fuzz/corpus>\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  mkdir(out_dir, 0755);
  make_gguf();
  make_safetensors();
  return 0;
}
