/*
 * Server-sent events framing of the OpenAI streams (and of the Responses API's): one "data:" event
 * per JSON body. Calls nothing else in src/server.
 */
#ifndef QVL_SERVER_OPENAI_SSE_H
#define QVL_SERVER_OPENAI_SSE_H

#include "base/buf.h"
#include "qvl.h"

/* Appends "data: <json>\n\n" (one SSE event; JSON never contains a raw newline). */
qvl_status sse_append(buf *out, const char *json);
/* Appends "event: <type>\ndata: <json>\n\n" (a named event: the Messages and Responses streams). */
qvl_status sse_append_event(buf *out, const char *type, const char *json);
/* Appends "data: [DONE]\n\n". */
qvl_status sse_append_done(buf *out);

#endif
