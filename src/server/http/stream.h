/*
 * Streaming a chat answer: the SSE events of OpenAI's chat.completion.chunk (tool calls held back
 * until they are complete) or another dialect's stream shape, handed to libmicrohttpd as they
 * come; a client that goes away cancels its request.
 */
#ifndef QVL_SERVER_HTTP_STREAM_H
#define QVL_SERVER_HTTP_STREAM_H

#include <microhttpd.h>

#include "server/http/call.h"

/* Queues the 200 stream response of k, which takes the caller's reference to k (released when
 * the response ends). MHD_NO (and the request cancelled) when out of memory. */
enum MHD_Result stream_respond(struct MHD_Connection *c, server *s, conn_req *r, call *k);

#endif
