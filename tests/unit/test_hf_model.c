/*
 * Hugging Face directories (engine/hf_model.h), weight tables and quantize-on-load (model/wtable.h),
 * and qvl convert (engine/hf_convert.h), against the fixture files:
 *  - every fixture HF directory loads; hyperparameters equal the fixture README's table;
 *  - the HF weight tables hold exactly the tensors of the GGUFs made from the same weights (names,
 *    shapes, types, bytes; the Conv3d patch kernel split into its two temporal slices);
 *  - re-encoding at load reproduces llama.cpp's files byte for byte: e2e BF16 -> Q8_0 = e2e-Q8_0.gguf,
 *    micro-b F32 -> Q8_0 / Q4_0 / Q4_K = llama-quantize's files, micro-a GGUF F32 -> F16 / BF16 / Q8_0,
 *    e2e vision BF16 -> F16 = mmproj-e2e-F16.gguf;
 *  - convert: micro-a --outtype f32 = micro-a-F32.gguf + mmproj-micro-a-F32.gguf (every tensor and
 *    every metadata value but general.name), e2e q8_0 / f16 = the e2e GGUFs, and the files load;
 *  - errors: missing files and keys, unsupported values, shard index problems, named clearly.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "engine/hf_convert.h"
#include "engine/hf_model.h"
#include "engine/model_sampling.h"
#include "model/gguf_write.h"
#include "model/safetensors.h"
#include "model/wtable.h"
#include "test.h"

#define MODELS "tests/fixtures/models"

static char tmpdir[256];
static char cwd[4096];

/* ---- helpers ------------------------------------------------------------------------------------ */

static bool err_has(const char *needle) {
  const char *e = qvl_last_error();
  bool ok = e && strstr(e, needle);
  if (!ok)
    fprintf(stderr, "  (message was: %s; expected to contain '%s')\n", e ? e : "(null)", needle);
  return ok;
}

/* Compares every tensor of GGUF g with the table entry of the same name; only names accepted by
 * `only` (NULL: all) are compared. Returns the number of tensors compared. */
static int compare_tensors(const gguf *g, const wtable *t, bool (*only)(const char *), const char *what) {
  int n = 0;
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const tensor *a = gguf_tensor_at(g, i);
    if (only && !only(a->name))
      continue;
    const tensor *b = wtable_find((void *)t, a->name);
    CHECK(b != NULL, "%s: tensor '%s' missing from the table", what, a->name);
    if (!b)
      continue;
    bool same_shape = true;
    for (int d = 0; d < TENSOR_MAX_DIMS; d++)
      same_shape &= a->ne[d] == b->ne[d];
    CHECK(same_shape, "%s: '%s' shape {%lld,%lld,%lld,%lld} vs {%lld,%lld,%lld,%lld}", what, a->name,
          (long long)a->ne[0], (long long)a->ne[1], (long long)a->ne[2], (long long)a->ne[3], (long long)b->ne[0],
          (long long)b->ne[1], (long long)b->ne[2], (long long)b->ne[3]);
    CHECK(a->type == b->type, "%s: '%s' type %s vs %s", what, a->name, dtype_name(a->type), dtype_name(b->type));
    CHECK(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "%s: '%s' data differs", what, a->name);
    n++;
  }
  return n;
}

static bool is_matrix_2d(const char *name) {
  return strstr(name, ".weight") && !strstr(name, "norm") && !strstr(name, "ln") && !strstr(name, "patch_embd") &&
         !strstr(name, "position_embd");
}

/* Symlinks every file of src into a fresh directory tmpdir/name, except the file `skip`. */
static const char *clone_dir(const char *name, const char *src, const char *skip) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  mkdir(path, 0700);
  static const char *const files[] = {"config.json",           "model.safetensors",        "tokenizer.json",
                                      "tokenizer_config.json", "chat_template.json",       "preprocessor_config.json",
                                      "generation_config.json"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    if (skip && !strcmp(skip, files[i]))
      continue;
    char from[8192], to[1024];
    snprintf(from, sizeof from, "%s/%s/%s", cwd, src, files[i]);
    snprintf(to, sizeof to, "%s/%s", path, files[i]);
    unlink(to);
    if (symlink(from, to) != 0)
      fprintf(stderr, "symlink %s failed\n", to);
  }
  return path;
}

static void write_file(const char *dir, const char *file, const char *text) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  unlink(p);
  FILE *f = fopen(p, "wb");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* config.json of micro-a with one substitution applied (from -> to). */
static char *micro_a_config(const char *from, const char *to) {
  buf b = {0};
  if (buf_read_file(MODELS "/micro-a/hf/config.json", 1 << 20, &b) != QVL_OK)
    return NULL;
  char *hit = from ? strstr(b.data, from) : NULL;
  size_t n = b.len + (to ? strlen(to) : 0) + 1;
  char *out = malloc(n);
  if (!hit) {
    memcpy(out, b.data, b.len + 1);
  } else {
    size_t pre = (size_t)(hit - b.data);
    memcpy(out, b.data, pre);
    strcpy(out + pre, to);
    strcat(out, hit + strlen(from));
  }
  buf_free(&b);
  return out;
}

/* Expects hf_model_open on micro-a with config.json edited (from -> to) to fail with status s and a
 * message containing needle. */
static void config_error(const char *tag, const char *from, const char *to, qvl_status s, const char *needle) {
  const char *d = clone_dir(tag, MODELS "/micro-a/hf", "config.json");
  char *cfg = micro_a_config(from, to);
  CHECK(cfg && (!from || strstr(cfg, to)), "%s: substitution applied", tag);
  write_file(d, "config.json", cfg ? cfg : "");
  free(cfg);
  hf_model *m = NULL;
  qvl_status got = hf_model_open(d, &m);
  CHECK(got == s, "%s: status %d, expected %d (%s)", tag, (int)got, (int)s, qvl_last_error());
  CHECK(err_has(needle), "%s: message", tag);
  CHECK(m == NULL, "%s: no model on error", tag);
  hf_model_close(m);
}

