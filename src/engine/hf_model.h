/*
 * A Hugging Face Qwen3-VL model directory (the checkpoint Qwen publishes, usually BF16):
 *
 *   config.json                   Qwen3VLForConditionalGeneration: text_config + vision_config
 *   model.safetensors             or model.safetensors.index.json + the shards it names
 *   tokenizer.json                (+ tokenizer_config.json: special tokens; text/tokenizer.h)
 *   chat_template.json            or tokenizer_config.json's chat_template / chat_template.jinja:
 *                                 we render the Qwen3-VL template natively (text/chat.h), so another
 *                                 template only gets a warning
 *   preprocessor_config.json      min/max pixels (size.shortest_edge / longest_edge), patch / merge /
 *                                 temporal sizes, mean/std; values the image code cannot honour are
 *                                 refused
 *   generation_config.json        eos ids and default sampling (optional)
 *
 * The weights are served to the decoder and the vision tower as weight tables under the llama.cpp
 * GGUF names (model/wtable.h), mapped as llama.cpp's converter maps them (names and layouts in
 * text/decoder.h and vision/vision.h): tensors whose layout is the same are views into the mapped
 * safetensors files; the Conv3d patch kernel [Dv, 3, 2, P, P] is split into two {P, P, 3, Dv}
 * temporal slices (F32 copies).
 *
 *   hf_model *hf;
 *   QVL_TRY(hf_model_open("Qwen3-VL-2B-Instruct/", &hf));
 *   wtable *tt;
 *   QVL_TRY(hf_model_text_weights(hf, &tt));                // holds a reference on hf
 *   tensor_source src = wtable_source(tt);
 *   QVL_TRY(decoder_init(&hf_model_config(hf)->text, &src, &dec));
 *   hf_model_close(hf);                                     // the tables keep the files mapped
 *
 * The directory is reference-counted (single-threaded loading): hf_model_close drops the caller's
 * reference; the files are unmapped when the last table is freed too.
 */
#ifndef QVL_ENGINE_HF_MODEL_H
#define QVL_ENGINE_HF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/safetensors.h"
#include "model/wtable.h"
#include "qvl.h"
#include "text/decoder.h"
#include "vision/vision.h"

#define HF_MAX_DEEPSTACK 64
#define HF_MAX_EOS 8
#define HF_MAX_SHARDS 4096
/* The Qwen3-VL Instruct chat template (XXH3-64 of its bytes, as in chat_template.json). */
#define HF_QWEN3VL_TEMPLATE_XXH3 0x1c679e5ba3aa43b5ULL

typedef struct hf_config {
  /* config.json */
  decoder_hparams text;        /* n_vocab = text_config.vocab_size */
  vision_hparams vision;       /* image_mean/std from preprocessor_config.json */
  bool has_vision;             /* vision_config present */
  int64_t vision_n_pos;        /* vision_config.num_position_embeddings (S*S) */
  int n_deepstack;             /* len(deepstack_visual_indexes) = text.n_deepstack */
  int64_t deepstack_layers[HF_MAX_DEEPSTACK]; /* deepstack_visual_indexes, strictly ascending */
  bool tie_word_embeddings;
  int32_t image_token_id, vision_start_token_id, vision_end_token_id; /* -1 when absent */
  int32_t bos_token_id, eos_token_id; /* config.json (text_config) values, -1 when absent */
  char torch_dtype[16];        /* "bfloat16", "float32", ... ("" when absent) */
  /* preprocessor_config.json */
  int64_t min_pixels, max_pixels; /* size.shortest_edge / size.longest_edge (0 when absent) */
  /* generation_config.json (has_generation false when the file is absent) */
  bool has_generation;
  int n_eos;
  int32_t eos_ids[HF_MAX_EOS];
  int32_t gen_bos_id, gen_pad_id; /* -1 when absent */
  bool do_sample;
  float temperature, top_p, repetition_penalty; /* 1, 1, 1 when absent */
  int32_t top_k;                                /* 0 when absent */
} hf_config;

/* Parsers of the three JSON files (pure functions over the bytes; label names the file in errors).
 * hf_config_parse fills the config.json fields and resets the others to their defaults; the other
 * two add theirs and cross-check against what config.json said (patch/merge sizes). */
qvl_status hf_config_parse(const char *json, size_t len, const char *label, hf_config *out);
qvl_status hf_preprocessor_parse(const char *json, size_t len, const char *label, hf_config *cfg);
qvl_status hf_generation_parse(const char *json, size_t len, const char *label, hf_config *cfg);

/* model.safetensors.index.json: weight_map tensor -> shard file. Shard names must be plain file
 * names (no directories), each tensor listed once. */
typedef struct hf_index {
  int n_shards;
  char **shards;      /* [n_shards] distinct file names, in first-seen order */
  int64_t n_tensors;
  char **names;       /* [n_tensors] */
  int *shard_of;      /* [n_tensors] index into shards */
} hf_index;
qvl_status hf_index_parse(const char *json, size_t len, const char *label, hf_index *out);
void hf_index_free(hf_index *ix);

typedef struct hf_model hf_model;

/* Opens dir: parses the JSON files, maps the safetensors file(s) (checking a shard index against
 * the shards), checks tokenizer.json is there and the chat template is the Qwen3-VL one (warns
 * otherwise). Errors name the file and the key. */
qvl_status hf_model_open(const char *dir, hf_model **out);
/* Drops a reference (NULL is a no-op). */
void hf_model_close(hf_model *m);

const hf_config *hf_model_config(const hf_model *m);
const char *hf_model_dir(const hf_model *m);
/* Path of a file in the directory, in a buffer of m: valid until the next hf_model_path call. */
const char *hf_model_path(hf_model *m, const char *file);
/* The chat template text (NUL-terminated, owned by m), or NULL if the directory has none. */
const char *hf_model_chat_template(const hf_model *m);
/* A checkpoint tensor by its HF name ("model.visual.pos_embed.weight"), or NULL. */
const st_tensor *hf_model_find(const hf_model *m, const char *hf_name);

/* Weight tables under GGUF names, each holding a reference on m (released by wtable_free).
 * text: token_embd, blk.N.*, output_norm, output (absent when tied); vision: v.*, mm.*. Tensors of
 * the checkpoint that belong to neither are refused (a tensor we don't know would be ignored
 * silently otherwise). */
qvl_status hf_model_text_weights(hf_model *m, wtable **out);
qvl_status hf_model_vision_weights(hf_model *m, wtable **out);

/* True if path is a directory with a config.json (how the CLI tells an HF directory from a GGUF). */
bool hf_model_is_dir(const char *path);

#endif
