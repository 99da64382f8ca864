/*
 * Dispatcher: picks the variant once (CPUID + XGETBV, or QVL_ISA), owns the worker pool and the
 * per-thread scratch, and splits every call into independent tiles. The variants only compute
 * tiles; they never see threads.
 */
#include "kernels/kernels_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "base/threadpool.h"

/* ---------------------------------------------------------------------------------------------
 * CPU features
 */
typedef struct cpu_features {
  bool avx2, fma, f16c, avxvnni;
  bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512fp16;
  bool amx_tile, amx_bf16, amx_int8; /* CPUID and the OS's XCR0 tile state; permission asked later */
} cpu_features;

#if defined(__x86_64__) || defined(__i386__)
static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_features detect_cpu(void) {
  cpu_features f = {0};
#if defined(__x86_64__) || defined(__i386__)
  uint32_t r[4];
  cpuid(0, 0, r);
  uint32_t max_leaf = r[0];
  if (max_leaf < 7)
    return f;
  cpuid(1, 0, r);
  bool osxsave = (r[2] >> 27) & 1;
  bool avx = (r[2] >> 28) & 1;
  f.fma = (r[2] >> 12) & 1;
  f.f16c = (r[2] >> 29) & 1;
  if (!osxsave || !avx)
    return (cpu_features){0};
  uint64_t xcr0 = xgetbv0();
  bool os_avx = (xcr0 & 0x6) == 0x6;         /* XMM and YMM state */
  bool os_avx512 = (xcr0 & 0xe6) == 0xe6;    /* + opmask, ZMM_Hi256, Hi16_ZMM */
  bool os_amx = (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
  if (!os_avx)
    return (cpu_features){0};
  cpuid(7, 0, r);
  uint32_t max_sub7 = r[0];
  f.avx2 = (r[1] >> 5) & 1;
  if (os_avx512) {
    f.avx512f = (r[1] >> 16) & 1;
    f.avx512dq = (r[1] >> 17) & 1;
    f.avx512bw = (r[1] >> 30) & 1;
    f.avx512vl = (r[1] >> 31) & 1;
    f.avx512vnni = (r[2] >> 11) & 1;
    f.avx512fp16 = (r[3] >> 23) & 1;
    if (os_amx) {
      f.amx_bf16 = (r[3] >> 22) & 1;
      f.amx_tile = (r[3] >> 24) & 1;
      f.amx_int8 = (r[3] >> 25) & 1;
    }
  }
  if (max_sub7 >= 1) {
    cpuid(7, 1, r);
    f.avxvnni = (r[0] >> 4) & 1;
    if (os_avx512)
      f.avx512bf16 = (r[0] >> 5) & 1;
  }
#endif
  return f;
}

/* What identifies this CPU model for the tuning file: vendor, family/model/stepping and the
 * brand string (CPUID leaves 0, 1 and 0x80000002-4). */
static void cpu_signature(char *out, size_t n) {
  snprintf(out, n, "unknown");
#if defined(__x86_64__) || defined(__i386__)
  uint32_t r[4], v[3];
  cpuid(0, 0, r);
  v[0] = r[1], v[1] = r[3], v[2] = r[2];
  char vendor[13] = {0};
  memcpy(vendor, v, 12);
  cpuid(1, 0, r);
  uint32_t fms = r[0];
  char brand[49] = {0};
  cpuid(0x80000000u, 0, r);
  if (r[0] >= 0x80000004u)
    for (uint32_t i = 0; i < 3; i++) {
      cpuid(0x80000002u + i, 0, r);
      memcpy(brand + 16 * i, r, 16);
    }
  for (char *c = brand; *c; c++)
    if (*c == '\n' || *c == '\t' || *c == '|')
      *c = ' ';
  const char *b = brand;
  while (*b == ' ')
    b++;
  snprintf(out, n, "%s %08x %s", vendor, fms, b);
#endif
}

static bool has_avx2(const cpu_features *f) { return f->avx2 && f->fma && f->f16c; }
static bool has_avx2vnni(const cpu_features *f) { return has_avx2(f) && f->avxvnni; }
static bool has_avx512(const cpu_features *f) {
  return has_avx2(f) && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
}
static bool has_avx512bf16(const cpu_features *f) { return has_avx512(f) && f->avx512bf16; }
static bool has_amx(const cpu_features *f) {
  return has_avx512bf16(f) && f->amx_tile && f->amx_bf16 && f->amx_int8;
}

/* ---------------------------------------------------------------------------------------------
 * State
 */
typedef struct scratch {
  void *p;
  size_t size;
} scratch;

/* The buffers of one calling thread (issue 31: two engines computing at once gave wrong answers
 * when they shared one process-wide set). A call's tasks use its caller's context: on the pool
 * (workers 1 .. n-1 run only the tasks of the caller that holds it) or serially on the caller
 * while another caller holds the pool. So no buffer is ever used by two calls at once, and the
 * pool stays one per process (a second engine just runs its loops on its own thread meanwhile). */
typedef struct kn_ctx {
  scratch *s; /* [n]: per pool thread index */
  int n;
  void *act; /* quantized activations of the current matmul */
  size_t act_size;
} kn_ctx;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_ready;
static kn_ops g_ops;
static threadpool *g_pool;
static int g_threads = 1;
static bool g_forced;            /* the tier was forced (QVL_ISA or the caller), not chosen */
/* The x86 tiers below the active one that this CPU runs, lowest first: their kernels read the same
 * X16 panels and give the same bits (test_tune), so the tuning may time them (kn_lower_tiers). */
static kn_lower_tier g_lower[N_LOWER_MAX];
static int g_n_lower;
static pthread_key_t g_ctx_key; /* frees a thread's context when the thread exits */
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;
static _Thread_local kn_ctx *t_ctx;     /* this thread's own context, as a caller */
static _Thread_local kn_ctx *t_run_ctx; /* in a task: the context of the call it belongs to */
/* An out-of-memory in a kernel since the last kernels_take_error on this thread (see kernels.h). */
static _Thread_local qvl_status t_failed;

/* Records an out-of-memory of a kernel call and returns it (the library never aborts on OOM). */
static qvl_status kernel_oom(const char *what, size_t bytes) {
  t_failed = QVL_ERR_NOMEM;
  return qvl_errorf(QVL_ERR_NOMEM, "kernels: %s: cannot allocate %zu bytes", what, bytes);
}

qvl_status kernels_take_error(void) {
  qvl_status s = t_failed;
  t_failed = QVL_OK;
  return s;
}

static void ctx_free(void *p) {
  kn_ctx *c = p;
  if (!c)
    return;
  for (int i = 0; i < c->n; i++)
    free(c->s[i].p);
  free(c->s);
  free(c->act);
  free(c);
}
static void ctx_key_init(void) { (void)pthread_key_create(&g_ctx_key, ctx_free); }

/* The calling thread's context with a slot for each of the pool's threads; NULL without memory. */
static kn_ctx *caller_ctx(void) {
  kn_ctx *c = t_ctx;
  if (!c) {
    pthread_once(&g_ctx_once, ctx_key_init);
    if (!(c = calloc(1, sizeof *c)))
      return NULL;
    t_ctx = c;
    (void)pthread_setspecific(g_ctx_key, c);
  }
  if (c->n < g_threads) {
    scratch *s = realloc(c->s, (size_t)g_threads * sizeof *s);
    if (!s)
      return NULL;
    memset(s + c->n, 0, (size_t)(g_threads - c->n) * sizeof *s);
    c->s = s;
    c->n = g_threads;
  }
  return c;
}

static void *ctx_scratch(kn_ctx *c, int thread, size_t bytes) {
  assert(c && thread >= 0 && thread < c->n);
  scratch *s = &c->s[thread];
  if (s->size < bytes) {
    size_t size = (bytes + 4095) & ~(size_t)4095;
    void *p = NULL;
    if (posix_memalign(&p, 64, size) != 0) {
      log_error("kernels: cannot allocate %zu bytes of scratch", size);
      return NULL;
    }
    free(s->p);
    s->p = p;
    s->size = size;
  }
  return s->p;
}

/* Grows the caller's scratch to `bytes` for every pool thread before a call's tasks run (a tile
 * function cannot report a failure); returns the context, or NULL when memory ran out. */
static kn_ctx *reserve_scratch(size_t bytes) {
  kn_ctx *c = caller_ctx();
  if (!c)
    return NULL;
  for (int i = 0; i < g_threads; i++)
    if (!ctx_scratch(c, i, bytes))
      return NULL;
  return c;
}

void *kn_scratch(int thread, size_t bytes) { return ctx_scratch(t_run_ctx ? t_run_ctx : caller_ctx(), thread, bytes); }

static qvl_status set_threads(int n) {
  if (n == g_threads && (g_pool || n == 1))
    return QVL_OK;
  threadpool *pool = NULL;
  if (n > 1)
    QVL_TRY(threadpool_init(n, &pool));
  threadpool_free(g_pool);
  g_pool = pool;
  g_threads = n;
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Tiers and the per-operation table
 */
static inline const kn_ops *ops(void);
enum { T_REF, T_AVX2, T_AVX2VNNI, T_AVX512, T_AVX512BF16, T_AMX, T_AMXSIM, T_AMXSIM512, N_TIERS };
typedef struct tier {
  const char *name;
  bool (*has)(const cpu_features *f); /* NULL: runs everywhere */
  const char *needs;
} tier;
static const tier g_tiers[N_TIERS] = {
    {"ref", NULL, ""},
    {"avx2", has_avx2, "AVX2+FMA+F16C"},
    /* AVX-VNNI (VEX vpdpbusd) without AVX-512: the AVX-512 tiers do not include it (Skylake-SP
     * to Ice Lake lack it) and do not need it, so it is only below them in preference. */
    {"avx2vnni", has_avx2vnni, "AVX2+FMA+F16C+AVX-VNNI"},
    {"avx512", has_avx512, "AVX-512 F/BW/VL/DQ/VNNI (and AVX2+FMA+F16C)"},
    {"avx512bf16", has_avx512bf16, "AVX-512 F/BW/VL/DQ/VNNI/BF16 (and AVX2+FMA+F16C)"},
    {"amx", has_amx, "AVX-512 F/BW/VL/DQ/VNNI/BF16 and AMX-TILE/BF16/INT8"},
    /* Test tier: the AMX kernels through the portable C model of the tile instructions, on top
     * of the best tier below AMX. Never chosen automatically. */
    {"amxsim", NULL, ""},
    /* Test tier: the same on the tile model with the vector code of the `amx` build (AVX-512),
     * which the tests hold bit for bit to amxsim's portable lanes. */
    {"amxsim512", has_avx512bf16, "AVX-512 F/BW/VL/DQ/VNNI/BF16 (and AVX2+FMA+F16C)"},
};
static const char *const g_op_names[KN_OP_COUNT] = {
    [KN_OP_MM_FLOAT] = "matmul F32/F16/BF16 exact", [KN_OP_MM_FAST] = "matmul F16/BF16 fast",
    [KN_OP_MM_Q8_0] = "matmul Q8_0", [KN_OP_MM_Q4_0] = "matmul Q4_0",
    [KN_OP_MM_KQUANT] = "matmul Q4_K/Q6_K", [KN_OP_ATTN] = "attention exact",
    [KN_OP_ATTN_FAST] = "attention fast", [KN_OP_ROWS] = "norms/activations",
};

static int best_tier(const cpu_features *f) {
  return has_amx(f) ? T_AMX : has_avx512bf16(f) ? T_AVX512BF16 : has_avx512(f) ? T_AVX512 : has_avx2vnni(f) ? T_AVX2VNNI : has_avx2(f) ? T_AVX2 : T_REF;
}
static int sim_base(const cpu_features *f) {
  int b = best_tier(f);
  return b == T_AMX ? T_AVX512BF16 : b;
}

/* Linux gives a process the AMX tile data state only on request (ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA, process-wide, so the pool's threads have it too). */
static bool amx_permission(void) {
#if defined(__x86_64__) && defined(__linux__)
  static int state; /* 0 unknown, 1 granted, -1 refused */
  if (state == 0)
    state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 ? 1 : -1;
  return state > 0;
#else
  return false;
#endif
}

static kn_ops build_ops(int t) {
  kn_ops ops = kn_ops_ref;
#if defined(__x86_64__) /* the x86/ variants are compiled (and the tiers above ref exist) only there */
  if (t >= T_AVX2)
    kn_avx2_override(&ops);
  if (t == T_AVX2VNNI)
    kn_avx2vnni_override(&ops);
  if (t >= T_AVX512)
    kn_avx512_override(&ops);
  if (t >= T_AVX512BF16)
    kn_avx512bf16_override(&ops);
  if (t == T_AMX)
    kn_amx_override(&ops);
#else
  (void)t;
#endif
  return ops;
}

/* Start-up probe (best tier chosen automatically, not forced): vdpbf16ps is not faster than FP32
 * FMA on every core that has it (the Xeon: 174 against 227 GFLOP/s). A few milliseconds of
 * each register-only loop on this thread decide whether the fast tier's bf16 kernels are worth
 * their rounding; if not, fast runs the exact FP32 kernels. QVL_KERNEL_PROBE=0 skips the probe. */
static char g_probe_why[2][160];
static void probe_choices(kn_ops *o, bool use_env) {
  if (!o->peak_loop || !o->weight_pack_fast || o->peak_loop(KN_PEAK_BF16_DOT, 1) <= 0)
    return;
  const char *e = use_env ? getenv("QVL_KERNEL_PROBE") : NULL;
  if (e && !strcmp(e, "0"))
    return;
  double rate[2];
  for (int k = 0; k < 2; k++) {
    kn_peak_kind kind = k ? KN_PEAK_BF16_DOT : KN_PEAK_F32_FMA;
    struct timespec a, b;
    double best = 0, ops_done;
    for (int rep = 0; rep < 5; rep++) {
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
      ops_done = o->peak_loop(kind, 1 << 12);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
      double sec = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
      if (sec > 0 && ops_done / sec > best)
        best = ops_done / sec;
    }
    rate[k] = best / 1e9;
  }
  if (rate[1] < 1.15 * rate[0]) {
    snprintf(g_probe_why[0], sizeof g_probe_why[0],
             "probe: vdpbf16ps %.0f GFLOP/s is not faster than FP32 FMA %.0f on this core: F16/BF16 as Q8_0 "
             "blocks (quantized at load), the int8 kernel", rate[1], rate[0]);
    snprintf(g_probe_why[1], sizeof g_probe_why[1],
             "probe: vdpbf16ps %.0f GFLOP/s is not faster than FP32 FMA %.0f on this core: exact FP32 kernel",
             rate[1], rate[0]);
    o->weight_pack_fast = kn_pack_x16_int8;
    o->fast_int8 = true;
    o->attention_fast = NULL;
    o->attention_fast_prep = NULL;
    o->attention_fast_prep_bytes = NULL;
    o->choice[KN_OP_MM_FAST] = (kn_choice){o->choice[KN_OP_MM_Q8_0].kernel, g_probe_why[0]};
    o->choice[KN_OP_ATTN_FAST] = (kn_choice){o->choice[KN_OP_ATTN].kernel, g_probe_why[1]};
  } else {
    snprintf(g_probe_why[0], sizeof g_probe_why[0], "%s (probe: vdpbf16ps %.0f GFLOP/s, FP32 FMA %.0f)",
             o->choice[KN_OP_MM_FAST].why, rate[1], rate[0]);
    snprintf(g_probe_why[1], sizeof g_probe_why[1], "%s (probe: vdpbf16ps %.0f GFLOP/s, FP32 FMA %.0f)",
             o->choice[KN_OP_ATTN_FAST].why, rate[1], rate[0]);
    o->choice[KN_OP_MM_FAST].why = g_probe_why[0];
    o->choice[KN_OP_ATTN_FAST].why = g_probe_why[1];
  }
}

int kernels_dispatch(kn_dispatch_row *rows, int max) {
  const kn_ops *o = ops();
  int n = 0;
  for (int k = 0; k < KN_OP_COUNT && n < max; k++, n++)
    rows[n] = (kn_dispatch_row){g_op_names[k], o->choice[k].kernel ? o->choice[k].kernel : "-",
                                o->choice[k].why ? o->choice[k].why : ""};
  return n;
}

bool kernels_fast_bf16(void) { return ops()->weight_pack_fast != NULL && !ops()->fast_int8; }
bool kernels_fast_int8(void) { return ops()->fast_int8; }

static qvl_status init_impl(const char *isa, int n_threads, bool use_env) {
  pthread_mutex_lock(&g_lock);
  qvl_status st = QVL_OK;
  cpu_features f = detect_cpu();
  const char *want = isa && *isa ? isa : use_env ? getenv("QVL_ISA") : NULL;
  if (want && !*want)
    want = NULL;
  int best = best_tier(&f);
  int pick = best;
  if (want) {
    pick = -1;
    for (int t = 0; t < N_TIERS; t++)
      if (!strcmp(want, g_tiers[t].name))
        pick = t;
    if (pick < 0) {
      st = qvl_errorf(QVL_ERR_INVALID_ARG,
                      "kernels: unknown ISA '%s', expected one of ref, avx2, avx2vnni, avx512, avx512bf16, amx, "
                      "amxsim, amxsim512", want);
      goto out;
    }
    if (g_tiers[pick].has && !g_tiers[pick].has(&f)) {
      st = qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "kernels: ISA '%s' requested but this CPU lacks part of %s (avx2=%d fma=%d "
                      "f16c=%d avx-vnni=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d amx-tile=%d amx-bf16=%d "
                      "amx-int8=%d)",
                      want, g_tiers[pick].needs, f.avx2, f.fma, f.f16c, f.avxvnni, f.avx512f, f.avx512bw,
                      f.avx512vl, f.avx512dq, f.avx512vnni, f.avx512bf16, f.amx_tile, f.amx_bf16,
                      f.amx_int8);
      goto out;
    }
    if (pick == T_AMX && !amx_permission()) {
      st = qvl_errorf(QVL_ERR_UNSUPPORTED,
                      "kernels: ISA 'amx' requested but the kernel refused the tile state "
                      "(arch_prctl ARCH_REQ_XCOMP_PERM)");
      goto out;
    }
  } else if (best == T_AMX && !amx_permission()) {
    log_warn("kernels: AMX present but the kernel refused the tile state (arch_prctl); using avx512bf16");
    best = pick = T_AVX512BF16;
  }
  int n = n_threads;
  if (n <= 0) {
    const char *e = use_env ? getenv("QVL_THREADS") : NULL;
    if (e && *e) {
      char *end;
      long v = strtol(e, &end, 10);
      if (*end || v < 1 || v > 1024) {
        st = qvl_errorf(QVL_ERR_INVALID_ARG, "kernels: QVL_THREADS='%s', expected 1..1024", e);
        goto out;
      }
      n = (int)v;
    } else {
      n = threadpool_physical_cores();
    }
  }
  if (n > 1024) {
    st = qvl_errorf(QVL_ERR_INVALID_ARG, "kernels: %d threads requested, expected 1..1024", n);
    goto out;
  }
  st = set_threads(n);
  if (st != QVL_OK)
    goto out;

  kn_ops ops = build_ops(pick == T_AMXSIM ? sim_base(&f) : pick == T_AMXSIM512 ? T_AVX512BF16 : pick);
  if (pick == T_AMXSIM)
    kn_amxsim_override(&ops);
#if defined(__x86_64__)
  if (pick == T_AMXSIM512)
    kn_amxsim512_override(&ops);
#endif
  ops.name = g_tiers[pick].name;
  if (!want && pick != T_AMX) /* AMX's fast tier is tiles, not vdpbf16ps */
    probe_choices(&ops, use_env);
  int own = pick == T_AMXSIM ? sim_base(&f) : pick == T_AMXSIM512 ? T_AVX512BF16 : pick;
  g_n_lower = 0;
  for (int t = T_AVX2; t < own && t < T_AMX && g_n_lower < N_LOWER_MAX; t++)
    if (g_tiers[t].has(&f))
      g_lower[g_n_lower++] = (kn_lower_tier){g_tiers[t].name, build_ops(t).mm_select};
  g_ops = ops;
  g_forced = want != NULL;
  const char *tune_env = use_env ? getenv("QVL_TUNE") : NULL;
  if (tune_env && !strcmp(tune_env, "0"))
    kernels_set_tune_mode(KN_TUNE_OFF);
  else if (tune_env && !strcmp(tune_env, "always")) /* also a forced tier: `QVL_ISA=amxsim qvl tune` */
    kernels_set_tune_mode(KN_TUNE_ALWAYS);
  char sig[160];
  cpu_signature(sig, sizeof sig);
  kn_tune_set_key(sig, g_ops.name, g_threads);
  log_info("kernels: ISA %s (best available: %s%s; avx2=%d fma=%d f16c=%d avx-vnni=%d avx512f=%d "
           "bw=%d vl=%d dq=%d vnni=%d bf16=%d fp16=%d amx-tile=%d amx-bf16=%d amx-int8=%d), %d threads",
           g_ops.name, g_tiers[best].name, want ? ", forced by the caller or QVL_ISA" : "", f.avx2,
           f.fma, f.f16c, f.avxvnni, f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512vnni,
           f.avx512bf16, f.avx512fp16, f.amx_tile, f.amx_bf16, f.amx_int8, g_threads);
  for (int k = 0; k < KN_OP_COUNT; k++)
    log_info("kernels:   %-28s %-22s %s", g_op_names[k], g_ops.choice[k].kernel ? g_ops.choice[k].kernel : "-",
             g_ops.choice[k].why ? g_ops.choice[k].why : "");
  atomic_store(&g_ready, true);
out:
  pthread_mutex_unlock(&g_lock);
  return st;
}

qvl_status kernels_init(const char *isa, int n_threads) { return init_impl(isa, n_threads, true); }

/* Lazy initialisation for callers that never called kernels_init. A bad QVL_ISA/QVL_THREADS
 * cannot be reported from here, so it is logged and the defaults are used instead. */
static void lazy_init(void) {
  if (kernels_init(NULL, 0) == QVL_OK)
    return;
  log_error("%s; using the best available variant and the default thread count", qvl_last_error());
  if (init_impl(NULL, 0, false) == QVL_OK)
    return;
  log_error("kernels: %s; using the reference kernels on one thread", qvl_last_error());
  /* Cannot fail: "ref" is always available and one thread needs no allocation (set_threads). */
  (void)init_impl("ref", 1, false);
}

static inline const kn_ops *ops(void) {
  if (!atomic_load_explicit(&g_ready, memory_order_acquire))
    lazy_init();
  return &g_ops;
}

const char *kernels_isa(void) { return ops()->name; }
const kn_ops *kn_active_ops(void) { return ops(); }
int kn_lower_tiers(const kn_lower_tier **out) {
  ops();
  *out = g_lower;
  return g_n_lower;
}
int kernels_threads(void) {
  ops();
  return g_threads;
}

static void run_parallel(int64_t n, int64_t chunk, threadpool_fn fn, void *arg) {
  threadpool_for(g_pool, n, chunk, fn, arg);
}

/* ---------------------------------------------------------------------------------------------
 * Parallel for (public)
 */
/* The end of the span of `per` items starting at `start`, clipped to n items in all: tasks split
 * their range into such spans, the last one shorter. */
static int64_t span_end(int64_t start, int64_t per, int64_t n) { return start + per < n ? start + per : n; }

typedef struct pf_ctx {
  kn_task_fn fn;
  void *arg;
} pf_ctx;

static void pf_body(void *arg, int64_t i, int thread) {
  (void)thread;
  pf_ctx *c = arg;
  c->fn(c->arg, i);
}

void kn_parallel_for(int64_t n, kn_task_fn fn, void *arg) {
  ops();
  pf_ctx c = {fn, arg};
  run_parallel(n, 1, pf_body, &c);
}

/* ---------------------------------------------------------------------------------------------
 * Weights and matmul
 */
/* After repacking, the source rows (usually in a mapped model file) are only read again for the odd
 * embedding row. Without this their pages stay resident next to the packed copy and the process
 * holds the weights twice. MADV_PAGEOUT only reclaims (file pages are re-read on the next access,
 * anonymous ones go to swap or stay), so it is safe whatever memory the tensor lives in. */
static void release_source_pages(const void *data, size_t nbytes) {
#ifdef MADV_PAGEOUT
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || nbytes < (size_t)page * 2)
    return;
  uintptr_t start = ((uintptr_t)data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
  uintptr_t end = ((uintptr_t)data + nbytes) & ~((uintptr_t)page - 1);
  if (end > start)
    (void)madvise((void *)start, end - start, MADV_PAGEOUT);
#else
  (void)data;
  (void)nbytes;
#endif
}

static qvl_status weight_init(kn_weight *w, const tensor *t, kn_precision prec);

qvl_status kn_weight_init(kn_weight *w, const tensor *t) { return weight_init(w, t, KN_PREC_EXACT); }
qvl_status kn_weight_init_prec(kn_weight *w, const tensor *t, kn_precision p) {
  return weight_init(w, t, p);
}

const char *kn_precision_name(kn_precision p) { return p == KN_PREC_FAST ? "fast" : "exact"; }

qvl_status kn_precision_parse(const char *s, kn_precision *out) {
  for (kn_precision p = KN_PREC_EXACT; p <= KN_PREC_FAST; p++)
    if (s && !strcmp(s, kn_precision_name(p))) {
      *out = p;
      return QVL_OK;
    }
  return qvl_errorf(QVL_ERR_INVALID_ARG, "precision '%s': expected 'exact' or 'fast'", s ? s : "(null)");
}

static qvl_status weight_init(kn_weight *w, const tensor *t, kn_precision prec) {
  memset(w, 0, sizeof *w);
  const char *name = t->name ? t->name : "(unnamed)";
  if (!dtype_supported(t->type))
    return qvl_errorf(QVL_ERR_UNSUPPORTED, "kernels: tensor '%s' has type %s (%d), which matmul "
                                           "does not support (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K)",
                      name, dtype_name(t->type), (int)t->type);
  if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] <= 0 || t->ne[1] <= 0)
    return qvl_errorf(QVL_ERR_FORMAT,
                      "kernels: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected a matrix "
                      "{n_in, n_out}",
                      name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                      (long long)t->ne[3]);
  size_t rb;
  if (!dtype_row_bytes(t->type, t->ne[0], &rb))
    return qvl_errorf(QVL_ERR_FORMAT,
                      "kernels: tensor '%s' (%s) has rows of %lld elements, expected a multiple of "
                      "%d",
                      name, dtype_name(t->type), (long long)t->ne[0], dtype_block_elems(t->type));
  if ((uint64_t)t->ne[1] > SIZE_MAX / rb || rb * (size_t)t->ne[1] > t->nbytes || !t->data)
    return qvl_errorf(QVL_ERR_FORMAT, "kernels: tensor '%s' holds %zu bytes, expected %lld rows of %zu",
                      name, t->nbytes, (long long)t->ne[1], rb);
  w->type = t->type;
  w->n_in = t->ne[0];
  w->n_out = t->ne[1];
  w->data = t->data;
  w->row_bytes = rb;
  w->packed = NULL;
  w->layout = KN_LAYOUT_PLAIN;
  const kn_ops *o = ops();
  qvl_status st = prec == KN_PREC_FAST && o->weight_pack_fast ? o->weight_pack_fast(w) : o->weight_pack(w);
  if (st != QVL_OK) {
    kn_weight_free(w);
    return qvl_error_prefix(st, "kernels: preparing tensor '%s': ", name);
  }
  if (w->packed)
    release_source_pages(t->data, t->nbytes);
  kn_tune_weight(w, g_forced);
  return QVL_OK;
}

