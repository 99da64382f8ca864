/* Vision tower against the golden fixtures: every case with images, loaded from its mmproj GGUF and
 * from its HF directory where it has one, feeds the expected pixel_values into vision_encode and compares every traced stage and both outputs with
 * expected.safetensors (max|got - exp| <= tol * max|exp|, tol from case.json). Also the error paths:
 * a text model given as mmproj, another projector, a missing tensor, a bad shape, a mismatched
 * text/mmproj pair, invalid grids; block-diagonal attention across frames; the sliced job API. */
#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "engine/hf_model.h"
#include "model/safetensors.h"
#include "test.h"
#include "test_files.h"
#include "vision/vision.h"

#define CASES_DIR "tests/fixtures/cases"
#define MODELS_DIR "tests/fixtures/models"

/* path = a + "/" + b; false (and a failed CHECK) if it does not fit */
static bool join(char *out, size_t n, const char *a, const char *b) {
  int len = snprintf(out, n, "%s/%s", a, b);
  CHECK(len > 0 && (size_t)len < n, "path too long: %s/%s", a, b);
  return len > 0 && (size_t)len < n;
}

/* ---- trace collection: concatenates every call of the same name (images in prompt order) ---- */

typedef struct collected {
  char name[48];
  float *data;
  int64_t rows, cols;
} collected;

typedef struct collector {
  collected items[64];
  int n;
  int bad_cols; /* calls whose width differs from earlier calls of the same name */
} collector;

static void collect(void *user, const char *name, const float *data, int64_t rows, int64_t cols) {
  collector *c = user;
  collected *it = NULL;
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->items[i].name, name) == 0)
      it = &c->items[i];
  if (!it) {
    if (c->n == (int)(sizeof c->items / sizeof c->items[0]))
      return;
    it = &c->items[c->n++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->cols = cols;
  }
  if (it->cols != cols) {
    c->bad_cols++;
    return;
  }
  it->data = realloc(it->data, (size_t)((it->rows + rows) * cols) * sizeof(float));
  memcpy(it->data + it->rows * cols, data, (size_t)(rows * cols) * sizeof(float));
  it->rows += rows;
}

static const collected *collector_get(const collector *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->items[i].name, name) == 0)
      return &c->items[i];
  return NULL;
}

static void collector_free(collector *c) {
  for (int i = 0; i < c->n; i++)
    free(c->items[i].data);
  c->n = 0;
}

/* ---- comparison ---- */

static double worst_ratio; /* largest (max err / max|exp|) / tol seen, for the summary */

/* Checks got [rows][cols] against an F32 expected tensor of the same 2-D shape. */
static void compare(const char *case_id, const char *what, const st_tensor *exp, const float *got,
                    int64_t rows, int64_t cols, double tol) {
  CHECK(exp != NULL, "%s: expected tensor %s missing", case_id, what);
  if (!exp)
    return;
  bool shape_ok = exp->dtype == ST_F32 && exp->n_dims == 2 && exp->shape[0] == rows && exp->shape[1] == cols;
  CHECK(shape_ok, "%s: %s: got [%lld, %lld], expected %s [%lld, %lld]", case_id, what, (long long)rows,
        (long long)cols, st_dtype_name(exp->dtype), (long long)exp->shape[0],
        (long long)(exp->n_dims > 1 ? exp->shape[1] : 0));
  if (!shape_ok || !got)
    return;
  const float *e = exp->data;
  double max_exp = 0, max_err = 0;
  int64_t at = 0;
  bool finite = true;
  for (int64_t i = 0; i < rows * cols; i++) {
    double d = fabs((double)got[i] - (double)e[i]);
    if (!isfinite(got[i]))
      finite = false;
    if (fabs((double)e[i]) > max_exp)
      max_exp = fabs((double)e[i]);
    if (d > max_err) {
      max_err = d;
      at = i;
    }
  }
  double rel = max_exp > 0 ? max_err / max_exp : max_err;
  if (rel / tol > worst_ratio)
    worst_ratio = rel / tol;
  CHECK(finite && max_err <= tol * max_exp,
        "%s: %s: max|got-exp| = %.3g at [%lld][%lld] (got %.7g, exp %.7g), relative %.3g > tol %.3g",
        case_id, what, max_err, (long long)(at / cols), (long long)(at % cols), (double)got[at],
        (double)e[at], rel, tol);
}

