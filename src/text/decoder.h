/*
 * The Qwen3-VL text decoder (transformers' Qwen3VLTextModel + lm_head; spec section 5): token
 * embedding, pre-norm Qwen3 layers (q/k RMSNorm per head before interleaved M-RoPE, GQA causal
 * attention, SwiGLU), DeepStack injection after the first n_deepstack layers, final RMSNorm and the
 * (possibly tied) output matrix. Weights come from a llama.cpp GGUF (general.architecture "qwen3vl")
 * or from any other tensor_source that hands out tensor views under the GGUF names.
 *
 * Usage (text only; errors via qvl_last_error()):
 *
 *   decoder_model *m;
 *   QVL_TRY(decoder_load_gguf("model.gguf", &m));
 *   decoder_seq *s;
 *   decoder_seq_params sp = {.n_ctx = 4096};
 *   QVL_TRY(decoder_seq_init(m, &sp, &s));
 *   QVL_TRY(decoder_seq_check_fit(s, n_prompt, max_new_tokens));  // the context-overflow message
 *   decoder_input in = {.n_tokens = n_prompt, .tokens = ids};      // positions: 0..n-1
 *   const float *logits;                                            // [n_vocab], last position
 *   QVL_TRY(decoder_prefill(s, &in, NULL, &logits));
 *   for (...) {
 *     int32_t tok = sample(logits);                                 // sampler.h
 *     if (stop) break;
 *     QVL_TRY(decoder_step(s, tok, &logits));                       // position = next_pos
 *   }
 *   decoder_seq_free(s);
 *   decoder_free(m);
 *
 * With images: compute positions with mrope_positions() (mrope.h) over the expanded prompt ids,
 * then pass tokens + positions + the image rows:
 *   in.pos = pos;                  // [3][n]
 *   in.n_img = number of <|image_pad|> tokens; in.img_idx = their indices (ascending)
 *   in.img_embd = merger rows [n_img][n_embd] (vision_encode's embeds, images concatenated in order)
 *   in.n_deepstack = levels; in.deepstack = [n_deepstack][n_img][n_embd]
 * The positions of generated tokens then continue at max(pos) + 1 (= cache index + rope_delta).
 *
 * Numerics: float32 activations, weights as stored (kn_matmul); RMSNorm statistics, softmax and
 * RoPE tables in float32 as HF builds them (spec section 8).
 *
 * Thread safety: a decoder_model is immutable after loading and may be shared by sequences; a
 * decoder_seq belongs to one thread at a time; model code uses the kernel worker pool, so only one
 * thread may run forward passes at a time (kernels.h).
 */
#ifndef QVL_TEXT_DECODER_H
#define QVL_TEXT_DECODER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/trace.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/tensor_source.h"
#include "qvl.h"
#include "tensor/tensor.h"
#include "text/kv_cache.h"
#include "text/mrope.h"

typedef struct decoder_hparams {
  int64_t n_vocab;     /* rows of token_embd.weight */
  int64_t n_embd;      /* D, hidden size (qwen3vl.embedding_length) */
  int64_t n_layer;     /* qwen3vl.block_count */
  int64_t n_ff;        /* SwiGLU width (qwen3vl.feed_forward_length) */
  int64_t n_head;      /* query heads (qwen3vl.attention.head_count) */
  int64_t n_head_kv;   /* key/value heads (qwen3vl.attention.head_count_kv, default n_head) */
  int64_t head_dim;    /* qwen3vl.attention.key_length, default n_embd / n_head */
  int64_t n_ctx_train; /* qwen3vl.context_length */
  int64_t n_deepstack; /* qwen3vl.n_deepstack_layers (default 0): DeepStack adds after layers < this */
  float rms_eps;       /* qwen3vl.attention.layer_norm_rms_epsilon */
  float rope_theta;    /* qwen3vl.rope.freq_base (default 10000, as llama.cpp) */
  int rope_sections[4]; /* qwen3vl.rope.dimension_sections: HF mrope_section + a 4th unused entry */
} decoder_hparams;

