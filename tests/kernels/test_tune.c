/*
 * Tuning by measurement (src/kernels/tune.c): on the `amxsim` tier (the AMX kernels on the tile
 * model, over the AVX-512 tier) a Q8_0 or Q4_0 weight offers the kernels of every x86 tier below
 * (avx2, avx2vnni where the CPU has it, avx512: the same panels, the same bits) and, from 4 tokens
 * on, the tiles. Checked here: a candidate made slow on purpose is never chosen, whichever it is;
 * the tiles are never a candidate for 1-3 tokens; every candidate gives the same bits at every
 * token count; results are kept in a file keyed by CPU, tier, threads and version and reused
 * without measuring again; a damaged or foreign file is ignored (measured again, then replaced); a
 * forced tier (QVL_ISA) is taken as it is; KN_TUNE_OFF keeps the tier below's kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels_impl.h"
#include "tensor/dtype.h"
#include "test.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (float)((double)(rs >> 11) / 4503599627370496.0 - 1.0);
}

typedef struct test_w {
  tensor t;
  void *data;
} test_w;

static void make_weight(test_w *w, qvl_dtype type, int64_t n_in, int64_t n_out) {
  size_t rb;
  dtype_row_bytes(type, n_in, &rb);
  w->data = malloc(rb * (size_t)n_out);
  float *row = malloc(sizeof(float) * (size_t)n_in);
  for (int64_t o = 0; o < n_out; o++) {
    for (int64_t i = 0; i < n_in; i++)
      row[i] = rnd();
    dtype_quantize_row(type, row, (char *)w->data + rb * (size_t)o, n_in);
  }
  free(row);
  w->t = (tensor){.name = "tune", .type = type, .n_dims = 2, .ne = {n_in, n_out, 1, 1}, .data = w->data,
                  .nbytes = rb * (size_t)n_out};
}

/* The candidates the active tier offers for w at n tokens (*n_safe: those before the AMX tiles). */
static int candidates_safe(const kn_weight *w, int64_t n, const kn_mm_kernel **k, const char **name, int *n_safe) {
  return kn_mm_candidates(w, n, k, name, KN_TUNE_MAX_CAND, n_safe);
}
static int candidates(const kn_weight *w, int64_t n, const kn_mm_kernel **k, const char **name) {
  int n_safe;
  return candidates_safe(w, n, k, name, &n_safe);
}
static bool has_tiles(int nc, const char **name) {
  for (int c = 0; c < nc; c++)
    if (strstr(name[c], "tile model"))
      return true;
  return false;
}

static const char *tmpdir;

/* Index of the candidate w->pick holds for class cls (-1: none picked). */
static int picked(const kn_weight *w, int cls) {
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  const char *name[KN_TUNE_MAX_CAND];
  int nc = candidates(w, kn_class_tokens(cls), k, name);
  for (int c = 0; c < nc; c++)
    if (w->pick[cls] == k[c])
      return c;
  return -1;
}

/* A candidate slowed down by 40 ms per run loses, whichever one it is; all give the same bits at
 * every token count; 1-3 tokens never run on tiles. */
