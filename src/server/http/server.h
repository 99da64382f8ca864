/*
 * The HTTP server of `qvl serve`: libmicrohttpd with one thread per connection (a handler may
 * block until its request is done; the engine runs on its own thread), the OpenAI endpoints,
 * async jobs, metrics, health and the embedded web UI. docs/API.md describes the endpoints.
 *
 * The server talks to the engine through a server_backend (engine_submit / engine_cancel /
 * engine_get_stats, or a fake in tests), attached once the model is loaded: the listener comes up
 * first, and until server_set_ready /health answers 503 {"status":"loading"}.
 *
 *     server *s;
 *     server_start(&cfg, &s);                  // listening; /health says loading
 *     ... load the model, start the engine ...
 *     server_set_ready(s, &backend, ids, n);   // ids[0] is the model id shown in /v1/models
 *     ... wait for SIGTERM ...
 *     server_drain(s, 60);                     // stop accepting, let requests finish, detach
 *     engine_stop(e, true);
 *     server_stop(s);
 *
 * Thread safety: server_set_ready, server_drain and server_stop are called by one controlling
 * thread; the backend's functions are called from connection threads.
 */
#ifndef QVL_SERVER_HTTP_SERVER_H
#define QVL_SERVER_HTTP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "qvl.h"
#include "server/config/settings.h"

typedef struct server_backend {
  qvl_status (*submit)(void *ctx, const engine_request *r, uint64_t *id);
  void (*cancel)(void *ctx, uint64_t id);
  void (*stats)(void *ctx, engine_stats *out);
  void *ctx;
  const sampler_params *sampling; /* the model's recommended sampling (vlm.sampling; must outlive
                                   * the server); NULL: Qwen3-VL's */
  /* Tier the vision tower was prepared in ("exact" / "fast"), NULL without a tower: a request's
   * "precision" must name it (the tower keeps one prepared copy of its weights, docs/API.md). */
  const char *vision_precision;
  /* The loaded model (tokenizer and chat template for /tokenize, /detokenize, /apply-template; whether
   * it reasons); NULL: those endpoints answer 503. */
  const vlm *model;
} server_backend;

typedef struct server server;

/* Binds host:port (port 0: a free port, see server_port) and starts serving. The config must
 * outlive the server. */
qvl_status server_start(const server_config *c, server **out);
int server_port(const server *s);
/* Attaches the engine; ids are the names accepted in a request's "model" (copied). */
void server_set_ready(server *s, const server_backend *b, const char *const *model_ids, int n_model_ids);
/* Stops accepting connections and new requests (503 on kept-alive connections), waits up to
 * timeout_s for the requests in flight to finish and their responses to be sent, then detaches the
 * backend (it is not called after this returns). Returns false on a timeout. */
bool server_drain(server *s, double timeout_s);
/* Closes every connection and frees the server. */
void server_stop(server *s);

#endif