/* ---- loading ------------------------------------------------------------------------------------- */

static void test_configs(void) {
  struct {
    const char *dir;
    int64_t hidden, layers, heads, kv, head_dim, ff, vocab;
    int sec[3];
    float theta;
    bool tied;
    int64_t v_hidden, v_depth, v_heads, v_ff, n_pos;
    int n_ds;
    int64_t ds0;
    int64_t min_px, max_px;
    int32_t eos0, eos1, img;
  } want[] = {
      {"micro-a", 64, 4, 4, 2, 16, 128, 512, {4, 2, 2}, 10000.0f, false, 32, 4, 2, 64, 64, 3, 0, 8192, 65536, 498, 496, 508},
      {"micro-b", 256, 2, 4, 1, 64, 256, 512, {12, 10, 10}, 5e6f, true, 32, 4, 4, 96, 100, 1, 2, 8192, 65536, 498, 496, 508},
      {"e2e", 32, 2, 2, 1, 16, 64, 151936, {4, 2, 2}, 5e6f, true, 32, 2, 2, 64, 144, 1, 0, 65536, 16777216, 151645,
       151643, 151655},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char dir[256];
    snprintf(dir, sizeof dir, MODELS "/%s/hf", want[i].dir);
    hf_model *m = NULL;
    qvl_status s = hf_model_open(dir, &m);
    CHECK(s == QVL_OK, "%s opens: %s", dir, qvl_last_error());
    if (s != QVL_OK)
      continue;
    const hf_config *c = hf_model_config(m);
    const decoder_hparams *t = &c->text;
    CHECK(t->n_embd == want[i].hidden && t->n_layer == want[i].layers && t->n_head == want[i].heads &&
              t->n_head_kv == want[i].kv && t->head_dim == want[i].head_dim && t->n_ff == want[i].ff &&
              t->n_vocab == want[i].vocab,
          "%s: text shape", dir);
    CHECK(t->rope_sections[0] == want[i].sec[0] && t->rope_sections[1] == want[i].sec[1] &&
              t->rope_sections[2] == want[i].sec[2] && t->rope_sections[3] == 0,
          "%s: mrope sections", dir);
    CHECK(t->rope_theta == want[i].theta && t->rms_eps == 1e-6f, "%s: theta %g eps %g", dir, (double)t->rope_theta,
          (double)t->rms_eps);
    CHECK(c->tie_word_embeddings == want[i].tied, "%s: tied", dir);
    CHECK(c->has_vision && c->vision.n_embd == want[i].v_hidden && c->vision.n_layer == want[i].v_depth &&
              c->vision.n_head == want[i].v_heads && c->vision.n_ff == want[i].v_ff &&
              c->vision.proj_dim == want[i].hidden && c->vision_n_pos == want[i].n_pos,
          "%s: vision shape", dir);
    CHECK(c->n_deepstack == want[i].n_ds && t->n_deepstack == want[i].n_ds && c->deepstack_layers[0] == want[i].ds0,
          "%s: deepstack", dir);
    CHECK(c->vision.eps == 1e-6f && c->vision.image_mean[0] == 0.5f && c->vision.image_std[2] == 0.5f,
          "%s: vision eps/mean/std", dir);
    CHECK(c->min_pixels == want[i].min_px && c->max_pixels == want[i].max_px, "%s: pixels %lld..%lld", dir,
          (long long)c->min_pixels, (long long)c->max_pixels);
    CHECK(c->has_generation && c->n_eos == 2 && c->eos_ids[0] == want[i].eos0 && c->eos_ids[1] == want[i].eos1,
          "%s: generation eos", dir);
    CHECK(c->do_sample && c->top_k == 20 && c->top_p == 0.8f && c->temperature == 0.7f &&
              c->repetition_penalty == 1.0f,
          "%s: sampling defaults", dir);
    CHECK(c->image_token_id == want[i].img, "%s: image token id", dir);
    CHECK(hf_model_chat_template(m) && strstr(hf_model_chat_template(m), "<|im_start|>"), "%s: template", dir);
    CHECK(hf_model_find(m, "model.visual.pos_embed.weight") != NULL, "%s: find", dir);
    CHECK(hf_model_is_dir(dir) && !hf_model_is_dir(MODELS "/e2e/gguf/e2e-Q8_0.gguf"), "%s: is_dir", dir);
    hf_model_close(m);
  }
}

/* The known-template hash must be the hash of the fixture's template file (the only copy). */
static void test_template_hash(void) {
  hf_model *m = NULL;
  const char *d = clone_dir("tpl", MODELS "/micro-a/hf", "chat_template.json");
  write_file(d, "chat_template.json", "{\"chat_template\": \"{{ messages }}\"}");
  log_level lv = log_get_level();
  log_set_level(LOG_ERROR); /* the warning is expected */
  CHECK(hf_model_open(d, &m) == QVL_OK, "another template only warns: %s", qvl_last_error());
  log_set_level(lv);
  CHECK(m && !strcmp(hf_model_chat_template(m), "{{ messages }}"), "template read");
  hf_model_close(m);
}

static void test_tables_match_gguf(void) {
  hf_model *m = NULL;
  if (hf_model_open(MODELS "/micro-a/hf", &m) != QVL_OK) {
    CHECK(0, "micro-a opens: %s", qvl_last_error());
    return;
  }
  wtable *tt = NULL, *vt = NULL;
  CHECK(hf_model_text_weights(m, &tt) == QVL_OK, "text table: %s", qvl_last_error());
  CHECK(hf_model_vision_weights(m, &vt) == QVL_OK, "vision table: %s", qvl_last_error());
  hf_model_close(m); /* the tables hold their own references */
  gguf *g = NULL, *gm = NULL;
  CHECK(gguf_open(MODELS "/micro-a/gguf/micro-a-F32.gguf", &g) == QVL_OK, "gguf");
  CHECK(gguf_open(MODELS "/micro-a/gguf/mmproj-micro-a-F32.gguf", &gm) == QVL_OK, "mmproj");
  if (tt && g) {
    CHECK(compare_tensors(g, tt, NULL, "micro-a text") == 47 && wtable_count(tt) == 47, "47 text tensors");
  }
  if (vt && gm) {
    CHECK(compare_tensors(gm, vt, NULL, "micro-a vision") == 76 && wtable_count(vt) == 76, "76 vision tensors");
  }
  gguf_close(g);
  gguf_close(gm);
  wtable_free(tt);
  wtable_free(vt);
}

