/*
 * Tuning by measurement (docs/KERNELS.md "Tuning"). A tier that offers several kernels for one
 * packed weight (kn_ops.mm_candidates: the same bytes, the same bits) has them timed here on the
 * weight's real shape, per token class, when the weight is prepared; the fastest is kept in
 * w->pick. The first candidate is the tier below's kernel, and another replaces it only when
 * measured at least TUNE_MARGIN faster, so a kernel nobody timed on a CPU cannot make it slower.
 *
 * Results are kept per (type, layout, shape, class) so the 28 layers of a model measure a shape
 * once, and in a small text file in the folder the command layer names (the cache folder), whose
 * name and first line carry the key: the CPU's signature, the tier, the thread count and
 * KN_TUNE_VERSION. A file with another key, or one that does not parse, is ignored with a
 * warning and rewritten with this process's results.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/kernels_impl.h"
#include "tensor/dtype.h"

#define TUNE_MARGIN 0.95   /* a later candidate must take at most this share of the best time */
#define TUNE_MAX_ROWS 256  /* shapes remembered (a model has about ten) */
#define TUNE_BUDGET_S 0.1 /* timed rounds of a shape stop after this much (at least one round) */
#define TUNE_MAX_RUNS 5
#define TUNE_DROP 1.5     /* a candidate whose warm-up run took this many times the fastest one's is out */

typedef struct tune_entry {
  qvl_dtype type;
  int layout;
  int64_t n_in, n_out;
  int cls, n_cand, chosen;
  bool measured;
  char cand[KN_TUNE_MAX_CAND][48];
  double gops[KN_TUNE_MAX_CAND];
} tune_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kn_tune_mode g_mode = KN_TUNE_AUTO;
static char g_key[320];
static char g_dir[4096];
static char g_path[4200];
static bool g_loaded; /* the file for g_key was read (or there is none) */
static tune_entry g_rows[TUNE_MAX_ROWS];
static int g_n_rows;
static atomic_llong g_measurements;
static char g_delay_name[48];
static int g_delay_usec;

/* 64 for prefill and vision: the dispatcher gives each task up to 64 tokens, so more tokens repeat
 * the same tile work (and would only make the measurement longer). */
int64_t kn_class_tokens(int cls) { return cls == KN_CLASS_GEMV ? 1 : cls == KN_CLASS_SHORT ? 8 : 64; }
const char *kn_class_name(int cls) {
  return cls == KN_CLASS_GEMV ? "1-3 tokens" : cls == KN_CLASS_SHORT ? "4-15 tokens" : ">=16 tokens";
}

void kernels_set_tune_mode(kn_tune_mode m) {
  pthread_mutex_lock(&g_mu);
  g_mode = m;
  pthread_mutex_unlock(&g_mu);
}

void kn_tune_test_delay(const char *kernel, int usec) {
  pthread_mutex_lock(&g_mu);
  snprintf(g_delay_name, sizeof g_delay_name, "%s", kernel ? kernel : "");
  g_delay_usec = kernel ? usec : 0;
  pthread_mutex_unlock(&g_mu);
}

int64_t kn_tune_measurements(void) { return atomic_load(&g_measurements); }

/* FNV-1a of the key: the file name, so machines sharing a cache folder keep one file each. */
static uint64_t key_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* Under g_mu. */
static void set_path(void) {
  if (g_dir[0])
    snprintf(g_path, sizeof g_path, "%s/kernels-%016llx.tune", g_dir, (unsigned long long)key_hash(g_key));
  else
    g_path[0] = 0;
}

void kn_tune_set_key(const char *cpu_signature, const char *tier, int threads) {
  char key[sizeof g_key];
  snprintf(key, sizeof key, "%s|%s|%d threads|%s", cpu_signature, tier, threads, KN_TUNE_VERSION);
  pthread_mutex_lock(&g_mu);
  if (strcmp(key, g_key)) { /* another tier or thread count: other results */
    snprintf(g_key, sizeof g_key, "%s", key);
    g_n_rows = 0;
    g_loaded = false;
    set_path();
  }
  pthread_mutex_unlock(&g_mu);
}

const char *kernels_tune_file(void) { return g_path; }

static tune_entry *find(qvl_dtype type, int layout, int64_t n_in, int64_t n_out, int cls) {
  for (int i = 0; i < g_n_rows; i++) {
    tune_entry *e = &g_rows[i];
    if (e->type == type && e->layout == layout && e->n_in == n_in && e->n_out == n_out && e->cls == cls)
      return e;
  }
  return NULL;
}