void kn_weight_free(kn_weight *w) {
  if (!w)
    return;
  free(w->packed);
  w->packed = NULL;
  w->layout = KN_LAYOUT_PLAIN;
  memset(w->pick, 0, sizeof w->pick);
}

void kn_weight_row(const kn_weight *w, int64_t r, float *out) {
  assert(r >= 0 && r < w->n_out);
  ops()->weight_row(w, r, out);
}

typedef struct mm_job {
  kn_mm m;
  const kn_mm_kernel *k;
  kn_ctx *ctx; /* the caller's buffers */
  int64_t rows_per_task, toks_per_task, n_row_tasks;
} mm_job;

static void mm_body(void *arg, int64_t i, int thread) {
  const mm_job *j = arg;
  int64_t rt = i % j->n_row_tasks, tt = i / j->n_row_tasks;
  int64_t r0 = rt * j->rows_per_task, t0 = tt * j->toks_per_task;
  kn_ctx *outer = t_run_ctx;
  t_run_ctx = j->ctx;
  j->k->tile(&j->m, r0, span_end(r0, j->rows_per_task, j->m.w->n_out), t0,
              span_end(t0, j->toks_per_task, j->m.n_tokens), thread);
  t_run_ctx = outer;
}

typedef struct aq_job {
  const kn_mm_kernel *k;
  const float *x;
  char *xq;
  size_t stride;
  int64_t n_in;
} aq_job;