static double tol_of(const cJSON *tols, const char *group, const char *name) {
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(tols, group);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, name);
  CHECK(cJSON_IsNumber(v), "tolerance %s.%s missing in case.json", group, name);
  return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* ---- one golden case ---- */

static int n_cases_run;

typedef struct tolset {
  double pos, hidden, emb, ds, rope;
} tolset;

/* Feeds every image of a case through vm and compares every stage with expected.safetensors. */
static void check_case(const char *case_id, const vision_model *vm, const safetensors *st, int n_img,
                       const tolset *tol) {
  const double tol_pos = tol->pos, tol_hidden = tol->hidden, tol_emb = tol->emb, tol_ds = tol->ds,
               tol_rope = tol->rope;
  qvl_status s;
  const int64_t D = vm->hp.proj_dim;
  const st_tensor *grid = st_find(st, "image_grid_thw");
  CHECK(grid && grid->dtype == ST_I32 && grid->n_dims == 2 && grid->shape[0] == n_img && grid->shape[1] == 3,
        "%s: image_grid_thw missing or not I32 [%d, 3]", case_id, n_img);
  collector col = {0};
  for (int i = 0; grid && grid->dtype == ST_I32 && grid->shape[0] == n_img && i < n_img; i++) {
    int32_t thw[3];
    memcpy(thw, (const int32_t *)grid->data + 3 * i, sizeof thw);
    char name[48];
    snprintf(name, sizeof name, "pixel_values.%d", i);
    const st_tensor *pv = st_find(st, name);
    const int64_t N = (int64_t)thw[0] * thw[1] * thw[2];
    const int64_t K = 3 * vm->hp.temporal * vm->hp.patch_size * vm->hp.patch_size;
    CHECK(pv && pv->dtype == ST_F32 && pv->n_dims == 2 && pv->shape[0] == N && pv->shape[1] == K,
          "%s: %s missing or not F32 [%lld, %lld]", case_id, name, (long long)N, (long long)K);
    if (!(pv && pv->dtype == ST_F32 && pv->n_dims == 2 && pv->shape[0] == N && pv->shape[1] == K))
      continue;
    const int64_t n_tok = vision_n_tokens(vm, thw[0], thw[1], thw[2]);
    CHECK(n_tok == N / 4, "%s: image %d: %lld tokens, expected %lld", case_id, i, (long long)n_tok,
          (long long)(N / 4));
    if (n_tok != N / 4)
      continue;
    float *emb = malloc((size_t)(n_tok * D) * sizeof(float));
    float *ds = malloc((size_t)((vm->n_deepstack ? vm->n_deepstack : 1) * n_tok * D) * sizeof(float));
    s = vision_encode(vm, pv->data, thw[0], thw[1], thw[2], emb, ds, collect, &col);
    CHECK(s == QVL_OK, "%s: image %d: %s", case_id, i, qvl_last_error());
    if (s == QVL_OK) {
      snprintf(name, sizeof name, "image_embeds.%d", i);
      compare(case_id, name, st_find(st, name), emb, n_tok, D, tol_emb);
      /* the trace carries the same rows as the output */
      const collected *te = collector_get(&col, "image_embeds");
      CHECK(te && te->rows >= n_tok && memcmp(te->data + (te->rows - n_tok) * D, emb,
                                              (size_t)(n_tok * D) * sizeof(float)) == 0,
            "%s: trace image_embeds differs from the output", case_id);
      for (int k = 0; k < vm->n_deepstack; k++) {
        snprintf(name, sizeof name, "deepstack.%d.%d", i, k);
        compare(case_id, name, st_find(st, name), ds + (int64_t)k * n_tok * D, n_tok, D, tol_ds);
      }
      snprintf(name, sizeof name, "deepstack.%d.%d", i, vm->n_deepstack);
      CHECK(st_find(st, name) == NULL, "%s: the fixture has %s but the tower only %d DeepStack mergers",
            case_id, name, vm->n_deepstack);
    }
    free(emb);
    free(ds);
  }
  CHECK(col.bad_cols == 0, "%s: a traced stage changed width between calls", case_id);
  compare(case_id, "vision_pos_embed", st_find(st, "vision_pos_embed"),
          collector_get(&col, "vision_pos_embed") ? collector_get(&col, "vision_pos_embed")->data : NULL,
          collector_get(&col, "vision_pos_embed") ? collector_get(&col, "vision_pos_embed")->rows : 0,
          vm->hp.n_embd, tol_pos);
  static const char *const rope[] = {"vision_rope_cos", "vision_rope_sin"};
  for (int r = 0; r < 2; r++) {
    const collected *c = collector_get(&col, rope[r]);
    compare(case_id, rope[r], st_find(st, rope[r]), c ? c->data : NULL, c ? c->rows : 0,
            vm->hp.head_dim, tol_rope);
  }
  for (int64_t k = 0; k <= vm->hp.n_layer; k++) {
    char name[48];
    snprintf(name, sizeof name, "vision_hidden.%lld", (long long)k);
    const collected *c = collector_get(&col, name);
    CHECK(c != NULL, "%s: %s was not traced", case_id, name);
    compare(case_id, name, st_find(st, name), c ? c->data : NULL, c ? c->rows : 0, vm->hp.n_embd,
            tol_hidden);
  }
  collector_free(&col);
}

