/*
 * Compute kernels used by the model code. Callers see plain functions; inside, each entry is
 * dispatched through one table of function pointers chosen once at start from the CPU's features
 * (CPUID + XGETBV) or forced with QVL_ISA=ref|avx2|avx2vnni|avx512|avx512bf16|amx|amxsim|amxsim512. The
 * scalar reference (src/kernels/ref/) implements every entry and is the oracle the SIMD variants
 * are tested against.
 *
 * Shapes use row-major C order: x[n_tokens][n_in] means n_tokens rows of n_in floats.
 * Thread safety: kernels_init() once before use (not while other threads compute); afterwards
 * every function may be called from any number of threads at once. Each calling thread has its
 * own scratch and activation buffers; the worker pool runs one caller's loop at a time, and a
 * caller that finds it busy runs its loop on its own thread (same results: they never depend on
 * the split).
 */
#ifndef QVL_KERNELS_KERNELS_H
#define QVL_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl.h"
#include "tensor/tensor.h"

/* Chooses the tier (NULL or "" = best available, then QVL_ISA; else "ref", "avx2", "avx2vnni"
 * (+ AVX-VNNI), "avx512"
 * (F/BW/VL/DQ + VNNI), "avx512bf16", "amx", or the test tiers "amxsim" (the AMX kernels through the
 * portable tile model) and "amxsim512" (the same with the amx build's AVX-512 vector code)) and the number of worker threads (<= 0: QVL_THREADS or the number of physical
 * cores). Safe to call again. Chosen automatically, the tier's per-operation kernels may be
 * adjusted by a start-up probe (docs/KERNELS.md "Dispatch"); a forced tier is taken as it is. */
qvl_status kernels_init(const char *isa, int n_threads);
const char *kernels_isa(void);
/* The per-operation table: which kernel runs each operation and why. Fills up to max rows
 * (static strings, valid until the next kernels_init) and returns the count. */
typedef struct kn_dispatch_row {
  const char *op, *kernel, *why;
} kn_dispatch_row;
int kernels_dispatch(kn_dispatch_row *rows, int max);
/* True when the fast tier rounds F16/BF16 matmul (and head_dim-64 attention) operands to bf16
 * on this tier; false when fast runs the exact kernels. */
bool kernels_fast_bf16(void);
/* True when the fast tier runs F16/BF16 matmuls (rows a multiple of 32 long) on int8 blocks: the
 * weights quantized to Q8_0 at load and the Q8_0 kernel (CPUs without a fast bf16 dot product,
 * docs/KERNELS.md "Precision tiers"). */
bool kernels_fast_int8(void);
int kernels_threads(void);

/* Tuning by measurement (docs/KERNELS.md "Tuning"): where a tier offers several kernels for an
 * operation on the same packed weights (e.g. AMX tiles or the VNNI kernel below them for Q8_0),
 * each is timed on the weight's real shape at kn_weight_init, per token class, and the fastest
 * taken; a kernel replaces the tier below's only if measured faster. Results are kept per shape
 * in memory and, once a folder is set, in a small file there keyed by the CPU's signature, the
 * thread count and KN_TUNE_VERSION, reused on later starts. */
#define KN_TUNE_VERSION "qvl-kernels-2026-12-08"
typedef enum kn_tune_mode {
  KN_TUNE_AUTO,   /* tune when the tier was chosen automatically (a forced tier is taken as it is) */
  KN_TUNE_ALWAYS, /* also on a forced tier (tests, `qvl tune --isa`) */
  KN_TUNE_OFF     /* never measure: the tier below's kernel wherever a tier offers a choice */
} kn_tune_mode;
void kernels_set_tune_mode(kn_tune_mode m);
/* The folder of the tuning file (created when written); NULL: keep results in memory only.
 * Loads the file for this CPU, build and thread count if there is one; a damaged or foreign file
 * is ignored with a warning (and replaced on the next write). */
qvl_status kernels_set_tune_dir(const char *dir);
/* Forgets every tuned result (in memory, and the file if a folder is set): the next weights
 * are measured again. */
