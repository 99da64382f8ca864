/* The prompt tools (see prompt_endpoints.h). */
#include "server/http/prompt_endpoints.h"

#include <stdlib.h>
#include <string.h>

#include "server/http/call.h"
#include "server/http/reply.h"
#include "server/http/server_state.h"
#include "server/openai/tokenize_wire.h"

typedef enum prompt_tool { TOOL_TOKENIZE, TOOL_DETOKENIZE, TOOL_APPLY_TEMPLATE } prompt_tool;

enum MHD_Result prompt_endpoints_serve(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  prompt_tool tool = !strcmp(t->url, "/tokenize")     ? TOOL_TOKENIZE
                     : !strcmp(t->url, "/detokenize") ? TOOL_DETOKENIZE
                                                      : TOOL_APPLY_TEMPLATE;
  api_error e;
  const char *body = r->body.data ? r->body.data : "";
  size_t len = r->body.len;
  char *json = NULL;
  pthread_rwlock_rdlock(&s->be_lock);
  const vlm *m = s->ready ? s->be.model : NULL;
  if (!m) {
    api_error_status(&e, QVL_ERR_BUSY, "model_loading", NULL, "the model is still loading; retry in a few seconds");
  } else if (tool == TOOL_TOKENIZE) {
    json = tok_wire_tokenize(m->tok, body, len, &e);
  } else if (tool == TOOL_DETOKENIZE) {
    json = tok_wire_detokenize(m->tok, body, len, &e);
  } else {
    /* the chat endpoint's own parse: the same checks, tools and reasoning fields */
    api_limits lim;
    call_fill_limits(s, &lim);
    api_chat_request req;
    if (api_chat_parse(body, len, &lim, &req, &e)) {
      json = tok_wire_apply_template(m, &req, &e);
      api_chat_request_free(&req);
    }
  }
  pthread_rwlock_unlock(&s->be_lock);
  if (!json)
    return reply_error(c, s, r, &e, NULL);
  return reply_json(c, s, r, 200, json, NULL);
}