/* The vision tower of an HF directory, through the weight tables of engine/hf_model.h. */
static qvl_status load_hf(const char *dir, vision_model **out) {
  *out = NULL;
  hf_model *hf = NULL;
  QVL_TRY(hf_model_open(dir, &hf));
  const hf_config *c = hf_model_config(hf);
  wtable *t = NULL;
  qvl_status s = c->has_vision ? hf_model_vision_weights(hf, &t)
                               : qvl_errorf(QVL_ERR_FORMAT, "%s: no vision_config", dir);
  if (s == QVL_OK) {
    tensor_source src = wtable_source(t);
    s = vision_init(&c->vision, &src, out);
  }
  hf_model_close(hf);
  return s;
}

static void run_case(const char *dir) {
  char path[512];
  const char *case_id = dir + strlen(CASES_DIR) + 1;
  if (!join(path, sizeof path, dir, "case.json"))
    return;
  cJSON *cj = test_read_json(path);
  if (!cj)
    return;
  const cJSON *images = cJSON_GetObjectItemCaseSensitive(cj, "images");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(cj, "model");
  const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "mmproj_weight_type");
  if (!cJSON_IsArray(images) || cJSON_GetArraySize(images) == 0) {
    cJSON_Delete(cj);
    return; /* text-only case */
  }
  safetensors *st = NULL;
  qvl_status s = join(path, sizeof path, dir, "expected.safetensors") ? st_open(path, &st) : QVL_ERR_INVALID_ARG;
  CHECK(s == QVL_OK, "%s: %s", path, qvl_last_error());
  /* Both precision tiers (docs/KERNELS.md). Exact: the rule of tests/golden/run_golden.sh, the
   * strict float32 tolerances for the scalar reference kernels and for F32 weights; SIMD kernels may
   * round activations like ggml. Fast: the same, except that an F16 tower whose matrices the fast
   * tier rounds to bf16 (with bf16 activations) or to Q8_0 blocks (with 8-bit activations, where
   * the CPU has no fast bf16 dot product) gets the README's bf16 hint, 2.5e-2, as the floor (the
   * "fast" group of tests/golden/compare.c). */
  for (int tier = 0; tier < 2 && st; tier++) {
    kn_precision prec = tier == 0 ? KN_PREC_EXACT : KN_PREC_FAST;
    vision_set_precision(prec);
    const char *group = "f32";
    if (strcmp(kernels_isa(), "ref") != 0 && !(cJSON_IsString(mtype) && strcmp(mtype->valuestring, "F32") == 0))
      group = "llama_style";
    double floor = 0;
    if (prec == KN_PREC_FAST && (kernels_fast_bf16() || kernels_fast_int8()) && cJSON_IsString(mtype) &&
        !strcmp(mtype->valuestring, "F16"))
      floor = 2.5e-2;
    const cJSON *tols = cJSON_GetObjectItemCaseSensitive(cj, "tolerances");
    if (!strcmp(group, "llama_style") && !cJSON_GetObjectItemCaseSensitive(tols, group)) {
      /* a case without llama_style values (the video cases): the README's hint for the tower's
       * weight type over its f32 groups (F16 3e-3, BF16 2.5e-2, 8-bit 1e-1; position embeddings
       * keep f32), the rule of tests/golden/compare.c */
      const char *w = cJSON_IsString(mtype) ? mtype->valuestring : "F32";
      floor = fmax(floor, !strcmp(w, "F16") ? 3e-3 : !strcmp(w, "BF16") ? 2.5e-2 : 1e-1);
      group = "f32";
    }
    tolset tol = {.pos = tol_of(tols, group, "vision_pos_embed"),
                  .hidden = fmax(floor, tol_of(tols, group, "vision_hidden")),
                  .emb = fmax(floor, tol_of(tols, group, "image_embeds")),
                  .ds = fmax(floor, tol_of(tols, group, "deepstack")),
                  .rope = 1e-5}; /* no group: float32 tables computed as the reference does */
    /* the same expected values apply to the mmproj GGUF and to the HF directory, where present */
    static const char *const kinds[] = {"gguf_mmproj", "hf_dir"};
    for (int k = 0; k < 2; k++) {
      const cJSON *rel = cJSON_GetObjectItemCaseSensitive(model, kinds[k]);
      char mpath[512];
      if (!cJSON_IsString(rel) || !join(mpath, sizeof mpath, dir, rel->valuestring))
        continue;
      vision_model *vm = NULL;
      s = k == 0 ? vision_load_gguf(mpath, &vm) : load_hf(mpath, &vm);
      CHECK(s == QVL_OK, "%s: loading %s: %s", case_id, mpath, qvl_last_error());
      if (s != QVL_OK)
        continue;
      CHECK(vm->precision == prec, "%s: tower loaded as %s, expected %s", case_id,
            kn_precision_name(vm->precision), kn_precision_name(prec));
      char id[600];
      snprintf(id, sizeof id, "%s [%s, %s]", case_id, k == 0 ? "mmproj GGUF" : "HF dir", kn_precision_name(prec));
      check_case(id, vm, st, cJSON_GetArraySize(images), &tol);
      n_cases_run++;
      printf("  %s: %s weights, %d image(s), tolerance group %s%s\n", id,
             cJSON_IsString(mtype) ? mtype->valuestring : "?", cJSON_GetArraySize(images), group,
             floor > 0 ? " (bf16 floor 2.5e-2)" : "");
      vision_free(vm);
    }
  }
  vision_set_precision(KN_PREC_FAST);
  st_close(st);
  cJSON_Delete(cj);
}