/* Where weights come from: a tensor_source (model/tensor_source.h) under the text GGUF names;
 * release is called by decoder_free, or by decoder_init when it fails. Matrices are referenced, not
 * copied (kn_weight may add a repacked copy); norm vectors are copied to float.
 *
 * For an HF checkpoint (prefix model.language_model.) a source serves these names; a PyTorch shape
 * [out, in] is ggml ne {in, out}, no permutation (HF and GGUF both use NeoX rotate_half halves):
 *   token_embd.weight            embed_tokens.weight
 *   output.weight                lm_head.weight (top level; absent when tie_word_embeddings)
 *   output_norm.weight           norm.weight
 *   blk.N.attn_norm / ffn_norm   layers.N.input_layernorm / post_attention_layernorm
 *   blk.N.attn_q/k/v/output      layers.N.self_attn.q_proj / k_proj / v_proj / o_proj
 *   blk.N.attn_q_norm / k_norm   layers.N.self_attn.q_norm / k_norm
 *   blk.N.ffn_gate / up / down   layers.N.mlp.gate_proj / up_proj / down_proj
 * (each with .weight). decoder_hparams then comes from config.json's text_config: hidden_size,
 * num_hidden_layers, intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
 * rms_norm_eps, rope_theta (or rope_parameters.rope_theta), rope_scaling.mrope_section (3 values;
 * the 4th section is 0), max_position_embeddings, vocab_size; n_deepstack =
 * len(vision_config.deepstack_visual_indexes). */

typedef struct decoder_layer {
  float *attn_norm;   /* [n_embd] */
  kn_weight wq;       /* [n_head*head_dim][n_embd], head-major rows */
  kn_weight wk;       /* [n_head_kv*head_dim][n_embd] */
  kn_weight wv;       /* [n_head_kv*head_dim][n_embd] */
  kn_weight wo;       /* [n_embd][n_head*head_dim] */
  float *q_norm;      /* [head_dim], shared by all query heads */
  float *k_norm;      /* [head_dim] */
  float *ffn_norm;    /* [n_embd] */
  kn_weight w_gate;   /* [n_ff][n_embd] */
  kn_weight w_up;     /* [n_ff][n_embd] */
  kn_weight w_down;   /* [n_embd][n_ff] */
} decoder_layer;

typedef struct decoder_model {
  decoder_hparams hp;
  kn_weight tok_embd;     /* [n_vocab][n_embd]; rows are read with kn_weight_row */
  kn_weight output;       /* [n_vocab][n_embd]; unused (zeroed) when tied */
  bool tied;              /* no output.weight: the head is tok_embd (tie_word_embeddings) */
  const kn_weight *head;  /* &output or &tok_embd */
  float *output_norm;     /* [n_embd] */
  decoder_layer *layers;  /* [n_layer] */
  mrope rope;             /* inv_freq and slot -> axis tables */
  tensor_source src;     /* keeps the weights' storage alive */
} decoder_model;

/*
 * Reads the qwen3vl.* hyperparameters of a text GGUF and the vocabulary size from token_embd.weight.
 * Errors: an mmproj (clip) file ("this is an mmproj (vision projector) file; pass it with --mmproj"),
 * another architecture ("architecture 'llama' is not supported, expected qwen3vl"), a missing
 * required key (named), a key of the wrong type or an invalid value (expected vs found).
 */
qvl_status decoder_hparams_from_gguf(const gguf *g, decoder_hparams *hp);

/* Builds a model from hyperparameters and a tensor source, checking every tensor's presence, shape
 * ("tensor 'blk.0.attn_q.weight': expected shape {64, 64}, found {64, 32}") and type. Matrices become
 * kn_weight (kn_weight_init may repack them); norm vectors are F32 in files, F16/BF16 are accepted
 * and dequantized. A layer may hold one fused blk.N.attn_qkv.weight {n_embd, (n_head + 2 n_head_kv)
 * head_dim} (q rows, then k, then v) instead of attn_q/k/v, as llama.cpp accepts; attention biases
 * are refused. Takes ownership of src: src->release is called on failure too. */
qvl_status decoder_init(const decoder_hparams *hp, const tensor_source *src, decoder_model **out);

/* Opens a text GGUF and loads it (the file stays mapped until decoder_free). */
qvl_status decoder_load_gguf(const char *path, decoder_model **out);
/* Same, taking ownership of an already opened GGUF (closed on failure too). */
qvl_status decoder_load_gguf_file(gguf *g, decoder_model **out);

void decoder_free(decoder_model *m);

/* out[i][n_embd] = token embedding of ids[i]. QVL_ERR_INVALID_ARG for an id outside the vocabulary. */
qvl_status decoder_embed(const decoder_model *m, const int32_t *ids, int64_t n, float *out);

