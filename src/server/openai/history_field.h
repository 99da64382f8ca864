/*
 * The context policy on the HTTP side (prompt/history.h does the trimming): the request's
 * "history" field ("error" | "trim", default --history), the server's --max-history-turns, whether
 * the client set max_tokens, and how a response reports what was dropped: usage.history and the
 * X-Qvl-History-Dropped header (turns dropped; X-Qvl-History-Dropped-Tokens the prompt tokens they
 * took).
 *
 * Thread safety: reentrant.
 */
#ifndef QVL_SERVER_OPENAI_HISTORY_FIELD_H
#define QVL_SERVER_OPENAI_HISTORY_FIELD_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "prompt/history.h"
#include "server/openai/api_error.h"
#include "server/config/settings.h"

/* The policy of a parsed request body (root). false with e filled (400) on a bad "history". */
bool chat_history_parse(const cJSON *root, const server_config *cfg, history_policy *out, api_error *e);

/* The per-request image cap (--max-images): with trim it applies to what is kept (the engine
 * drops image turns until it holds), and the whole conversation may carry up to
 * CHAT_HISTORY_IMAGE_FACTOR times as many. false with e filled (400 too_many_images). */
#define CHAT_HISTORY_IMAGE_FACTOR 8
typedef struct api_chat_request api_chat_request; /* chat_wire.h */
bool chat_history_check_images(const api_chat_request *req, const history_policy *p, const server_config *cfg,
                               api_error *e);

/* Adds name/value pairs for the report to hdr (at most 4 entries), formatted into store. Returns
 * the entries added (0 when nothing was dropped). */
typedef struct chat_history_hdr {
  char turns[24], tokens[24];
} chat_history_hdr;
int chat_history_headers(const history_report *r, chat_history_hdr *store, const char **hdr);

/* usage.history = {policy, turns, kept_turns, dropped_turns, dropped_messages, dropped_images,
 * dropped_tokens} when a policy ran. */
void chat_history_add_usage(cJSON *usage, const history_report *r);

#endif
