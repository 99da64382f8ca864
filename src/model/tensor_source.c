#include "model/tensor_source.h"

static const tensor *gguf_source_find(void *user, const char *name) {
  return gguf_find_tensor((const gguf *)user, name);
}

static void gguf_source_release(void *user) { gguf_close((gguf *)user); }

tensor_source tensor_source_gguf(gguf *g) {
  return (tensor_source){.label = gguf_path(g), .user = g, .find = gguf_source_find, .release = gguf_source_release};
}