static int dir_filter(const struct dirent *d) { return d->d_name[0] != '.'; }

/* tests/fixtures/cases/<family>/<variant>/<case>/ in sorted order */
static void run_all_cases(void) {
  struct dirent **fam = NULL;
  int nf = scandir(CASES_DIR, &fam, dir_filter, alphasort);
  CHECK(nf > 0, "no fixture families under %s", CASES_DIR);
  for (int a = 0; a < nf; a++) {
    char p1[512];
    struct dirent **var = NULL;
    int nv = join(p1, sizeof p1, CASES_DIR, fam[a]->d_name) ? scandir(p1, &var, dir_filter, alphasort) : 0;
    for (int b = 0; b < nv; b++) {
      char p2[512];
      struct dirent **cs = NULL;
      int nc = join(p2, sizeof p2, p1, var[b]->d_name) ? scandir(p2, &cs, dir_filter, alphasort) : 0;
      for (int c = 0; c < nc; c++) {
        char p3[512];
        if (join(p3, sizeof p3, p2, cs[c]->d_name))
          run_case(p3);
        free(cs[c]);
      }
      free(cs);
      free(var[b]);
    }
    free(var);
    free(fam[a]);
  }
  free(fam);
}

/* ---- frames: attention must be block-diagonal across frames ---- */

/* A clip of F different frames of one image's grid must encode frame by frame exactly like the
 * frames alone (up to float rounding of differently blocked GEMMs). With 22 frames of 4 x 6 patches
 * (528 rows) the 512-row MLP blocks also end in the middle of a frame. */
