/*
 * Kernel benchmark on the Qwen3-VL-2B shapes: GEMV (decode), GEMM (prefill, 512 tokens), the vision
 * MLP (4096x1024 over 3000 tokens) and vision attention. Prints GB/s of weights streamed and
 * GFLOP/s (or GOP/s) against the machine peaks given on the command line.
 *
 *   build/rel/bench/kernels_bench [--isa ref|avx2|avx2vnni|avx512|avx512bf16|amx|amxsim|amxsim512] [--threads N] [--types q8_0,q4_0,...]
 *                                 [--only gemv,gemm,short,vision,tower,prefill,attn,kvattn] [--time S]
 *                                 [--no-lmhead] [--precision exact|fast] [--peaks S]
 * (tower and prefill run only when named in --only.)
 *
 * GEMV weights are cycled over several copies (>= 96 MiB in total) so they come from DRAM, not
 * from the 32 MiB L3, as in a real decode step. kvattn: one decode step's attention over a KV cache
 * of 512 / 4096 positions (16 heads, 8 KV heads x 128), f32 and f16 K/V, cycling over the 28
 * layers' caches (each layer its own K/V, as in a decode step) so K/V stream from DRAM.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/timing.h"
#include "commands/tune.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

static double peak_bw = 25.0, peak_f32 = 300.0, peak_int8 = 770.0, peak_bf16 = 0.0;
/* The tile peaks (AMX tiers only, measured with --peaks): tile kernels are rated against them. */
static double peak_amx_bf16 = 0.0, peak_amx_int8 = 0.0;
static double min_time = 0.5;
static kn_precision g_prec = KN_PREC_EXACT;

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 0x1234567;
static float rnd(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (float)((double)(rs >> 11) / 4503599627370496.0 - 1.0);
}

typedef struct bw {
  tensor t;
  void *data;
  kn_weight w;
} bw;

static int make(bw *b, qvl_dtype type, int64_t n_in, int64_t n_out) {
  size_t rb;
  if (!dtype_row_bytes(type, n_in, &rb))
    return -1;
  b->data = malloc(rb * (size_t)n_out);
  if (!b->data)
    return -1;
  float *row = malloc(sizeof(float) * (size_t)n_in);
  for (int64_t o = 0; o < n_out; o++) {
    for (int64_t i = 0; i < n_in; i++)
      row[i] = rnd() * 0.05f;
    dtype_quantize_row(type, row, (char *)b->data + rb * (size_t)o, n_in);
  }
  free(row);
  b->t = (tensor){.name = "bench", .type = type, .n_dims = 2, .ne = {n_in, n_out, 1, 1},
                  .data = b->data, .nbytes = rb * (size_t)n_out};
  if (kn_weight_init_prec(&b->w, &b->t, g_prec) != QVL_OK) {
    fprintf(stderr, "kn_weight_init: %s\n", qvl_last_error());
    free(b->data);
    return -1;
  }
  return 0;
}

static void drop(bw *b) {
  kn_weight_free(&b->w);
  free(b->data);
}

/* Whether kn_matmul runs w on AMX tiles for n tokens (the tuning's pick, else the tier's own). */
static bool on_tiles(const kn_weight *w, int64_t n) {
  if (strncmp(kernels_isa(), "amx", 3))
    return false;
  if (w->layout == KN_LAYOUT_AMX_BF16 || w->layout == KN_LAYOUT_AMX_BF16X3)
    return true;
  const kn_ops *o = kn_active_ops();
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  const char *name[KN_TUNE_MAX_CAND];
  int n_safe = 0;
  int nc = kn_mm_candidates(w, n, k, name, KN_TUNE_MAX_CAND, &n_safe);
  int cls = n <= 3 ? KN_CLASS_GEMV : n < 16 ? KN_CLASS_SHORT : KN_CLASS_GEMM;
  const kn_mm_kernel *run = w->pick[cls] ? w->pick[cls] : o->mm_select(w, n);
  for (int c = n_safe; c < nc; c++) /* the candidates after the safe ones are the tiles */
    if (run == k[c])
      return true;
  return false;
}