static void aq_body(void *arg, int64_t t, int thread) {
  (void)thread;
  const aq_job *j = arg;
  j->k->act_quantize(j->x + t * j->n_in, j->xq + (size_t)t * j->stride, j->n_in);
}

static int token_class(int64_t n_tokens) {
  return n_tokens <= 3 ? KN_CLASS_GEMV : n_tokens < 16 ? KN_CLASS_SHORT : KN_CLASS_GEMM;
}

qvl_status kn_matmul(const kn_weight *w, const float *x, int64_t n_tokens, const float *bias, float *y) {
  const kn_ops *o = ops();
  if (n_tokens <= 0)
    return QVL_OK;
  const kn_mm_kernel *k = w->pick[token_class(n_tokens)];
  return kn_matmul_with(w, k ? k : o->mm_select(w, n_tokens), x, n_tokens, bias, y);
}

qvl_status kn_matmul_with(const kn_weight *w, const kn_mm_kernel *k, const float *x, int64_t n_tokens,
                          const float *bias, float *y) {
  ops();
  if (n_tokens <= 0)
    return QVL_OK;
  mm_job j = {.m = {.w = w, .x = x, .n_tokens = n_tokens, .bias = bias, .y = y}, .k = k};
  size_t stride = j.k->act_row_bytes ? (j.k->act_row_bytes(w->n_in) + 63) & ~(size_t)63 : 0;
  size_t scratch_bytes = (size_t)w->n_in * 16 + 4096;
  if (j.k->scratch_bytes && j.k->scratch_bytes(w->n_in, stride) > scratch_bytes)
    scratch_bytes = j.k->scratch_bytes(w->n_in, stride);
  kn_ctx *c = j.ctx = reserve_scratch(scratch_bytes);
  if (!c)
    return kernel_oom("matmul scratch", scratch_bytes);
  if (j.k->act_row_bytes) {
    size_t need = stride * (size_t)n_tokens;
    if (need > c->act_size) {
      void *p = NULL;
      if (posix_memalign(&p, 64, need) != 0)
        return kernel_oom("matmul activations", need);
      free(c->act);
      c->act = p;
      c->act_size = need;
    }
    aq_job a = {j.k, x, c->act, stride, w->n_in};
    run_parallel(n_tokens, 1, aq_body, &a);
    j.m.xq = c->act;
    j.m.xq_stride = stride;
  }
  /* Split: token blocks of up to 64 (the weights are streamed once per block), row blocks sized
   * so there are several tasks per thread for balance. */
  int64_t align = j.k->row_align > 0 ? j.k->row_align : 1;
  j.toks_per_task = n_tokens < 64 ? n_tokens : 64;
  int64_t n_tok_tasks = (n_tokens + j.toks_per_task - 1) / j.toks_per_task;
  int64_t want_tasks = (int64_t)g_threads * 8;
  int64_t rows = (w->n_out * n_tok_tasks + want_tasks - 1) / want_tasks;
  if (rows < 16)
    rows = 16;
  rows = (rows + align - 1) / align * align;
  j.rows_per_task = rows;
  j.n_row_tasks = (w->n_out + rows - 1) / rows;
  run_parallel(j.n_row_tasks * n_tok_tasks, 1, mm_body, &j);
  return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Row-wise and element-wise operations
 */
typedef struct rows_job {
  const float *x, *w, *b;
  float *y;
  int64_t n_rows, n, rows_per_task;
  float eps;
  bool layer;
} rows_job;

static void rows_body(void *arg, int64_t i, int thread) {
  (void)thread;
  const rows_job *j = arg;
  int64_t r0 = i * j->rows_per_task;
  int64_t r1 = span_end(r0, j->rows_per_task, j->n_rows);
  if (j->layer)
    g_ops.layernorm(j->x + r0 * j->n, j->w, j->b, r1 - r0, j->n, j->eps, j->y + r0 * j->n);
  else
    g_ops.rmsnorm(j->x + r0 * j->n, j->w, r1 - r0, j->n, j->eps, j->y + r0 * j->n);
}

/* Rows per task: small inputs run on the calling thread (waking workers costs more). */
static int64_t rows_per_task(int64_t n_rows, int64_t n) {
  int64_t per = (32 * 1024 + n - 1) / (n > 0 ? n : 1);
  return per < 1 ? 1 : per > n_rows ? n_rows : per;
}

void kn_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *y) {
  ops();
  if (n_rows <= 0)
    return;
  rows_job j = {x, w, NULL, y, n_rows, n, rows_per_task(n_rows, n), eps, false};
  run_parallel((n_rows + j.rows_per_task - 1) / j.rows_per_task, 1, rows_body, &j);
}