/* ---- quantize on load ------------------------------------------------------------------------ */

static void check_convert(const char *hf_dir, bool vision, qvl_dtype to, const char *gguf_path,
                          bool (*only)(const char *), int want_n) {
  hf_model *m = NULL;
  wtable *t = NULL;
  gguf *g = NULL;
  char what[256];
  snprintf(what, sizeof what, "%s -> %s vs %s", hf_dir, dtype_name(to), gguf_path);
  CHECK(hf_model_open(hf_dir, &m) == QVL_OK, "%s: open: %s", what, qvl_last_error());
  if (m)
    CHECK((vision ? hf_model_vision_weights(m, &t) : hf_model_text_weights(m, &t)) == QVL_OK, "%s: table", what);
  if (t)
    CHECK(wtable_convert(t, to, vision ? WTABLE_VISION : WTABLE_TEXT) == QVL_OK, "%s: convert: %s", what,
          qvl_last_error());
  CHECK(gguf_open(gguf_path, &g) == QVL_OK, "%s: gguf", what);
  if (t && g) {
    int n = compare_tensors(g, t, only, what);
    CHECK(n == want_n, "%s: %d tensors compared, expected %d", what, n, want_n);
  }
  gguf_close(g);
  wtable_free(t);
  hf_model_close(m);
}

static void check_gguf_convert(const char *from, qvl_dtype to, const char *want_path, int want_n) {
  gguf *g = NULL, *w = NULL;
  wtable *t = NULL;
  CHECK(gguf_open(from, &g) == QVL_OK, "open %s", from);
  if (g)
    CHECK(wtable_from_gguf(g, &t) == QVL_OK, "table of %s", from);
  if (t)
    CHECK(wtable_convert(t, to, WTABLE_TEXT) == QVL_OK, "convert %s: %s", from, qvl_last_error());
  CHECK(gguf_open(want_path, &w) == QVL_OK, "open %s", want_path);
  if (t && w)
    CHECK(compare_tensors(w, t, NULL, want_path) == want_n, "%s: all tensors", want_path);
  gguf_close(w);
  wtable_free(t);
}

static void test_quantize_on_load(void) {
  /* the README: an HF bf16 checkpoint quantized to Q8_0 on load reproduces the e2e Q8_0 GGUF */
  check_convert(MODELS "/e2e/hf", false, QVL_DTYPE_Q8_0, MODELS "/e2e/gguf/e2e-Q8_0.gguf", NULL, 24);
  check_convert(MODELS "/micro-b/hf", false, QVL_DTYPE_Q8_0, MODELS "/micro-b/gguf/micro-b-Q8_0.gguf", NULL, 24);
  check_convert(MODELS "/micro-b/hf", false, QVL_DTYPE_Q4_0, MODELS "/micro-b/gguf/micro-b-Q4_0.gguf", NULL, 24);
  check_convert(MODELS "/micro-b/hf", false, QVL_DTYPE_Q4_K, MODELS "/micro-b/gguf/micro-b-Q4_K.gguf", NULL, 24);
  /* vision matrices: llama-quantize Q8_0 of the F32 mmproj; the converter's f16 of the bf16 one */
  check_convert(MODELS "/micro-b/hf", true, QVL_DTYPE_Q8_0, MODELS "/micro-b/gguf/mmproj-micro-b-Q8_0.gguf",
                is_matrix_2d, 20);
  check_convert(MODELS "/e2e/hf", true, QVL_DTYPE_F16, MODELS "/e2e/gguf/mmproj-e2e-F16.gguf", is_matrix_2d, 12);
  /* GGUF sources */
  check_gguf_convert(MODELS "/micro-a/gguf/micro-a-F32.gguf", QVL_DTYPE_F16, MODELS "/micro-a/gguf/micro-a-F16.gguf",
                     47);
  check_gguf_convert(MODELS "/micro-a/gguf/micro-a-F32.gguf", QVL_DTYPE_BF16,
                     MODELS "/micro-a/gguf/micro-a-BF16.gguf", 47);
  check_gguf_convert(MODELS "/micro-a/gguf/micro-a-F32.gguf", QVL_DTYPE_Q8_0,
                     MODELS "/micro-a/gguf/micro-a-Q8_0.gguf", 47);
  check_gguf_convert(MODELS "/micro-a/gguf/micro-a-F32.gguf", QVL_DTYPE_Q4_0,
                     MODELS "/micro-a/gguf/micro-a-Q4_0.gguf", 47);

  /* fallbacks for rows that do not fit a block; parsing of --dtype */
  CHECK(wtable_target_type(QVL_DTYPE_Q4_K, 64) == QVL_DTYPE_Q8_0, "q4_k on 64-wide rows -> q8_0");
  CHECK(wtable_target_type(QVL_DTYPE_Q4_K, 256) == QVL_DTYPE_Q4_K, "q4_k on 256-wide rows");
  CHECK(wtable_target_type(QVL_DTYPE_Q8_0, 48) == QVL_DTYPE_F16, "q8_0 on 48-wide rows -> f16");
  qvl_dtype d;
  CHECK(wtable_parse_dtype("Q4_K", &d) && d == QVL_DTYPE_Q4_K && wtable_parse_dtype("bf16", &d) &&
            d == QVL_DTYPE_BF16 && !wtable_parse_dtype("q6_k", &d) && !wtable_parse_dtype("", &d),
        "dtype names");

  /* a model loaded with --dtype runs: e2e BF16 directory as Q8_0 gives the Q8_0 GGUF's logits */
  vlm *a = NULL, *b = NULL;
  vlm_paths pa = {MODELS "/e2e/hf", NULL}, pb = {MODELS "/e2e/gguf/e2e-Q8_0.gguf", NULL};
  vlm_load_opts lo = {.hf_dir = NULL, .dtype = "q8_0"};
  CHECK(vlm_load_with(&pa, &lo, &a) == QVL_OK, "e2e hf as q8_0: %s", qvl_last_error());
  CHECK(vlm_load(&pb, &b) == QVL_OK, "e2e q8_0 gguf: %s", qvl_last_error());
  if (a && b) {
    CHECK(a->text->tok_embd.type == QVL_DTYPE_Q8_0 && a->vision && a->vision->layers[0].qkv.type == QVL_DTYPE_Q8_0,
          "matrices re-encoded");
    int32_t ids[4] = {9707, 11, 1879, 0};
    float ea[4 * 32], eb[4 * 32];
    CHECK(decoder_embed(a->text, ids, 4, ea) == QVL_OK && decoder_embed(b->text, ids, 4, eb) == QVL_OK &&
              !memcmp(ea, eb, sizeof ea),
          "same embeddings");
  }
  vlm_free(a);
  vlm_free(b);
  lo.dtype = "q5_0";
  CHECK(vlm_load_with(&pa, &lo, &a) == QVL_ERR_INVALID_ARG && err_has("q5_0"), "unknown dtype refused");
}