static void test_slow_candidate_never_chosen(qvl_dtype type) {
  test_w tw;
  make_weight(&tw, type, 256, 48);
  const char *name[KN_TUNE_MAX_CAND];
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  kn_weight w;
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init"); /* to learn the names */
  int n_all = candidates(&w, 8, k, name);
  CHECK(n_all >= 3 && has_tiles(n_all, name) && !strcmp(name[0], "avx2"),
        "%s: %d candidates at 8 tokens, want avx2 ... avx512 and the tiles", dtype_name(type), n_all);
  int n1 = candidates(&w, 1, k, name), n3 = candidates(&w, 3, k, name);
  CHECK(n1 >= 2 && !has_tiles(n1, name) && !has_tiles(n3, name), "%s: no tiles for 1-3 tokens", dtype_name(type));
  kn_weight_free(&w);
  for (int slow = 0; slow < n_all; slow++) {
    CHECK(kernels_tune_reset() == QVL_OK, "reset");
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
    n_all = candidates(&w, 8, k, name);
    kn_weight_free(&w);
    CHECK(kernels_tune_reset() == QVL_OK, "reset");
    char slow_name[48];
    snprintf(slow_name, sizeof slow_name, "%s", name[slow]);
    kn_tune_test_delay(slow_name, 40000);
    int64_t m0 = kn_tune_measurements();
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
    kn_tune_test_delay(NULL, 0);
    CHECK(kn_tune_measurements() > m0, "measured");
    for (int cls = KN_CLASS_GEMV; cls <= KN_CLASS_GEMM; cls++) {
      int nc = candidates(&w, kn_class_tokens(cls), k, name);
      int p = picked(&w, cls);
      CHECK(p >= 0 && strcmp(name[p], slow_name), "%s, %s: %s picked, which was made slow (%d candidates)",
            dtype_name(type), kn_class_name(cls), p >= 0 ? name[p] : "nothing", nc);
    }
    static const int64_t toks[] = {1, 3, 4, 8, 15, 16, 37, 128};
    for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) {
      int64_t n = toks[i];
      float *x = malloc(sizeof(float) * (size_t)(n * 256)), *y0 = calloc((size_t)(n * 48), sizeof(float));
      float *y = calloc((size_t)(n * 48), sizeof(float));
      for (int64_t j = 0; j < n * 256; j++)
        x[j] = rnd();
      int nc = candidates(&w, n, k, name);
      CHECK(nc >= 2 && kn_matmul_with(&w, k[0], x, n, NULL, y0) == QVL_OK, "run");
      for (int c = 1; c < nc; c++) {
        CHECK(kn_matmul_with(&w, k[c], x, n, NULL, y) == QVL_OK, "run");
        CHECK(!memcmp(y0, y, sizeof(float) * (size_t)(n * 48)), "%s, %lld tokens: %s and %s differ",
              dtype_name(type), (long long)n, name[0], name[c]);
      }
      CHECK(kn_matmul(&w, x, n, NULL, y) == QVL_OK && !memcmp(y, y0, sizeof(float) * (size_t)(n * 48)),
            "%s, %lld tokens: the tuned kn_matmul differs", dtype_name(type), (long long)n);
      free(y), free(y0), free(x);
    }
    kn_weight_free(&w);
  }
  free(tw.data);
}

/* Every X16 panel type on the tier chosen here (exact tier): each tier's kernel gives the same
 * bits, at every token count, which is what lets the tuning pick any of them. */
static void test_same_bits_every_type(const char *isa) {
  static const qvl_dtype types[] = {QVL_DTYPE_F32, QVL_DTYPE_F16, QVL_DTYPE_BF16, QVL_DTYPE_Q8_0,
                                    QVL_DTYPE_Q4_0, QVL_DTYPE_Q4_K, QVL_DTYPE_Q6_K};
  static const int64_t toks[] = {1, 2, 5, 16, 33};
  if (kernels_init(isa, 2) != QVL_OK)
    return;
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
    if (!strncmp(isa, "amx", 3) && (types[ti] == QVL_DTYPE_F16 || types[ti] == QVL_DTYPE_BF16))
      continue; /* split-bf16 tiles of their own layout: no other tier reads them */
    test_w tw;
    make_weight(&tw, types[ti], 512, 40);
    kn_weight w;
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
    for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) {
      int64_t n = toks[i];
      const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
      const char *name[KN_TUNE_MAX_CAND];
      int nc = candidates(&w, n, k, name);
      CHECK(nc >= 2, "%s %s: %d candidates", isa, dtype_name(types[ti]), nc);
      float *x = malloc(sizeof(float) * (size_t)(n * 512));
      float *y0 = calloc((size_t)(n * 40), sizeof(float)), *y = calloc((size_t)(n * 40), sizeof(float));
      for (int64_t j = 0; j < n * 512; j++)
        x[j] = rnd() * 3;
      CHECK(nc >= 1 && kn_matmul_with(&w, k[0], x, n, NULL, y0) == QVL_OK, "run");
      for (int c = 1; c < nc; c++)
        CHECK(kn_matmul_with(&w, k[c], x, n, NULL, y) == QVL_OK && !memcmp(y0, y, sizeof(float) * (size_t)(n * 40)),
              "%s %s, %lld tokens: %s and %s differ", isa, dtype_name(types[ti]), (long long)n, name[0], name[c]);
      free(x), free(y0), free(y);
    }
    kn_weight_free(&w);
    free(tw.data);
  }
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *s = calloc(1, 1 << 16);
  size_t n = fread(s, 1, (1 << 16) - 1, f);
  s[n] = 0;
  fclose(f);
  return s;
}

