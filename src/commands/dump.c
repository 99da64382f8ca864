/*
 * qvl_dump_case (qvl_tools.h), `qvl dump [--hf] CASE.json OUT.safetensors` — runs one fixture case (format in
 * tests/fixtures/README.md) and writes every stage under the names of the case's expected file:
 * preprocessing, vision stages, positions, decoder stages, logits and the greedy continuation (no
 * EOS stop). With --hf the case's Hugging Face directory (model.hf_dir) is loaded instead of its
 * GGUF files.
 */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "engine/vlm.h"
#include "model/safetensors.h"
#include "qvl_tools.h"
#include "text/sampler.h"

typedef struct dump_ctx {
  st_writer *w;
  /* Vision stages of several images are concatenated by rows under one name. */
  struct pending {
    char name[64];
    float *data;
    int64_t rows, cols;
  } pend[128];
  int n_pend;
  qvl_status err;
} dump_ctx;

static void on_trace(void *user, const char *name, const float *data, int64_t rows, int64_t cols) {
  dump_ctx *d = user;
  if (d->err != QVL_OK)
    return;
  /* The per-image vision outputs are written from the prompt (as image_embeds.i / deepstack.i.k). */
  if (!strcmp(name, "image_embeds") || !strncmp(name, "deepstack.", 10) || !strcmp(name, "video_image_embeds") ||
      !strncmp(name, "video_deepstack.", 16))
    return;
  for (int i = 0; i < d->n_pend; i++) {
    struct pending *p = &d->pend[i];
    if (strcmp(p->name, name))
      continue;
    if (p->cols != cols) {
      d->err = qvl_errorf(QVL_ERR_INTERNAL, "trace '%s': %lld columns after %lld", name, (long long)cols,
                          (long long)p->cols);
      return;
    }
    float *grown = realloc(p->data, sizeof(float) * (size_t)((p->rows + rows) * cols));
    if (!grown) {
      d->err = qvl_errorf(QVL_ERR_NOMEM, "out of memory in the dump");
      return;
    }
    memcpy(grown + p->rows * cols, data, sizeof(float) * (size_t)(rows * cols));
    p->data = grown;
    p->rows += rows;
    return;
  }
  if (d->n_pend == (int)(sizeof d->pend / sizeof d->pend[0])) {
    d->err = qvl_errorf(QVL_ERR_INTERNAL, "too many traced tensors");
    return;
  }
  struct pending *p = &d->pend[d->n_pend++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->data = malloc(sizeof(float) * (size_t)(rows * cols));
  if (!p->data) {
    d->err = qvl_errorf(QVL_ERR_NOMEM, "out of memory in the dump");
    return;
  }
  memcpy(p->data, data, sizeof(float) * (size_t)(rows * cols));
  p->rows = rows;
  p->cols = cols;
}

static qvl_status add_f32(st_writer *w, const char *name, const float *data, int64_t rows, int64_t cols) {
  int64_t shape[2] = {rows, cols};
  return st_writer_add(w, name, ST_F32, rows < 0 ? 1 : 2, rows < 0 ? shape + 1 : shape, data);
}

static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static qvl_status add_grids(st_writer *w, const char *name, const vlm_prompt *p, bool videos) {
  int n = 0;
  for (int i = 0; i < p->n_images; i++)
    n += p->images[i].is_video == videos;
  if (n == 0)
    return QVL_OK;
  int32_t *thw = malloc(sizeof *thw * 3 * (size_t)n);
  if (!thw)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int k = 0;
  for (int i = 0; i < p->n_images; i++) {
    if (p->images[i].is_video != videos)
      continue;
    thw[3 * k] = p->images[i].grid_t;
    thw[3 * k + 1] = p->images[i].grid_h;
    thw[3 * k + 2] = p->images[i].grid_w;
    k++;
  }
  int64_t shape[2] = {n, 3};
  qvl_status s = st_writer_add(w, name, ST_I32, 2, shape, thw);
  free(thw);
  return s;
}

/* A video's preprocessing stages (every decoded frame, indices, resized frames, pixel values). */
static qvl_status write_video(st_writer *w, const vlm_image *im, int j) {
  const video_clip *c = &im->clip;
  char name[64];
  if (c->all_rgb) {
    int64_t shape[4] = {c->info.total_frames, c->info.height, c->info.width, 3};
    snprintf(name, sizeof name, "video_rgb.%d", j);
    QVL_TRY(st_writer_add(w, name, ST_U8, 4, shape, c->all_rgb));
  }
  int32_t *idx = malloc(sizeof *idx * (size_t)c->n);
  if (!idx)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  for (int i = 0; i < c->n; i++)
    idx[i] = (int32_t)c->indices[i];
  int64_t n = c->n;
  snprintf(name, sizeof name, "video_frame_indices.%d", j);
  qvl_status s = st_writer_add(w, name, ST_I32, 1, &n, idx);
  free(idx);
  QVL_TRY(s);
  if (c->resized) {
    int64_t shape[4] = {c->n, c->height, c->width, 3};
    snprintf(name, sizeof name, "video_resized.%d", j);
    QVL_TRY(st_writer_add(w, name, ST_U8, 4, shape, c->resized));
  }
  snprintf(name, sizeof name, "pixel_values_videos.%d", j);
  return add_f32(w, name, im->patches.pixel_values, im->patches.n_patches, IMAGE_PATCH_DIM);
}

static qvl_status write_prompt_tensors(st_writer *w, const vlm *m, const vlm_prompt *p) {
  int64_t n = p->n;
  QVL_TRY(st_writer_add(w, "input_ids", ST_I32, 1, &n, p->ids));
  int64_t d = m->text->hp.n_embd;
  QVL_TRY(add_grids(w, "image_grid_thw", p, false));
  QVL_TRY(add_grids(w, "video_grid_thw", p, true));
  if (p->n_videos > 0) {
    /* mm_token_type_ids: 0 text, 1 image pad, 2 video pad */
    int32_t *tt = malloc(sizeof *tt * (size_t)(n ? n : 1));
    if (!tt)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
      tt[i] = p->ids[i] == m->image_pad_id ? 1 : p->ids[i] == m->video_pad_id ? 2 : 0;
    qvl_status s = st_writer_add(w, "mm_token_type_ids", ST_I32, 1, &n, tt);
    free(tt);
    QVL_TRY(s);
  }
  int ni = 0, nv = 0;
  for (int i = 0; i < p->n_images; i++) {
    const vlm_image *im = &p->images[i];
    char name[64];
    const char *emb = im->is_video ? "video_embeds" : "image_embeds", *dsn = im->is_video ? "video_deepstack" : "deepstack";
    int j = im->is_video ? nv++ : ni++;
    if (im->is_video) {
      QVL_TRY(write_video(w, im, j));
    } else {
      int64_t ds[3] = {im->decoded.height, im->decoded.width, 3};
      snprintf(name, sizeof name, "image_rgb.%d", j);
      QVL_TRY(st_writer_add(w, name, ST_U8, 3, ds, im->decoded.data));
      int64_t rs[3] = {im->patches.resized.height, im->patches.resized.width, 3};
      snprintf(name, sizeof name, "image_resized.%d", j);
      QVL_TRY(st_writer_add(w, name, ST_U8, 3, rs, im->patches.resized.data));
      snprintf(name, sizeof name, "pixel_values.%d", j);
      QVL_TRY(add_f32(w, name, im->patches.pixel_values, im->patches.n_patches, IMAGE_PATCH_DIM));
    }
    snprintf(name, sizeof name, "%s.%d", emb, j);
    QVL_TRY(add_f32(w, name, p->img_embd + im->row0 * d, im->n_tokens, d));
    for (int64_t k = 0; k < p->n_deepstack; k++) {
      snprintf(name, sizeof name, "%s.%d.%lld", dsn, j, (long long)k);
      QVL_TRY(add_f32(w, name, p->deepstack + (k * p->n_img + im->row0) * d, im->n_tokens, d));
    }
  }
  int64_t ps[2] = {3, n};
  QVL_TRY(st_writer_add(w, "position_ids", ST_I32, 2, ps, p->pos));
  int32_t delta = (int32_t)p->rope_delta;
  int64_t one = 1;
  return st_writer_add(w, "rope_delta", ST_I32, 1, &one, &delta);
}

/* The case's video settings: video_sampling {fps | num_frames, min_frames, max_frames} and
 * video_min_pixels / video_max_pixels. */
static void video_opts_from_case(const cJSON *c, vlm_prompt_opts *o) {
  const cJSON *vs = cJSON_GetObjectItemCaseSensitive(c, "video_sampling");
  const cJSON *fps = cJSON_GetObjectItemCaseSensitive(vs, "fps");
  const cJSON *nf = cJSON_GetObjectItemCaseSensitive(vs, "num_frames");
  const cJSON *mnf = cJSON_GetObjectItemCaseSensitive(vs, "min_frames");
  const cJSON *mxf = cJSON_GetObjectItemCaseSensitive(vs, "max_frames");
  if (cJSON_IsNumber(nf)) {
    o->video.num_frames = nf->valueint;
    o->video.fps = 0;
  } else if (cJSON_IsNumber(fps)) {
    o->video.fps = fps->valuedouble;
  }
  if (cJSON_IsNumber(mnf))
    o->video.min_frames = mnf->valueint;
  if (cJSON_IsNumber(mxf))
    o->video.max_frames = mxf->valueint;
  const cJSON *mn = cJSON_GetObjectItemCaseSensitive(c, "video_min_pixels");
  const cJSON *mx = cJSON_GetObjectItemCaseSensitive(c, "video_max_pixels");
  if (cJSON_IsNumber(mn))
    o->video.min_pixels = (int64_t)mn->valuedouble;
  if (cJSON_IsNumber(mx))
    o->video.max_pixels = (int64_t)mx->valuedouble;
}

qvl_status qvl_dump_case(const char *case_path, const char *out_path, bool use_hf) {
  buf text = {0};
  QVL_TRY(buf_read_file(case_path, 1 << 26, &text));
  cJSON *c = cJSON_Parse(text.data);
  buf_free(&text);
  if (!c)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: not valid JSON", case_path);
  char *dir_copy = strdup(case_path);
  const char *dir = dir_copy ? dirname(dir_copy) : ".";
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model");
  const char *text_rel = json_str(model, "gguf_text"), *mmproj_rel = json_str(model, "gguf_mmproj");
  const char *hf_rel = json_str(model, "hf_dir");
  qvl_status s = QVL_OK;
  vlm *m = NULL;
  vlm_prompt p = {0};
  dump_ctx dc = {0};
  decoder_seq *seq = NULL;
  sampler *smp = NULL;
  float *logits_all = NULL;
  char text_path[4096], mmproj_path[4096];
  if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(c, "messages")))
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: no 'messages' array", case_path);
  else if (use_hf && !hf_rel)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: the case has no Hugging Face directory (model.hf_dir)", case_path);
  else if (!use_hf && !text_rel)
    s = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: the case has no GGUF text model (model.gguf_text); use --hf",
                   case_path);
  if (s == QVL_OK && use_hf) {
    snprintf(text_path, sizeof text_path, "%s/%s", dir, hf_rel);
    vlm_paths paths = {.model = NULL, .mmproj = NULL};
    vlm_load_opts lo = {.hf_dir = text_path, .dtype = NULL};
    s = vlm_load_with(&paths, &lo, &m);
  } else if (s == QVL_OK) {
    snprintf(text_path, sizeof text_path, "%s/%s", dir, text_rel);
    if (mmproj_rel)
      snprintf(mmproj_path, sizeof mmproj_path, "%s/%s", dir, mmproj_rel);
    vlm_paths paths = {text_path, mmproj_rel ? mmproj_path : NULL};
    s = vlm_load(&paths, &m);
  }
  if (s == QVL_OK) {
    dc.w = st_writer_init();
    if (!dc.w)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  if (s == QVL_OK) {
    vlm_prompt_opts o;
    vlm_prompt_opts_default(&o);
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt");
    o.add_generation_prompt = !cJSON_IsFalse(agp);
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(c, "min_pixels");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(c, "max_pixels");
    if (cJSON_IsNumber(mn))
      o.pre.min_pixels = (int64_t)mn->valuedouble;
    if (cJSON_IsNumber(mx))
      o.pre.max_pixels = (int64_t)mx->valuedouble;
    video_opts_from_case(c, &o);
    o.source.allow_files = true;
    o.source.base_dir = dir;
    o.keep_images = true;
    o.trace = on_trace;
    o.trace_user = &dc;
    s = vlm_prompt_build(m, cJSON_GetObjectItemCaseSensitive(c, "messages"), &o, &p);
  }
  if (s == QVL_OK)
    s = dc.err;
  if (s == QVL_OK)
    s = write_prompt_tensors(dc.w, m, &p);
  const cJSON *gen = cJSON_GetObjectItemCaseSensitive(c, "generation");
  const cJSON *max_new = cJSON_GetObjectItemCaseSensitive(gen, "max_new_tokens");
  int n_gen = cJSON_IsNumber(max_new) ? (int)max_new->valuedouble : 8;
  if (n_gen < 0 || n_gen > 4096)
    n_gen = 8;
  if (s == QVL_OK) {
    decoder_seq_params sp = {.n_ctx = p.n + n_gen + 1, .n_batch = 0};
    s = decoder_seq_init(m->text, &sp, &seq);
  }
  int64_t vocab = m ? m->text->hp.n_vocab : 0;
  if (s == QVL_OK) {
    decoder_seq_set_trace(seq, on_trace, &dc);
    decoder_input in = vlm_prompt_input(&p);
    const float *last = NULL;
    s = decoder_prefill(seq, &in, NULL, &last);
    if (s == QVL_OK)
      s = dc.err;
    decoder_seq_set_trace(seq, NULL, NULL);
    if (s == QVL_OK)
      s = add_f32(dc.w, "logits_last", last, -1, vocab);
    sampler_params spar = sampler_default_params();
    spar.temperature = 0;
    if (s == QVL_OK)
      s = sampler_init(&spar, vocab, &smp);
    int32_t *generated = calloc((size_t)(n_gen ? n_gen : 1), sizeof *generated);
    float *work = malloc(sizeof(float) * (size_t)vocab);
    if (s == QVL_OK && (!generated || !work))
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    for (int i = 0; s == QVL_OK && i < n_gen; i++) {
      memcpy(work, last, sizeof(float) * (size_t)vocab);
      generated[i] = sampler_sample(smp, work);
      if (i + 1 < n_gen)
        s = decoder_step(seq, generated[i], &last);
    }
    int64_t ng = n_gen;
    if (s == QVL_OK)
      s = st_writer_add(dc.w, "generated", ST_I32, 1, &ng, generated);
    free(generated);
    free(work);
  }
  for (int i = 0; s == QVL_OK && i < dc.n_pend; i++)
    s = add_f32(dc.w, dc.pend[i].name, dc.pend[i].data, dc.pend[i].rows, dc.pend[i].cols);
  if (s == QVL_OK)
    s = st_writer_save(dc.w, out_path);
  for (int i = 0; i < dc.n_pend; i++)
    free(dc.pend[i].data);
  free(logits_all);
  sampler_free(smp);
  decoder_seq_free(seq);
  st_writer_free(dc.w);
  vlm_prompt_free(&p);
  vlm_free(m);
  free(dir_copy);
  cJSON_Delete(c);
  return s;
}
