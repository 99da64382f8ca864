/* Request JSON checks shared by every dialect (see json_field.h). */
#include "server/openai/json_field.h"

#include <stdlib.h>
#include <string.h>

const char *json_type_name(const cJSON *j) {
  static const struct {
    cJSON_bool (*is)(const cJSON *);
    const char *name;
  } types[] = {{cJSON_IsNull, "null"},     {cJSON_IsBool, "a boolean"}, {cJSON_IsNumber, "a number"},
               {cJSON_IsString, "a string"}, {cJSON_IsArray, "an array"}, {cJSON_IsObject, "an object"}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (types[i].is(j))
      return types[i].name;
  return "invalid JSON";
}

bool api_get_bool(const cJSON *obj, const char *name, const char *param, bool *out, api_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!j || cJSON_IsNull(j)) /* OpenAI clients send null for "not set" */
    return true;
  if (!cJSON_IsBool(j)) {
    const char *p = param ? param : name;
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", p, "'%s' must be a boolean, got %s", p, json_type_name(j));
    return false;
  }
  *out = cJSON_IsTrue(j);
  return true;
}

char *api_json_nul_escapes(const char *body, size_t len, bool *nomem) {
  *nomem = false;
  char *copy = NULL;
  size_t run = 0; /* backslashes just before i */
  for (size_t i = 0; i < len; i++) {
    if (body[i] != '\\') {
      run = 0;
      continue;
    }
    /* an escaping backslash is one preceded by an even run of backslashes */
    if (run % 2 == 0 && len - i >= 6 && !memcmp(body + i + 1, "u0000", 5)) {
      if (!copy) {
        if (!(copy = malloc(len + 1))) {
          *nomem = true;
          return NULL;
        }
        memcpy(copy, body, len);
        copy[len] = '\0';
      }
      memcpy(copy + i + 1, "ufffd", 5);
      i += 5;
      run = 0;
      continue;
    }
    run++;
  }
  return copy;
}
