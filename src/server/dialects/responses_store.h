/*
 * Stored Responses API conversations, for previous_response_id: response id -> the conversation so
 * far as chat messages (a printed JSON array: earlier turns, this turn's input, this answer) in
 * their processed form: each image the prompt held is a "qvl-media:<key>" URL answered from the
 * entry's media table (resp_media: the image's header facts, pixel hash and one reference to its
 * encoded bytes, shared with the requests that continue the conversation), never its data URL. A
 * follow-up therefore fetches, base64-decodes and header-reads nothing again, and decodes pixels
 * only when the engine has neither the image's embeddings nor the conversation's KV any more.
 * In memory only, bounded three ways: entries, bytes (JSON + the images' encoded bytes) and age;
 * the least recently used entry goes first. A continued conversation is re-rendered into the same
 * prompt tokens, so the engine's prefix cache reuses its KV.
 *
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef QVL_SERVER_DIALECTS_RESPONSES_STORE_H
#define QVL_SERVER_DIALECTS_RESPONSES_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "prompt/prompt.h"
#include "qvl.h"

#define RESP_STORE_ID_CAP 64

typedef struct resp_store resp_store;

/* A stored conversation's images (reference counted: the entry and each request continuing it hold
 * one). */
typedef struct resp_media resp_media;

/* A table of n items, zeroed, with one reference (NULL when out of memory). */
resp_media *resp_media_new(int n);
resp_media *resp_media_ref(resp_media *m);
void resp_media_unref(resp_media *m);
/* Item i (0 <= i < resp_media_count); its bytes reference belongs to the table. */
prompt_media_ref *resp_media_item(resp_media *m, int i);
int resp_media_count(const resp_media *m);
/* prompt_opts.resolve_media over a table (user is the resp_media). */
bool resp_media_resolve(void *user, uint64_t bytes_key, prompt_media_ref *out);

qvl_status resp_store_init(int max_entries, size_t max_bytes, double ttl_s, resp_store **out);
void resp_store_free(resp_store *s);
/* Stores a copy of messages_json under id (replacing an entry with that id), evicting the least
 * recently used entries to make room. QVL_ERR_TOO_LARGE when it alone exceeds max_bytes. */
qvl_status resp_store_put(resp_store *s, const char *id, const char *messages_json, double now);
/* The same with the conversation's media table (taken, may be NULL); its encoded bytes count
 * against max_bytes. */
qvl_status resp_store_put_media(resp_store *s, const char *id, const char *messages_json, resp_media *media,
                                double now);
/* A malloc'd copy of the stored messages, or NULL when the id is unknown or expired. */
char *resp_store_get(resp_store *s, const char *id, double now);
/* The same; *media receives a reference to the entry's media table (NULL when it has none). */
char *resp_store_get_media(resp_store *s, const char *id, double now, resp_media **media);
/* Entries and bytes held now (tests, metrics). */
void resp_store_usage(resp_store *s, int *entries, size_t *bytes);

#endif
