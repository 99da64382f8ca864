/*
 * The operator-facing side of `qvl serve` settings (settings.h has the table):
 *  - config files in the nested, transformers-style layout that deployments of Qwen3-VL use
 *    (sections model: / generation: / system: ..., keys such as max_new_tokens, context_length,
 *    torch_dtype, max_wait_time, cpu_affinity, process_priority), rewritten onto our flat keys;
 *    keys that mean nothing for qvl (device_map, offload_folder, use_cache, cache_type,
 *    swap_size_gb) are dropped with one warning naming them; other unknown keys still fail with
 *    their line number (docs/API.md, "Config file mapping");
 *  - checks of the settings whose range is not a plain number or a list of names (history,
 *    log_format, cpu_affinity; the others are checked as they are read, qvl_options.h).
 *
 * Thread safety: reentrant (warnings go through base/log).
 */
#ifndef QVL_SERVER_CONFIG_CONFIG_FILES_H
#define QVL_SERVER_CONFIG_CONFIG_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "qvl.h"

struct server_config;

/* Appends v as a YAML double-quoted string ('"' and '\\' escaped, control bytes as \xHH). */
void config_yaml_quote(buf *b, const char *v);

/* Rewrites a nested / aliased YAML config into the flat form server_config_apply_yaml reads, with
 * every setting on the line it came from (so later errors keep their line numbers). *rewritten is
 * false (and out untouched) when the text needs no rewriting or is not a mapping at all; the flat
 * parser then reports on the original. `name` is used in messages. ignored_out (may be NULL)
 * receives the ignored keys, comma-separated. */
qvl_status config_yaml_normalize(const char *text, size_t len, const char *name, buf *out, bool *rewritten,
                                 buf *ignored_out);

/* model / mmproj and hf name the model two ways: when the environment (env, argc 0) or the flags
 * (argv, env NULL) choose one, what a lower source chose is forgotten, so `--config seeds.yaml -m
 * x.gguf` works although the file names a Hugging Face repository. */
void config_ops_model_choice(struct server_config *c, int argc, char **argv, int first, const char *(*env)(const char *));

/* The checks beyond each setting's own range (called by server_config_check). */
qvl_status config_ops_check(struct server_config *c);

#endif