/* One line: type|layout|n_in|n_out|class|chosen|name=gops|name=gops... */
static bool parse_line(char *line, tune_entry *e) {
  memset(e, 0, sizeof *e);
  char *save = NULL, *f[4 + 2 + KN_TUNE_MAX_CAND + 1];
  int n = 0;
  for (char *t = strtok_r(line, "|", &save); t && n < (int)(sizeof f / sizeof *f); t = strtok_r(NULL, "|", &save))
    f[n++] = t;
  if (n < 8 || n > 6 + KN_TUNE_MAX_CAND)
    return false;
  char *end;
  long long v[5];
  for (int i = 0; i < 5; i++) {
    errno = 0;
    v[i] = strtoll(f[1 + i], &end, 10);
    if (errno || *end || end == f[1 + i])
      return false;
  }
  qvl_dtype type;
  if (!dtype_from_name(f[0], &type) || v[1] <= 0 || v[2] <= 0 || v[3] < 0 || v[3] >= KN_N_CLASSES)
    return false;
  *e = (tune_entry){.type = type, .layout = (int)v[0], .n_in = v[1], .n_out = v[2], .cls = (int)v[3],
                    .chosen = (int)v[4], .n_cand = n - 6};
  for (int i = 0; i < e->n_cand; i++) {
    char *eq = strrchr(f[6 + i], '=');
    if (!eq || eq == f[6 + i] || (size_t)(eq - f[6 + i]) >= sizeof e->cand[i])
      return false;
    *eq = 0;
    snprintf(e->cand[i], sizeof e->cand[i], "%s", f[6 + i]);
    e->gops[i] = strtod(eq + 1, &end);
    if (*end || e->gops[i] < 0)
      return false;
  }
  return e->chosen >= 0 && e->chosen < e->n_cand;
}

/* Under g_mu: reads the file once per key. */
static void load(void) {
  if (g_loaded)
    return;
  g_loaded = true;
  if (!g_path[0])
    return;
  FILE *f = fopen(g_path, "r");
  if (!f)
    return;
  char line[1024];
  tune_entry rows[TUNE_MAX_ROWS];
  int n = 0;
  bool ok = fgets(line, sizeof line, f) && !strcmp(line, "qvl kernel tuning 1\n");
  bool foreign = false;
  if (ok && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    foreign = strncmp(line, "key ", 4) || strcmp(line + 4, g_key);
  } else {
    ok = false;
  }
  while (ok && !foreign && fgets(line, sizeof line, f)) {
    if (!strchr(line, '\n') || n == TUNE_MAX_ROWS) {
      ok = false;
      break;
    }
    line[strcspn(line, "\n")] = 0;
    ok = parse_line(line, &rows[n]);
    n++;
  }
  fclose(f);
  if (foreign) {
    log_warn("kernels: tuning file %s was written for another CPU, tier, thread count or build; ignoring it "
             "(this run measures again and replaces it)", g_path);
    return;
  }
  if (!ok) {
    log_warn("kernels: tuning file %s is damaged; ignoring it (this run measures again and replaces it)", g_path);
    return;
  }
  memcpy(g_rows, rows, (size_t)n * sizeof *rows);
  g_n_rows = n;
}

/* mkdir -p (the cache folder may not exist before the first download). */
static bool make_dirs(const char *dir) {
  char p[sizeof g_dir];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return false;
      *s = '/';
    }
  return mkdir(p, 0755) == 0 || errno == EEXIST;
}

/* Under g_mu: writes every row (a temporary file renamed over the old one, so a reader never
 * sees half a file). A failure is logged: tuning still works in memory. */
static void save(void) {
  if (!g_path[0])
    return;
  if (!make_dirs(g_dir)) {
    log_warn("kernels: cannot create %s for the tuning file: %s", g_dir, strerror(errno));
    return;
  }
  char tmp[sizeof g_path + 16];
  snprintf(tmp, sizeof tmp, "%s.%d", g_path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    log_warn("kernels: cannot write %s: %s", tmp, strerror(errno));
    return;
  }
  fprintf(f, "qvl kernel tuning 1\nkey %s\n", g_key);
  for (int i = 0; i < g_n_rows; i++) {
    const tune_entry *e = &g_rows[i];
    fprintf(f, "%s|%d|%lld|%lld|%d|%d", dtype_name(e->type), e->layout, (long long)e->n_in, (long long)e->n_out,
            e->cls, e->chosen);
    for (int c = 0; c < e->n_cand; c++)
      fprintf(f, "|%s=%.1f", e->cand[c], e->gops[c]);
    fputc('\n', f);
  }
  if (fclose(f) != 0 || rename(tmp, g_path) != 0) {
    log_warn("kernels: cannot write %s: %s", g_path, strerror(errno));
    unlink(tmp);
  }
}

qvl_status kernels_set_tune_dir(const char *dir) {
  if (dir && strlen(dir) >= sizeof g_dir)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "kernels: tuning folder name too long");
  pthread_mutex_lock(&g_mu);
  snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "");
  set_path();
  g_n_rows = 0;
  g_loaded = false;
  pthread_mutex_unlock(&g_mu);
  return QVL_OK;
}

