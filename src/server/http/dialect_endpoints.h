/*
 * The endpoints of the other APIs (dialects/dialect.h): POST /v1/responses, POST /v1/completions
 * and Ollama's /api/ (chat and generate are translated into a chat request and served by
 * chat_endpoint.h; the rest is answered by ollama_info).
 */
#ifndef QVL_SERVER_HTTP_DIALECT_ENDPOINTS_H
#define QVL_SERVER_HTTP_DIALECT_ENDPOINTS_H

#include "server/http/request.h"

enum MHD_Result dialect_endpoints_responses(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
enum MHD_Result dialect_endpoints_completions(struct MHD_Connection *c, server *s, conn_req *r,
                                              const request_target *t);
/* Everything under /v1/messages (Anthropic's Messages API), any method; checks the API key itself
 * (x-api-key or Bearer; errors in Anthropic's shape). */
enum MHD_Result dialect_endpoints_messages(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);
/* Everything under /api/, any method; checks the API key itself (errors in Ollama's shape). */
enum MHD_Result dialect_endpoints_ollama(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

#endif
