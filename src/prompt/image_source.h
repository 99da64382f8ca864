/*
 * Where image bytes come from: a data: URL (what OpenAI clients send), a local file (the CLI and
 * fixture cases; relative to a base directory, and only when the caller allows files), or an
 * http(s) URL (only when the caller allows it; fetched by a separate fetcher).
 */
#ifndef QVL_PROMPT_IMAGE_SOURCE_H
#define QVL_PROMPT_IMAGE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/stop.h"
#include "qvl.h"

typedef struct image_source_opts {
  bool allow_files;     /* plain paths and file:// URLs */
  const char *base_dir; /* relative paths are resolved against it (NULL = current directory) */
  size_t max_bytes;     /* cap on the encoded image (0 = 32 MiB) */
  /* http(s): called when non-NULL; must respect max_bytes. NULL = remote URLs are refused. */
  qvl_status (*fetch_remote)(void *user, const char *url, size_t max_bytes, buf *out);
  void *fetch_user;
  /* The same with a stop check (used instead of fetch_remote when set): a download that is no
   * longer wanted (client gone, deadline, shutdown) ends at once. stop comes from the fields below. */
  qvl_status (*fetch_remote_stoppable)(void *user, const char *url, size_t max_bytes, qvl_stop_fn stop,
                                       void *stop_user, buf *out);
  qvl_stop_fn stop;
  void *stop_user;
} image_source_opts;

/* Reads the bytes the URL points to into out (replacing its contents). Errors name the URL (data:
 * URLs abbreviated) and say what is allowed. */
qvl_status image_source_read(const char *url, const image_source_opts *o, buf *out);

#endif