static void write_all(const char *path, const char *s) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(s, f);
    fclose(f);
  }
}

/* The file: written after measuring, read back by a fresh start (kernels_set_tune_dir drops what
 * is in memory, as a new process has nothing) without measuring, its choice obeyed even when it is
 * not what this run would measure; a damaged or foreign file measured again and replaced. */
static void test_file(void) {
  test_w tw;
  make_weight(&tw, QVL_DTYPE_Q8_0, 128, 32);
  kn_weight w;
  CHECK(kernels_set_tune_dir(tmpdir) == QVL_OK && kernels_tune_reset() == QVL_OK, "dir");
  const char *path = kernels_tune_file();
  CHECK(path[0] && !strncmp(path, tmpdir, strlen(tmpdir)), "file %s in %s", path, tmpdir);
  char file[4300];
  snprintf(file, sizeof file, "%s", path);
  kn_tune_test_delay("amx (tile model)", 20000); /* an AVX kernel wins, whatever the machine */
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  kn_tune_test_delay(NULL, 0);
  kn_weight_free(&w);
  char *s = read_all(file);
  CHECK(s && !strncmp(s, "qvl kernel tuning 1\nkey ", 24) && strstr(s, "|amxsim|2 threads|" KN_TUNE_VERSION "\n"),
        "file written with its key: %s", s ? s : "(none)");
  /* the same shapes, but the first candidate (avx2) chosen everywhere: a file this run did not write */
  char *edited = s ? strdup(s) : NULL;
  for (char *l = edited ? strstr(edited, "\nQ8_0|") : NULL; l; l = strstr(l + 1, "\nQ8_0|")) {
    char *f = l + 1;
    for (int bar = 0; bar < 5; f++)
      bar += *f == '|';
    *f = '0';
  }
  if (edited)
    write_all(file, edited);
  int64_t m0 = kn_tune_measurements();
  CHECK(kernels_set_tune_dir(tmpdir) == QVL_OK, "a fresh start");
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  CHECK(kn_tune_measurements() == m0, "the file's results reused without measuring (%lld runs)",
        (long long)(kn_tune_measurements() - m0));
  CHECK(picked(&w, KN_CLASS_GEMV) == 0 && picked(&w, KN_CLASS_SHORT) == 0 && picked(&w, KN_CLASS_GEMM) == 0,
        "the file's choice taken: %d %d %d", picked(&w, KN_CLASS_GEMV), picked(&w, KN_CLASS_SHORT),
        picked(&w, KN_CLASS_GEMM));
  kn_weight_free(&w);
  kn_tune_row rows[8];
  int n = kernels_tune_rows(rows, 8);
  CHECK(n == 3 && !rows[0].measured && rows[0].n_cand >= 2 && rows[0].gops[0] > 0, "rows listed: %d", n);

  /* damaged: measured again, and the file replaced by a good one */
  static const char *const bad[] = {"garbage\n", "qvl kernel tuning 1\n", "qvl kernel tuning 1\nkey x\nQ8_0|1|2\n",
                                    NULL};
  for (int i = 0; i < 4; i++) {
    char foreign[1024];
    if (!bad[i]) { /* a good file of another CPU */
      snprintf(foreign, sizeof foreign, "qvl kernel tuning 1\nkey Other CPU|amx|2 threads|%s\n", KN_TUNE_VERSION);
      write_all(file, foreign);
    } else if (i == 2) { /* our key, a damaged row */
      const char *nl = s ? strchr(strchr(s, '\n') + 1, '\n') : NULL;
      snprintf(foreign, sizeof foreign, "%.*sQ8_0|1|2\n", nl ? (int)(nl + 1 - s) : 0, s ? s : "");
      write_all(file, foreign);
    } else {
      write_all(file, bad[i]);
    }
    m0 = kn_tune_measurements();
    CHECK(kernels_set_tune_dir(tmpdir) == QVL_OK, "a fresh start");
    kn_tune_test_delay("amx (tile model)", 20000);
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
    kn_tune_test_delay(NULL, 0);
    CHECK(kn_tune_measurements() > m0, "file %d (damaged or foreign) ignored: measured again", i);
    const char *nm[KN_TUNE_MAX_CAND];
    const kn_mm_kernel *kk[KN_TUNE_MAX_CAND];
    int p = picked(&w, KN_CLASS_SHORT);
    candidates(&w, 8, kk, nm);
    CHECK(p >= 0 && !strstr(nm[p], "tile model"), "and the measured choice taken (not the slowed tiles)");
    kn_weight_free(&w);
    char *again = read_all(file);
    const char *key_end = s ? strchr(strchr(s, '\n') + 1, '\n') : NULL;
    int rows_again = 0;
    for (const char *l = again ? strstr(again, "\nQ8_0|") : NULL; l; l = strstr(l + 1, "\nQ8_0|"))
      rows_again++;
    CHECK(again && key_end && !strncmp(again, s, (size_t)(key_end - s)) && rows_again == 3,
          "file %d replaced by this run's results: %s", i, again ? again : "(none)");
    free(again);
  }
  free(s);
  free(edited);
  CHECK(kernels_tune_reset() == QVL_OK && access(file, F_OK) != 0, "reset removes the file");
  CHECK(kernels_set_tune_dir(NULL) == QVL_OK && !kernels_tune_file()[0], "no folder");
  free(tw.data);
}

