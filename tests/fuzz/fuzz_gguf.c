/* libFuzzer target for the GGUF reader: parse from memory, then touch every key, value, string
 * and tensor byte so ASan sees any range the parser accepted but should not have. A file that
 * parses is also re-serialized with the writer and re-parsed: its tensors must survive intact. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "model/gguf.h"
#include "model/gguf_write.h"

static size_t elem_size(gguf_type t) {
  switch (t) {
  case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
  case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
  case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
  case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
  default: return 0;
  }
}

/* Copies what the getters expose into a writer (skipping files with something they can't express),
 * writes it, parses it back and compares the tensors. */
static void rewrite_check(const gguf *g) {
  gguf_writer *w = gguf_writer_init();
  if (!w)
    return;
  bool ok = true;
  for (int64_t k = 0; k < gguf_n_kv(g) && ok; k++) {
    const char *key = gguf_key_name(g, k);
    gguf_type t = gguf_key_type(g, k);
    int64_t i;
    float f;
    bool b;
    size_t len;
    if (t == GGUF_TYPE_STRING) {
      const char *s = gguf_key_str(g, k, &len);
      ok = gguf_writer_set_strn(w, key, s, len) == QVL_OK;
    } else if (t == GGUF_TYPE_ARRAY && gguf_array_type(g, k) != GGUF_TYPE_STRING) {
      ok = gguf_writer_set_array(w, key, gguf_array_type(g, k), gguf_array_data(g, k), gguf_array_len(g, k)) ==
           QVL_OK;
    } else if (t == GGUF_TYPE_ARRAY) {
      uint64_t n = gguf_array_len(g, k);
      const char **strs = malloc((n ? n : 1) * sizeof *strs);
      size_t *lens = malloc((n ? n : 1) * sizeof *lens);
      ok = strs && lens;
      for (uint64_t j = 0; ok && j < n; j++)
        strs[j] = gguf_array_str(g, k, j, &lens[j]);
      ok = ok && gguf_writer_set_str_array(w, key, strs, lens, n) == QVL_OK;
      free(strs);
      free(lens);
    } else if (t == GGUF_TYPE_FLOAT32 && gguf_get_f32(g, key, &f) == QVL_OK) {
      ok = gguf_writer_set_f32(w, key, f) == QVL_OK;
    } else if (t == GGUF_TYPE_BOOL && gguf_get_bool(g, key, &b) == QVL_OK) {
      ok = gguf_writer_set_bool(w, key, b) == QVL_OK;
    } else if (t == GGUF_TYPE_UINT32 && gguf_get_i64(g, key, &i) == QVL_OK) {
      ok = gguf_writer_set_u32(w, key, (uint32_t)i) == QVL_OK;
    } else if (gguf_get_i64(g, key, &i) == QVL_OK) {
      ok = gguf_writer_set_i64(w, key, i) == QVL_OK;
    } else {
      ok = false; /* e.g. a uint64 above INT64_MAX: no getter exposes it */
    }
  }
  for (int64_t k = 0; k < gguf_n_tensors(g) && ok; k++) {
    const tensor *t = gguf_tensor_at(g, k);
    /* names of 64+ bytes are valid input but the writer refuses them (llama.cpp's limit) */
    ok = gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data) == QVL_OK;
  }
  void *mem = NULL;
  size_t size = 0;
  if (ok && gguf_writer_save_mem(w, &mem, &size) == QVL_OK) {
    gguf *g2 = NULL;
    if (gguf_open_memory(mem, size, "rewrite", &g2) != QVL_OK || gguf_n_tensors(g2) != gguf_n_tensors(g) ||
        gguf_n_kv(g2) != gguf_n_kv(g))
      __builtin_trap();
    for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
      const tensor *a = gguf_tensor_at(g, k), *b = gguf_tensor_at(g2, k);
      if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->nbytes != b->nbytes ||
          memcmp(a->ne, b->ne, sizeof a->ne) != 0 || memcmp(a->data, b->data, a->nbytes) != 0)
        __builtin_trap();
    }
    gguf_close(g2);
  }
  free(mem);
  gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gguf *g = NULL;
  if (gguf_open_memory(data, size, "fuzz", &g) != QVL_OK)
    return 0;
  for (int64_t k = 0; k < gguf_n_kv(g); k++) {
    const char *key = gguf_key_name(g, k);
    fuzz_touch(key, strlen(key) + 1);
    if (gguf_find_key(g, key) != k)
      __builtin_trap();
    gguf_type t = gguf_key_type(g, k);
    uint32_t u;
    int64_t i;
    float f;
    bool b;
    const char *s;
    size_t len;
    gguf_get_u32(g, key, &u);
    gguf_get_i64(g, key, &i);
    gguf_get_f32(g, key, &f);
    gguf_get_bool(g, key, &b);
    if (gguf_get_str(g, key, &s) == QVL_OK) {
      gguf_key_str(g, k, &len);
      fuzz_touch(s, len + 1);
    }
    int64_t *iv = NULL;
    float *fv = NULL;
    uint64_t n = 0;
    if (gguf_get_int_array(g, key, &iv, &n) == QVL_OK)
      fuzz_touch(iv, n * sizeof *iv);
    free(iv);
    if (gguf_get_f32_array(g, key, &fv, &n) == QVL_OK)
      fuzz_touch(fv, n * sizeof *fv);
    free(fv);
    if (t == GGUF_TYPE_ARRAY) {
      gguf_type et = gguf_array_type(g, k);
      n = gguf_array_len(g, k);
      if (et == GGUF_TYPE_STRING) {
        for (uint64_t j = 0; j < n; j++) {
          const char *p = gguf_array_str(g, k, j, &len);
          fuzz_touch(p, len);
        }
      } else {
        fuzz_touch(gguf_array_data(g, k), n * elem_size(et));
      }
    }
  }
  for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
    const tensor *t = gguf_tensor_at(g, k);
    fuzz_touch(t->data, t->nbytes);
    if (gguf_find_tensor(g, t->name) != t)
      __builtin_trap();
  }
  rewrite_check(g);
  gguf_close(g);
  return 0;
}