/* ---- shards -------------------------------------------------------------------------------------- */

/* Writes micro-a's weights as two shards + an index into dir; index_json may be overridden. */
static void write_shards(const char *dir, const char *index_override) {
  safetensors *st = NULL;
  if (st_open(MODELS "/micro-a/hf/model.safetensors", &st) != QVL_OK)
    return;
  st_writer *w[2] = {st_writer_init(), st_writer_init()};
  buf ix = {0};
  const char *head = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  buf_append(&ix, head, strlen(head));
  for (int64_t i = 0; i < st_n_tensors(st); i++) {
    const st_tensor *t = st_tensor_at(st, i);
    int k = strstr(t->name, "visual") ? 1 : 0;
    st_writer_add(w[k], t->name, t->dtype, t->n_dims, t->shape, t->data);
    char line[512];
    int n = snprintf(line, sizeof line, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", t->name,
                     k + 1);
    buf_append(&ix, line, (size_t)n);
  }
  buf_append(&ix, "}}", 3);
  char p[1024];
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/model-0000%d-of-00002.safetensors", dir, k + 1);
    st_writer_save(w[k], p);
    st_writer_free(w[k]);
  }
  write_file(dir, "model.safetensors.index.json", index_override ? index_override : ix.data);
  buf_free(&ix);
  st_close(st);
}

