/* The guards against hostile input that need no server: URL normalisation (server/url.h) and the
 * allow list on normal forms, the image decoding budget (image/budget.h), header-first pixel checks
 * in the prompt builder's building blocks (image_probe) and the capped tokenizer's stop check. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "base/timing.h"
#include "image/budget.h"
#include "server/fetch/fetch.h"
#include "server/fetch/url.h"
#include "server/http/cors.h"
#include "server/http/write_watch.h"
#include "text/tokenizer.h"
#include "test.h"

static void test_url(void) {
  struct {
    const char *in, *out; /* out NULL: refused */
  } cases[] = {
      {"http://host/img/../secret.png", "http://host/secret.png"},
      {"HTTP://HoSt:80/img/%2e%2E/secret.png", "http://host/secret.png"},
      {"http://h/img/.%2E/x", "http://h/x"},
      {"http://h/img/./a/./b/../c.png?x=%7e%2f#frag", "http://h/img/a/c.png?x=~%2F"},
      {"https://h:443/a", "https://h/a"},
      {"https://h:8443/a", "https://h:8443/a"},
      {"http://h", "http://h/"},
      {"http://h/a/", "http://h/a/"},
      {"http://h/a/..", "http://h/"},
      {"http://h/../../..", "http://h/"},
      {"http://h/%41%62c", "http://h/Abc"},
      {"http://h/%c3%a9", "http://h/%C3%A9"},
      {"http://h/\xc3\xa9", "http://h/%C3%A9"},
      {"http://h/a%2fb", "http://h/a%2Fb"}, /* an encoded '/' is data, not a separator */
      {"http://[::1]:8080/x/..", "http://[::1]:8080/"},
      {"http://h./x", "http://h/x"},
      {"http://user@evil/x", NULL},
      {"http://good.example@evil.example/x", NULL},
      {"http://h\\@evil/x", NULL},
      {"http://h/a b", NULL},
      {"http://h/%zz", NULL},
      {"http://h/%4", NULL},
      {"http://h:0/", NULL},
      {"http://h:99999/", NULL},
      {"http://h:8x/", NULL},
      {"http:///x", NULL},
      {"ftp://h/x", NULL},
      {"javascript:alert(1)", NULL},
  };
  char out[URL_MAX + 1];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    qvl_status s = url_normalize(cases[i].in, out, sizeof out);
    if (cases[i].out)
      CHECK(s == QVL_OK && !strcmp(out, cases[i].out), "%s -> '%s' (expected '%s'): %s", cases[i].in, out,
            cases[i].out, s ? qvl_last_error() : "");
    else
      CHECK(s == QVL_ERR_INVALID_ARG, "%s refused (got '%s')", cases[i].in, out);
  }
  char small[8];
  CHECK(url_normalize("http://example.com/long", small, sizeof small) == QVL_ERR_INVALID_ARG, "output cap");
  char *huge = malloc(URL_MAX + 64);
  memcpy(huge, "http://h/", 9);
  memset(huge + 9, 'a', URL_MAX + 40);
  huge[URL_MAX + 49] = '\0';
  CHECK(url_normalize(huge, out, sizeof out) == QVL_ERR_INVALID_ARG, "URL over URL_MAX refused");
  free(huge);
}

