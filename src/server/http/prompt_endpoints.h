/*
 * POST /tokenize, /detokenize and /apply-template (llama-server's shapes, openai/tokenize_wire.h):
 * the exact prompt a chat request becomes and its tokens, answered from the loaded model's
 * tokenizer and chat template without generating. They need the API key like /v1/ and answer 503
 * while the model loads.
 */
#ifndef QVL_SERVER_HTTP_PROMPT_ENDPOINTS_H
#define QVL_SERVER_HTTP_PROMPT_ENDPOINTS_H

#include "server/http/request.h"

/* The handler of all three: t->url says which. */
enum MHD_Result prompt_endpoints_serve(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

#endif
