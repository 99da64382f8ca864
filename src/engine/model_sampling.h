/*
 * The sampling a model recommends, for requests and commands that do not say: a Hugging Face
 * directory's generation_config.json, a GGUF's general.sampling.* keys (llama.cpp's names: temp,
 * top_k, top_p, min_p, penalty_repeat), else Qwen3-VL's published settings. vlm_load puts the
 * result in vlm.sampling; the server and qvl run / qvl chat start from it.
 *
 * Thread safety: pure functions.
 */
#ifndef QVL_ENGINE_MODEL_SAMPLING_H
#define QVL_ENGINE_MODEL_SAMPLING_H

#include "engine/hf_model.h"
#include "model/gguf.h"
#include "qvl.h"
#include "text/sampler.h"

/* Qwen3-VL-2B-Instruct's generation_config.json: temperature 0.7, top_p 0.8, top_k 20 (the one
 * place these numbers are written). */
sampler_params model_sampling_qwen3vl(void);

/* From a parsed generation_config.json (c->has_generation; else p is left as it is). Keys the file
 * lacks take transformers' defaults (hf_generation_parse), and do_sample false means greedy, as in
 * transformers. */
void model_sampling_from_hf(const hf_config *c, sampler_params *p);

/* Overrides p with the general.sampling.* keys g has (the others are kept). A key of the wrong
 * type or out of range is QVL_ERR_FORMAT naming it. */
qvl_status model_sampling_from_gguf(const gguf *g, sampler_params *p);

#endif
