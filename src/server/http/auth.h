/*
 * API keys (--api-key): whether a request carries one of them, and the owner of the jobs it makes
 * and sees (a hash of its key, jobs.h).
 */
#ifndef QVL_SERVER_HTTP_AUTH_H
#define QVL_SERVER_HTTP_AUTH_H

#include <microhttpd.h>
#include <stdbool.h>

#include "server/http/server_state.h"

/* True without configured keys, or with "Authorization: Bearer KEY" for one of them (compared in
 * constant time in the key's content). */
bool auth_key_ok(server *s, struct MHD_Connection *c);
/* The caller's job owner: "" without keys. Called after auth_key_ok. */
void auth_owner(server *s, struct MHD_Connection *c, char out[JOBS_OWNER_CAP]);

#endif
