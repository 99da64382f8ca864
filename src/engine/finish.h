/* Why a request ended, as the engine says it. It stays an enum up to the JSON formatters, each of
 * which writes its own API's words (OpenAI's finish_reason, Ollama's done_reason, the Responses
 * API's status); engine_finish_name is the engine's own word (logs, qvl chat). */
#ifndef QVL_ENGINE_FINISH_H
#define QVL_ENGINE_FINISH_H

typedef enum engine_finish {
  ENGINE_FINISH_NONE,      /* still running (or never started) */
  ENGINE_FINISH_STOP,      /* end of turn (EOS) or a stop string */
  ENGINE_FINISH_LENGTH,    /* max_tokens (or the context) reached */
  ENGINE_FINISH_CANCELLED, /* engine_cancel, on_text returned false, or the engine stopped */
  ENGINE_FINISH_ERROR,     /* failed: engine_result.status and .error say why */
} engine_finish;

/* "stop", "length", "cancelled", "error"; NULL for ENGINE_FINISH_NONE (and unknown values). */
static inline const char *engine_finish_name(engine_finish f) {
  switch (f) {
  case ENGINE_FINISH_STOP: return "stop";
  case ENGINE_FINISH_LENGTH: return "length";
  case ENGINE_FINISH_CANCELLED: return "cancelled";
  case ENGINE_FINISH_ERROR: return "error";
  case ENGINE_FINISH_NONE: break;
  }
  return NULL;
}

#endif
