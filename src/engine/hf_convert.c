#include "engine/hf_convert.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "model/gguf_write.h"
#include "engine/hf_model.h"
#include "model/wtable.h"
#include "text/tokenizer.h"

#define MAX_TOKENIZER_JSON (256u << 20)

int hf_convert_file_type(qvl_dtype t) {
  switch (t) {
  case QVL_DTYPE_F32: return 0;
  case QVL_DTYPE_F16: return 1;
  case QVL_DTYPE_Q4_0: return 2;
  case QVL_DTYPE_Q8_0: return 7;
  case QVL_DTYPE_Q4_K: return 15;
  case QVL_DTYPE_BF16: return 32;
  default: return -1;
  }
}

/* Converted tensor data kept alive until the file is saved. */
typedef struct pool {
  void **p;
  size_t n, cap;
} pool;

static void *pool_alloc(pool *pl, size_t bytes) {
  if (pl->n == pl->cap) {
    size_t cap = pl->cap ? 2 * pl->cap : 64;
    void **g = realloc(pl->p, sizeof *g * cap);
    if (!g)
      return NULL;
    pl->p = g;
    pl->cap = cap;
  }
  void *m = malloc(bytes ? bytes : 1);
  if (m)
    pl->p[pl->n++] = m;
  return m;
}

static void pool_free(pool *pl) {
  for (size_t i = 0; i < pl->n; i++)
    free(pl->p[i]);
  free(pl->p);
  memset(pl, 0, sizeof *pl);
}

/* One GGUF being written from a weight table (taken): the tensors already placed (every one must
 * be, see check_all_used) and the converted data the writer refers to until it is saved. */
typedef struct out_file {
  wtable *t;
  gguf_writer *w;
  bool *used;
  pool pl;
  qvl_dtype outtype; /* what the matrices become */
} out_file;

/* Adds table tensor `name` to the writer as type `to` (re-encoded through float if it differs). */
static qvl_status put(out_file *f, const char *name, qvl_dtype to) {
  const wtable *t = f->t;
  const tensor *v = wtable_find((void *)t, name);
  if (!v)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: missing tensor '%s'", wtable_label(t), name);
  f->used[wtable_index(t, name)] = true;
  int n_dims = v->n_dims;
  if (to == v->type)
    return gguf_writer_add_tensor_ref(f->w, name, to, n_dims, v->ne, v->data);
  int64_t n_in = v->ne[0], rows = v->ne[1] * v->ne[2] * v->ne[3];
  size_t src_row, dst_row;
  if (!dtype_row_bytes(v->type, n_in, &src_row) || !dtype_row_bytes(to, n_in, &dst_row) ||
      (uint64_t)rows > SIZE_MAX / dst_row || src_row * (size_t)rows > v->nbytes)
    return qvl_errorf(QVL_ERR_FORMAT, "%s: tensor '%s': cannot convert %s to %s", wtable_label(t), name,
                      dtype_name(v->type), dtype_name(to));
  float *tmp = malloc(sizeof(float) * (size_t)n_in);
  char *dst = pool_alloc(&f->pl, dst_row * (size_t)rows);
  if (!tmp || !dst) {
    free(tmp);
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory converting '%s'", name);
  }
  for (int64_t r = 0; r < rows; r++) {
    dtype_dequantize_row(v->type, (const char *)v->data + (size_t)r * src_row, tmp, n_in);
    dtype_quantize_row(to, tmp, dst + (size_t)r * dst_row, n_in);
  }
  free(tmp);
  return gguf_writer_add_tensor_ref(f->w, name, to, n_dims, v->ne, dst);
}

/* A weight matrix, as the output type allows for its row length. */
static qvl_status put_matrix(out_file *f, const char *name) {
  const tensor *v = wtable_find(f->t, name);
  return put(f, name, v ? wtable_target_type(f->outtype, v->ne[0]) : f->outtype);
}

/* Every tensor of the table must have been written: one we did not expect means a checkpoint
 * we do not understand. */
