/*
 * POST /video/frames (openai/video_frames_wire.h): the frames a chat request would sample from a
 * clip, with their times and thumbnails, for the web page's frame strip. It runs the chat path's
 * own code on the same settings: the URL rules and byte cap of videos (call_fill_media), the
 * request's sampling under the server's caps (api_video_parse), video_clip_open's plan; then it
 * decodes only the sampled frames, scaled down (video/thumbs.h). Needs the API key, not the model;
 * the work runs on the connection thread and stops when the client leaves, the request's
 * timeout_s passes or the drain gives up.
 */
#ifndef QVL_SERVER_HTTP_VIDEO_FRAMES_ENDPOINT_H
#define QVL_SERVER_HTTP_VIDEO_FRAMES_ENDPOINT_H

#include "server/http/request.h"

enum MHD_Result video_frames_endpoint(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t);

#endif