/* A forced tier is taken as it is; KN_TUNE_OFF keeps the tier below. */
static void test_modes(void) {
  test_w tw;
  make_weight(&tw, QVL_DTYPE_Q8_0, 128, 32);
  kn_weight w;
  kernels_set_tune_mode(KN_TUNE_AUTO);
  setenv("QVL_ISA", "amxsim", 1);
  CHECK(kernels_init(NULL, 2) == QVL_OK && !strcmp(kernels_isa(), "amxsim"), "QVL_ISA forces the tier");
  unsetenv("QVL_ISA");
  int64_t m0 = kn_tune_measurements();
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  CHECK(kn_tune_measurements() == m0 && !w.pick[0] && !w.pick[1] && !w.pick[2],
        "a forced tier: nothing measured, its own selection");
  kn_weight_free(&w);
  kernels_set_tune_mode(KN_TUNE_OFF);
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  const char *name[KN_TUNE_MAX_CAND];
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  int n_safe = 0;
  candidates_safe(&w, 128, k, name, &n_safe);
  CHECK(kn_tune_measurements() == m0 && n_safe >= 2 && picked(&w, KN_CLASS_SHORT) == n_safe - 1 &&
            picked(&w, KN_CLASS_GEMM) == n_safe - 1 && !strstr(name[n_safe - 1], "tile model"),
        "tuning off: the best tier below the tiles (%s), never the tiles", n_safe ? name[n_safe - 1] : "-");
  kn_weight_free(&w);
  kernels_set_tune_mode(KN_TUNE_ALWAYS);
  CHECK(kernels_init("avx2", 2) == QVL_OK, "avx2");
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  CHECK(kn_tune_measurements() == m0 && !w.pick[1], "a tier without a choice measures nothing");
  kn_weight_free(&w);
  free(tw.data);
}

int main(void) {
  char dir[] = "/tmp/qvl-tune-XXXXXX";
  tmpdir = mkdtemp(dir);
  kernels_set_tune_mode(KN_TUNE_ALWAYS);
  if (!tmpdir || kernels_init("amxsim", 2) != QVL_OK || kernels_init("avx512", 2) != QVL_OK) {
    printf("test_tune: skipped (the amxsim tier's candidates need AVX-512 below them)\n");
    return TEST_SUMMARY("test_tune");
  }
  kernels_init("amxsim", 2);
  test_slow_candidate_never_chosen(QVL_DTYPE_Q8_0);
  test_slow_candidate_never_chosen(QVL_DTYPE_Q4_0);
  test_file();
  test_same_bits_every_type("avx512bf16");
  test_same_bits_every_type("amxsim");
  test_modes();
  kernels_set_tune_dir(NULL);
  rmdir(tmpdir);
  return TEST_SUMMARY("test_tune");
}
