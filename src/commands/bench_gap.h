#ifndef QVL_COMMANDS_BENCH_GAP_H
#define QVL_COMMANDS_BENCH_GAP_H
#include <cjson/cJSON.h>

#include "engine/vlm.h"
/* The largest gap between two tokens of a streaming answer while another request's 1024x768 image
 * is encoded, with the engine's default vision slicing and with the whole image in one step: adds
 * "stream_gap_ms" and "stream_gap_vision_ms" objects keyed by the mode. Needs a vision tower. */
qvl_status bench_stream_gap(const vlm *m, cJSON *out);
#endif
