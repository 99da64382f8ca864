/*
 * The Qwen3-VL vision tower (transformers' Qwen3VLVisionModel): patch embedding, interpolated learned
 * position embedding, 2-D vision RoPE, pre-norm ViT blocks, the final 2x2 patch merger and the
 * DeepStack mergers. Weights come from an mmproj GGUF (general.architecture "clip",
 * clip.projector_type "qwen3vl_merger") or from any other "tensor source" that can hand out tensor
 * views under the mmproj GGUF names (an HF safetensors directory adapter, issue 7).
 *
 * Usage:
 *
 *   vision_model *vm;
 *   QVL_TRY(vision_load_gguf("mmproj.gguf", &vm));
 *   QVL_TRY(vision_check_text(vm, text_hidden, text_n_deepstack));  // model and mmproj belong together?
 *   int64_t n_tok = vision_n_tokens(vm, 1, gh, gw);                   // LLM tokens of this image
 *   float *emb = malloc(n_tok * vm->hp.proj_dim * sizeof(float));
 *   float *ds  = malloc(vm->n_deepstack * n_tok * vm->hp.proj_dim * sizeof(float));
 *   QVL_TRY(vision_encode(vm, pixel_values, 1, gh, gw, emb, ds, NULL, NULL));
 *   ...
 *   vision_free(vm);
 *
 * Numerics follow transformers in float32 (spec sections 4 and 8): erf-GELU in both mergers,
 * tanh-GELU in the block MLPs, float32 RoPE tables, float32 bilinear weights for the position table.
 *
 * Thread safety: a loaded vision_model is immutable and may be shared; vision_encode uses the kernel
 * worker pool, so (like every kernels.h user) only one thread may run model code at a time.
 */
#ifndef QVL_VISION_VISION_H
#define QVL_VISION_VISION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/trace.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/tensor_source.h"
#include "qvl.h"
#include "tensor/tensor.h"

typedef struct vision_hparams {
  int64_t n_embd;     /* Dv, width of the tower (clip.vision.embedding_length) */
  int64_t n_head;     /* attention heads (clip.vision.attention.head_count) */
  int64_t head_dim;   /* n_embd / n_head; a multiple of 4 (2-D RoPE uses head_dim/4 frequencies) */
  int64_t n_ff;       /* block MLP width (clip.vision.feed_forward_length) */
  int64_t n_layer;    /* number of blocks (clip.vision.block_count) */
  int64_t proj_dim;   /* output width = text hidden size (clip.vision.projection_dim) */
  int64_t patch_size; /* P, pixels per patch side (16) */
  int64_t merge;      /* m, spatial merge size (2): m x m patches become one LLM token */
  int64_t temporal;   /* T, frames per temporal patch (2; fixed by the Conv3d kernel) */
  float eps;          /* LayerNorm epsilon (clip.vision.attention.layer_norm_epsilon) */
  float rope_theta;   /* vision RoPE base (10000, hard-coded in transformers) */
  float image_mean[3];  /* normalisation used by the image preprocessor */
  float image_std[3];
} vision_hparams;

/* Where weights come from: a tensor_source (model/tensor_source.h) under the mmproj GGUF names
 * ("v.blk.3.attn_qkv.weight"); release is called by vision_free, or by vision_init when it fails.
 * Matrices are referenced, not copied (kn_weight may add a repacked copy); vectors are copied to
 * float at load.
 *
 * For an HF checkpoint (prefix model.visual.) a source serves these names (shapes in ne order):
 *   v.patch_embd.weight, .weight.1  {P, P, 3, Dv}  patch_embed.proj.weight [Dv,3,2,P,P][:, :, t]
 *                                                   (a strided slice: the source copies it out)
 *   v.patch_embd.bias               {Dv}           patch_embed.proj.bias
 *   v.position_embd.weight          {Dv, S*S}      pos_embed.weight
 *   v.blk.N.ln1/ln2 .weight/.bias                  blocks.N.norm1 / norm2
 *   v.blk.N.attn_qkv / attn_out                    blocks.N.attn.qkv / attn.proj
 *   v.blk.N.ffn_up / ffn_down                      blocks.N.mlp.linear_fc1 / linear_fc2
 *   v.post_ln, mm.0, mm.2                          merger.norm, merger.linear_fc1, merger.linear_fc2
 *   v.deepstack.L.norm/fc1/fc2                     deepstack_merger_list.j.norm/linear_fc1/linear_fc2
 *                                                   with L = deepstack_visual_indexes[j] (absolute)
 * and vision_hparams comes from config.json's vision_config (hidden_size, num_heads,
 * intermediate_size, depth, out_hidden_size, patch_size, spatial_merge_size, temporal_patch_size;
 * eps 1e-6) and preprocessor_config.json (image_mean, image_std). */