static bool is_quant(qvl_dtype t) {
  return t == QVL_DTYPE_Q8_0 || t == QVL_DTYPE_Q4_0 || t == QVL_DTYPE_Q4_K || t == QVL_DTYPE_Q6_K;
}

static void bench_matmul(const char *label, qvl_dtype type, int64_t n_in, int64_t n_out,
                         int64_t n_tok, bool cold) {
  size_t rb;
  if (!dtype_row_bytes(type, n_in, &rb))
    return;
  double bytes = (double)rb * (double)n_out;
  int copies = 1;
  if (cold && bytes < 96.0 * 1048576)
    copies = (int)ceil(96.0 * 1048576 / bytes);
  bw *ws = calloc((size_t)copies, sizeof *ws);
  for (int c = 0; c < copies; c++)
    if (make(&ws[c], type, n_in, n_out)) {
      fprintf(stderr, "%s %s: cannot build weights\n", label, dtype_name(type));
      for (int k = 0; k < c; k++)
        drop(&ws[k]);
      free(ws);
      return;
    }
  float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
  float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
  for (int64_t i = 0; i < n_in * n_tok; i++)
    x[i] = rnd();
  kn_matmul(&ws[0].w, x, n_tok, NULL, y); /* warm up */
  /* Best of several timed rounds, by process CPU time (all threads): other processes on the
   * cores stretch wall time but not the CPU time our threads get. */
  double best_wall = 1e30, best_cpu = 1e30;
  for (int round = 0; round < 3; round++) {
    int iters = 0;
    double t0 = time_now_s(), c0 = cpu_now(), t;
    do {
      kn_matmul(&ws[iters % copies].w, x, n_tok, NULL, y);
      iters++;
      t = time_now_s() - t0;
    } while (t < min_time / 3);
    double per = t / iters, cpu_per = (cpu_now() - c0) / iters;
    best_wall = per < best_wall ? per : best_wall;
    best_cpu = cpu_per < best_cpu ? cpu_per : best_cpu;
  }
  double per = best_wall, cpu_per = best_cpu;
  double flops = 2.0 * (double)n_in * (double)n_out * (double)n_tok;
  double gbs = bytes / per / 1e9, gf = flops / per / 1e9;
  /* the rate the threads reach per second of CPU each (x threads): comparable to the probed peaks */
  double gf_cpu = flops / cpu_per * kernels_threads() / 1e9;
  bool fast_bf16 = g_prec == KN_PREC_FAST && peak_bf16 > 0 &&
                   (type == QVL_DTYPE_F16 || type == QVL_DTYPE_BF16);
  /* the int8 fast tier runs F16/BF16 rows a multiple of 32 long as Q8_0 blocks */
  bool int8 = is_quant(type) || (g_prec == KN_PREC_FAST && kernels_fast_int8() && n_in % 32 == 0 &&
                                 (type == QVL_DTYPE_F16 || type == QVL_DTYPE_BF16));
  double peak = int8 ? peak_int8 : fast_bf16 ? peak_bf16 : peak_f32;
  const char *pk = int8 ? "int8" : fast_bf16 ? "bf16" : "fp32";
  if (on_tiles(&ws[0].w, n_tok)) {
    bool tile_int8 = is_quant(type);
    if ((tile_int8 ? peak_amx_int8 : peak_amx_bf16) > 0) {
      peak = tile_int8 ? peak_amx_int8 : peak_amx_bf16;
      pk = tile_int8 ? "AMX int8" : "AMX bf16";
    }
  }
  printf("%-7s %-5s %-5s %6lld x %-6lld x %4lld tok  %9.3f ms (cpu %9.3f ms)  %7.2f GB/s  %7.1f "
         "GFLOP/s wall, %7.1f per cpu-time (%3.0f%% of %s peak %.0f)\n",
         label, dtype_name(type), kn_precision_name(g_prec), (long long)n_out, (long long)n_in,
         (long long)n_tok, per * 1e3, cpu_per * 1e3, gbs, gf, gf_cpu, 100 * gf_cpu / peak, pk, peak);
  fflush(stdout);
  free(x);
  free(y);
  for (int c = 0; c < copies; c++)
    drop(&ws[c]);
  free(ws);
}

