/* OpenAI's finish_reason (see finish_reason.h). */
#include "server/openai/finish_reason.h"

#include <stddef.h>

const char *api_finish_reason(engine_finish f) {
  switch (f) {
  case ENGINE_FINISH_NONE: return NULL;
  case ENGINE_FINISH_LENGTH: return "length";
  case ENGINE_FINISH_STOP:
  case ENGINE_FINISH_CANCELLED:
  case ENGINE_FINISH_ERROR: break;
  }
  return "stop";
}
