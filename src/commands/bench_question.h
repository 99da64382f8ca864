/* `qvl bench`'s time to first token of one media question, shared by the image and video rows: a
 * user message of one media part and a text goes through prompt building (fetch, decode,
 * preprocess, vision tower) and a one-token greedy generate. */
#ifndef QVL_COMMANDS_BENCH_QUESTION_H
#define QVL_COMMANDS_BENCH_QUESTION_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "engine/vlm.h"

typedef struct bench_question_times {
  double total_ms;      /* prompt building to the first token */
  double total_cpu_ms;  /* the same span in process CPU time, every thread counted */
  double preprocess_ms; /* decode + preprocess of the media */
  double vision_ms;     /* the vision tower */
  double prefill_ms;    /* the decoder over the prompt */
  int64_t prompt_tokens;
} bench_question_times;

/* The messages of one user question: a part_type part ("image_url" or "video_url") with url when url
 * is non-NULL, then the question's text. */
cJSON *bench_question_messages(const char *part_type, const char *url, const char *question);
/* part_type is "image_url" or "video_url"; url the media (a data: URL); po the prompt options (NULL:
 * the defaults). */
qvl_status bench_first_token(const vlm *m, const char *part_type, const char *url, const char *question,
                             const vlm_prompt_opts *po, bench_question_times *t);

#endif