static void test_allow_list_normal_forms(void) {
  const char *allow[] = {"http://host/img/", "https://Pics.Example.com", "http://h:80/p"};
  fetch_opts o = {allow, 3, 5};
  struct {
    const char *url;
    bool ok;
  } cases[] = {
      {"http://host/img/a.png", true},
      {"http://host/img/../secret.png", false},
      {"http://host/img/%2e%2e/secret.png", false},
      {"http://host/img/sub/../a.png", true},
      {"http://host/IMG/a.png", false},
      {"http://HOST:80/img/a.png", true},
      {"http://host:8080/img/a.png", false},
      {"http://user@host/img/a.png", false},
      {"https://pics.example.com/x.jpg", true},
      {"https://pics.example.com", true},
      {"https://pics.example.com.evil/x.jpg", false},
      {"http://h/p/x", true},
      {"http://h/p", true},
      {"http://h/px", false},
      {"http://h/p/../q", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK(fetch_allowed(&o, cases[i].url) == cases[i].ok, "%s: expected %s", cases[i].url,
          cases[i].ok ? "allowed" : "refused");
}

/* ---- image budget ---- */

static qvl_status never_stop(void *u) {
  (void)u;
  return QVL_OK;
}

typedef struct stop_after {
  double until;
  int polls;
} stop_after;

static qvl_status stop_at(void *u) {
  stop_after *s = u;
  s->polls++;
  return time_now_s() >= s->until ? qvl_errorf(QVL_ERR_TIMEOUT, "test deadline") : QVL_OK;
}

typedef struct waiter {
  image_budget *b;
  int64_t px;
  qvl_status st;
  double waited;
} waiter;

static void *reserve_main(void *arg) {
  waiter *w = arg;
  double t0 = time_now_s();
  w->st = image_budget_reserve(w->b, w->px, never_stop, NULL);
  w->waited = time_now_s() - t0;
  return NULL;
}

static void test_budget(void) {
  image_budget *b = NULL;
  CHECK(image_budget_new(0, 1, &b) == QVL_ERR_INVALID_ARG, "empty pool refused");
  CHECK(image_budget_new(1000, 0, &b) == QVL_ERR_INVALID_ARG, "no slots refused");
  CHECK(image_budget_new(1000, 1, &b) == QVL_OK && b, "new");
  CHECK(image_budget_reserve(b, 1001, never_stop, NULL) == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "image_memory_mb"),
        "more than the pool: TOO_LARGE at once (%s)", qvl_last_error());
  CHECK(image_budget_reserve(b, 600, never_stop, NULL) == QVL_OK, "first reservation");
  /* a second one that does not fit waits, and gives up when its stop check says so */
  stop_after sa = {time_now_s() + 0.2, 0};
  double t0 = time_now_s();
  qvl_status s = image_budget_reserve(b, 600, stop_at, &sa);
  double dt = time_now_s() - t0;
  CHECK(s == QVL_ERR_TIMEOUT && dt >= 0.15 && dt < 2 && sa.polls >= 2, "waiting reservation stopped (%s, %.2f s, %d polls)",
        qvl_status_text(s), dt, sa.polls);
  /* ... and proceeds as soon as the pixels are released */
  waiter w = {b, 600, QVL_ERR_INTERNAL, 0};
  pthread_t t;
  pthread_create(&t, NULL, reserve_main, &w);
  usleep(150000);
  image_budget_stats st;
  image_budget_get_stats(b, &st);
  CHECK(st.waiting == 1 && st.reserved_pixels == 600, "one waiter, 600 reserved (%d, %lld)", st.waiting,
        (long long)st.reserved_pixels);
  image_budget_release(b, 600);
  pthread_join(t, NULL);
  CHECK(w.st == QVL_OK && w.waited >= 0.1 && w.waited < 2, "waiter admitted after the release (%.2f s)", w.waited);
  image_budget_get_stats(b, &st);
  CHECK(st.reserved_pixels == 600 && st.peak_pixels == 600 && st.refused == 1, "stats: %lld reserved, peak %lld, %llu refused",
        (long long)st.reserved_pixels, (long long)st.peak_pixels, (unsigned long long)st.refused);
  image_budget_release(b, 600);
  /* decode slots */
  CHECK(image_budget_slot_take(b, never_stop, NULL) == QVL_OK, "slot");
  sa = (stop_after){time_now_s() + 0.1, 0};
  CHECK(image_budget_slot_take(b, stop_at, &sa) == QVL_ERR_TIMEOUT, "second slot waits, then stops");
  image_budget_slot_give(b);
  CHECK(image_budget_slot_take(b, never_stop, NULL) == QVL_OK, "slot free again");
  image_budget_slot_give(b);
  image_budget_free(b);
}

/* ---- capped tokenizing ---- */

static qvl_status stop_now(void *u) {
  int *calls = u;
  ++*calls;
  return qvl_errorf(QVL_ERR_CANCELLED, "client gone");
}

static void test_capped_tokenizer(void) {
  tokenizer *t = NULL;
  if (tokenizer_init_hf("tests/fixtures/tokenizer/tokenizer.json", &t) != QVL_OK) {
    CHECK(0, "tokenizer.json: %s", qvl_last_error());
    return;
  }
  const char *text = "The quick brown fox jumps over the lazy dog. <|im_start|>user\nHello!<|im_end|>";
  int32_t *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  CHECK(tokenizer_encode(t, text, strlen(text), &a, &na) == QVL_OK, "plain encode");
  CHECK(tokenizer_encode_capped(t, text, strlen(text), 0, na, NULL, NULL, &b, &nb) == QVL_OK && nb == na &&
            !memcmp(a, b, na * sizeof *a),
        "a cap equal to the length changes nothing (%zu vs %zu)", nb, na);
  free(b);
  b = NULL;
  CHECK(tokenizer_encode_capped(t, text, strlen(text), 0, na - 1, NULL, NULL, &b, &nb) == QVL_ERR_CONTEXT_OVERFLOW && !b,
        "one under: overflow (%s)", qvl_last_error());
  free(a);
  /* 16 MiB of text against a cap of 1000: stops after ~1000 tokens, not 16 MiB of work */
  size_t big = (size_t)16 << 20;
  char *s = malloc(big);
  for (size_t i = 0; i < big; i++)
    s[i] = "lorem ipsum dolor sit amet "[i % 27];
  double t0 = time_now_s();
  qvl_status st = tokenizer_encode_capped(t, s, big, 0, 1000, NULL, NULL, &b, &nb);
  double dt = time_now_s() - t0;
  CHECK(st == QVL_ERR_CONTEXT_OVERFLOW && strstr(qvl_last_error(), "more than 1000 tokens"), "huge text: overflow (%s)",
        qvl_last_error());
  fprintf(stderr, "  capped encode of 16 MiB: %.3f s\n", dt);
  int calls = 0;
  st = tokenizer_encode_capped(t, s, big, 0, 0, stop_now, &calls, &b, &nb);
  CHECK(st == QVL_ERR_CANCELLED && calls == 1, "the stop check ends the encode (%s, %d calls)", qvl_status_text(st), calls);
  free(s);
  tokenizer_free(t);
}

/* Issue 24 item 6: a preflight echoes only RFC 7230 token characters of the asked headers. */
static void test_cors_filter(void) {
  struct {
    const char *in, *out;
  } cases[] = {
      {"authorization, content-type, x-stainless-os", "authorization, content-type, x-stainless-os"},
      {"  Authorization ,Content-Type,,  ", "Authorization, Content-Type"},
      {"x-ok, x-bad\x01, x-\xff\xfe, x-also-ok", "x-ok, x-also-ok"},
      {"x-a\r\nSet-Cookie: a=b", ""},
      {"x-a, two words, \"quoted\", x-b", "x-a, x-b"},
      {"", ""},
      {"\t", ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[CORS_ALLOW_HEADERS_CAP];
    size_t n = cors_filter_headers(cases[i].in, out, sizeof out);
    CHECK(n == strlen(out) && !strcmp(out, cases[i].out), "cors filter case %zu: '%s'", i, out);
  }
  /* a long value is cut at an element boundary within the cap */
  char big[8192], out[CORS_ALLOW_HEADERS_CAP];
  size_t k = 0;
  for (int i = 0; i < 600; i++)
    k += (size_t)snprintf(big + k, sizeof big - k, "x-h%d,", i);
  size_t n = cors_filter_headers(big, out, sizeof out);
  CHECK(n > 0 && n < sizeof out && out[n - 1] != ',' && out[n - 1] != ' ', "capped at %zu bytes", n);
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] >= 0x20 && out[i] < 0x7f, "printable ASCII only");
}

