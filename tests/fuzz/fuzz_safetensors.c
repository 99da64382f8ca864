/* libFuzzer target for the safetensors reader: parse from memory, touch every tensor's bytes and
 * name, and check that a file that parses survives a rewrite with the writer. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  safetensors *st = NULL;
  if (st_open_memory(data, size, "fuzz", &st) != QVL_OK)
    return 0;
  st_writer *w = st_writer_init();
  bool ok = w != NULL;
  for (int64_t k = 0; k < st_n_tensors(st); k++) {
    const st_tensor *t = st_tensor_at(st, k);
    fuzz_touch(t->name, strlen(t->name) + 1);
    fuzz_touch(t->data, t->nbytes);
    if (st_find(st, t->name) != t)
      __builtin_trap();
    ok = ok && st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, t->data) == QVL_OK;
  }
  const char *m = st_metadata(st, "format");
  if (m)
    fuzz_touch(m, strlen(m));
  void *mem = NULL;
  size_t n = 0;
  if (ok && st_writer_save_mem(w, &mem, &n) == QVL_OK) {
    safetensors *st2 = NULL;
    if (st_open_memory(mem, n, "rewrite", &st2) != QVL_OK || st_n_tensors(st2) != st_n_tensors(st))
      __builtin_trap();
    for (int64_t k = 0; k < st_n_tensors(st); k++) {
      const st_tensor *a = st_tensor_at(st, k), *b = st_find(st2, st_tensor_at(st, k)->name);
      if (!b || a->dtype != b->dtype || a->n_dims != b->n_dims || a->nbytes != b->nbytes ||
          memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->n_dims) != 0 ||
          memcmp(a->data, b->data, a->nbytes) != 0)
        __builtin_trap();
    }
    st_close(st2);
  }
  free(mem);
  st_writer_free(w);
  st_close(st);
  return 0;
}
