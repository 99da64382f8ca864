/* libFuzzer target for the Hugging Face directory parsers (engine/hf_model.h). The first byte picks
 * the parser, the rest is the file: 0 config.json, 1 preprocessor_config.json (after the micro-a
 * config), 2 generation_config.json, 3 model.safetensors.index.json. A config that parses must
 * satisfy the invariants the loaders rely on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/hf_model.h"

static const char base_config[] =
    "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"text_config\": {\"vocab_size\": 512, "
    "\"hidden_size\": 64, \"num_hidden_layers\": 4, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
    "\"rope_scaling\": {\"rope_type\": \"default\", \"mrope_interleaved\": true, \"mrope_section\": [4, 2, 2]}}, "
    "\"vision_config\": {\"depth\": 4, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_heads\": 2, "
    "\"out_hidden_size\": 64, \"num_position_embeddings\": 64, \"deepstack_visual_indexes\": [0, 1, 2]}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *json = (const char *)data + 1;
  size_t len = size - 1;
  hf_config c;
  switch (data[0] % 4) {
  case 0:
    if (hf_config_parse(json, len, "fuzz", &c) == QVL_OK) {
      const decoder_hparams *t = &c.text;
      if (t->n_embd < 1 || t->n_head < 1 || t->n_head_kv < 1 || t->n_head % t->n_head_kv || t->head_dim < 2 ||
          t->head_dim % 2 || t->rope_sections[0] + t->rope_sections[1] + t->rope_sections[2] > t->head_dim / 2 ||
          !(t->rms_eps > 0) || c.n_deepstack < 0 || c.n_deepstack > HF_MAX_DEEPSTACK)
        __builtin_trap();
      for (int i = 0; i < c.n_deepstack; i++)
        if (c.deepstack_layers[i] < 0 || c.deepstack_layers[i] >= c.vision.n_layer ||
            (i && c.deepstack_layers[i] <= c.deepstack_layers[i - 1]))
          __builtin_trap();
      if (c.has_vision && (c.vision.n_embd % c.vision.n_head || c.vision.proj_dim != t->n_embd))
        __builtin_trap();
    }
    break;
  case 1:
    if (hf_config_parse(base_config, sizeof base_config - 1, "base", &c) != QVL_OK)
      __builtin_trap();
    if (hf_preprocessor_parse(json, len, "fuzz", &c) == QVL_OK &&
        (c.min_pixels < 0 || c.max_pixels < 0 || (c.min_pixels && c.max_pixels && c.min_pixels > c.max_pixels)))
      __builtin_trap();
    break;
  case 2:
    if (hf_config_parse(base_config, sizeof base_config - 1, "base", &c) != QVL_OK)
      __builtin_trap();
    if (hf_generation_parse(json, len, "fuzz", &c) == QVL_OK && (c.n_eos < 0 || c.n_eos > HF_MAX_EOS))
      __builtin_trap();
    break;
  default: {
    hf_index ix;
    if (hf_index_parse(json, len, "fuzz", &ix) == QVL_OK) {
      for (int64_t i = 0; i < ix.n_tensors; i++)
        if (ix.shard_of[i] < 0 || ix.shard_of[i] >= ix.n_shards || strchr(ix.shards[ix.shard_of[i]], '/'))
          __builtin_trap();
      hf_index_free(&ix);
    }
  }
  }
  return 0;
}
