/* The output file of qvl batch, which is also its record of what is done: JSON Lines or CSV (by the
 * name's .csv), read back when it exists so that a run goes on where the last one stopped. A last
 * line without its newline (a run killed while writing it) is cut off and its input done again.
 * Every line is flushed as it is written, so a kill -9 loses at most the inputs still running. */
#ifndef QVL_APPS_BATCH_OUT_H
#define QVL_APPS_BATCH_OUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qvl.h"

typedef struct batch_out {
  FILE *f;
  bool csv;
  char **done; /* sorted paths already in the file */
  size_t n_done;
  char err[512]; /* what the last failure was */
} batch_out;

typedef struct batch_line {
  const char *path;
  const char *answer; /* NULL when error is set */
  const char *finish;
  int64_t prompt_tokens, completion_tokens;
  const char *error;  /* NULL on success */
} batch_line;

/* Opens (creating, or reading back and appending to) path. QVL_ERR_IO / ERR_FORMAT (a line that is
 * not this format: not our file), with the message in o->err (as for every function here). */
qvl_status batch_out_open(batch_out *o, const char *path);
/* Whether path's line is already in the file. */
bool batch_out_has(const batch_out *o, const char *path);
qvl_status batch_out_write(batch_out *o, const batch_line *l);
qvl_status batch_out_close(batch_out *o);

#endif