static qvl_status check_all_used(const wtable *t, const bool *used) {
  for (int64_t i = 0; i < wtable_count(t); i++)
    if (!used[i])
      return qvl_errorf(QVL_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in a Qwen3-VL GGUF", wtable_label(t),
                        wtable_at(t, i)->name);
  return QVL_OK;
}

static qvl_status put_general(gguf_writer *w, const char *arch, const char *type, const char *name) {
  QVL_TRY(gguf_writer_set_str(w, "general.architecture", arch));
  QVL_TRY(gguf_writer_set_str(w, "general.type", type));
  QVL_TRY(gguf_writer_set_str(w, "general.name", name));
  return gguf_writer_set_u32(w, "general.quantization_version", 2);
}

/* Starts a file of architecture arch and type from the weight table that weights() gives, with
 * its general.* keys; out_close frees it whatever this returns. */
static qvl_status out_open(hf_model *hf, qvl_status (*weights)(hf_model *, wtable **), const char *arch,
                           const char *type, const char *name, qvl_dtype outtype, out_file *f) {
  *f = (out_file){.outtype = outtype};
  QVL_TRY(weights(hf, &f->t));
  f->w = gguf_writer_init();
  f->used = calloc((size_t)wtable_count(f->t) + 1, sizeof *f->used);
  if (!f->w || !f->used)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  return put_general(f->w, arch, type, name);
}

/* Saves the file to path if s is still QVL_OK and every tensor found its place; frees it either way. */
static qvl_status out_close(out_file *f, qvl_status s, const char *path) {
  if (s == QVL_OK)
    s = check_all_used(f->t, f->used);
  if (s == QVL_OK)
    s = gguf_writer_save(f->w, path);
  pool_free(&f->pl);
  free(f->used);
  gguf_writer_free(f->w);
  wtable_free(f->t);
  return s;
}

static const char *base_name(const char *dir, char *out, size_t cap) {
  const char *s = strrchr(dir, '/');
  snprintf(out, cap, "%s", s && s[1] ? s + 1 : dir);
  return out;
}

/* ---- tokenizer ------------------------------------------------------------------------------------ */

static bool looks_special(const char *s) {
  size_t n = strlen(s);
  static const char *const words[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strcmp(s, words[i]))
      return true;
  if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>"))
    return true;
  /* fullwidth bars: "<｜" ... "｜>" */
  if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>"))
    return true;
  return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

static int32_t added_id(const cJSON *added, const char *content) {
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    if (cJSON_IsString(c) && cJSON_IsNumber(id) && !strcmp(c->valuestring, content))
      return (int32_t)id->valuedouble;
  }
  return -1;
}

/* tokenizer_config.json's <typ>_token: a string or {"content": ...}; its id among the added tokens. */
static int32_t special_from_config(const cJSON *tc, const cJSON *added, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, key);
  if (cJSON_IsObject(v))
    v = cJSON_GetObjectItemCaseSensitive(v, "content");
  return cJSON_IsString(v) ? added_id(added, v->valuestring) : -1;
}