static void test_frames(void) {
  const char *dir = CASES_DIR "/micro-a/f32/one_image_resized";
  enum { F = 22 };
  vision_model *vm = NULL;
  safetensors *st = NULL;
  qvl_status s = vision_load_gguf(MODELS_DIR "/micro-a/gguf/mmproj-micro-a-F32.gguf", &vm);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  char path[512];
  qvl_status s2 = join(path, sizeof path, dir, "expected.safetensors") ? st_open(path, &st) : QVL_ERR_INVALID_ARG;
  CHECK(s2 == QVL_OK, "%s", qvl_last_error());
  const st_tensor *pv = st ? st_find(st, "pixel_values.0") : NULL;
  const st_tensor *grid = st ? st_find(st, "image_grid_thw") : NULL;
  if (s != QVL_OK || !pv || !grid || grid->dtype != ST_I32 || pv->dtype != ST_F32) {
    vision_free(vm);
    st_close(st);
    return;
  }
  int32_t thw[3];
  memcpy(thw, grid->data, sizeof thw);
  const int64_t nf = (int64_t)thw[1] * thw[2], K = pv->shape[1], D = vm->hp.proj_dim;
  const int64_t nt = nf / 4, nds = vm->n_deepstack;
  CHECK(F * nf > 512 && 512 % nf != 0, "the clip must cross an MLP block boundary mid-frame");
  /* frame f = the image scaled by (1 + f/10), every other one negated */
  float *clip = malloc((size_t)(F * nf * K) * sizeof(float));
  const float *px = pv->data;
  for (int64_t f = 0; f < F; f++)
    for (int64_t i = 0; i < nf * K; i++)
      clip[f * nf * K + i] = px[i] * (1.0f + 0.1f * (float)f) * (f % 2 ? -1.0f : 1.0f);
  float *eF = malloc((size_t)(F * nt * D) * sizeof(float)), *dF = malloc((size_t)(nds * F * nt * D) * sizeof(float));
  float *e1 = malloc((size_t)(nt * D) * sizeof(float)), *d1 = malloc((size_t)(nds * nt * D) * sizeof(float));
  s = vision_encode(vm, clip, F, thw[1], thw[2], eF, dF, NULL, NULL);
  CHECK(s == QVL_OK, "%d frames: %s", F, qvl_last_error());
  for (int64_t f = 0; f < F && s == QVL_OK; f++) {
    s = vision_encode(vm, clip + f * nf * K, 1, thw[1], thw[2], e1, d1, NULL, NULL);
    CHECK(s == QVL_OK, "one frame: %s", qvl_last_error());
    double max_e = 0, max_d = 0, mx = 0;
    for (int64_t i = 0; i < nt * D; i++) {
      max_e = fmax(max_e, fabs((double)e1[i] - eF[f * nt * D + i]));
      mx = fmax(mx, fabs((double)e1[i]));
    }
    for (int64_t k = 0; k < nds; k++)
      for (int64_t i = 0; i < nt * D; i++)
        max_d = fmax(max_d, fabs((double)d1[k * nt * D + i] - dF[k * F * nt * D + f * nt * D + i]));
    CHECK(max_e <= 1e-5 * mx && max_d <= 1e-5 * mx,
          "frame %lld of a %d-frame clip differs from the frame alone: embeds %.3g, deepstack %.3g (max %.3g)",
          (long long)f, F, max_e, max_d, mx);
  }
  /* the resumable job API, one block per slice, gives exactly what vision_encode gives */
  float *e3 = malloc((size_t)(F * nt * D) * sizeof(float)), *d3 = malloc((size_t)(nds * F * nt * D) * sizeof(float));
  vision_job *job = NULL;
  s = vision_job_begin(vm, clip, F, thw[1], thw[2], e3, d3, NULL, NULL, &job);
  CHECK(s == QVL_OK, "vision_job_begin: %s", qvl_last_error());
  if (s == QVL_OK) {
    int64_t calls = 1;
    bool done = false;
    while (vision_job_run(job, 1, &done) == QVL_OK && !done && calls < 1000)
      calls++;
    CHECK(calls == vision_n_layers(vm), "%lld calls of one block for %lld blocks", (long long)calls,
          (long long)vision_n_layers(vm));
    CHECK(memcmp(e3, eF, (size_t)(F * nt * D) * sizeof(float)) == 0 &&
              memcmp(d3, dF, (size_t)(nds * F * nt * D) * sizeof(float)) == 0,
          "sliced job differs from vision_encode");
  }
  vision_job_free(job);
  free(e3);
  free(d3);
  /* invalid grids are refused */
  CHECK(vision_encode(vm, clip, 1, thw[1] - 1, thw[2], e1, d1, NULL, NULL) == QVL_ERR_INVALID_ARG,
        "odd grid height accepted");
  CHECK(vision_encode(vm, clip, 0, thw[1], thw[2], e1, d1, NULL, NULL) == QVL_ERR_INVALID_ARG,
        "zero frames accepted");
  CHECK(vision_n_tokens(vm, 1, 1 << 20, 2) < 0, "huge grid accepted");
  free(clip);
  free(e1);
  free(d1);
  free(eF);
  free(dF);
  vision_free(vm);
  st_close(st);
}

