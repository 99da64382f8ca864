/* The reasoning budget of a chat request (see reasoning_field.h). */
#include "server/openai/reasoning_field.h"

#include <math.h>
#include <string.h>

#include "qvl.h"

static const cJSON *present(const cJSON *root, const char *name) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, name);
  return j && !cJSON_IsNull(j) ? j : NULL;
}

bool api_reasoning_parse(const cJSON *root, bool reasoning_model, int64_t default_budget, int64_t *budget,
                         api_error *e) {
  *budget = default_budget;
  const cJSON *mrt = present(root, "max_reasoning_tokens"), *effort = present(root, "reasoning_effort");
  if (!reasoning_model) {
    const char *name = mrt ? "max_reasoning_tokens" : effort ? "reasoning_effort" : NULL;
    if (name) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", name,
                       "'%s' is not supported: the model has no reasoning (its chat template opens no think block)",
                       name);
      return false;
    }
    return true;
  }
  if (mrt) {
    double v = cJSON_IsNumber(mrt) ? mrt->valuedouble : NAN;
    if (!(v >= -1 && v <= API_REASONING_MAX) || v != floor(v)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "max_reasoning_tokens",
                       "'max_reasoning_tokens' must be an integer from -1 (unbounded) to %d", API_REASONING_MAX);
      return false;
    }
    *budget = (int64_t)v;
    return true;
  }
  if (effort) {
    static const struct {
      const char *name;
      int64_t budget;
    } levels[] = {{"none", 0}, {"minimal", 0}, {"low", API_REASONING_LOW}, {"medium", API_REASONING_MEDIUM},
                  {"high", API_REASONING_HIGH}};
    for (size_t i = 0; cJSON_IsString(effort) && i < sizeof levels / sizeof levels[0]; i++)
      if (!strcmp(effort->valuestring, levels[i].name)) {
        *budget = levels[i].budget;
        return true;
      }
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "reasoning_effort",
                     "'reasoning_effort' must be one of none, minimal, low, medium, high");
    return false;
  }
  const cJSON *kw = present(root, "chat_template_kwargs");
  if (kw && !cJSON_IsObject(kw)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "chat_template_kwargs",
                     "'chat_template_kwargs' must be an object");
    return false;
  }
  const cJSON *et = kw ? present(kw, "enable_thinking") : NULL;
  if (et && !cJSON_IsBool(et)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "chat_template_kwargs.enable_thinking",
                     "'chat_template_kwargs.enable_thinking' must be a boolean");
    return false;
  }
  if (cJSON_IsFalse(et))
    *budget = 0;
  return true;
}
