/*
 * Chat request fields added for clients beyond OpenAI's own SDK (called from api_chat_parse):
 *
 *   - the `file` content part carrying image data, as LlamaIndex sends images:
 *     {"type":"file","file":{"file_data":"data:image/png;base64,...","filename":...}} becomes an
 *     image_url part; a file_id (files API) or non-image data answers 400;
 *   - `logit_bias` {"TOKEN_ID": bias in [-100, 100], ...} (at most SAMPLER_MAX_BIAS entries),
 *     added to the logits before sampling (-100 in effect bans a token, +100 forces it);
 *   - fields of OpenAI's platform that qvl does not honour (audio output, predicted outputs,
 *     web search, verbosity, non-text modalities) answer 400 naming them instead of
 *     being ignored.
 */
#ifndef QVL_SERVER_OPENAI_CLIENT_FIELDS_H
#define QVL_SERVER_OPENAI_CLIENT_FIELDS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "server/openai/api_error.h"
#include "text/sampler.h"

/* Rewrites a `file` part with image data into an image_url part in place. */
bool api_file_part_to_image(cJSON *part, const char *param, api_error *e);
/* Parses root.logit_bias (absent or null: none) into sp. */
bool api_parse_logit_bias(const cJSON *root, sampler_params *sp, api_error *e);
/* 400 for a field qvl does not honour. */
bool api_refuse_unhonoured(const cJSON *root, api_error *e);

#endif
