/*
 * The engine as the server's files reach it outside a submit: cancelling a request through the
 * attached server_backend (server.h), a no-op once the drain has detached it. Calls nothing else
 * in src/server.
 */
#ifndef QVL_SERVER_HTTP_BACKEND_H
#define QVL_SERVER_HTTP_BACKEND_H

#include <stdint.h>

#include "server/http/server_state.h"

/* Cancels engine request id, if the backend is still attached (takes be_lock for reading). */
void backend_cancel(server *s, uint64_t id);

#endif