/* A loopback TCP pair whose client has a small receive buffer; *srv is non-blocking. */
static bool tcp_pair(int *srv, int *cli) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al))
    return false;
  *cli = socket(AF_INET, SOCK_STREAM, 0);
  int rcv = 4096;
  setsockopt(*cli, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  if (connect(*cli, (struct sockaddr *)&a, sizeof a))
    return false;
  *srv = accept(l, NULL, NULL);
  close(l);
  return *srv >= 0 && fcntl(*srv, F_SETFL, O_NONBLOCK) == 0;
}

/* Issue 24 item 4: a stream is stalled when nothing was handed over for the timeout and the socket
 * still holds bytes the client did not take; an engine pause with everything delivered is not. */
static void test_write_watch(void) {
  int srv = -1, cli = -1;
  CHECK(tcp_pair(&srv, &cli), "loopback pair");
  write_watch w = {0};
  CHECK(!write_watch_stalled(&w, srv, 100, 1), "not armed: never stalled");
  write_watch_start(&w, srv, 0);
  int sz = 0;
  socklen_t sl = sizeof sz;
  getsockopt(srv, SOL_SOCKET, SO_SNDBUF, &sz, &sl);
  CHECK(sz <= 4 * WRITE_WATCH_SNDBUF, "the stream socket's send buffer is small: %d", sz);
  char chunk[1024] = {0};
  /* a little output, all delivered: a long pause (the engine's) is not the client's fault */
  CHECK(write(srv, chunk, 100) == 100, "write");
  char got[200];
  usleep(20000);
  CHECK(read(cli, got, sizeof got) == 100, "the client reads it");
  usleep(20000);
  CHECK(!write_watch_stalled(&w, srv, 5, 1), "an empty socket queue after a pause: not stalled");
  CHECK(!write_watch_stalled(&w, srv, 5.5, 1), "progress was recorded at that look");
  /* the client stops reading: fill both buffers */
  size_t sent = 0;
  for (int i = 0; i < 100000; i++) {
    ssize_t n = write(srv, chunk, sizeof chunk);
    if (n <= 0)
      break;
    sent += (size_t)n;
  }
  usleep(20000);
  CHECK(sent > 0 && sent < (1u << 20), "the buffers take %zu bytes, then writes would block", sent);
  write_watch_progress(&w, 10); /* the last bytes handed over at t=10 */
  CHECK(!write_watch_stalled(&w, srv, 10.5, 1), "within the timeout: not stalled");
  CHECK(write_watch_stalled(&w, srv, 11.5, 1), "no progress for the timeout, bytes still queued: stalled");
  CHECK(!write_watch_stalled(&w, srv, 100, 0), "timeout 0: never");
  /* the client reads some: progress again, then stalled again once it stops */
  char big[8192];
  CHECK(read(cli, big, sizeof big) > 0, "the client reads a little");
  usleep(20000);
  CHECK(!write_watch_stalled(&w, srv, 13, 1), "the queue shrank since the last look: progress");
  CHECK(write_watch_stalled(&w, srv, 14.5, 1), "and no more since: stalled");
  close(srv);
  close(cli);
}

int main(void) {
  test_write_watch();
  test_cors_filter();
  test_capped_tokenizer();
  test_url();
  test_allow_list_normal_forms();
  test_budget();
  return TEST_SUMMARY("hostile_limits");
}
