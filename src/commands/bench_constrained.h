#ifndef QVL_COMMANDS_BENCH_CONSTRAINED_H
#define QVL_COMMANDS_BENCH_CONSTRAINED_H
#include <cjson/cJSON.h>

#include "engine/vlm.h"
/* Decode speed with and without a JSON-schema mask at the given batch sizes (steps tokens each):
 * adds "constrained_decode_tok_s", "unconstrained_decode_tok_s", "constrained_ratio" and
 * "mask_ms_per_token" objects keyed by batch size. */
qvl_status bench_constrained(const vlm *m, const int *batch_sizes, int n_sizes, int steps, cJSON *out);
#endif