/* ---- error paths ---- */

static bool msg_has(const char *needle) { return strstr(qvl_last_error(), needle) != NULL; }

/* A tensor source over an opened GGUF that hides one tensor or reports a wrong shape for it. */
typedef struct faulty {
  gguf *g;
  const char *hide;     /* tensor reported absent */
  const char *reshape;  /* tensor reported with ne[1] + 1 */
  tensor fake;
} faulty;

static const tensor *faulty_find(void *user, const char *name) {
  faulty *f = user;
  if (f->hide && strcmp(name, f->hide) == 0)
    return NULL;
  const tensor *t = gguf_find_tensor(f->g, name);
  if (t && f->reshape && strcmp(name, f->reshape) == 0) {
    f->fake = *t;
    f->fake.ne[1] += 1;
    return &f->fake;
  }
  return t;
}

static void faulty_release(void *user) {
  faulty *f = user;
  gguf_close(f->g);
  f->g = NULL;
}

static qvl_status load_faulty(const char *path, const char *hide, const char *reshape, faulty *f) {
  memset(f, 0, sizeof *f);
  QVL_TRY(gguf_open(path, &f->g));
  f->hide = hide;
  f->reshape = reshape;
  vision_hparams hp;
  qvl_status s = vision_hparams_from_gguf(f->g, &hp);
  if (s != QVL_OK) {
    gguf_close(f->g);
    return s;
  }
  tensor_source src = {.label = path, .user = f, .find = faulty_find, .release = faulty_release};
  vision_model *vm = NULL;
  s = vision_init(&hp, &src, &vm);
  vision_free(vm);
  return s;
}

/* Writes a copy of an mmproj GGUF (its clip keys and all tensors but skip) with another projector
 * type into memory. */
static qvl_status rewrite_mmproj(const gguf *g, const char *projector, const char *skip, void **mem,
                                 size_t *size) {
  gguf_writer *w = gguf_writer_init();
  if (!w)
    return QVL_ERR_NOMEM;
  static const char *const u32_keys[] = {
      "clip.vision.projection_dim", "clip.vision.image_size", "clip.vision.patch_size",
      "clip.vision.embedding_length", "clip.vision.feed_forward_length", "clip.vision.block_count",
      "clip.vision.attention.head_count", "clip.vision.spatial_merge_size"};
  qvl_status s = gguf_writer_set_str(w, "general.architecture", "clip");
  if (s == QVL_OK)
    s = gguf_writer_set_str(w, "general.type", "mmproj");
  if (s == QVL_OK)
    s = gguf_writer_set_str(w, "clip.projector_type", projector);
  if (s == QVL_OK)
    s = gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
  for (size_t i = 0; s == QVL_OK && i < sizeof u32_keys / sizeof u32_keys[0]; i++) {
    uint32_t v = 0;
    s = gguf_get_u32(g, u32_keys[i], &v);
    if (s == QVL_OK)
      s = gguf_writer_set_u32(w, u32_keys[i], v);
  }
  float eps = 0;
  if (s == QVL_OK)
    s = gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &eps);
  if (s == QVL_OK)
    s = gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", eps);
  static const float half3[3] = {0.5f, 0.5f, 0.5f};
  if (s == QVL_OK)
    s = gguf_writer_set_array(w, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half3, 3);
  if (s == QVL_OK)
    s = gguf_writer_set_array(w, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half3, 3);
  for (int64_t i = 0; s == QVL_OK && i < gguf_n_tensors(g); i++) {
    const tensor *t = gguf_tensor_at(g, i);
    if (skip && strcmp(t->name, skip) == 0)
      continue;
    s = gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data);
  }
  if (s == QVL_OK)
    s = gguf_writer_save_mem(w, mem, size);
  gguf_writer_free(w);
  return s;
}

