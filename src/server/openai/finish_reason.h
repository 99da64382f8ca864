/*
 * The finish_reason of the OpenAI wire format. Calls nothing else in src/server.
 */
#ifndef QVL_SERVER_OPENAI_FINISH_REASON_H
#define QVL_SERVER_OPENAI_FINISH_REASON_H

#include <stddef.h> /* engine/finish.h uses NULL */

#include "engine/finish.h"

/* OpenAI's finish_reason for the engine's: "length" at max_tokens, else "stop" (cancelled and
 * failed requests report their status in the body); NULL while running. */
const char *api_finish_reason(engine_finish f);

#endif