static void test_shards(void) {
  const char *d = clone_dir("sharded", MODELS "/micro-a/hf", "model.safetensors");
  write_shards(d, NULL);
  hf_model *m = NULL;
  CHECK(hf_model_open(d, &m) == QVL_OK, "sharded directory opens: %s", qvl_last_error());
  wtable *tt = NULL, *vt = NULL;
  if (m) {
    CHECK(hf_model_text_weights(m, &tt) == QVL_OK && hf_model_vision_weights(m, &vt) == QVL_OK, "tables");
    hf_model_close(m);
  }
  gguf *g = NULL, *gm = NULL;
  gguf_open(MODELS "/micro-a/gguf/micro-a-F32.gguf", &g);
  gguf_open(MODELS "/micro-a/gguf/mmproj-micro-a-F32.gguf", &gm);
  if (tt && vt && g && gm)
    CHECK(compare_tensors(g, tt, NULL, "sharded text") == 47 && compare_tensors(gm, vt, NULL, "sharded vision") == 76,
          "shards hold the same tensors");
  gguf_close(g);
  gguf_close(gm);
  wtable_free(tt);
  wtable_free(vt);

  struct {
    const char *tag, *index, *needle;
  } bad[] = {
      {"ix_json", "{\"weight_map\": ", "not valid JSON"},
      {"ix_empty", "{\"weight_map\": {}}", "weight_map"},
      {"ix_path", "{\"weight_map\": {\"lm_head.weight\": \"../model-00001-of-00002.safetensors\"}}",
       "not a plain file name"},
      {"ix_missing_shard", "{\"weight_map\": {\"lm_head.weight\": \"model-00009-of-00009.safetensors\"}}",
       "shard 'model-00009-of-00009.safetensors'"},
      {"ix_wrong_shard", "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}",
       "puts tensor 'lm_head.weight' in 'model-00002-of-00002.safetensors'"},
      {"ix_unlisted", "{\"weight_map\": {\"lm_head.weight\": \"model-00001-of-00002.safetensors\"}}",
       "does not list"},
      {"ix_value", "{\"weight_map\": {\"lm_head.weight\": 3}}", "weight_map entry 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *bd = clone_dir(bad[i].tag, MODELS "/micro-a/hf", "model.safetensors");
    write_shards(bd, bad[i].index);
    m = NULL;
    CHECK(hf_model_open(bd, &m) != QVL_OK, "%s refused", bad[i].tag);
    CHECK(err_has(bad[i].needle), "%s: message", bad[i].tag);
    hf_model_close(m);
  }
  hf_index ix;
  CHECK(hf_index_parse("{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}", 60, "ix", &ix) ==
                QVL_ERR_FORMAT && err_has("twice"),
        "duplicate index entry");
  CHECK(hf_index_parse("{\"weight_map\": {\"a\": \"x.safetensors\", \"b\": \"y.safetensors\", \"c\": \"x.safetensors\"}}",
                       84, "ix", &ix) == QVL_OK && ix.n_shards == 2 && ix.n_tensors == 3 && ix.shard_of[2] == 0,
        "index with two shards");
  hf_index_free(&ix);
}

/* ---- errors -------------------------------------------------------------------------------------- */

static void test_errors(void) {
  hf_model *m = NULL;
  CHECK(hf_model_open("tests/fixtures/no-such-dir", &m) == QVL_ERR_NOT_FOUND && err_has("not a directory"), "no dir");
  const char *d = clone_dir("nocfg", MODELS "/micro-a/hf", "config.json");
  CHECK(hf_model_open(d, &m) == QVL_ERR_NOT_FOUND && err_has("no config.json"), "no config.json");
  d = clone_dir("notok", MODELS "/micro-a/hf", "tokenizer.json");
  CHECK(hf_model_open(d, &m) == QVL_ERR_NOT_FOUND && err_has("no tokenizer.json"), "no tokenizer.json");
  d = clone_dir("noweights", MODELS "/micro-a/hf", "model.safetensors");
  CHECK(hf_model_open(d, &m) == QVL_ERR_NOT_FOUND && err_has("no model.safetensors or model.safetensors.index.json"),
        "no weights");
  d = clone_dir("badpre", MODELS "/micro-a/hf", "preprocessor_config.json");
  write_file(d, "preprocessor_config.json", "{\"image_mean\": [0.48, 0.45, 0.4], \"image_std\": [0.5, 0.5, 0.5]}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_UNSUPPORTED && err_has("'image_mean': value 0 is 0.48"), "mean refused");
  write_file(d, "preprocessor_config.json", "{\"patch_size\": 14}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_UNSUPPORTED && err_has("patch_size 14"), "patch 14 refused");
  write_file(d, "preprocessor_config.json", "{\"size\": {\"shortest_edge\": 9000, \"longest_edge\": 100}}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_FORMAT && err_has("exceed"), "min > max refused");
  write_file(d, "preprocessor_config.json", "{\"do_normalize\": false}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_UNSUPPORTED && err_has("do_normalize"), "do_normalize false refused");
  d = clone_dir("badgen", MODELS "/micro-a/hf", "generation_config.json");
  write_file(d, "generation_config.json", "{\"eos_token_id\": \"x\"}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_FORMAT && err_has("eos_token_id"), "bad eos");
  write_file(d, "generation_config.json", "{\"top_p\": 3}");
  CHECK(hf_model_open(d, &m) == QVL_ERR_FORMAT && err_has("top_p"), "bad top_p");

  config_error("arch", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", QVL_ERR_UNSUPPORTED,
               "architecture 'Qwen3VLMoeForConditionalGeneration' is not supported");
  config_error("json", "\"text_config\": {", "\"text_config\": {{", QVL_ERR_FORMAT, "not valid JSON");
  config_error("hidden", "\"hidden_size\": 64,", "", QVL_ERR_FORMAT, "missing key 'text_config.hidden_size'");
  config_error("act", "\"silu\"", "\"gelu\"", QVL_ERR_UNSUPPORTED, "'gelu' is not supported");
  config_error("vact", "\"gelu_pytorch_tanh\"", "\"quick_gelu\"", QVL_ERR_UNSUPPORTED, "vision_config.hidden_act");
  config_error("rope", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", QVL_ERR_UNSUPPORTED,
               "'yarn' RoPE scaling is not supported");
  config_error("inter", "\"mrope_interleaved\": true", "\"mrope_interleaved\": false", QVL_ERR_UNSUPPORTED,
               "mrope_interleaved");
  config_error("section", "4,\n    2,\n    2", "4,\n    2", QVL_ERR_FORMAT, "mrope_section");
  config_error("sectsum", "4,\n    2,\n    2", "8,\n    2,\n    2", QVL_ERR_FORMAT, "sum to 12");
  config_error("heads", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", QVL_ERR_FORMAT,
               "not a multiple of num_key_value_heads 3");
  config_error("bias", "\"attention_bias\": false", "\"attention_bias\": true", QVL_ERR_UNSUPPORTED, "attention bias");
  config_error("temporal", "\"temporal_patch_size\": 2", "\"temporal_patch_size\": 3", QVL_ERR_UNSUPPORTED,
               "temporal_patch_size 3");
  config_error("outdim", "\"out_hidden_size\": 64", "\"out_hidden_size\": 48", QVL_ERR_MISMATCH,
               "out_hidden_size 48 differs");
  config_error("ds", "0,\n   1,\n   2", "1,\n   0", QVL_ERR_FORMAT, "deepstack_visual_indexes");
  config_error("vocab", "\"vocab_size\": 512", "\"vocab_size\": -4", QVL_ERR_FORMAT, "text_config.vocab_size");
  /* a tensor shape that contradicts config.json is caught when the decoder binds the weights */
  {
    const char *dd = clone_dir("ffshape", MODELS "/micro-a/hf", "config.json");
    char *cfg = micro_a_config("\"intermediate_size\": 128", "\"intermediate_size\": 96");
    write_file(dd, "config.json", cfg);
    free(cfg);
    vlm *v = NULL;
    vlm_paths p = {dd, NULL};
    CHECK(vlm_load(&p, &v) == QVL_ERR_MISMATCH && err_has("blk.0.ffn_gate.weight': expected shape {64, 96}"),
          "shape mismatch named");
    vlm_free(v);
  }
  /* tied false without an lm_head */
  {
    const char *dd = clone_dir("nohead", MODELS "/micro-b/hf", "config.json");
    buf b = {0};
    buf_read_file(MODELS "/micro-b/hf/config.json", 1 << 20, &b);
    char *p = strstr(b.data, "\"tie_word_embeddings\": true");
    if (p)
      memcpy(p, "\"tie_word_embeddings\": 0   ", 27);
    write_file(dd, "config.json", b.data);
    buf_free(&b);
    CHECK(hf_model_open(dd, &m) == QVL_ERR_FORMAT && err_has("tie_word_embeddings"), "non-bool tie refused");
    b = (buf){0};
    buf_read_file(MODELS "/micro-b/hf/config.json", 1 << 20, &b);
    char *q = b.data;
    while ((q = strstr(q, "\"tie_word_embeddings\": true")))
      memcpy(q, "\"tie_word_embeddings\":false", 27);
    write_file(dd, "config.json", b.data);
    buf_free(&b);
    wtable *t = NULL;
    m = NULL;
    CHECK(hf_model_open(dd, &m) == QVL_OK, "untied micro-b opens");
    if (m)
      CHECK(hf_model_text_weights(m, &t) == QVL_ERR_FORMAT && err_has("no lm_head.weight"), "missing lm_head named");
    wtable_free(t);
    hf_model_close(m);
  }
  /* a stray tensor in the checkpoint */
  {
    const char *dd = clone_dir("stray", MODELS "/micro-a/hf", "model.safetensors");
    safetensors *st = NULL;
    st_open(MODELS "/micro-a/hf/model.safetensors", &st);
    st_writer *w = st_writer_init();
    for (int64_t i = 0; st && i < st_n_tensors(st); i++) {
      const st_tensor *t = st_tensor_at(st, i);
      st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, t->data);
    }
    float x[2] = {1, 2};
    st_writer_add(w, "mtp.proj.weight", ST_F32, 1, (int64_t[]){2}, x);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dd);
    st_writer_save(w, p);
    st_writer_free(w);
    st_close(st);
    m = NULL;
    wtable *t = NULL;
    CHECK(hf_model_open(dd, &m) == QVL_OK, "stray: opens");
    if (m)
      CHECK(hf_model_text_weights(m, &t) == QVL_ERR_UNSUPPORTED && err_has("'mtp.proj.weight'"), "stray tensor named");
    wtable_free(t);
    hf_model_close(m);
  }
  /* the rope_parameters form of newer transformers */
  hf_config c;
  const char *js = "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"text_config\": {\"vocab_size\": 10, "
                   "\"hidden_size\": 8, \"num_hidden_layers\": 1, \"intermediate_size\": 16, \"num_attention_heads\": "
                   "2, \"rms_norm_eps\": 1e-6, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500.0, "
                   "\"mrope_section\": [1, 1, 0]}}}";
  CHECK(hf_config_parse(js, strlen(js), "cfg", &c) == QVL_OK && c.text.rope_theta == 500.0f && c.text.head_dim == 4 &&
            c.text.n_head_kv == 2 && !c.has_vision && c.text.rope_sections[0] == 1,
        "rope_parameters: %s", qvl_last_error());
}

/* ---- convert ------------------------------------------------------------------------------------- */

/* Every key of want (but general.name) exists in got with the same type and value. */
static void compare_kv(const gguf *want, const gguf *got, const char *what) {
  int n = 0;
  for (int64_t i = 0; i < gguf_n_kv(want); i++) {
    const char *k = gguf_key_name(want, i);
    if (!strcmp(k, "general.name"))
      continue;
    int64_t j = gguf_find_key(got, k);
    CHECK(j >= 0, "%s: key '%s' missing", what, k);
    if (j < 0)
      continue;
    gguf_type t = gguf_key_type(want, i);
    CHECK(gguf_key_type(got, j) == t, "%s: key '%s' type %s vs %s", what, k, gguf_type_name(t),
          gguf_type_name(gguf_key_type(got, j)));
    bool same = true;
    if (t == GGUF_TYPE_STRING) {
      size_t la, lb;
      const char *a = gguf_key_str(want, i, &la), *b = gguf_key_str(got, j, &lb);
      same = a && b && la == lb && !memcmp(a, b, la);
    } else if (t == GGUF_TYPE_ARRAY) {
      uint64_t len = gguf_array_len(want, i);
      same = gguf_array_type(got, j) == gguf_array_type(want, i) && gguf_array_len(got, j) == len;
      if (same && gguf_array_type(want, i) == GGUF_TYPE_STRING) {
        for (uint64_t e = 0; same && e < len; e++) {
          size_t la, lb;
          const char *a = gguf_array_str(want, i, e, &la), *b = gguf_array_str(got, j, e, &lb);
          same = la == lb && !memcmp(a, b, la);
          if (!same)
            fprintf(stderr, "  %s[%llu]: '%.*s' vs '%.*s'\n", k, (unsigned long long)e, (int)la, a, (int)lb, b);
        }
      } else if (same) {
        size_t es = gguf_array_type(want, i) == GGUF_TYPE_BOOL || gguf_array_type(want, i) <= GGUF_TYPE_INT8 ? 1
                    : gguf_array_type(want, i) <= GGUF_TYPE_INT16                                          ? 2
                    : gguf_array_type(want, i) >= GGUF_TYPE_UINT64                                         ? 8
                                                                                                           : 4;
        same = !memcmp(gguf_array_data(want, i), gguf_array_data(got, j), es * len);
      }
    } else if (t == GGUF_TYPE_FLOAT32) {
      float a, b;
      same = gguf_get_f32(want, k, &a) == QVL_OK && gguf_get_f32(got, k, &b) == QVL_OK && a == b;
    } else if (t == GGUF_TYPE_BOOL) {
      bool a, b;
      same = gguf_get_bool(want, k, &a) == QVL_OK && gguf_get_bool(got, k, &b) == QVL_OK && a == b;
    } else {
      int64_t a, b;
      same = gguf_get_i64(want, k, &a) == QVL_OK && gguf_get_i64(got, k, &b) == QVL_OK && a == b;
    }
    CHECK(same, "%s: key '%s' value differs", what, k);
    n++;
  }
  CHECK(gguf_n_kv(got) == gguf_n_kv(want), "%s: %lld keys, expected %lld", what, (long long)gguf_n_kv(got),
        (long long)gguf_n_kv(want));
  CHECK(n > 10, "%s: %d keys compared", what, n);
}

static void compare_files(const char *want_path, const char *got_path, bool tensors, bool kv) {
  gguf *w = NULL, *g = NULL;
  CHECK(gguf_open(want_path, &w) == QVL_OK, "open %s", want_path);
  CHECK(gguf_open(got_path, &g) == QVL_OK, "open %s: %s", got_path, qvl_last_error());
  if (w && g) {
    if (kv)
      compare_kv(w, g, want_path);
    if (tensors) {
      wtable *t = NULL;
      gguf *g2 = NULL;
      gguf_open(got_path, &g2);
      if (g2 && wtable_from_gguf(g2, &t) == QVL_OK)
        CHECK(compare_tensors(w, t, NULL, want_path) == gguf_n_tensors(g) && gguf_n_tensors(g) == gguf_n_tensors(w),
              "%s: same tensor set", want_path);
      wtable_free(t);
    }
  }
  gguf_close(w);
  gguf_close(g);
}

static void test_convert(void) {
  char text[512], mm[512];
  snprintf(text, sizeof text, "%s/micro-a-f32.gguf", tmpdir);
  snprintf(mm, sizeof mm, "%s/mmproj-micro-a-f32.gguf", tmpdir);
  hf_convert_opts o = {.outtype = QVL_DTYPE_F32, .out_text = text, .out_mmproj = mm, .name = NULL};
  CHECK(hf_convert(MODELS "/micro-a/hf", &o) == QVL_OK, "convert micro-a f32: %s", qvl_last_error());
  compare_files(MODELS "/micro-a/gguf/micro-a-F32.gguf", text, true, true);
  compare_files(MODELS "/micro-a/gguf/mmproj-micro-a-F32.gguf", mm, true, true);
  /* the converted pair loads and computes what the fixture pair computes */
  vlm *a = NULL, *b = NULL;
  vlm_paths pa = {text, mm}, pb = {MODELS "/micro-a/gguf/micro-a-F32.gguf", MODELS "/micro-a/gguf/mmproj-micro-a-F32.gguf"};
  CHECK(vlm_load(&pa, &a) == QVL_OK, "converted micro-a loads: %s", qvl_last_error());
  CHECK(vlm_load(&pb, &b) == QVL_OK, "fixture micro-a loads");
  if (a && b) {
    vlm_prompt p1, p2;
    const char *txt = "Hello there, how are you?";
    CHECK(vlm_prompt_from_text(a, txt, strlen(txt), &p1) == QVL_OK && vlm_prompt_from_text(b, txt, strlen(txt), &p2) == QVL_OK &&
              p1.n == p2.n && !memcmp(p1.ids, p2.ids, sizeof(int32_t) * (size_t)p1.n),
          "same tokens");
    decoder_seq *s1 = NULL, *s2 = NULL;
    decoder_seq_params sp = {.n_ctx = 64, .n_batch = 0};
    const float *l1 = NULL, *l2 = NULL;
    decoder_input in1 = vlm_prompt_input(&p1), in2 = vlm_prompt_input(&p2);
    CHECK(decoder_seq_init(a->text, &sp, &s1) == QVL_OK && decoder_seq_init(b->text, &sp, &s2) == QVL_OK &&
              decoder_prefill(s1, &in1, NULL, &l1) == QVL_OK && decoder_prefill(s2, &in2, NULL, &l2) == QVL_OK &&
              !memcmp(l1, l2, sizeof(float) * 512),
          "same logits");
    decoder_seq_free(s1);
    decoder_seq_free(s2);
    vlm_prompt_free(&p1);
    vlm_prompt_free(&p2);
  }
  vlm_free(a);
  vlm_free(b);

  /* e2e: the real tokenizer (151,936 rows with [PADn]), q8_0 text = llama-quantize's file, f16 mmproj */
  snprintf(text, sizeof text, "%s/e2e-q8_0.gguf", tmpdir);
  snprintf(mm, sizeof mm, "%s/mmproj-e2e-f16.gguf", tmpdir);
  o = (hf_convert_opts){.outtype = QVL_DTYPE_Q8_0, .out_text = text, .out_mmproj = NULL, .name = NULL};
  CHECK(hf_convert(MODELS "/e2e/hf", &o) == QVL_OK, "convert e2e q8_0: %s", qvl_last_error());
  compare_files(MODELS "/e2e/gguf/e2e-Q8_0.gguf", text, true, true);
  o = (hf_convert_opts){.outtype = QVL_DTYPE_F16, .out_text = NULL, .out_mmproj = mm, .name = NULL};
  CHECK(hf_convert(MODELS "/e2e/hf", &o) == QVL_OK, "convert e2e mmproj f16: %s", qvl_last_error());
  compare_files(MODELS "/e2e/gguf/mmproj-e2e-F16.gguf", mm, true, true);

  /* bad requests */
  o = (hf_convert_opts){.outtype = QVL_DTYPE_Q6_K, .out_text = text, .out_mmproj = NULL, .name = NULL};
  CHECK(hf_convert(MODELS "/e2e/hf", &o) == QVL_ERR_INVALID_ARG && err_has("Q6_K"), "q6_k refused");
  o = (hf_convert_opts){.outtype = QVL_DTYPE_F16, .out_text = NULL, .out_mmproj = NULL, .name = NULL};
  CHECK(hf_convert(MODELS "/e2e/hf", &o) == QVL_ERR_INVALID_ARG, "nothing to write");
  CHECK(hf_convert_file_type(QVL_DTYPE_BF16) == 32 && hf_convert_file_type(QVL_DTYPE_Q8_0) == 7, "file types");
}

static void rm_tree(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- the model's recommended sampling (engine/model_sampling.h) ---------------------------------- */

static bool same_sampling(const sampler_params *p, float temp, float top_p, int32_t top_k, float min_p, float rep) {
  return p->temperature == temp && p->top_p == top_p && p->top_k == top_k && p->min_p == min_p &&
         p->repetition_penalty == rep;
}

static void test_sampling_defaults(void) {
  /* the fixtures carry Qwen3-VL's generation_config.json; without any file it is the same values */
  sampler_params q = model_sampling_qwen3vl();
  CHECK(same_sampling(&q, 0.7f, 0.8f, 20, 0, 1), "Qwen3-VL's recommendation");
  vlm *m = NULL;
  vlm_paths hf = {MODELS "/micro-a/hf", NULL};
  CHECK(vlm_load(&hf, &m) == QVL_OK && same_sampling(&m->sampling, 0.7f, 0.8f, 20, 0, 1),
        "micro-a HF: %s", m ? "values" : qvl_last_error());
  vlm_free(m);
  /* another generation_config.json gives other defaults */
  const char *d = clone_dir("gen", MODELS "/micro-a/hf", "generation_config.json");
  write_file(d, "generation_config.json",
             "{\"do_sample\": true, \"eos_token_id\": [498, 496], \"temperature\": 0.3, \"top_p\": 0.5, "
             "\"top_k\": 7, \"repetition_penalty\": 1.1}");
  vlm_paths other = {d, NULL};
  m = NULL;
  CHECK(vlm_load(&other, &m) == QVL_OK && same_sampling(&m->sampling, 0.3f, 0.5f, 7, 0, 1.1f),
        "edited generation_config.json: %s", m ? "values differ" : qvl_last_error());
  vlm_free(m);
  /* do_sample false is greedy, as in transformers */
  write_file(d, "generation_config.json", "{\"do_sample\": false, \"eos_token_id\": [498, 496], \"temperature\": 0.3}");
  m = NULL;
  CHECK(vlm_load(&other, &m) == QVL_OK && m->sampling.temperature == 0.0f, "do_sample false: greedy");
  vlm_free(m);
  /* no generation_config.json: Qwen3-VL's */
  d = clone_dir("nogen", MODELS "/micro-a/hf", "generation_config.json");
  vlm_paths none = {d, NULL};
  m = NULL;
  CHECK(vlm_load(&none, &m) == QVL_OK && same_sampling(&m->sampling, 0.7f, 0.8f, 20, 0, 1),
        "no generation_config.json: %s", m ? "values" : qvl_last_error());
  vlm_free(m);
  /* a GGUF without general.sampling.* keys: Qwen3-VL's */
  vlm_paths gg = {MODELS "/micro-a/gguf/micro-a-F32.gguf", NULL};
  m = NULL;
  CHECK(vlm_load(&gg, &m) == QVL_OK && same_sampling(&m->sampling, 0.7f, 0.8f, 20, 0, 1),
        "GGUF without sampling keys: %s", m ? "values" : qvl_last_error());
  vlm_free(m);

  /* general.sampling.* keys (llama.cpp's names) override, the others are kept */
  char path[600];
  snprintf(path, sizeof path, "%s/sampling.gguf", tmpdir);
  gguf_writer *w = gguf_writer_init();
  CHECK(w && gguf_writer_set_f32(w, "general.sampling.temp", 0.25f) == QVL_OK &&
            gguf_writer_set_i32(w, "general.sampling.top_k", 40) == QVL_OK &&
            gguf_writer_set_f32(w, "general.sampling.min_p", 0.05f) == QVL_OK &&
            gguf_writer_set_f32(w, "general.sampling.penalty_repeat", 1.05f) == QVL_OK &&
            gguf_writer_save(w, path) == QVL_OK,
        "write a GGUF with sampling keys: %s", qvl_last_error());
  gguf_writer_free(w);
  gguf *g = NULL;
  sampler_params p = model_sampling_qwen3vl();
  CHECK(gguf_open(path, &g) == QVL_OK && model_sampling_from_gguf(g, &p) == QVL_OK &&
            same_sampling(&p, 0.25f, 0.8f, 40, 0.05f, 1.05f),
        "GGUF sampling keys: temp %g top_p %g top_k %d min_p %g rep %g", (double)p.temperature, (double)p.top_p,
        (int)p.top_k, (double)p.min_p, (double)p.repetition_penalty);
  gguf_close(g);
  /* a wrong type or an out-of-range value is an error naming the key; p is left alone */
  static const struct {
    const char *key;
    bool as_string;
    float v;
  } bad[] = {{"general.sampling.top_p", false, 1.5f}, {"general.sampling.penalty_repeat", false, 0.0f},
             {"general.sampling.temp", true, 0}, {"general.sampling.top_k", true, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    w = gguf_writer_init();
    if (bad[i].as_string)
      gguf_writer_set_str(w, bad[i].key, "hot");
    else
      gguf_writer_set_f32(w, bad[i].key, bad[i].v);
    gguf_writer_save(w, path);
    gguf_writer_free(w);
    g = NULL;
    p = model_sampling_qwen3vl();
    qvl_status st = gguf_open(path, &g) == QVL_OK ? model_sampling_from_gguf(g, &p) : QVL_ERR_IO;
    CHECK(st == QVL_ERR_FORMAT && strstr(qvl_last_error(), bad[i].key) && same_sampling(&p, 0.7f, 0.8f, 20, 0, 1),
          "%s: %s: %s", bad[i].key, qvl_status_text(st), qvl_last_error());
    gguf_close(g);
  }
}

int main(void) {
  if (kernels_init(getenv("QVL_ISA"), 0) != QVL_OK) {
    fprintf(stderr, "kernels_init: %s\n", qvl_last_error());
    return 1;
  }
  if (!getcwd(cwd, sizeof cwd))
    return 1;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/qvl_test_hf_XXXXXX");
  if (!mkdtemp(tmpdir))
    return 1;
  test_configs();
  test_template_hash();
  test_tables_match_gguf();
  test_quantize_on_load();
  test_shards();
  test_errors();
  test_convert();
  test_sampling_defaults();
  rm_tree(tmpdir);
  return TEST_SUMMARY("test_hf_model");
}