static qvl_status write_tokenizer(gguf_writer *w, hf_model *hf) {
  const hf_config *cfg = hf_model_config(hf);
  const char *dir = hf_model_dir(hf);
  /* Refuses tokenizers that are not the Qwen2 byte-level BPE layout, which "qwen2" promises. */
  tokenizer *tk;
  QVL_TRY(tokenizer_init_hf(hf_model_path(hf, "tokenizer.json"), &tk));
  tokenizer_free(tk);
  buf b = {0}, bc = {0};
  QVL_TRY(buf_read_file(hf_model_path(hf, "tokenizer.json"), MAX_TOKENIZER_JSON, &b));
  cJSON *root = cJSON_ParseWithLength(b.data, b.len);
  buf_free(&b);
  cJSON *tcfg = NULL;
  if (buf_read_file(hf_model_path(hf, "tokenizer_config.json"), 64u << 20, &bc) == QVL_OK)
    tcfg = cJSON_ParseWithLength(bc.data, bc.len);
  buf_free(&bc);
  qvl_status s = QVL_OK;
  int64_t n_vocab = cfg->text.n_vocab;
  char **tokens = calloc((size_t)n_vocab, sizeof *tokens);
  int32_t *types = calloc((size_t)n_vocab, sizeof *types);
  const char **merges = NULL;
  char **merge_buf = NULL;
  int n_merges = 0;
  if (!root)
    s = qvl_errorf(QVL_ERR_FORMAT, "%s/tokenizer.json: not valid JSON", dir);
  if (s == QVL_OK && (!tokens || !types))
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *mj = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  for (const cJSON *e = s == QVL_OK && vocab ? vocab->child : NULL; s == QVL_OK && e; e = e->next) {
    double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (id < 0 || id >= (double)n_vocab || id != floor(id))
      s = qvl_errorf(QVL_ERR_MISMATCH, "%s/tokenizer.json: token '%s' has id %g, outside the vocabulary of %lld "
                     "(text_config.vocab_size)", dir, e->string, id, (long long)n_vocab);
    else if (tokens[(int64_t)id])
      s = qvl_errorf(QVL_ERR_FORMAT, "%s/tokenizer.json: id %lld is given twice", dir, (long long)id);
    else if (!(tokens[(int64_t)id] = strdup(e->string)))
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    else
      types[(int64_t)id] = TOKENIZER_TOKEN_NORMAL;
  }
  for (const cJSON *a = s == QVL_OK && cJSON_IsArray(added) ? added->child : NULL; s == QVL_OK && a; a = a->next) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
    const cJSON *idj = cJSON_GetObjectItemCaseSensitive(a, "id");
    double id = cJSON_IsNumber(idj) ? idj->valuedouble : -1;
    if (!cJSON_IsString(c) || id < 0 || id >= (double)n_vocab || id != floor(id)) {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s/tokenizer.json: an added token has no content or an id outside 0..%lld", dir,
                     (long long)n_vocab - 1);
      break;
    }
    int64_t i = (int64_t)id;
    free(tokens[i]);
    if (!(tokens[i] = strdup(c->valuestring))) {
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
      break;
    }
    types[i] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")) || looks_special(c->valuestring)
                   ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_USER_DEFINED;
  }
  for (int64_t i = 0; s == QVL_OK && i < n_vocab; i++)
    if (!tokens[i]) {
      char pad[32];
      snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
      if (!(tokens[i] = strdup(pad)))
        s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
      types[i] = TOKENIZER_TOKEN_UNUSED;
    }
  int nm = cJSON_IsArray(mj) ? cJSON_GetArraySize(mj) : 0;
  if (s == QVL_OK) {
    merges = calloc((size_t)(nm ? nm : 1), sizeof *merges);
    merge_buf = calloc((size_t)(nm ? nm : 1), sizeof *merge_buf);
    if (!merges || !merge_buf)
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  }
  for (const cJSON *m = s == QVL_OK ? mj->child : NULL; s == QVL_OK && m; m = m->next) {
    /* "a b" (older files) or ["a", "b"] */
    if (cJSON_IsString(m)) {
      merges[n_merges++] = m->valuestring;
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
      size_t la = strlen(m->child->valuestring), lb = strlen(m->child->next->valuestring);
      char *j = malloc(la + lb + 2);
      if (!j) {
        s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
        break;
      }
      memcpy(j, m->child->valuestring, la);
      j[la] = ' ';
      memcpy(j + la + 1, m->child->next->valuestring, lb + 1);
      merge_buf[n_merges] = j;
      merges[n_merges++] = j;
    } else {
      s = qvl_errorf(QVL_ERR_FORMAT, "%s/tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]", dir, n_merges);
    }
  }
  if (s == QVL_OK)
    s = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
  if (s == QVL_OK)
    s = gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
  if (s == QVL_OK)
    s = gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tokens, NULL, (uint64_t)n_vocab);
  if (s == QVL_OK)
    s = gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_vocab);
  if (s == QVL_OK)
    s = gguf_writer_set_str_array(w, "tokenizer.ggml.merges", merges, NULL, (uint64_t)n_merges);
  /* Special ids as gguf-py's SpecialVocab finds them: tokenizer_config.json's <typ>_token, then the
   * config files' <typ>_token_id. */
  int32_t eos = special_from_config(tcfg, added, "eos_token");
  int32_t pad = special_from_config(tcfg, added, "pad_token");
  int32_t bos = special_from_config(tcfg, added, "bos_token");
  if (eos < 0)
    eos = cfg->eos_token_id >= 0 ? cfg->eos_token_id : (cfg->n_eos ? cfg->eos_ids[0] : -1);
  if (pad < 0)
    pad = cfg->gen_pad_id;
  if (bos < 0)
    bos = cfg->bos_token_id >= 0 ? cfg->bos_token_id : cfg->gen_bos_id;
  if (s == QVL_OK && eos >= 0)
    s = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
  if (s == QVL_OK && pad >= 0)
    s = gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
  if (s == QVL_OK && bos >= 0)
    s = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
  static const char *const add_keys[][2] = {{"add_bos_token", "tokenizer.ggml.add_bos_token"},
                                            {"add_eos_token", "tokenizer.ggml.add_eos_token"}};
  for (int i = 0; s == QVL_OK && i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tcfg, add_keys[i][0]);
    if (cJSON_IsBool(v))
      s = gguf_writer_set_bool(w, add_keys[i][1], cJSON_IsTrue(v));
  }
  if (s == QVL_OK && hf_model_chat_template(hf))
    s = gguf_writer_set_str(w, "tokenizer.chat_template", hf_model_chat_template(hf));
  for (int64_t i = 0; tokens && i < n_vocab; i++)
    free(tokens[i]);
  for (int i = 0; merge_buf && i < n_merges; i++)
    free(merge_buf[i]);
  free(tokens);
  free(types);
  free(merges);
  free(merge_buf);
  cJSON_Delete(root);
  cJSON_Delete(tcfg);
  return s;
}