qvl_status kernels_tune_reset(void) {
  pthread_mutex_lock(&g_mu);
  g_n_rows = 0;
  g_loaded = true; /* nothing to read back */
  qvl_status st = QVL_OK;
  if (g_path[0] && unlink(g_path) != 0 && errno != ENOENT)
    st = qvl_errorf(QVL_ERR_IO, "kernels: cannot remove %s: %s", g_path, strerror(errno));
  pthread_mutex_unlock(&g_mu);
  return st;
}

int kernels_tune_rows(kn_tune_row *rows, int max) {
  pthread_mutex_lock(&g_mu);
  int n = 0;
  for (; n < g_n_rows && n < max; n++) {
    const tune_entry *e = &g_rows[n];
    rows[n] = (kn_tune_row){.type = dtype_name(e->type), .n_in = e->n_in, .n_out = e->n_out, .cls = e->cls,
                            .n_cand = e->n_cand, .chosen = e->chosen, .measured = e->measured};
    for (int c = 0; c < e->n_cand; c++) {
      rows[n].cand[c] = e->cand[c]; /* (rows are only ever appended or all dropped) */
      rows[n].gops[c] = e->gops[c];
    }
  }
  pthread_mutex_unlock(&g_mu);
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One run of candidate k on x, in seconds (< 0 when the call failed). */
static double timed_run(const kn_weight *w, const kn_mm_kernel *k, const char *name, const float *x, int64_t n,
                        float *y) {
  double t0 = now_s();
  if (kn_matmul_with(w, k, x, n, NULL, y) != QVL_OK)
    return -1;
  pthread_mutex_lock(&g_mu);
  int delay = strcmp(name, g_delay_name) ? 0 : g_delay_usec;
  pthread_mutex_unlock(&g_mu);
  if (delay > 0)
    usleep((useconds_t)delay);
  atomic_fetch_add(&g_measurements, 1);
  return now_s() - t0;
}

/* Times the candidates on n tokens of deterministic activations, taking each one's best run
 * (runs interleaved across candidates, so a change of machine load hits them alike); fills e.
 * A candidate whose warm-up run was TUNE_DROP times slower than the fastest one's is not run
 * again (it could not win by the margin), which keeps a large shape (the LM head) to a few runs. */
static bool measure(const kn_weight *w, int64_t n, const kn_mm_kernel **k, const char **name, int nc,
                    tune_entry *e) {
  float *x = malloc(sizeof(float) * (size_t)(n * w->n_in));
  float *y = malloc(sizeof(float) * (size_t)(n * w->n_out));
  bool ok = x && y;
  uint32_t s = 12345;
  for (int64_t i = 0; ok && i < n * w->n_in; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  double best[KN_TUNE_MAX_CAND], warm[KN_TUNE_MAX_CAND], fastest = 1e30, spent = 0;
  for (int c = 0; ok && c < nc; c++) { /* warm-up: packing pages, scratch, caches */
    ok = (warm[c] = best[c] = timed_run(w, k[c], name[c], x, n, y)) >= 0;
    if (ok && warm[c] < fastest)
      fastest = warm[c];
  }
  for (int r = 0; ok && r < TUNE_MAX_RUNS && (r == 0 || spent < TUNE_BUDGET_S); r++)
    for (int c = 0; ok && c < nc; c++) {
      if (warm[c] > TUNE_DROP * fastest)
        continue;
      double t = timed_run(w, k[c], name[c], x, n, y);
      ok = t >= 0;
      spent += t;
      if (ok && t < best[c])
        best[c] = t;
    }
  free(x);
  free(y);
  if (!ok)
    return false;
  e->chosen = 0;
  for (int c = 0; c < nc; c++) {
    e->gops[c] = 2.0 * (double)n * (double)w->n_in * (double)w->n_out / (best[c] > 0 ? best[c] : 1e-9) / 1e9;
    snprintf(e->cand[c], sizeof e->cand[c], "%s", name[c]);
    if (c > 0 && best[c] < TUNE_MARGIN * best[e->chosen])
      e->chosen = c;
  }
  return true;
}

/* The index of the candidate named `want`, or -1. */
static int cand_index(const char **name, int nc, const char *want) {
  for (int c = 0; c < nc; c++)
    if (!strcmp(name[c], want))
      return c;
  return -1;
}

static bool is_x16(int layout) { return layout >= KN_LAYOUT_X16_F32 && layout <= KN_LAYOUT_X16_Q6_K; }

static int add_cand(const kn_mm_kernel **k, const char **name, int nc, int max, const kn_mm_kernel *kk,
                    const char *nm) {
  if (!kk || kk == &kn_mm_ref || nc >= max)
    return nc;
  for (int c = 0; c < nc; c++)
    if (k[c] == kk)
      return nc; /* the same kernel under a lower tier's name */
  k[nc] = kk;
  name[nc] = nm;
  return nc + 1;
}

int kn_mm_candidates(const kn_weight *w, int64_t n_tokens, const kn_mm_kernel **k, const char **name, int max,
                     int *n_safe) {
  const kn_ops *o = kn_active_ops();
  const kn_mm_kernel *extra[KN_TUNE_MAX_CAND];
  const char *extra_name[KN_TUNE_MAX_CAND];
  int ne = o->mm_candidates ? o->mm_candidates(w, n_tokens, extra, extra_name, KN_TUNE_MAX_CAND) : 0;
  int nc = 0;
  if (w->packed && is_x16(w->layout)) { /* panels every x86 tier reads, with the same bits */
    const kn_lower_tier *lo;
    int nl = kn_lower_tiers(&lo);
    for (int i = 0; i < nl; i++)
      nc = add_cand(k, name, nc, max, lo[i].select(w, n_tokens), lo[i].name);
    const kn_mm_kernel *own = o->mm_select(w, n_tokens);
    bool own_extra = false;
    for (int i = 0; i < ne; i++)
      own_extra |= own == extra[i];
    if (!own_extra)
      nc = add_cand(k, name, nc, max, own, o->name);
  }
  *n_safe = nc;
  for (int i = 0; i < ne; i++)
    nc = add_cand(k, name, nc, max, extra[i], extra_name[i]);
  return nc;
}

static void tune_class(kn_weight *w, int cls, bool tier_forced) {
  const kn_mm_kernel *k[KN_TUNE_MAX_CAND];
  const char *name[KN_TUNE_MAX_CAND];
  int64_t n = kn_class_tokens(cls);
  int n_safe = 0;
  int nc = kn_mm_candidates(w, n, k, name, KN_TUNE_MAX_CAND, &n_safe);
  w->pick[cls] = NULL;
  if (nc < 2)
    return;
  pthread_mutex_lock(&g_mu);
  kn_tune_mode mode = g_mode;
  if (mode == KN_TUNE_OFF || (mode == KN_TUNE_AUTO && tier_forced)) {
    pthread_mutex_unlock(&g_mu);
    /* nothing measured: a forced tier's own selection; with tuning off the tier's own kernel, but
     * never one only the tuning may choose (the AMX tiles), whose place the best tier below takes */
    if (mode == KN_TUNE_OFF && n_safe > 0)
      w->pick[cls] = k[n_safe - 1];
    return;
  }
  load();
  const tune_entry *have = find(w->type, w->layout, w->n_in, w->n_out, cls);
  int at = -1;
  if (have && have->n_cand == nc) {
    at = cand_index(name, nc, have->cand[have->chosen]);
    for (int c = 0; at >= 0 && c < nc; c++) /* the same candidates, or measure again */
      if (strcmp(have->cand[c], name[c]))
        at = -1;
  }
  pthread_mutex_unlock(&g_mu);
  if (at >= 0) {
    w->pick[cls] = k[at];
    return;
  }
  tune_entry e = {.type = w->type, .layout = w->layout, .n_in = w->n_in, .n_out = w->n_out, .cls = cls,
                  .n_cand = nc, .measured = true};
  if (!measure(w, n, k, name, nc, &e)) {
    log_warn("kernels: tuning %s %lldx%lld could not run (%s); keeping %s", dtype_name(w->type), (long long)w->n_out,
             (long long)w->n_in, qvl_last_error(), name[0]);
    (void)kernels_take_error();
    w->pick[cls] = k[0];
    return;
  }
  w->pick[cls] = k[e.chosen];
  char rates[256] = "";
  for (int c = 0; c < nc; c++) {
    size_t used = strlen(rates);
    snprintf(rates + used, sizeof rates - used, "%s%s %.0f GOP/s", c ? ", " : "", name[c], e.gops[c]);
  }
  log_info("kernels: tuned %s %lldx%lld, %s (%lld measured): %s: %s", dtype_name(w->type), (long long)w->n_out,
           (long long)w->n_in, kn_class_name(cls), (long long)n, rates, name[e.chosen]);
  pthread_mutex_lock(&g_mu);
  tune_entry *old = find(w->type, w->layout, w->n_in, w->n_out, cls);
  if (old)
    *old = e;
  else if (g_n_rows < TUNE_MAX_ROWS)
    g_rows[g_n_rows++] = e;
  save();
  pthread_mutex_unlock(&g_mu);
}

void kn_tune_weight(kn_weight *w, bool tier_forced) {
  for (int cls = 0; cls < KN_N_CLASSES; cls++)
    tune_class(w, cls, tier_forced);
}
