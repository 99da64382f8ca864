/*
 * Tuning by measurement (src/kernels/tune.c): on the `amxsim` tier (the AMX kernels on the tile
 * model, over the AVX-512 tier) Q8_0 and Q4_0 weights offer two kernels from 4 tokens on, the VNNI
 * kernel and the tiles. Checked here: a candidate made slow on purpose is never chosen, whichever
 * it is; the tiles are never a candidate for 1-3 tokens; every candidate gives the same bits at
 * every token count; results are kept in a file keyed by CPU, tier, threads and version and reused
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

/* The candidates the active tier offers for w at n tokens. */
static int candidates(const kn_weight *w, int64_t n, const kn_mm_kernel **k, const char **name) {
  const kn_ops *o = kn_active_ops();
  return o->mm_candidates ? o->mm_candidates(w, n, k, name, KN_TUNE_MAX_CAND) : 0;
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

/* A candidate slowed down by 40 ms per run loses, whichever one it is; both give the same bits at
 * every token count; 1-3 tokens never run on tiles. */
static void test_slow_candidate_never_chosen(qvl_dtype type) {
  test_w tw;
  make_weight(&tw, type, 256, 48);
  const char *name[KN_TUNE_MAX_CAND];
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  kn_weight w;
  for (int slow = 0; slow < 2; slow++) {
    CHECK(kernels_tune_reset() == QVL_OK, "reset");
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init"); /* to learn the names */
    int nc = candidates(&w, 8, k, name);
    kn_weight_free(&w);
    CHECK(nc == 2, "%s: %d candidates at 8 tokens, want 2 (VNNI, tiles)", dtype_name(type), nc);
    if (nc != 2)
      break;
    CHECK(kernels_tune_reset() == QVL_OK, "reset");
    kn_tune_test_delay(name[slow], 40000);
    int64_t m0 = kn_tune_measurements();
    CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
    kn_tune_test_delay(NULL, 0);
    CHECK(kn_tune_measurements() > m0, "measured");
    CHECK(w.pick[KN_CLASS_GEMV] == NULL && candidates(&w, 1, k, name) == 0 && candidates(&w, 3, k, name) == 0,
          "%s: no choice (and no tiles) for 1-3 tokens", dtype_name(type));
    for (int cls = KN_CLASS_SHORT; cls <= KN_CLASS_GEMM; cls++)
      CHECK(picked(&w, cls) == 1 - slow, "%s, %s: candidate %d picked, the other (%d) was made slow",
            dtype_name(type), kn_class_name(cls), picked(&w, cls), slow);
    static const int64_t toks[] = {4, 8, 15, 16, 37, 128};
    for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) {
      int64_t n = toks[i];
      float *x = malloc(sizeof(float) * (size_t)(n * 256)), *y[2];
      for (int64_t j = 0; j < n * 256; j++)
        x[j] = rnd();
      nc = candidates(&w, n, k, name);
      for (int c = 0; c < 2; c++) {
        y[c] = calloc((size_t)(n * 48), sizeof(float));
        CHECK(nc == 2 && kn_matmul_with(&w, k[c], x, n, NULL, y[c]) == QVL_OK, "run");
      }
      CHECK(!memcmp(y[0], y[1], sizeof(float) * (size_t)(n * 48)), "%s, %lld tokens: %s and %s differ",
            dtype_name(type), (long long)n, name[0], name[1]);
      float *yt = calloc((size_t)(n * 48), sizeof(float));
      CHECK(kn_matmul(&w, x, n, NULL, yt) == QVL_OK && !memcmp(yt, y[0], sizeof(float) * (size_t)(n * 48)),
            "%s, %lld tokens: the tuned kn_matmul differs", dtype_name(type), (long long)n);
      free(yt), free(y[0]), free(y[1]), free(x);
    }
    kn_weight_free(&w);
  }
  free(tw.data);
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
  kn_tune_test_delay("amx (tile model)", 20000); /* the VNNI kernel wins, whatever the machine */
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  kn_tune_test_delay(NULL, 0);
  kn_weight_free(&w);
  char *s = read_all(file);
  CHECK(s && !strncmp(s, "qvl kernel tuning 1\nkey ", 24) && strstr(s, "|amxsim|2 threads|" KN_TUNE_VERSION "\n"),
        "file written with its key: %s", s ? s : "(none)");
  /* the same choices, but the tiles chosen: a file this run did not write */
  char *edited = s ? strdup(s) : NULL;
  for (char *l = edited ? strstr(edited, "\nQ8_0|") : NULL; l; l = strstr(l + 1, "\nQ8_0|")) {
    char *f = l + 1;
    for (int bar = 0; bar < 5; f++)
      bar += *f == '|';
    *f = '1';
  }
  if (edited)
    write_all(file, edited);
  int64_t m0 = kn_tune_measurements();
  CHECK(kernels_set_tune_dir(tmpdir) == QVL_OK, "a fresh start");
  CHECK(kn_weight_init(&w, &tw.t) == QVL_OK, "init");
  CHECK(kn_tune_measurements() == m0, "the file's results reused without measuring (%lld runs)",
        (long long)(kn_tune_measurements() - m0));
  CHECK(picked(&w, KN_CLASS_SHORT) == 1 && picked(&w, KN_CLASS_GEMM) == 1, "the file's choice taken: %d %d",
        picked(&w, KN_CLASS_SHORT), picked(&w, KN_CLASS_GEMM));
  kn_weight_free(&w);
  kn_tune_row rows[8];
  int n = kernels_tune_rows(rows, 8);
  CHECK(n == 2 && !rows[0].measured && rows[0].n_cand == 2 && rows[0].gops[0] > 0, "rows listed: %d", n);

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
    CHECK(picked(&w, KN_CLASS_SHORT) == 0, "and the measured choice taken");
    kn_weight_free(&w);
    char *again = read_all(file);
    const char *key_end = s ? strchr(strchr(s, '\n') + 1, '\n') : NULL;
    int rows_again = 0;
    for (const char *l = again ? strstr(again, "\nQ8_0|") : NULL; l; l = strstr(l + 1, "\nQ8_0|"))
      rows_again++;
    CHECK(again && key_end && !strncmp(again, s, (size_t)(key_end - s)) && rows_again == 2,
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
  CHECK(kn_tune_measurements() == m0 && picked(&w, KN_CLASS_SHORT) == 0 && picked(&w, KN_CLASS_GEMM) == 0,
        "tuning off: the tier below's kernel");
  kn_weight_free(&w);
  kernels_set_tune_mode(KN_TUNE_ALWAYS);
  CHECK(kernels_init("avx512", 2) == QVL_OK, "avx512");
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
  test_modes();
  kernels_set_tune_dir(NULL);
  rmdir(tmpdir);
  return TEST_SUMMARY("test_tune");
}
