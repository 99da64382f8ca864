/* Columns of the finish list (see finish.h and QVL_FINISH_LIST in qvl.h). */
#include "base/finish.h"

#include <stddef.h>

#define FINISH_COLUMN(fn, col, unknown)                                                      \
  const char *fn(qvl_finish f) {                                                             \
    switch (f) {                                                                             \
    QVL_FINISH_LIST(col)                                                                     \
    }                                                                                        \
    return unknown;                                                                          \
  }

#define COL_NAME(id, v, name, openai, ollama, responses, anthropic) case QVL_FINISH_##id: return name;
#define COL_OPENAI(id, v, name, openai, ollama, responses, anthropic) case QVL_FINISH_##id: return openai;
#define COL_OLLAMA(id, v, name, openai, ollama, responses, anthropic) case QVL_FINISH_##id: return ollama;
#define COL_RESPONSES(id, v, name, openai, ollama, responses, anthropic) case QVL_FINISH_##id: return responses;
#define COL_ANTHROPIC(id, v, name, openai, ollama, responses, anthropic) case QVL_FINISH_##id: return anthropic;

QVL_API FINISH_COLUMN(qvl_finish_name, COL_NAME, "error")
FINISH_COLUMN(finish_openai, COL_OPENAI, NULL)
FINISH_COLUMN(finish_ollama, COL_OLLAMA, NULL)
FINISH_COLUMN(finish_responses, COL_RESPONSES, NULL)
FINISH_COLUMN(finish_anthropic, COL_ANTHROPIC, NULL)