qvl_status kernels_tune_reset(void);
/* The file's path ("" when no folder is set). */
const char *kernels_tune_file(void);
/* One tuned shape: weight type and size, token class, the candidates' names and measured rates
 * (GOP/s; 0 when the result came from the file without rates) and the index chosen. */
#define KN_TUNE_MAX_CAND 6
typedef struct kn_tune_row {
  const char *type;
  int64_t n_in, n_out;
  int cls, n_cand, chosen;
  bool measured; /* this process measured it (false: from the file) */
  const char *cand[KN_TUNE_MAX_CAND];
  double gops[KN_TUNE_MAX_CAND];
} kn_tune_row;
int kernels_tune_rows(kn_tune_row *rows, int max);
/* The representative token count of a class for measurements, and a class's name. */
int64_t kn_class_tokens(int cls);
const char *kn_class_name(int cls);
/* Out of memory inside a kernel (kn_matmul and kn_attention grow their scratch on first use):
 * the call returns QVL_ERR_NOMEM with its output unwritten, and the failure is also remembered
 * for the calling thread, so that a forward pass can check once at its end instead of after
 * each of its calls. Returns that status (QVL_OK if none) and clears it. */
qvl_status kernels_take_error(void);

/* A weight matrix prepared for matmul: W[n_out][n_in] (ggml ne0 = n_in, ne1 = n_out).
 * kn_weight_init may repack the data into the layout the active ISA wants (owned memory). */
/* Token-count classes of a matmul, each with its own measured kernel choice (docs/KERNELS.md
 * "Tuning"): 1-3 tokens (decode), 4-15 (short prompts, batched decode), 16 and more (prefill, vision). */
enum { KN_CLASS_GEMV, KN_CLASS_SHORT, KN_CLASS_GEMM, KN_N_CLASSES };
struct kn_mm_kernel;

typedef struct kn_weight {
  qvl_dtype type;   /* storage type of the rows as loaded */
  int64_t n_in;
  int64_t n_out;
  const void *data; /* rows in ggml block format, n_out rows of row_bytes each */
  size_t row_bytes;
  void *packed;     /* ISA-specific repacked copy, or NULL */
  int layout;       /* 0 = plain rows; other values are private to the kernels */
  /* Per token class: the kernel the tuning chose among candidates giving the same bits, or NULL
   * (the tier's own selection). */
  const struct kn_mm_kernel *pick[KN_N_CLASSES];
} kn_weight;

qvl_status kn_weight_init(kn_weight *w, const tensor *t);

/* Precision tiers (docs/KERNELS.md "Precision tiers"). EXACT: float weights are converted exactly and
 * multiplied in fp32 (the strict f32 tolerance). FAST: where the ISA has bf16 dot products, F16/BF16
 * weights are repacked to bf16 pairs and activations rounded to bf16 (the llama_style tolerance).
 * Quantized weights use int8 activation blocks in both tiers (as today). */
typedef enum kn_precision { KN_PREC_EXACT = 0, KN_PREC_FAST = 1 } kn_precision;
/* kn_weight_init for one tier. Batch and thread invariance hold within a tier. */
qvl_status kn_weight_init_prec(kn_weight *w, const tensor *t, kn_precision p);
/* "exact" / "fast"; parse returns QVL_ERR_INVALID_ARG with a message for anything else. */
const char *kn_precision_name(kn_precision p);
qvl_status kn_precision_parse(const char *s, kn_precision *out);
void kn_weight_free(kn_weight *w);

/* y[t][o] = sum_i W[o][i] * x[t][i] (+ bias[o] if bias != NULL), for t < n_tokens. */
qvl_status kn_matmul(const kn_weight *w, const float *x, int64_t n_tokens, const float *bias, float *y);

/* out[n_in] = row r of W, dequantized. */
void kn_weight_row(const kn_weight *w, int64_t r, float *out);

/* y = x / sqrt(mean(x^2) + eps) * w, per row of n floats (w may be NULL for no scale). */
void kn_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *y);
/* y = (x - mean) / sqrt(var + eps) * w + b, per row (biased variance). */
void kn_layernorm(const float *x, const float *w, const float *b, int64_t n_rows, int64_t n,
                  float eps, float *y);
