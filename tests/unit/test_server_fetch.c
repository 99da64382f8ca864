/* Allow-listed http(s) image downloads (server/fetch.h): prefix rules, and fetches from a local
 * libmicrohttpd host: success, HTTP errors, redirects not followed, the byte cap, the time limit. */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "base/timing.h"
#include "server/fetch/fetch.h"
#include "test.h"

static void test_allowed(void) {
  const char *allow[] = {"https://img.example.com", "http://cdn.example.org/pics/", "https://a.example.net/x?"};
  fetch_opts o = {allow, 3, 5};
  struct {
    const char *url;
    bool ok;
  } cases[] = {
      {"https://img.example.com/cat.png", true},
      {"https://img.example.com", true},
      {"https://IMG.EXAMPLE.COM/cat.png", true}, /* host compares case-insensitively */
      {"HTTPS://img.example.com/cat.png", true},
      {"https://img.example.com?x=1", true},
      {"https://img.example.com.evil.net/cat.png", false},
      {"https://img.example.com:8443/cat.png", false},
      {"https://img.example.comx/", false},
      {"http://img.example.com/cat.png", false},
      {"http://cdn.example.org/pics/a/b.jpg", true},
      {"http://cdn.example.org/pics", false},
      {"http://cdn.example.org/picsx/a.jpg", false},
      {"http://cdn.example.org/PICS/a.jpg", false}, /* paths are case-sensitive */
      {"https://a.example.net/x?id=1", true},
      {"ftp://img.example.com/cat.png", false},
      {"file:///etc/passwd", false},
      {"data:image/png;base64,AAAA", false},
      {"", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK(fetch_allowed(&o, cases[i].url) == cases[i].ok, "%s: expected %s", cases[i].url,
          cases[i].ok ? "allowed" : "refused");
  fetch_opts none = {NULL, 0, 5};
  CHECK(!fetch_allowed(&none, "https://img.example.com/cat.png"), "empty allow list refuses all");
}

static enum MHD_Result host(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                            const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)cls, (void)method, (void)version, (void)upload, (void)upload_size, (void)con_cls;
  static char big[300000];
  struct MHD_Response *r;
  unsigned status = 200;
  if (!strcmp(url, "/ok.png")) {
    r = MHD_create_response_from_buffer(11, (void *)"PNG-BYTES!!", MHD_RESPMEM_PERSISTENT);
  } else if (!strcmp(url, "/big.png")) {
    r = MHD_create_response_from_buffer(sizeof big, big, MHD_RESPMEM_PERSISTENT);
  } else if (!strcmp(url, "/redirect.png")) {
    r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Location", "/ok.png");
    status = 302;
  } else if (!strcmp(url, "/slow.png")) {
    usleep(3000 * 1000);
    r = MHD_create_response_from_buffer(4, (void *)"late", MHD_RESPMEM_PERSISTENT);
  } else {
    r = MHD_create_response_from_buffer(9, (void *)"not found", MHD_RESPMEM_PERSISTENT);
    status = 404;
  }
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static void test_fetch(void) {
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL,
                                          NULL, host, NULL, MHD_OPTION_END);
  CHECK(d != NULL, "image host");
  if (!d)
    return;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  int port = di ? di->port : 0;
  CHECK(port > 0, "host port");
  char prefix[64], url[128];
  snprintf(prefix, sizeof prefix, "http://127.0.0.1:%d/", port);
  const char *allow[] = {prefix};
  fetch_opts o = {allow, 1, 1.0};
  buf b = {0};

  snprintf(url, sizeof url, "%sok.png", prefix);
  CHECK(fetch_remote(&o, url, 1000, &b) == QVL_OK && b.len == 11 && !memcmp(b.data, "PNG-BYTES!!", 11), "fetch ok: %s",
        qvl_last_error());
  snprintf(url, sizeof url, "%smissing.png", prefix);
  CHECK(fetch_remote(&o, url, 1000, &b) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "HTTP status 404"), "404: %s",
        qvl_last_error());
  snprintf(url, sizeof url, "%sredirect.png", prefix);
  CHECK(fetch_remote(&o, url, 1000, &b) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "redirects are not followed"),
        "redirect: %s", qvl_last_error());
  snprintf(url, sizeof url, "%sbig.png", prefix);
  CHECK(fetch_remote(&o, url, 100000, &b) == QVL_ERR_TOO_LARGE && strstr(qvl_last_error(), "100000 bytes"),
        "byte cap: %s", qvl_last_error());
  snprintf(url, sizeof url, "%sslow.png", prefix);
  double t0 = time_now_s();
  CHECK(fetch_remote(&o, url, 1000, &b) == QVL_ERR_TIMEOUT, "time limit: %s", qvl_last_error());
  CHECK(time_now_s() - t0 < 2.5, "gave up after the time limit (%.2f s)", time_now_s() - t0);
  snprintf(url, sizeof url, "http://localhost:%d/ok.png", port);
  CHECK(fetch_remote(&o, url, 1000, &b) == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), "not allowed"),
        "other host refused: %s", qvl_last_error());
  buf_free(&b);
  MHD_stop_daemon(d);
}

int main(void) {
  CHECK(fetch_global_init() == QVL_OK, "curl init");
  test_allowed();
  test_fetch();
  return TEST_SUMMARY("server_fetch");
}
