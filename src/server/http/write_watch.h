/*
 * Slow readers (issue 24): a streamed answer whose client does not read holds its batch slot for the
 * whole generation, so twenty such clients take every slot and the queue. write_watch tells when a
 * stream has made no progress for --write-timeout-s: progress is the server handing the socket new
 * bytes (libmicrohttpd asks for more only when what it wrote before has left its buffer) or the
 * socket's unsent queue shrinking (the client read something). The engine thread asks at each token
 * of the request (cheap: a clock read; the ioctl only once the timeout has passed), so a stalled
 * stream is cancelled and its slot freed while the others keep going.
 *
 * The stream's socket gets a send buffer of WRITE_WATCH_SNDBUF, so that a client that stops reading
 * fills it after a few hundred tokens instead of the kernel's autotuned megabytes (which also bounds
 * the kernel memory a stalled stream holds).
 *
 * Thread safety: none; the caller holds the stream's mutex.
 */
#ifndef QVL_SERVER_HTTP_WRITE_WATCH_H
#define QVL_SERVER_HTTP_WRITE_WATCH_H

#include <stdbool.h>

#define WRITE_WATCH_SNDBUF (8 * 1024) /* the kernel doubles it; tokens need far less */

typedef struct write_watch {
  bool armed;           /* the response is queued: the client is expected to read */
  double last_progress; /* seconds (time_now_s) */
  long last_outq;       /* unsent bytes in the socket at the last look; -1 unknown */
} write_watch;

/* Arms the watch when a stream's response is queued; sets the socket's send buffer (fd may be -1). */
void write_watch_start(write_watch *w, int fd, double now);
/* The server handed the socket new bytes. */
void write_watch_progress(write_watch *w, double now);
/* True when the stream made no progress for timeout_s (0: never) and its socket still holds unsent
 * bytes that the client has not taken since the last look (asked at each new token). */
bool write_watch_stalled(write_watch *w, int fd, double now, double timeout_s);

#endif
