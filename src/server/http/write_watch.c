/* Slow-reader detection for streams (see write_watch.h). */
#include "server/http/write_watch.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

/* Bytes the kernel has not yet sent (or, on TCP, not yet had acknowledged); -1 when unknown. */
static long outq(int fd) {
  int n = 0;
  if (fd < 0 || ioctl(fd, SIOCOUTQ, &n) != 0)
    return -1;
  return n;
}

void write_watch_start(write_watch *w, int fd, double now) {
  if (fd >= 0) {
    int sz = WRITE_WATCH_SNDBUF;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz); /* best effort: only detection is slower */
  }
  w->armed = true;
  w->last_progress = now;
  w->last_outq = outq(fd);
}

void write_watch_progress(write_watch *w, double now) { w->last_progress = now; }

bool write_watch_stalled(write_watch *w, int fd, double now, double timeout_s) {
  if (!w->armed || timeout_s <= 0 || now - w->last_progress < timeout_s)
    return false;
  /* libmicrohttpd has not asked for bytes for a while: did the client read anything meanwhile? An
   * empty queue means all was delivered (the pause was the engine's, e.g. a long prefill of another
   * request), a shorter one that the client read some of it. */
  long q = outq(fd);
  if (q == 0 || (q > 0 && (w->last_outq < 0 || q < w->last_outq))) {
    w->last_outq = q;
    w->last_progress = now;
    return false;
  }
  w->last_outq = q;
  return true;
}
