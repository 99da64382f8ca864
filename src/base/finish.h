/* The wire words of a finish, read from QVL_FINISH_LIST in qvl.h (one list: adding a reason or an
 * API is one line or one column there). Each returns NULL where the list says the API has no word
 * (NONE: still running) and for values not in the list. Any thread. */
#ifndef QVL_BASE_FINISH_H
#define QVL_BASE_FINISH_H

#include "qvl.h"

/* OpenAI's finish_reason ("stop", "length"). */
const char *finish_openai(qvl_finish f);
/* Ollama's done_reason ("stop", "length"). */
const char *finish_ollama(qvl_finish f);
/* The Responses API's status ("completed", "incomplete", "failed"). */
const char *finish_responses(qvl_finish f);
/* Anthropic's stop_reason ("end_turn", "stop_sequence", "max_tokens"). */
const char *finish_anthropic(qvl_finish f);

#endif
