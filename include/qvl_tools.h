/*
 * qvl tools — the programs of the qvl command line that are not a conversation with the model:
 * the HTTP service, model file tools (convert, verify, make-random), the golden-fixture dumper and
 * the benchmark. Each takes options already parsed and does the whole job, printing what the
 * command prints (results on stdout, progress on stderr). Chat programs need only qvl.h.
 *
 * Return codes as in qvl.h (qvl_last_error() says more), except qvl_serve, which returns a
 * process exit code because its options are parsed inside the library (flags > environment >
 * YAML file, src/server/config/settings.c, over the option table of qvl_options.h). None of
 * them exits the process.
 *
 * Thread safety: each runs model code on the calling thread and sets process-wide state (kernel
 * threads, signal masks for qvl_serve): call one at a time, from the main thread.
 */
#ifndef QVL_TOOLS_H
#define QVL_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qvl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `qvl serve`: argv[first..argc) are the serve flags (docs/API.md; --help prints them). Runs the
 * OpenAI-compatible service until SIGINT/SIGTERM, then drains. Returns 0, 1 (failed to start or
 * load) or 2 (bad settings). */
QVL_API int qvl_serve(int argc, char **argv, int first);

/* Finds the files of a Hugging Face repository spec "REPO[:QUANT]" in the download cache, or
 * downloads them there first (not with offline). GGUF repositories: *model is the text GGUF and
 * *mmproj the projector (NULL if the repository has none); safetensors repositories: *model is
 * the snapshot directory (load it with mmproj NULL) and *mmproj NULL. Both free with qvl_free.
 * QVL_ERR_NOT_FOUND, ERR_IO (network, named). One call at a time. */
QVL_API qvl_status qvl_hf_resolve(const char *spec, bool offline, char **model, char **mmproj);

/* `--hf SPEC` as every command takes it: qvl_hf_resolve into *own_model / *own_mmproj (free with
 * qvl_free), then *model = the file or directory to load and, when *mmproj is NULL, *mmproj = the
 * repository's projector. Returns an exit code: 0, 1 (not resolved) or 2 (a --mmproj given for a
 * checkpoint that holds its vision tower), after printing "qvl: ..." on stderr. */
QVL_API int qvl_hf_files(const char *spec, bool offline, const char **model, const char **mmproj, char **own_model,
                         char **own_mmproj);

/* `qvl convert`: a Hugging Face directory to llama.cpp GGUF files. outtype NULL: f16; else a
 * qvl_dtype_valid name. At least one of out_text / out_mmproj. name: general.name (NULL: from the
 * directory). A failed conversion leaves no output file. */
QVL_API qvl_status qvl_convert(const char *hf_dir, const char *outtype, const char *out_text, const char *out_mmproj,
                               const char *name);

typedef struct qvl_verify_counts {
  unsigned n_files, n_ok, n_bad, n_missing;
} qvl_verify_counts;

/* `qvl verify`: checks a model file or directory (path), or the cached files of a Hugging Face
 * spec (hf; never downloads), against their recorded sha256; one line per file on out (may be
 * NULL). QVL_ERR_MISMATCH when a file is damaged or missing; counts are filled either way. */
QVL_API qvl_status qvl_verify(const char *path, const char *hf, FILE *out, qvl_verify_counts *counts);

typedef struct qvl_random_opts {
  const char *tokenizer_from; /* GGUF whose tokenizer the text model gets (needed with out_text) */
  const char *out_text, *out_mmproj;
  const char *text_type;      /* f32 f16 bf16 q8_0 q4_0 q4_k (NULL: q8_0) */
  const char *mmproj_type;    /* f32 f16 q8_0 (NULL: f16) */
  uint64_t seed;
  bool tiny;                  /* small shapes instead of the 2B ones */
  const char *chat_template;  /* a file whose text becomes tokenizer.chat_template (e.g. the Thinking
                               * template: a reasoning model); NULL: the tokenizer source's */
} qvl_random_opts;

/* `qvl make-random`: random-weight model files with the shapes of Qwen3-VL-2B (benchmarks).
 * QVL_ERR_INVALID_ARG for an unknown type or a missing tokenizer_from. */
QVL_API qvl_status qvl_make_random(const qvl_random_opts *o);

/* `qvl dump`: runs one golden fixture case (tests/fixtures/README.md) and writes every stage
 * into a safetensors file; use_hf loads the case's Hugging Face directory instead of its GGUFs. */
QVL_API qvl_status qvl_dump_case(const char *case_json, const char *out_safetensors, bool use_hf);

typedef struct qvl_bench_opts {
  const char *model, *mmproj;
  int threads;
  int n_prefill, n_decode, n_batch_steps;
  int batch_sizes[8], n_batch_sizes;
  int decode_at[8], n_decode_at; /* decode n_decode tokens after each of these context lengths */
  bool constrained;           /* the constrained-decoding rows */
  bool json, skip_vision, image_stages;
  bool stream_gap;            /* only: a stream's largest token gap while a 1024x768 image is encoded */
  bool video_only;            /* only the video row: a 10 s 640x360 clip at 2 fps (issue 23) */
  const char *video_file;     /* that row on this clip instead of the synthetic one (NULL: synthetic) */
} qvl_bench_opts;

/* The kernels keep their tuning (docs/KERNELS.md "Tuning") in the cache folder's tuning/ (QVL_CACHE,
 * else XDG_CACHE_HOME/qvl or ~/.cache/qvl), reused by later starts on the same CPU. Without this
 * call a process measures again at each start. */
QVL_API qvl_status qvl_tune_use_cache(void);
/* `qvl tune`: forgets the tuning of this CPU, measures every weight shape of the model again
 * (threads <= 0: the default) and prints the table on out. */
QVL_API qvl_status qvl_tune(const char *model, const char *mmproj, int threads, FILE *out);

/* prefill 512, decode 128, 32 batch steps, batches 1 2 4 8, constrained rows on. */
QVL_API void qvl_bench_opts_default(qvl_bench_opts *o);
/* `qvl bench`: stage-by-stage speed and batched decode throughput; a table (or JSON) on stdout. */
QVL_API qvl_status qvl_bench(const qvl_bench_opts *o);

#ifdef __cplusplus
}
#endif
#endif