static void bench_attention(int64_t n, int n_head, int hd, bool causal) {
  int64_t stride = (int64_t)n_head * hd;
  float *q = malloc(sizeof(float) * (size_t)(n * stride));
  float *k = malloc(sizeof(float) * (size_t)(n * stride));
  float *v = malloc(sizeof(float) * (size_t)(n * stride));
  float *o = malloc(sizeof(float) * (size_t)(n * stride));
  for (int64_t i = 0; i < n * stride; i++) {
    q[i] = rnd();
    k[i] = rnd();
    v[i] = rnd();
  }
  double per = 1e30, cpu_per = 1e30;
  for (int round = 0; round < 3; round++) {
    int iters = 0;
    double t0 = time_now_s(), c0 = cpu_now(), t;
    do {
      kn_attention_prec(q, n, stride, k, v, n, stride, n_head, n_head, hd, 1.0f / sqrtf((float)hd),
                        causal ? 0 : -1, o, stride, g_prec);
      iters++;
      t = time_now_s() - t0;
    } while (t < min_time / 3);
    per = t / iters < per ? t / iters : per;
    cpu_per = (cpu_now() - c0) / iters < cpu_per ? (cpu_now() - c0) / iters : cpu_per;
  }
  double flops = 4.0 * (double)n * (double)n * (double)hd * n_head * (causal ? 0.5 : 1.0);
  double gf_cpu = flops / cpu_per * kernels_threads() / 1e9;
  bool bf = g_prec == KN_PREC_FAST && hd == 64 && peak_bf16 > 0;
  double peak = bf ? peak_bf16 : peak_f32;
  printf("attn    %-5s %5lld x %5lld, %d heads x %d%s  %9.3f ms (cpu %9.3f)  %7.1f GFLOP/s wall, %7.1f "
         "per cpu-time (%3.0f%% of %s peak %.0f)\n",
         kn_precision_name(g_prec), (long long)n, (long long)n, n_head, hd, causal ? " causal" : "",
         per * 1e3, cpu_per * 1e3, flops / per / 1e9, gf_cpu, 100 * gf_cpu / peak, bf ? "bf16" : "fp32", peak);
  free(q);
  free(k);
  free(v);
  free(o);
}

static void bench_kv_attention(int64_t n_kv, bool f16) {
  enum { H = 16, KVH = 8, HD = 128, LAYERS = 28 };
  int64_t row = KVH * HD, elems = n_kv * row;
  size_t es = f16 ? 2 : 4;
  char *k = malloc(es * (size_t)elems * LAYERS), *v = malloc(es * (size_t)elems * LAYERS);
  float *q = malloc(sizeof(float) * H * HD), *o = malloc(sizeof(float) * H * HD);
  float *tmp = malloc(sizeof(float) * (size_t)row);
  if (!k || !v || !q || !o || !tmp) {
    fprintf(stderr, "kvattn: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < H * HD; i++)
    q[i] = rnd();
  for (int64_t r = 0; r < n_kv * LAYERS; r++) {
    for (int64_t i = 0; i < row; i++)
      tmp[i] = rnd();
    for (int kv = 0; kv < 2; kv++) {
      char *dst = (kv ? v : k) + (size_t)r * (size_t)row * es;
      if (f16)
        kn_f32_to_f16(tmp, (uint16_t *)dst, row);
      else
        memcpy(dst, tmp, sizeof(float) * (size_t)row);
    }
  }
  double per = 1e30, cpu_per = 1e30;
  for (int round = 0; round < 3; round++) {
    int iters = 0;
    double t0 = time_now_s(), c0 = cpu_now(), t;
    do {
      size_t off = (size_t)(iters % LAYERS) * (size_t)elems * es;
      if (f16)
        kn_attention_f16kv(q, 1, H * HD, (const uint16_t *)(k + off), (const uint16_t *)(v + off), n_kv, row, H, KVH,
                           HD, 1.0f / sqrtf((float)HD), n_kv - 1, o, H * HD);
      else
        kn_attention(q, 1, H * HD, (const float *)(k + off), (const float *)(v + off), n_kv, row, H, KVH, HD,
                     1.0f / sqrtf((float)HD), n_kv - 1, o, H * HD);
      iters++;
      t = time_now_s() - t0;
    } while (t < min_time / 3 || iters < LAYERS);
    per = t / iters < per ? t / iters : per;
    cpu_per = (cpu_now() - c0) / iters < cpu_per ? (cpu_now() - c0) / iters : cpu_per;
  }
  double bytes = 2.0 * (double)elems * (double)es;
  printf("kvattn  %s KV  ctx %5lld, 16/8 heads x 128  %8.1f us (cpu %8.1f us) per layer, %6.1f us per token "
         "(28 layers, cpu %7.1f)  %6.2f GB/s  (%lld bytes per token)\n",
         f16 ? "f16" : "f32", (long long)n_kv, per * 1e6, cpu_per * 1e6, per * 1e6 * LAYERS, cpu_per * 1e6 * LAYERS,
         bytes / per / 1e9, (long long)(2 * row * (int64_t)es * LAYERS));
  free(k);
  free(v);
  free(q);
  free(o);
  free(tmp);
}

static bool listed(const char *list, const char *name) {
  if (!list)
    return true;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncasecmp(p, name, n))
      return true;
    p += len + (e ? 1 : 0);
  }
  return false;
}

