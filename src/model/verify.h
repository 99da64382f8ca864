/*
 * Model integrity: sha256 of files, the qvl manifest written next to downloaded files, and
 * `qvl verify MODEL`.
 *
 * The manifest (qvl-manifest.json, one per directory) records what a download verified:
 *   {"format": "qvl-manifest", "version": 1, "repo": "Qwen/...", "revision": "main",
 *    "files": [{"path": "x.gguf", "size": 123, "sha256": "<64 hex>"}, ...]}
 * Paths are relative to the manifest's directory. A local file may instead carry a sidecar
 * `FILE.sha256` in sha256sum format ("<64 hex>  name", or the bare hex); a directory may carry
 * a `SHA256SUMS` file in the same format.
 *
 * All functions are thread-safe (no shared state); concurrent writers of one manifest are
 * serialised by the caller (hub.c holds a lock file).
 */
#ifndef QVL_MODEL_VERIFY_H
#define QVL_MODEL_VERIFY_H

#include <stdint.h>
#include <stdio.h>

#include "qvl.h"

#define VERIFY_MANIFEST_NAME "qvl-manifest.json"

/* Streams the file through SHA-256. hex receives 64 lowercase hex digits + NUL; *size the bytes
 * read (may be NULL). */
qvl_status verify_sha256_file(const char *path, char hex[65], uint64_t *size);

/* Checks one file against a recorded size (UINT64_MAX: don't check) and sha256 (NULL or "": don't
 * check). Returns ERR_NOT_FOUND if absent, ERR_MISMATCH with "expected ..., found ..." otherwise. */
qvl_status verify_file(const char *path, uint64_t size, const char *sha256);

/* True if s is 64 hex digits (either case). */
int verify_is_sha256(const char *s);

/* Adds or replaces the entry for rel_path in dir/qvl-manifest.json (created if absent; written to
 * a temporary file and renamed, so a reader never sees half a manifest). repo/revision may be NULL. */
qvl_status verify_manifest_put(const char *dir, const char *repo, const char *revision,
                               const char *rel_path, uint64_t size, const char *sha256);

/* Looks up rel_path in dir/qvl-manifest.json. ERR_NOT_FOUND if there is no manifest or no entry. */
qvl_status verify_manifest_get(const char *dir, const char *rel_path, uint64_t *size, char sha256[65]);

typedef struct verify_report {
  FILE *out;        /* one line per file ("OK ..." / "FAILED ...") when non-NULL */
  unsigned n_files; /* files with a recorded checksum that were checked */
  unsigned n_ok;
  unsigned n_bad;     /* present but size or sha256 differ */
  unsigned n_missing; /* recorded but absent */
} verify_report;

/*
 * `qvl verify MODEL`: MODEL is a file or a directory.
 *  - directory: every entry of its qvl-manifest.json (or SHA256SUMS) is checked;
 *  - file: its FILE.sha256 sidecar, else its entry in the qvl-manifest.json of its directory.
 * Returns QVL_OK when every recorded file matches; ERR_MISMATCH naming the damaged or missing
 * files otherwise; ERR_NOT_FOUND when nothing records a checksum for MODEL. report may be NULL.
 */
qvl_status verify_model(const char *path, verify_report *report);

/*
 * Cheap load-time check (no hashing): if a manifest next to path records its size, the file must
 * have that size. Catches truncated or partially copied files before a parser sees them.
 * QVL_OK when it matches or nothing is recorded.
 */
qvl_status verify_quick(const char *path);

#endif