static qvl_status load_mem(const void *mem, size_t size, const char *label) {
  gguf *g = NULL;
  QVL_TRY(gguf_open_memory(mem, size, label, &g));
  vision_model *vm = NULL;
  qvl_status s = vision_load_gguf_file(g, &vm);
  vision_free(vm);
  return s;
}

static qvl_status text_dims(const char *path, int64_t *hidden, int64_t *n_ds) {
  gguf *g = NULL;
  QVL_TRY(gguf_open(path, &g));
  qvl_status s = gguf_get_i64(g, "qwen3vl.embedding_length", hidden);
  if (s == QVL_OK)
    s = gguf_get_i64(g, "qwen3vl.n_deepstack_layers", n_ds);
  gguf_close(g);
  return s;
}

static void test_errors(void) {
  const char *mm_a = MODELS_DIR "/micro-a/gguf/mmproj-micro-a-F32.gguf";
  const char *mm_b = MODELS_DIR "/micro-b/gguf/mmproj-micro-b-Q8_0.gguf";
  const char *text_a = MODELS_DIR "/micro-a/gguf/micro-a-F32.gguf";
  const char *text_b = MODELS_DIR "/micro-b/gguf/micro-b-Q8_0.gguf";
  vision_model *vm = NULL;

  /* a text model given as mmproj */
  qvl_status s = vision_load_gguf(text_a, &vm);
  CHECK(s == QVL_ERR_FORMAT && vm == NULL && msg_has("'clip'") && msg_has("text model"),
        "text model as mmproj: status %d, message: %s", s, qvl_last_error());
  CHECK(vision_load_gguf("tests/fixtures/no-such-file.gguf", &vm) != QVL_OK && vm == NULL,
        "missing file accepted");

  /* hyperparameters and deepstack layers as the fixture families define them */
  s = vision_load_gguf(mm_a, &vm);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (vm) {
    CHECK(vm->hp.n_embd == 32 && vm->hp.n_head == 2 && vm->hp.n_ff == 64 && vm->hp.n_layer == 4 &&
              vm->hp.proj_dim == 64 && vm->pos_side == 8 && vm->hp.patch_size == 16 && vm->hp.merge == 2,
          "micro-a hyperparameters: Dv %lld heads %lld ff %lld layers %lld proj %lld S %lld",
          (long long)vm->hp.n_embd, (long long)vm->hp.n_head, (long long)vm->hp.n_ff,
          (long long)vm->hp.n_layer, (long long)vm->hp.proj_dim, (long long)vm->pos_side);
    CHECK(vm->n_deepstack == 3 && vm->deepstack[0].layer == 0 && vm->deepstack[1].layer == 1 &&
              vm->deepstack[2].layer == 2, "micro-a deepstack layers (expected 0, 1, 2)");
    CHECK(fabsf(vm->hp.eps - 1e-6f) < 1e-12f && vm->hp.image_mean[1] == 0.5f && vm->hp.image_std[2] == 0.5f,
          "micro-a eps/mean/std");
    vision_free(vm);
  }
  s = vision_load_gguf(mm_b, &vm);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (vm) {
    CHECK(vm->n_deepstack == 1 && vm->deepstack[0].layer == 2 && vm->pos_side == 10 && vm->hp.n_head == 4,
          "micro-b: deepstack layer 2 (absolute index), 10x10 table, 4 heads");

    /* text/mmproj pairing */
    int64_t hid = 0, nds = 0;
    CHECK(text_dims(text_b, &hid, &nds) == QVL_OK, "%s", qvl_last_error());
    CHECK(vision_check_text(vm, hid, nds) == QVL_OK, "micro-b pair rejected: %s", qvl_last_error());
    CHECK(text_dims(text_a, &hid, &nds) == QVL_OK, "%s", qvl_last_error());
    s = vision_check_text(vm, hid, nds);
    CHECK(s == QVL_ERR_MISMATCH && msg_has("256") && msg_has("64"),
          "micro-a text + micro-b mmproj: status %d: %s", s, qvl_last_error());
    s = vision_check_text(vm, 256, 3);
    CHECK(s == QVL_ERR_MISMATCH && msg_has("DeepStack") && msg_has("1") && msg_has("3"),
          "deepstack count mismatch: status %d: %s", s, qvl_last_error());
    vision_free(vm);
  }

  /* tensor problems through a tensor source */
  faulty f;
  s = load_faulty(mm_a, "v.blk.1.ffn_up.weight", NULL, &f);
  CHECK(s == QVL_ERR_FORMAT && msg_has("v.blk.1.ffn_up.weight") && msg_has("missing"),
        "hidden tensor: status %d: %s", s, qvl_last_error());
  s = load_faulty(mm_a, "v.deepstack.1.fc2.bias", NULL, &f);
  CHECK(s == QVL_ERR_FORMAT && msg_has("v.deepstack.1.fc2.bias"),
        "partial deepstack merger: status %d: %s", s, qvl_last_error());
  s = load_faulty(mm_a, "v.patch_embd.weight.1", NULL, &f);
  CHECK(s == QVL_ERR_FORMAT && msg_has("v.patch_embd.weight.1"), "second temporal slice: %s",
        qvl_last_error());
  s = load_faulty(mm_a, NULL, "v.blk.2.attn_qkv.weight", &f);
  CHECK(s == QVL_ERR_FORMAT && msg_has("v.blk.2.attn_qkv.weight") && msg_has("{32, 97}") && msg_has("{32, 96}"),
        "bad shape: status %d: %s", s, qvl_last_error());
  s = load_faulty(mm_a, NULL, "v.position_embd.weight", &f);
  CHECK(s == QVL_ERR_FORMAT && msg_has("square"), "non-square position table: status %d: %s", s,
        qvl_last_error());
  s = load_faulty(mm_a, NULL, NULL, &f);
  CHECK(s == QVL_OK, "unmodified source: %s", qvl_last_error());

  /* rewritten files: another projector, a missing tensor */
  gguf *g = NULL;
  s = gguf_open(mm_a, &g);
  CHECK(s == QVL_OK, "%s", qvl_last_error());
  if (g) {
    void *mem = NULL;
    size_t size = 0;
    s = rewrite_mmproj(g, "qwen3vl_merger", NULL, &mem, &size);
    CHECK(s == QVL_OK, "rewrite: %s", qvl_last_error());
    if (s == QVL_OK)
      CHECK(load_mem(mem, size, "copy.gguf") == QVL_OK, "faithful copy rejected: %s", qvl_last_error());
    free(mem);
    mem = NULL;
    s = rewrite_mmproj(g, "mlp", NULL, &mem, &size);
    CHECK(s == QVL_OK, "rewrite: %s", qvl_last_error());
    if (s == QVL_OK) {
      s = load_mem(mem, size, "llava.gguf");
      CHECK(s == QVL_ERR_UNSUPPORTED && msg_has("unsupported projector") && msg_has("'mlp'"),
            "projector mlp: status %d: %s", s, qvl_last_error());
    }
    free(mem);
    mem = NULL;
    s = rewrite_mmproj(g, "qwen3vl_merger", "mm.2.bias", &mem, &size);
    CHECK(s == QVL_OK, "rewrite: %s", qvl_last_error());
    if (s == QVL_OK) {
      s = load_mem(mem, size, "nobias.gguf");
      CHECK(s == QVL_ERR_FORMAT && msg_has("mm.2.bias") && msg_has("nobias.gguf"),
            "missing mm.2.bias: status %d: %s", s, qvl_last_error());
    }
    free(mem);
    gguf_close(g);
  }
}

int main(void) {
  qvl_status s = kernels_init(getenv("QVL_ISA"), 0);
  CHECK(s == QVL_OK, "kernels_init: %s", qvl_last_error());
  if (s != QVL_OK)
    return TEST_SUMMARY("test_vision");
  printf("  kernels: %s, %d threads\n", kernels_isa(), kernels_threads());
  test_errors();
  test_frames();
  run_all_cases();
  printf("  %d (case, weights) pairs compared; worst error / tolerance = %.3g\n", n_cases_run, worst_ratio);
  /* 17 with an mmproj GGUF + 13 with an HF directory (micro-a/b f32: 5 each, e2e bf16: 3) */
  CHECK(n_cases_run >= 30, "only %d vision cases ran", n_cases_run);
  return TEST_SUMMARY("test_vision");
}