int main(int argc, char **argv) {
  const char *isa = NULL, *types = NULL, *only = NULL;
  double peaks_s = 0.5;
  int threads = 0;
  bool lmhead = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--isa") && i + 1 < argc)
      isa = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--types") && i + 1 < argc)
      types = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--time") && i + 1 < argc)
      min_time = atof(argv[++i]);
    else if (!strcmp(argv[i], "--no-lmhead"))
      lmhead = false;
    else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
      if (kn_precision_parse(argv[++i], &g_prec) != QVL_OK) {
        fprintf(stderr, "%s\n", qvl_last_error());
        return 2;
      }
    } else if (!strcmp(argv[i], "--peaks") && i + 1 < argc) {
      peaks_s = atof(argv[++i]);
    }
    else {
      fprintf(stderr, "usage: %s [--isa ref|avx2|avx2vnni|avx512|avx512bf16|amx|amxsim|amxsim512] [--threads N] [--types q8_0,...] "
                      "[--only gemv,gemm,short,vision,tower,prefill,attn,kvattn] [--time S] [--no-lmhead] "
                      "[--precision exact|fast] [--peaks S]\n", argv[0]);
      return 2;
    }
  }
  if (kernels_init(isa, threads) != QVL_OK) {
    fprintf(stderr, "%s\n", qvl_last_error());
    return 1;
  }
  /* Peaks measured now, on these threads, by thread CPU time (0 where the ISA lacks the instruction:
   * then the defaults above stay). */
  if (peaks_s > 0) {
    double f = kn_peak_ops(KN_PEAK_F32_FMA, peaks_s) / 1e9;
    double b = kn_peak_ops(KN_PEAK_BF16_DOT, peaks_s) / 1e9;
    double q = kn_peak_ops(KN_PEAK_INT8_DOT, peaks_s) / 1e9;
    peak_f32 = f > 0 ? f : peak_f32;
    peak_bf16 = b;
    peak_int8 = q > 0 ? q : peak_int8;
    peak_amx_bf16 = kn_peak_ops(KN_PEAK_AMX_BF16, peaks_s) / 1e9;
    peak_amx_int8 = kn_peak_ops(KN_PEAK_AMX_INT8, peaks_s) / 1e9;
    printf("peaks (measured, per cpu-time x threads): fp32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s, "
           "int8 dot %.0f GOP/s", peak_f32, peak_bf16, peak_int8);
    if (peak_amx_bf16 > 0 || peak_amx_int8 > 0)
      printf(", AMX tiles: bf16 %.0f GFLOP/s, int8 %.0f GOP/s", peak_amx_bf16, peak_amx_int8);
    printf("\n");
  }
  printf("kernels_bench: isa %s, %d threads, precision %s; peaks: %.0f GB/s, %.0f GFLOP/s fp32, "
         "%.0f bf16, %.0f GOP/s int8\n",
         kernels_isa(), kernels_threads(), kn_precision_name(g_prec), peak_bw, peak_f32, peak_bf16,
         peak_int8);
  kn_dispatch_row rows[16];
  int n_rows = kernels_dispatch(rows, 16);
  for (int r = 0; r < n_rows; r++)
    printf("  %-28s %-24s %s\n", rows[r].op, rows[r].kernel, rows[r].why);
  static const qvl_dtype all[] = {QVL_DTYPE_Q8_0, QVL_DTYPE_Q4_0, QVL_DTYPE_Q4_K, QVL_DTYPE_Q6_K,
                                  QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_F32};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    qvl_dtype t = all[k];
    if (!listed(types, dtype_name(t)))
      continue;
    if (listed(only, "gemv")) {
      bench_matmul("gemv", t, 2048, 2048, 1, true);
      bench_matmul("gemv", t, 2048, 6144, 1, true);
      bench_matmul("gemv", t, 6144, 2048, 1, true);
      if (lmhead && t != QVL_DTYPE_F32)
        bench_matmul("gemv", t, 2048, 151936, 1, true);
    }
    /* a short prefill (a follow-up turn, the tail of a cached prompt): a few tokens on weights from
     * DRAM; it should cost about one pass over the weights, like a gemv */
    if (only && listed(only, "short"))
      for (int64_t n = 2; n <= 16; n *= 2)
        bench_matmul("short", t, 2048, 6144, n, true);
    if (listed(only, "gemm")) {
      bench_matmul("gemm", t, 2048, 2048, 512, false);
      bench_matmul("gemm", t, 2048, 6144, 512, false);
    }
    if (listed(only, "vision") && !(t == QVL_DTYPE_Q4_K || t == QVL_DTYPE_Q6_K || t == QVL_DTYPE_Q4_0))
      bench_matmul("vision", t, 1024, 4096, 3000, false);
    /* every GEMM shape of the 2B tower on a 1024x768 image (3072 patches, 768 merged tokens) */
    if (only && listed(only, "tower") && !(t == QVL_DTYPE_Q4_K || t == QVL_DTYPE_Q6_K || t == QVL_DTYPE_Q4_0)) {
      bench_matmul("qkv", t, 1024, 3072, 3072, false);
      bench_matmul("attnout", t, 1024, 1024, 3072, false);
      bench_matmul("ffn_up", t, 1024, 4096, 3072, false);
      bench_matmul("ffn_dn", t, 4096, 1024, 3072, false);
      bench_matmul("mm_fc1", t, 4096, 4096, 768, false);
      bench_matmul("mm_fc2", t, 4096, 2048, 768, false);
    }
    /* image-token prefill of the 2B text decoder (hidden 2048, 16 q / 8 kv heads x 128, SwiGLU
     * 6144) over the 768 tokens of a 1024x768 image */
    if (only && listed(only, "prefill")) {
      bench_matmul("pf_q_o", t, 2048, 2048, 768, false);
      bench_matmul("pf_kv", t, 2048, 1024, 768, false);
      bench_matmul("pf_gate", t, 2048, 6144, 768, false);
      bench_matmul("pf_down", t, 6144, 2048, 768, false);
    }
  }
  if (listed(only, "attn")) {
    bench_attention(3000, 16, 64, false);
    bench_attention(512, 16, 128, true);
  }
  if (only && listed(only, "kvattn"))
    for (int c = 0; c < 2; c++)
      for (int f = 0; f < 2; f++)
        bench_kv_attention(c ? 4096 : 512, f == 1);
  tune_print(stdout); /* what the tuning chose for the shapes above, with each candidate's rate */
  return 0;
}