void kn_layernorm(const float *x, const float *w, const float *b, int64_t n_rows, int64_t n,
                  float eps, float *y) {
  ops();
  if (n_rows <= 0)
    return;
  rows_job j = {x, w, b, y, n_rows, n, rows_per_task(n_rows, n), eps, true};
  run_parallel((n_rows + j.rows_per_task - 1) / j.rows_per_task, 1, rows_body, &j);
}

enum { EW_GELU_TANH, EW_GELU_ERF, EW_SILU_MUL, EW_ADD };
#define EW_CHUNK 16384 /* elements per task; a multiple of every SIMD width */

typedef struct ew_job {
  int op;
  float *a;
  const float *b;
  int64_t n;
} ew_job;

static void ew_body(void *arg, int64_t i, int thread) {
  (void)thread;
  const ew_job *j = arg;
  int64_t s = i * EW_CHUNK;
  int64_t len = span_end(s, EW_CHUNK, j->n) - s;
  switch (j->op) {
  case EW_GELU_TANH:
    g_ops.gelu_tanh(j->a + s, len);
    break;
  case EW_GELU_ERF:
    g_ops.gelu_erf(j->a + s, len);
    break;
  case EW_SILU_MUL:
    g_ops.silu_mul(j->a + s, j->b + s, len);
    break;
  default:
    g_ops.add(j->a + s, j->b + s, len);
    break;
  }
}