/* ---- sequences ---------------------------------------------------------------------------- */

typedef struct decoder_seq_params {
  int64_t n_ctx;   /* KV capacity in tokens; <= 0: min(n_ctx_train, 4096) */
  int64_t n_batch; /* tokens per forward chunk (sizes its own work buffers); <= 0: 512 */
  bool shared_work; /* no work buffers of its own: the caller runs it with decoder_forward and one
                     * decoder_work for all its sequences (decoder_prefill / decoder_step refuse it) */
  kv_type kv_type; /* KV cache element type; KV_TYPE_DEFAULT (0): the process default (f16) */
} decoder_seq_params;

/* One sequence: its KV cache, position state, logits and (unless shared_work) the work buffers of
 * its own calls (allocated here, once; the decode loop allocates nothing). */
typedef struct decoder_seq decoder_seq;

/* The work buffers of one forward (activations, projections, RoPE tables, positions), sized in
 * rows. They are per call, not per sequence: a serving loop owns one for all its sequences. */
typedef struct decoder_work decoder_work;

qvl_status decoder_work_init(const decoder_model *m, int64_t n_rows, decoder_work **out);
void decoder_work_free(decoder_work *w);
/* Bytes decoder_work_init allocates for n_rows rows (the same table allocates them; a step with
 * several logit rows grows a gathered-logits buffer of n_vocab floats a row on top); 0 on overflow. */
uint64_t decoder_work_bytes(const decoder_model *m, int64_t n_rows);

qvl_status decoder_seq_init(const decoder_model *m, const decoder_seq_params *p, decoder_seq **out);
void decoder_seq_free(decoder_seq *s);
/* Bytes decoder_seq_init allocates for these parameters (KV cache + its own work buffers, as
 * decoder_work_bytes, unless shared_work + logits), for admission control; 0 on overflow. */
uint64_t decoder_seq_bytes(const decoder_model *m, const decoder_seq_params *p);
/* Forgets every cached token (positions restart at 0). */
void decoder_seq_reset(decoder_seq *s);
int64_t decoder_seq_n_past(const decoder_seq *s); /* tokens in the cache */
int64_t decoder_seq_next_pos(const decoder_seq *s); /* position of the next generated token */

/* QVL_ERR_CONTEXT_OVERFLOW, "prompt of N tokens + M to generate exceeds the context of C", if the
 * tokens already cached + n_prompt + n_generate do not fit. */
qvl_status decoder_seq_check_fit(const decoder_seq *s, int64_t n_prompt, int64_t n_generate);

/* Trace hook for dumps (NULL: off). decoder_prefill then calls it with "inputs_embeds",
 * "text_rope_cos", "text_rope_sin" ([n][head_dim]), "text_hidden.k" (after layer k, DeepStack add
 * included), "final_norm" ([n][n_embd]) and "logits" ([n][n_vocab]), for the tokens of that call;
 * prefill then runs the call as one chunk (its scratch grows to fit, once). */
void decoder_seq_set_trace(decoder_seq *s, trace_fn fn, void *user);

/* Tokens to append to a sequence. Either tokens or embd must be given. */
typedef struct decoder_input {
  int64_t n_tokens;
  const int32_t *tokens;    /* [n_tokens] ids looked up in token_embd, or NULL */
  const float *embd;        /* [n_tokens][n_embd] input rows, or NULL (used when tokens is NULL) */
  const int32_t *pos;       /* [3][n_tokens] (t, h, w) rows; NULL: text positions next_pos, +1, ... */
  /* Image tokens: indices into this input (strictly ascending). */
  int64_t n_img;
  const int64_t *img_idx;   /* [n_img] */
  const float *img_embd;    /* [n_img][n_embd]: replace those rows' embeddings, or NULL */
  int64_t n_deepstack;      /* levels given, <= hp.n_deepstack (0: none) */
  const float *deepstack;   /* [n_deepstack][n_img][n_embd]: level k is added after layer k */
} decoder_input;

/*
 * Runs the input through the decoder (in chunks of n_batch tokens), appending it to the cache.
 * logits_all, if non-NULL, receives [n_tokens][n_vocab]; *logits_last (if non-NULL) points to the
 * last token's logits [n_vocab], valid until the next call on s. On error the sequence is left as
 * it was before the call (cache rows written past n_past are ignored).
 * Errors: QVL_ERR_CONTEXT_OVERFLOW when the cache cannot hold the tokens, QVL_ERR_INVALID_ARG for
 * ids outside the vocabulary, bad image indices or too many DeepStack levels.
 */