typedef struct vision_layer {
  float *ln1_w, *ln1_b;   /* [Dv] */
  kn_weight qkv;          /* [3*Dv][Dv]: rows q (head-major), then k, then v */
  float *qkv_b;           /* [3*Dv] */
  kn_weight out;          /* [Dv][Dv] */
  float *out_b;           /* [Dv] */
  float *ln2_w, *ln2_b;   /* [Dv] */
  kn_weight up;           /* [n_ff][Dv] */
  float *up_b;            /* [n_ff] */
  kn_weight down;         /* [Dv][n_ff] */
  float *down_b;          /* [Dv] */
} vision_layer;

/* A patch merger: LayerNorm, fc1 (4*Dv -> 4*Dv), erf-GELU, fc2 (4*Dv -> proj_dim). */
typedef struct vision_merger {
  int64_t layer;          /* DeepStack: absolute block index it taps (after that block); final: -1 */
  int64_t norm_dim;       /* Dv for the final merger (per patch), 4*Dv for DeepStack (after concat) */
  float *norm_w, *norm_b; /* [norm_dim] */
  kn_weight fc1;          /* [4*Dv][4*Dv] */
  float *fc1_b;           /* [4*Dv] */
  kn_weight fc2;          /* [proj_dim][4*Dv] */
  float *fc2_b;           /* [proj_dim] */
} vision_merger;

typedef struct vision_model {
  vision_hparams hp;
  float *patch_w;         /* [Dv][3*T*P*P] Conv3d kernel as a matrix, columns in (c, t, py, px) order */
  kn_weight patch;        /* view of patch_w */
  float *patch_b;         /* [Dv] */
  int64_t pos_side;       /* S: the learned position table is an S x S grid */
  float *pos;             /* [S*S][Dv], index = row*S + col */
  vision_layer *layers;   /* [n_layer] */
  vision_merger merger;   /* final merger (v.post_ln, mm.0, mm.2) */
  int n_deepstack;
  vision_merger *deepstack; /* [n_deepstack], sorted by tapped layer */
  tensor_source src;      /* keeps the weights' storage alive */
  kn_precision precision; /* tier the matrices were prepared for (the loader's, else vision_precision()) */
} vision_model;

/* Precision tiers (docs/KERNELS.md "Precision tiers"): fast (the default; F16/BF16 matrices use bf16
 * dot products where the CPU has them) or exact (fp32 as transformers; the strict f32 tolerance).
 * Quantized matrices (Q8_0, Q4_0, ...) use int8 activation blocks in both tiers. Each tower has
 * its own (the *_prec loaders; one process can hold an exact and a fast tower); the loaders
 * without _prec take the process default below, fast unless set (the deprecated qvl_set_precision). */
void vision_set_precision(kn_precision p);
kn_precision vision_precision(void);

/* Reads the clip.* hyperparameters of an mmproj GGUF. Errors: a file that is not an mmproj
 * (e.g. the text model), another projector type (QVL_ERR_UNSUPPORTED), missing or ill-typed keys. */
qvl_status vision_hparams_from_gguf(const gguf *g, vision_hparams *hp);

/* Builds a model from hyperparameters and a tensor source, checking every tensor's presence, shape
 * and type. Takes ownership of src: src->release is called on failure too. */
qvl_status vision_init(const vision_hparams *hp, const tensor_source *src, vision_model **out);
qvl_status vision_init_prec(const vision_hparams *hp, const tensor_source *src, kn_precision prec,
                            vision_model **out);