static void ew_run(int op, float *a, const float *b, int64_t n) {
  ops();
  if (n <= 0)
    return;
  ew_job j = {op, a, b, n};
  run_parallel((n + EW_CHUNK - 1) / EW_CHUNK, 1, ew_body, &j);
}

void kn_gelu_tanh(float *x, int64_t n) { ew_run(EW_GELU_TANH, x, NULL, n); }
void kn_gelu_erf(float *x, int64_t n) { ew_run(EW_GELU_ERF, x, NULL, n); }
void kn_silu_mul(float *gate, const float *up, int64_t n) { ew_run(EW_SILU_MUL, gate, up, n); }
void kn_add(float *y, const float *x, int64_t n) { ew_run(EW_ADD, y, x, n); }

/* ---------------------------------------------------------------------------------------------
 * Attention
 */
typedef struct attn_job {
  kn_attn a;
  kn_ctx *ctx; /* the caller's buffers */
  int64_t q_per_task, n_q_tasks;
} attn_job;

static void attn_body(void *arg, int64_t i, int thread) {
  const attn_job *j = arg;
  int units = g_ops.attn_by_group ? j->a.n_kv_head : j->a.n_head;
  /* Tasks go head by head when K/V were prepared (the tiles of one head then find its converted
   * K/V, ~0.75 MB for 3000 keys, in L2), else head-interleaved as before. */
  bool by_head = j->a.kv_prep != NULL;
  int h = (int)(by_head ? i / j->n_q_tasks : i % units);
  int64_t q0 = (by_head ? i % j->n_q_tasks : i / units) * j->q_per_task;
  int64_t q1 = span_end(q0, j->q_per_task, j->a.n_q);
  kn_ctx *outer = t_run_ctx;
  t_run_ctx = j->ctx;
  if (j->a.fast && !j->a.k16 && g_ops.attention_fast)
    g_ops.attention_fast(&j->a, h, q0, q1, thread);
  else
    g_ops.attention(&j->a, h, q0, q1, thread);
  t_run_ctx = outer;
}