qvl_status decoder_prefill(decoder_seq *s, const decoder_input *in, float *logits_all,
                           const float **logits_last);

/*
 * Prefills tokens [begin, end) of in: the piece of a prompt that a scheduler runs between other
 * sequences' decode steps. Call it with consecutive ranges (begin = the previous end), starting at
 * 0 on an empty sequence, or at k after the first k tokens' KV were restored (decoder_seq_kv +
 * decoder_seq_set_past). in describes the whole prompt (tokens, positions [3][n_tokens], image rows
 * with indices into the whole prompt). Any split gives the KV and logits of one decoder_prefill
 * call, bit for bit. *logits_last = the logits of token end-1. Errors as decoder_prefill.
 */
qvl_status decoder_prefill_part(decoder_seq *s, const decoder_input *in, int64_t begin, int64_t end,
                                const float **logits_last);

/* Appends one token at position next_pos on all three axes; *logits = its logits [n_vocab].
 * Same as decoder_step_batch with one sequence. */
qvl_status decoder_step(decoder_seq *s, int32_t token, const float **logits);

/* Most sequences one decoder_step_batch call takes. */
#define DECODER_MAX_BATCH 256

/*
 * One decode step for n distinct sequences of the same model: token i is appended to seqs[i] at
 * its own next position, and logits[i] (if logits is non-NULL) points to its logits [n_vocab],
 * valid until the next call on that sequence. The projections, MLP and output head run once on
 * an [n][n_embd] activation matrix (each weight is read once per step, which is where batching
 * pays on a CPU); attention runs per sequence against its own KV. Every kernel is row-independent,
 * so each sequence's logits are bit-identical to a decoder_step on it alone, whatever else is in
 * the batch. The work buffers of seqs[0] are used (grown once if n exceeds their size).
 * Errors (nothing is changed): a sequence listed twice, another model, a full context, a bad id.
 */
qvl_status decoder_step_batch(decoder_seq **seqs, const int32_t *tokens, int n, const float **logits);

/*
 * The general form: one forward over a mix of decode tokens and prefill pieces of distinct
 * sequences, so that a serving loop reads the weights once per step for everyone. Item i either
 * appends one token (in == NULL: token at next_pos, like decoder_step) or tokens [begin, end) of a
 * prompt (like decoder_prefill_part). logits[i] (if logits is non-NULL) points to the sequence's
 * logits of its last row when computed — always for a decode item, for a prefill item only when
 * it asks (logits = true) — else NULL. Rows never interact except through their own sequence's KV,
 * so every result is bit-identical to the single-sequence calls. Errors change nothing.
 */
typedef struct decoder_batch_item {
  decoder_seq *seq;
  const decoder_input *in; /* NULL: one decode token */
  int64_t begin, end;      /* with in: the prompt range to run */
  int32_t token;           /* without in: the token to append */
  bool logits;             /* with in: compute the logits of row end-1 */
} decoder_batch_item;
/* With the first sequence's own work buffers (grown once if the step is larger than ever before). */
qvl_status decoder_forward_batch(const decoder_batch_item *items, int n, const float **logits);
/* With the caller's work buffers w (of the same model; grown the same way): the form for sequences
 * made with shared_work. decoder_prefill, decoder_prefill_part, decoder_step and decoder_step_batch
 * are this same forward with one prefill item per chunk or decode items. */
qvl_status decoder_forward(decoder_work *w, const decoder_batch_item *items, int n, const float **logits);

/* ---- KV access for a prefix cache ------------------------------------------------------------ */

/* The sequence's cache storage: rows [0, n_past) of every layer are valid. A prefix cache copies
 * rows out after a request and back in before the next one (then calls decoder_seq_set_past). */
kv_cache *decoder_seq_kv(decoder_seq *s);
/* Declares the first n_past rows of every layer valid, with next_pos the position the next
 * default-position token is given (max stored position + 1). QVL_ERR_INVALID_ARG beyond the capacity. */
qvl_status decoder_seq_set_past(decoder_seq *s, int64_t n_past, int64_t next_pos);

#endif
