/*
 * The routing key of a conversation (the X-Qvl-Session response header, docs/DEPLOY.md): what a
 * balancer hashes so that every turn of one conversation reaches the replica whose image and
 * prefix caches hold it. In order of preference:
 *   1. the client's X-Session-Id header, as sent when it is 1..128 of [A-Za-z0-9._:-]
 *      (any other value: "h-" + a hash of it);
 *   2. the request's "user" field: "u-" + a hash of it (the user's name is not echoed);
 *   3. "c-" + a hash of the conversation's first turn (the messages up to and including the first
 *      user message): the same for every later turn of that conversation, since each turn resends
 *      the history.
 * Thread safety: pure functions.
 */
#ifndef QVL_SERVER_HTTP_SESSION_H
#define QVL_SERVER_HTTP_SESSION_H

#include <cjson/cJSON.h>

#define SESSION_KEY_CAP 132

/* header: the X-Session-Id value or NULL; root: the parsed request body (may be NULL). */
void session_key(const char *header, const cJSON *root, char out[SESSION_KEY_CAP]);

#endif