/* Converts K and V of every KV head once per call (one task per (head, block of keys))
 * when the variant offers it and the problem is large enough for the conversion to be repeated by
 * many tiles. The buffer is allocated per call (a vision layer's attention runs for hundreds of
 * ms; the buffer is half the size of the fp32 K and V) and freed after; without memory the tiles
 * convert what they read, as before. Returns the buffer to free (or NULL). */
static void attn_prep_body(void *arg, int64_t i, int thread) {
  (void)thread;
  kn_attn *a = arg;
  int h = (int)(i / a->kv_prep_blocks);
  int64_t b = i % a->kv_prep_blocks;
  bool fast = a->fast && !a->k16 && g_ops.attention_fast;
  (fast ? g_ops.attention_fast_prep : g_ops.attention_prep)(a, h, b, (char *)a->kv_prep + (size_t)i * a->kv_prep_block_bytes);
}

static void *attn_prepare(kn_attn *a) {
  int64_t kpb = 0;
  size_t bb;
  bool fast = a->fast && !a->k16 && g_ops.attention_fast;
  size_t (*bytes)(const kn_attn *, int64_t *) = fast ? g_ops.attention_fast_prep_bytes : g_ops.attention_prep_bytes;
  if (!bytes || a->n_q * (a->n_head / a->n_kv_head) <= 64 || (bb = bytes(a, &kpb)) == 0 || kpb <= 0)
    return NULL;
  int64_t nb = (a->n_kv + kpb - 1) / kpb;
  void *buf = NULL;
  if (posix_memalign(&buf, 64, bb * (size_t)nb * (size_t)a->n_kv_head) != 0)
    return NULL;
  a->kv_prep = buf;
  a->kv_prep_blocks = nb;
  a->kv_prep_block_bytes = bb;
  run_parallel(nb * a->n_kv_head, 1, attn_prep_body, a);
  return buf;
}

