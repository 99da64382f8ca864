/*
 * Stored Responses API conversations, for previous_response_id: response id -> the conversation so
 * far as chat messages (a printed JSON array: earlier turns, this turn's input, this answer).
 * In memory only, bounded three ways: entries, bytes (images are stored as their data URLs) and
 * age; the least recently used entry goes first. A continued conversation is re-rendered into the
 * same prompt tokens, so the engine's prefix cache reuses its KV.
 *
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef QVL_SERVER_RESP_STORE_H
#define QVL_SERVER_RESP_STORE_H

#include <stddef.h>

#include "qvl.h"

#define RESP_STORE_ID_CAP 64

typedef struct resp_store resp_store;

qvl_status resp_store_init(int max_entries, size_t max_bytes, double ttl_s, resp_store **out);
void resp_store_free(resp_store *s);
/* Stores a copy of messages_json under id (replacing an entry with that id), evicting the least
 * recently used entries to make room. QVL_ERR_TOO_LARGE when it alone exceeds max_bytes. */
qvl_status resp_store_put(resp_store *s, const char *id, const char *messages_json, double now);
/* A malloc'd copy of the stored messages, or NULL when the id is unknown or expired. */
char *resp_store_get(resp_store *s, const char *id, double now);
/* Entries and bytes held now (tests, metrics). */
void resp_store_usage(resp_store *s, int *entries, size_t *bytes);

#endif
