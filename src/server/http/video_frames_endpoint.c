/* The frame strip's endpoint (see video_frames_endpoint.h). */
#include "server/http/video_frames_endpoint.h"

#include <string.h>
#include <strings.h>

#include "base/dataurl.h"
#include "server/http/call.h"
#include "server/http/reply.h"
#include "server/http/server_state.h"
#include "server/openai/video_frames_wire.h"
#include "image/budget.h"
#include "video/thumbs.h"

typedef struct frames_stop {
  server *s;
  int fd;
  double deadline;
} frames_stop;

static qvl_status stop_check(void *user) {
  frames_stop *f = user;
  return call_prep_check(f->s, f->fd, f->deadline);
}

/* A data: URL's payload is known before it is decoded: say how large the clip is and what the
 * server takes, in the words of its option, rather than base64's. */
static bool data_url_fits(const char *url, size_t max_bytes, api_error *e) {
  const char *comma = dataurl_is(url) ? strchr(url, ',') : NULL;
  if (!comma || comma - url < 7 || strncasecmp(comma - 7, ";base64", 7))
    return true; /* not base64: image_source_read checks the decoded size */
  size_t payload = strlen(comma + 1);
  double mib = (double)payload * 3 / 4 / (1 << 20);
  if ((double)payload * 3 / 4 <= (double)max_bytes + 2)
    return true;
  api_error_status(e, QVL_ERR_TOO_LARGE, "video_too_large", "video_url",
                   "The video is %.1f MiB; this server takes videos up to %zu MiB (--max-video-mb).", mib,
                   max_bytes >> 20);
  return false;
}

enum MHD_Result video_frames_endpoint(struct MHD_Connection *c, server *s, conn_req *r, const request_target *t) {
  (void)t;
  api_error e;
  /* Counted by the drain like a chat request, and stopped when its client leaves (the fd). */
  if (!call_admit(s, c, r)) {
    static const char *const close_hdr[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    api_error_status(&e, QVL_ERR_BUSY, "shutting_down", NULL, "the server is shutting down");
    return reply_error(c, s, r, &e, close_hdr);
  }
  api_limits lim;
  call_fill_limits(s, &lim);
  video_frames_request req;
  if (!video_frames_parse(r->body.data ? r->body.data : "", r->body.len, &lim, &req, &e))
    return reply_error(c, s, r, &e, NULL);
  frames_stop stop = {s, r->fd, call_deadline(s, r)};
  image_source_opts src;
  video_limits vlim;
  call_fill_media(s, &src, &vlim);
  src.max_bytes = vlim.max_bytes;
  src.stop = stop_check;
  src.stop_user = &stop;
  buf bytes = {0};
  video_clip clip = {0};
  video_thumbs thumbs = {0};
  char *json = NULL;
  qvl_status st = QVL_OK;
  if (!data_url_fits(req.url, vlim.max_bytes, &e))
    goto out;
  st = image_source_read(req.url, &src, &bytes);
  /* A decode slot, as the chat path's video decodes take: however many strips are asked for, video
   * CPU stays under --max-decodes (and video_clip_open refuses a clip whose sampled frames would
   * cost more decoding than one request may). */
  bool slot = false;
  if (st == QVL_OK)
    slot = (st = image_budget_slot_take(s->budget, stop_check, &stop)) == QVL_OK;
  if (st == QVL_OK)
    st = video_clip_open(bytes.data, bytes.len, &vlim, &req.sampling, stop_check, &stop, &clip);
  if (st == QVL_OK)
    st = video_clip_thumbnails(&clip, req.thumb_width, req.thumb_height, &thumbs);
  if (slot)
    image_budget_slot_give(s->budget);
  if (st != QVL_OK) {
    api_error_from_status(&e, st, qvl_last_error());
    goto out;
  }
  if (!(json = video_frames_json(&clip, &thumbs)))
    api_error_status(&e, QVL_ERR_NOMEM, NULL, NULL, "out of memory");
out:
  video_thumbs_free(&thumbs);
  video_clip_free(&clip);
  buf_free(&bytes);
  video_frames_request_free(&req);
  if (!json)
    return reply_error(c, s, r, &e, NULL);
  return reply_json(c, s, r, 200, json, NULL);
}