qvl_status kn_attention(const float *q, int64_t n_q, int64_t q_stride, const float *k, const float *v,
                        int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head, int head_dim,
                        float scale, int64_t causal_base, float *out, int64_t out_stride) {
  return kn_attention_prec(q, n_q, q_stride, k, v, n_kv, kv_stride, n_head, n_kv_head, head_dim, scale,
                    causal_base, out, out_stride, KN_PREC_EXACT);
}

static qvl_status attn_run(attn_job j) {
  int64_t n_q = j.a.n_q;
  int n_head = j.a.n_head, n_kv_head = j.a.n_kv_head, head_dim = j.a.head_dim;
  size_t scratch_bytes = (size_t)head_dim * 1024 + 64 * 1024;
  if (!(j.ctx = reserve_scratch(scratch_bytes)))
    return kernel_oom("attention scratch", scratch_bytes);
  void *prep = attn_prepare(&j.a);
  /* About 64 (query, head) rows per task (each task streams the K/V of its head once); by KV
   * group when the variant wants it. */
  int units = g_ops.attn_by_group ? n_kv_head : n_head;
  int64_t per = g_ops.attn_by_group ? 64 / (n_head / n_kv_head) : 64;
  if (per < 1)
    per = 1;
  j.q_per_task = n_q < per ? n_q : per;
  j.n_q_tasks = (n_q + j.q_per_task - 1) / j.q_per_task;
  run_parallel(j.n_q_tasks * units, 1, attn_body, &j);
  free(prep);
  return QVL_OK;
}

