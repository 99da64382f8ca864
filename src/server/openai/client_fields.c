/* Chat request fields added for other clients (see client_fields.h). */
#include "server/openai/client_fields.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool api_file_part_to_image(cJSON *part, const char *param, api_error *e) {
  const cJSON *file = cJSON_GetObjectItemCaseSensitive(part, "file");
  const cJSON *data = cJSON_IsObject(file) ? cJSON_GetObjectItemCaseSensitive(file, "file_data") : NULL;
  const cJSON *fid = cJSON_IsObject(file) ? cJSON_GetObjectItemCaseSensitive(file, "file_id") : NULL;
  if (fid && !cJSON_IsNull(fid) && !data) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", param,
                  "%s: a file part with 'file_id' needs OpenAI's files API, which qvl does not have; send "
                  "'file_data' as a data:image/... URL",
                  param);
    return false;
  }
  if (!cJSON_IsString(data) || strncmp(data->valuestring, "data:image/", 11)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", param,
                  "%s: a file part must carry an image as 'file.file_data' = \"data:image/...;base64,...\" "
                  "(other files, e.g. PDF, are not supported)",
                  param);
    return false;
  }
  cJSON *url = cJSON_CreateObject();
  if (!url || !cJSON_AddStringToObject(url, "url", data->valuestring)) {
    cJSON_Delete(url);
    api_error_status(e, QVL_ERR_INTERNAL, NULL, NULL, "out of memory");
    return false;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(part, "file"); /* data is gone from here on */
  cJSON_AddItemToObject(part, "image_url", url);
  cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(part, "type"), "image_url");
  return true;
}

bool api_parse_logit_bias(const cJSON *root, sampler_params *sp, api_error *e) {
  const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
  sp->n_bias = 0;
  if (!lb || cJSON_IsNull(lb))
    return true;
  if (!cJSON_IsObject(lb)) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_type", "logit_bias",
                  "'logit_bias' must be an object mapping token ids to biases");
    return false;
  }
  if (cJSON_GetArraySize(lb) > SAMPLER_MAX_BIAS) {
    api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "logit_bias",
                  "'logit_bias' has %d entries; at most %d", cJSON_GetArraySize(lb), SAMPLER_MAX_BIAS);
    return false;
  }
  for (const cJSON *b = lb->child; b; b = b->next) {
    char *end = NULL;
    long id = strtol(b->string, &end, 10);
    if (!b->string[0] || *end || id < 0 || id > 0x7fffffffL) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "logit_bias",
                    "'logit_bias' key '%.40s' is not a token id (a non-negative integer as a string)", b->string);
      return false;
    }
    if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || b->valuedouble < -100 || b->valuedouble > 100) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "logit_bias",
                    "'logit_bias' for token %ld must be a number in [-100, 100]", id);
      return false;
    }
    sp->bias_ids[sp->n_bias] = (int32_t)id;
    sp->bias[sp->n_bias++] = (float)b->valuedouble;
  }
  return true;
}

bool api_refuse_unhonoured(const cJSON *root, api_error *e) {
  static const char *const fields[][2] = {
      {"audio", "qvl answers in text only"},
      {"prediction", "no predicted outputs"},
      {"web_search_options", "no web search"},
      {"verbosity", "no verbosity control"},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, fields[i][0]);
    if (j && !cJSON_IsNull(j)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", fields[i][0], "'%s' is not supported: %s",
                    fields[i][0], fields[i][1]);
      return false;
    }
  }
  const cJSON *mod = cJSON_GetObjectItemCaseSensitive(root, "modalities");
  if (mod && !cJSON_IsNull(mod)) {
    bool text_only = cJSON_IsArray(mod);
    for (const cJSON *m = cJSON_IsArray(mod) ? mod->child : NULL; m; m = m->next)
      text_only &= cJSON_IsString(m) && !strcmp(m->valuestring, "text");
    if (!text_only) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "unsupported_parameter", "modalities",
                    "'modalities' may only be [\"text\"]: qvl answers in text only");
      return false;
    }
  }
  return true;
}