/* ---- keys and tensors both files write ------------------------------------------------------------- */

typedef struct u32_key {
  const char *key;
  int64_t value;
} u32_key;

static qvl_status put_u32s(gguf_writer *w, const u32_key *keys, size_t n) {
  for (size_t i = 0; i < n; i++)
    QVL_TRY(gguf_writer_set_u32(w, keys[i].key, (uint32_t)keys[i].value));
  return QVL_OK;
}

/* <prefix>.weight as a matrix of outtype's kind and <prefix>.bias in F32. */
static qvl_status put_linear(out_file *f, const char *prefix) {
  char n[96];
  snprintf(n, sizeof n, "%s.weight", prefix);
  QVL_TRY(put_matrix(f, n));
  snprintf(n, sizeof n, "%s.bias", prefix);
  return put(f, n, QVL_DTYPE_F32);
}

/* The writers below go on while s is QVL_OK, so that out_close frees what a failure leaves. */
#define TRY(x) \
  if (s == QVL_OK) \
  s = (x)

/* ---- text model ------------------------------------------------------------------------------------ */

static qvl_status write_text(hf_model *hf, const hf_convert_opts *o, const char *name) {
  const decoder_hparams *hp = &hf_model_config(hf)->text;
  out_file f;
  qvl_status s = out_open(hf, hf_model_text_weights, "qwen3vl", "model", name, o->outtype, &f);
  gguf_writer *w = f.w;
  const u32_key shape[] = {{"qwen3vl.block_count", hp->n_layer},
                           {"qwen3vl.context_length", hp->n_ctx_train},
                           {"qwen3vl.embedding_length", hp->n_embd},
                           {"qwen3vl.feed_forward_length", hp->n_ff},
                           {"qwen3vl.attention.head_count", hp->n_head},
                           {"qwen3vl.attention.head_count_kv", hp->n_head_kv}};
  TRY(put_u32s(w, shape, sizeof shape / sizeof shape[0]));
  int32_t sec[4] = {hp->rope_sections[0], hp->rope_sections[1], hp->rope_sections[2], hp->rope_sections[3]};
  TRY(gguf_writer_set_array(w, "qwen3vl.rope.dimension_sections", GGUF_TYPE_INT32, sec, 4));
  TRY(gguf_writer_set_f32(w, "qwen3vl.rope.freq_base", hp->rope_theta));
  TRY(gguf_writer_set_f32(w, "qwen3vl.attention.layer_norm_rms_epsilon", hp->rms_eps));
  const u32_key heads[] = {{"qwen3vl.attention.key_length", hp->head_dim},
                           {"qwen3vl.attention.value_length", hp->head_dim},
                           {"general.file_type", hf_convert_file_type(o->outtype)},
                           {"qwen3vl.n_deepstack_layers", hp->n_deepstack}};
  TRY(put_u32s(w, heads, sizeof heads / sizeof heads[0]));
  TRY(write_tokenizer(w, hf));
  TRY(put_matrix(&f, "token_embd.weight"));
  static const char *const layer[] = {"attn_norm.weight",   "attn_q.weight",      "attn_k.weight",
                                      "attn_v.weight",      "attn_output.weight", "attn_q_norm.weight",
                                      "attn_k_norm.weight", "ffn_norm.weight",    "ffn_gate.weight",
                                      "ffn_up.weight",      "ffn_down.weight"};
  for (int64_t il = 0; s == QVL_OK && il < hp->n_layer; il++)
    for (size_t k = 0; s == QVL_OK && k < sizeof layer / sizeof layer[0]; k++) {
      char n[96];
      snprintf(n, sizeof n, "blk.%lld.%s", (long long)il, layer[k]);
      bool norm = strstr(layer[k], "norm") != NULL;
      s = norm ? put(&f, n, QVL_DTYPE_F32) : put_matrix(&f, n);
    }
  TRY(put(&f, "output_norm.weight", QVL_DTYPE_F32));
  if (s == QVL_OK && wtable_find(f.t, "output.weight"))
    s = put_matrix(&f, "output.weight");
  return out_close(&f, s, o->out_text);
}