/* Opens an mmproj GGUF and loads it (the file stays mapped until vision_free). */
qvl_status vision_load_gguf(const char *path, vision_model **out);
qvl_status vision_load_gguf_prec(const char *path, kn_precision prec, vision_model **out);
/* Same, taking ownership of an already opened GGUF (closed on failure too). */
qvl_status vision_load_gguf_file(gguf *g, vision_model **out);
qvl_status vision_load_gguf_file_prec(gguf *g, kn_precision prec, vision_model **out);

void vision_free(vision_model *m);

/* Checks that this tower fits a text model: projection_dim must equal the text hidden size and the
 * number of DeepStack mergers the text model's DeepStack layer count. QVL_ERR_MISMATCH otherwise. */
qvl_status vision_check_text(const vision_model *m, int64_t text_hidden, int64_t text_n_deepstack);

/* LLM tokens produced for a grid of t x h x w patches (t*h*w / merge^2), or -1 if the grid is invalid
 * (non-positive, h or w not a multiple of merge, too large). */
int64_t vision_n_tokens(const vision_model *m, int64_t grid_t, int64_t grid_h, int64_t grid_w);

/*
 * Encodes one image (or a t-frame clip): grid in patches (t, h, w), h and w multiples of merge.
 *   pixel_values [N][3*T*P*P]           N = t*h*w patch rows in merge-window order, as produced by
 *                                       the image preprocessor; each row in (c, t, py, px) order
 *   embeds       [N/m^2][proj_dim]      output: one row per <|image_pad|> token
 *   deepstack    [n_deepstack][N/m^2][proj_dim]  output (may be NULL only when n_deepstack == 0)
 * Attention is non-causal within each frame and block-diagonal across frames. Scratch memory is
 * allocated per call: N*(5*Dv + 2*head_dim) + 512*n_ff floats (about 70 MB for the 2B tower on
 * 3000 patches; the MLP runs in blocks of 512 rows). Attention never holds N x N scores. trace (may be NULL) receives "vision_pos_embed",
 * "vision_rope_cos", "vision_rope_sin" ([N][head_dim]), "vision_hidden.k" ([N][Dv]; k = 0 after
 * patch + position embedding, k = 1..n_layer after block k-1), "deepstack.k" and "image_embeds".
 */
qvl_status vision_encode(const vision_model *m, const float *pixel_values, int64_t grid_t,
                         int64_t grid_h, int64_t grid_w, float *embeds, float *deepstack,
                         trace_fn trace, void *trace_user);

/*
 * The same encode in slices, so a server can run other work between them (a 3000-patch image takes
 * seconds in the tower; decode steps of running streams go on between slices). begin checks the
 * arguments, allocates the scratch and runs the patch + position embedding; each run call does up
 * to max_layers blocks (<= 0: all that remain) and, after the last block, the final merger; it
 * sets *done once the outputs are complete, and fails (QVL_ERR_NOMEM) when a kernel ran out of
 * memory, after which the job can only be freed. The outputs are bit-identical to vision_encode
 * (same operations in the same order). pixel_values is read by begin only; embeds and deepstack
 * must stay valid until the job is done. Free with vision_job_free (any time; NULL is a no-op).
 */
typedef struct vision_job vision_job;
qvl_status vision_job_begin(const vision_model *m, const float *pixel_values, int64_t grid_t, int64_t grid_h,
                            int64_t grid_w, float *embeds, float *deepstack, trace_fn trace, void *trace_user,
                            vision_job **out);
qvl_status vision_job_run(vision_job *j, int64_t max_layers, bool *done);
/* Where a job's time went so far (wall ms): matmuls (patch embedding, blocks, mergers), attention,
 * and the rest (norms, GELU, RoPE, residual adds, position embedding). */
typedef struct vision_stage_ms {
  double gemm, attn, rest;
} vision_stage_ms;
vision_stage_ms vision_job_stage_ms(const vision_job *j);
/* vision_encode that also reports the stage times (ms may be NULL). */
qvl_status vision_encode_stages(const vision_model *m, const float *pixel_values, int64_t grid_t,
                                int64_t grid_h, int64_t grid_w, float *embeds, float *deepstack,
                                trace_fn trace, void *trace_user, vision_stage_ms *ms);
void vision_job_free(vision_job *j);
/* Blocks of the tower (for choosing a slice size). */
static inline int64_t vision_n_layers(const vision_model *m) { return m->hp.n_layer; }

#endif