/* In place: x = gelu_tanh(x) (PyTorch gelu approximate='tanh'). */
void kn_gelu_tanh(float *x, int64_t n);
/* In place: x = 0.5 x (1 + erf(x / sqrt 2)) (exact GELU). */
void kn_gelu_erf(float *x, int64_t n);
/* gate[i] = silu(gate[i]) * up[i]. */
void kn_silu_mul(float *gate, const float *up, int64_t n);
/* y[i] += x[i]. */
void kn_add(float *y, const float *x, int64_t n);

/*
 * Multi-head attention with grouped KV heads (query head h reads kv head h / (n_head / n_kv_head)).
 *   q   [n_q][n_head][head_dim]      rows q_stride floats apart
 *   k,v [n_kv][n_kv_head][head_dim]  rows kv_stride floats apart
 *   out [n_q][n_head][head_dim]      rows out_stride floats apart
 * causal_base < 0: every query sees every key. Otherwise query i sees keys 0 .. causal_base + i.
 * Softmax in float32 of scale * q.k. Never materializes n_q x n_kv scores.
 */
qvl_status kn_attention(const float *q, int64_t n_q, int64_t q_stride, const float *k, const float *v,
                        int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head, int head_dim,
                        float scale, int64_t causal_base, float *out, int64_t out_stride);

/* Measured machine peaks (for benchmarks): a register-only loop of independent fp32 FMAs, bf16 dot
 * products (vdpbf16ps) or int8 dot products (vpdpbusd / vpmaddubsw) on every worker thread at once.
 * Returns operations (2 per multiply-add) per second of thread CPU time, summed over the threads,
 * so the figure does not drop when other processes share the cores; 0 if the active ISA has no
 * such instruction. */
/* KN_PEAK_AMX_BF16 / KN_PEAK_AMX_INT8: chains of TDPBF16PS / TDPBSSD on four C tiles (the AMX
 * tiers only: the `amx` tier on the hardware, amxsim through the tile model). */
typedef enum kn_peak_kind {
  KN_PEAK_F32_FMA,
  KN_PEAK_BF16_DOT,
  KN_PEAK_INT8_DOT,
  KN_PEAK_AMX_BF16,
  KN_PEAK_AMX_INT8
} kn_peak_kind;
double kn_peak_ops(kn_peak_kind kind, double seconds_per_thread);

/* kn_attention in a precision tier: KN_PREC_FAST may use bf16 dot products for q.k and p v (q, k,
 * v and the probabilities rounded to bf16; softmax in fp32) where the ISA has them (AVX-512 BF16
 * or AMX tiles, head_dim 64); otherwise, and for KN_PREC_EXACT, it is kn_attention. */
qvl_status kn_attention_prec(const float *q, int64_t n_q, int64_t q_stride, const float *k, const float *v,
                             int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head, int head_dim,
                             float scale, int64_t causal_base, float *out, int64_t out_stride,
                             kn_precision prec);

/* kn_attention (exact tier) over keys and values stored as IEEE half (the F16 KV cache): the rows
 * are widened to fp32 in registers as they are read, so the arithmetic is the f32 path's on the
 * f16-rounded values (no separate conversion pass, half the bytes streamed per key). */
qvl_status kn_attention_f16kv(const float *q, int64_t n_q, int64_t q_stride, const uint16_t *k,
                              const uint16_t *v, int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head,
                              int head_dim, float scale, int64_t causal_base, float *out, int64_t out_stride);

/* y[i] = x[i] rounded to IEEE half (round to nearest even, as f32_to_fp16; F16C where available):
 * how rows enter an F16 KV cache. */
void kn_f32_to_f16(const float *x, uint16_t *y, int64_t n);

/* Runs fn(arg, i) for i in [0, n) on the worker pool, returning when all are done. */
typedef void (*kn_task_fn)(void *arg, int64_t i);
void kn_parallel_for(int64_t n, kn_task_fn fn, void *arg);

#endif