/* ---- mmproj ------------------------------------------------------------------------------------------ */

static qvl_status write_mmproj(hf_model *hf, const hf_convert_opts *o, const char *name) {
  const hf_config *c = hf_model_config(hf);
  const vision_hparams *hp = &c->vision;
  out_file f;
  qvl_status s = out_open(hf, hf_model_vision_weights, "clip", "mmproj", name, o->outtype, &f);
  gguf_writer *w = f.w;
  bool *ds = calloc((size_t)hp->n_layer, sizeof *ds);
  if (s == QVL_OK && !ds)
    s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  int64_t side = (int64_t)llround(sqrt((double)c->vision_n_pos));
  if (s == QVL_OK && side * side != c->vision_n_pos)
    s = qvl_errorf(QVL_ERR_FORMAT, "%s: vision_config.num_position_embeddings %lld is not a square", hf_model_dir(hf),
                   (long long)c->vision_n_pos);
  for (int i = 0; s == QVL_OK && i < c->n_deepstack; i++)
    ds[c->deepstack_layers[i]] = true;
  TRY(gguf_writer_set_u32(w, "general.file_type", (uint32_t)hf_convert_file_type(o->outtype)));
  TRY(gguf_writer_set_bool(w, "clip.has_vision_encoder", true));
  const u32_key shape[] = {{"clip.vision.projection_dim", hp->proj_dim},
                           {"clip.vision.image_size", side * hp->patch_size},
                           {"clip.vision.patch_size", hp->patch_size},
                           {"clip.vision.embedding_length", hp->n_embd},
                           {"clip.vision.feed_forward_length", hp->n_ff},
                           {"clip.vision.block_count", hp->n_layer},
                           {"clip.vision.attention.head_count", hp->n_head}};
  TRY(put_u32s(w, shape, sizeof shape / sizeof shape[0]));
  TRY(gguf_writer_set_array(w, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, hp->image_mean, 3));
  TRY(gguf_writer_set_array(w, "clip.vision.image_std", GGUF_TYPE_FLOAT32, hp->image_std, 3));
  TRY(gguf_writer_set_str(w, "clip.projector_type", "qwen3vl_merger"));
  TRY(gguf_writer_set_bool(w, "clip.use_gelu", true));
  TRY(gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", (uint32_t)hp->merge));
  /* The converter copies the text rms_norm_eps here (1e-6, which is also HF's LayerNorm eps). */
  TRY(gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", c->text.rms_eps));
  if (s == QVL_OK) {
    uint8_t *flags = malloc((size_t)hp->n_layer);
    if (!flags) {
      s = qvl_errorf(QVL_ERR_NOMEM, "out of memory");
    } else {
      for (int64_t i = 0; i < hp->n_layer; i++)
        flags[i] = ds[i];
      s = gguf_writer_set_array(w, "clip.vision.is_deepstack_layers", GGUF_TYPE_BOOL, flags, (uint64_t)hp->n_layer);
      free(flags);
    }
  }
  qvl_dtype patch_type = o->outtype == QVL_DTYPE_F16 ? QVL_DTYPE_F16 : QVL_DTYPE_F32;
  TRY(put(&f, "v.patch_embd.weight", patch_type));
  TRY(put(&f, "v.patch_embd.weight.1", patch_type));
  TRY(put(&f, "v.patch_embd.bias", QVL_DTYPE_F32));
  TRY(put(&f, "v.position_embd.weight", QVL_DTYPE_F32));
  static const char *const vec[] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"};
  static const char *const lin[] = {"attn_qkv", "attn_out", "ffn_up", "ffn_down"};
  char n[96];
  for (int64_t il = 0; s == QVL_OK && il < hp->n_layer; il++) {
    for (size_t k = 0; s == QVL_OK && k < 4; k++) {
      snprintf(n, sizeof n, "v.blk.%lld.%s", (long long)il, vec[k]);
      s = put(&f, n, QVL_DTYPE_F32);
    }
    for (size_t k = 0; s == QVL_OK && k < 4; k++) {
      snprintf(n, sizeof n, "v.blk.%lld.%s", (long long)il, lin[k]);
      s = put_linear(&f, n);
    }
  }
  TRY(put(&f, "v.post_ln.weight", QVL_DTYPE_F32));
  TRY(put(&f, "v.post_ln.bias", QVL_DTYPE_F32));
  static const char *const mm[] = {"mm.0", "mm.2"};
  for (int k = 0; s == QVL_OK && k < 2; k++)
    s = put_linear(&f, mm[k]);
  for (int j = 0; s == QVL_OK && j < c->n_deepstack; j++) {
    long long L = (long long)c->deepstack_layers[j];
    snprintf(n, sizeof n, "v.deepstack.%lld.norm.weight", L);
    s = put(&f, n, QVL_DTYPE_F32);
    snprintf(n, sizeof n, "v.deepstack.%lld.norm.bias", L);
    TRY(put(&f, n, QVL_DTYPE_F32));
    static const char *const fc[] = {"fc1", "fc2"};
    for (int k = 0; s == QVL_OK && k < 2; k++) {
      snprintf(n, sizeof n, "v.deepstack.%lld.%s", L, fc[k]);
      s = put_linear(&f, n);
    }
  }
  free(ds);
  return out_close(&f, s, o->out_mmproj);
}

#undef TRY

qvl_status hf_convert(const char *hf_dir, const hf_convert_opts *o) {
  if (hf_convert_file_type(o->outtype) < 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "cannot convert to %s (expected f32, bf16, f16, q8_0, q4_0 or q4_k)",
                      dtype_name(o->outtype));
  if (!o->out_text && !o->out_mmproj)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "nothing to write (no text or mmproj output path)");
  hf_model *hf;
  QVL_TRY(hf_model_open(hf_dir, &hf));
  char nb[256];
  const char *name = o->name ? o->name : base_name(hf_model_dir(hf), nb, sizeof nb);
  qvl_status s = QVL_OK;
  if (o->out_text)
    s = write_text(hf, o, name);
  if (s == QVL_OK && o->out_mmproj) {
    if (!hf_model_config(hf)->has_vision)
      s = qvl_errorf(QVL_ERR_INVALID_ARG, "%s: the model has no vision_config; there is no mmproj to write", hf_dir);
    else
      s = write_mmproj(hf, o, name);
  }
  hf_model_close(hf);
  return s;
}
