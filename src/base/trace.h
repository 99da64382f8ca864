/* Trace hook for dumping intermediate tensors (qvl dump, golden tests). Model code calls it, when set,
 * with a stage name ("vision_hidden.3", "text_hidden.0", ...) and a row-major float matrix
 * data[rows][cols] that is only valid during the call. */
#ifndef QVL_BASE_TRACE_H
#define QVL_BASE_TRACE_H

#include <stdint.h>

typedef void (*trace_fn)(void *user, const char *name, const float *data, int64_t rows, int64_t cols);

#endif