qvl_status kn_attention_prec(const float *q, int64_t n_q, int64_t q_stride, const float *k, const float *v,
                             int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head, int head_dim,
                             float scale, int64_t causal_base, float *out, int64_t out_stride, kn_precision prec) {
  ops();
  if (n_q <= 0)
    return QVL_OK;
  assert(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0);
  return attn_run((attn_job){.a = {.q = q, .k = k, .v = v, .out = out, .n_q = n_q, .q_stride = q_stride, .n_kv = n_kv,
                            .kv_stride = kv_stride, .out_stride = out_stride, .n_head = n_head,
                            .n_kv_head = n_kv_head, .head_dim = head_dim, .scale = scale,
                            .causal_base = causal_base, .fast = prec == KN_PREC_FAST}});
}

qvl_status kn_attention_f16kv(const float *q, int64_t n_q, int64_t q_stride, const uint16_t *k,
                              const uint16_t *v, int64_t n_kv, int64_t kv_stride, int n_head, int n_kv_head,
                              int head_dim, float scale, int64_t causal_base, float *out, int64_t out_stride) {
  ops();
  if (n_q <= 0)
    return QVL_OK;
  assert(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0);
  return attn_run((attn_job){.a = {.q = q, .k16 = k, .v16 = v, .out = out, .n_q = n_q, .q_stride = q_stride,
                            .n_kv = n_kv, .kv_stride = kv_stride, .out_stride = out_stride, .n_head = n_head,
                            .n_kv_head = n_kv_head, .head_dim = head_dim, .scale = scale,
                            .causal_base = causal_base}});
}

void kn_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
  /* One KV row per token and layer (a few thousand values): on the calling thread. */
  if (n > 0)
    ops()->to_f16(x, y, n);
}

/* ---------------------------------------------------------------------------------------------
 * Peak probes (benchmarks only)
 */
#include <time.h>

typedef struct peak_job {
  kn_peak_kind kind;
  double seconds;
  double rate[1024]; /* per thread: operations per CPU second */
} peak_job;

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void peak_body(void *arg, int64_t i, int thread) {
  (void)i;
  peak_job *j = arg;
  int64_t iters = 1 << 14;
  double best = 0;
  double c_end = thread_cpu_s() + j->seconds;
  while (thread_cpu_s() < c_end) {
    double c0 = thread_cpu_s();
    double ops_done = g_ops.peak_loop(j->kind, iters);
    double c = thread_cpu_s() - c0;
    if (c < 1e-3) {
      iters *= 4;
      continue;
    }
    if (ops_done / c > best)
      best = ops_done / c;
  }
  j->rate[thread] = best;
}

double kn_peak_ops(kn_peak_kind kind, double seconds_per_thread) {
  const kn_ops *o = ops();
  if (!o->peak_loop || o->peak_loop(kind, 1) <= 0)
    return 0;
  peak_job *j = calloc(1, sizeof *j);
  if (!j)
    return 0;
  j->kind = kind;
  j->seconds = seconds_per_thread;
  /* static partition: one task per thread, all threads at once (as in a real GEMM) */
  threadpool_for(g_pool, g_threads, 0, peak_body, j);
  double sum = 0;
  for (int t = 0; t < g_threads && t < 1024; t++)
    sum += j->rate[t];
  free(j);
  return sum;
}
