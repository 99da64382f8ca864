/* The context policy on the HTTP side (see history_field.h). */
#include "server/openai/history_field.h"

#include <stdio.h>
#include <string.h>

#include "server/openai/chat_wire.h" /* the api_chat_request type; no calls into it */

bool chat_history_parse(const cJSON *root, const server_config *cfg, history_policy *out, api_error *e) {
  *out = history_policy_default();
  if (cfg->history && !history_mode_parse(cfg->history, &out->mode))
    out->mode = HISTORY_ERROR; /* server_config_check refuses anything else */
  out->max_turns = cfg->max_history_turns >= 0 ? (int)cfg->max_history_turns : -1;
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "history");
  if (h && !cJSON_IsNull(h)) {
    if (!cJSON_IsString(h) || !history_mode_parse(h->valuestring, &out->mode)) {
      api_error_status(e, QVL_ERR_INVALID_ARG, "invalid_value", "history",
                    "'history' must be \"error\" (refuse a conversation that does not fit the context) or \"trim\" "
                    "(drop its oldest turns)");
      return false;
    }
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
  const cJSON *mct = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
  out->auto_max_tokens = (!mt || cJSON_IsNull(mt)) && (!mct || cJSON_IsNull(mct));
  return true;
}

bool chat_history_check_images(const api_chat_request *req, const history_policy *p, const server_config *cfg,
                               api_error *e) {
  int64_t cap = cfg->max_images;
  if (p->mode == HISTORY_TRIM)
    cap *= CHAT_HISTORY_IMAGE_FACTOR;
  if (req->n_images <= cap)
    return true;
  if (p->mode == HISTORY_TRIM)
    api_error_status(e, QVL_ERR_INVALID_ARG, "too_many_images", "messages",
                  "the request has %d images; with history trim this server accepts at most %lld per conversation "
                  "(%lld kept)",
                  req->n_images, (long long)cap, (long long)cfg->max_images);
  else
    api_error_status(e, QVL_ERR_INVALID_ARG, "too_many_images", "messages",
                  "the request has %d images; this server accepts at most %lld per request", req->n_images,
                  (long long)cfg->max_images);
  return false;
}

int chat_history_headers(const history_report *r, chat_history_hdr *store, const char **hdr) {
  if (!r->applied || r->dropped_turns == 0)
    return 0;
  snprintf(store->turns, sizeof store->turns, "%d", r->dropped_turns);
  snprintf(store->tokens, sizeof store->tokens, "%lld", (long long)r->dropped_tokens);
  hdr[0] = "X-Qvl-History-Dropped";
  hdr[1] = store->turns;
  hdr[2] = "X-Qvl-History-Dropped-Tokens";
  hdr[3] = store->tokens;
  return 4;
}

void chat_history_add_usage(cJSON *usage, const history_report *r) {
  if (!r->applied)
    return;
  cJSON *h = cJSON_AddObjectToObject(usage, "history");
  if (!h)
    return;
  cJSON_AddStringToObject(h, "policy", history_mode_name(r->mode));
  cJSON_AddNumberToObject(h, "turns", r->turns);
  cJSON_AddNumberToObject(h, "kept_turns", r->kept_turns);
  cJSON_AddNumberToObject(h, "dropped_turns", r->dropped_turns);
  cJSON_AddNumberToObject(h, "dropped_messages", r->dropped_messages);
  cJSON_AddNumberToObject(h, "dropped_images", r->dropped_images);
  cJSON_AddNumberToObject(h, "dropped_tokens", (double)r->dropped_tokens);
}
