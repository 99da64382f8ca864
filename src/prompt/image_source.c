#include "prompt/image_source.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/dataurl.h"
#include "base/status.h"

#define DEFAULT_MAX_BYTES ((size_t)32 << 20)

static bool has_scheme(const char *url, const char *scheme) {
  size_t n = strlen(scheme);
  return strncasecmp(url, scheme, n) == 0 && url[n] == ':';
}

qvl_status image_source_read(const char *url, const image_source_opts *o, buf *out) {
  size_t cap = o && o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
  out->len = 0;
  if (!url || !*url)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image URL is empty");
  if (dataurl_is(url)) {
    char mime[64];
    qvl_status s = dataurl_decode(url, cap, mime, sizeof mime, out);
    if (s != QVL_OK)
      return qvl_error_prefix(s, "image data URL: ");
    if (out->len == 0)
      return qvl_errorf(QVL_ERR_FORMAT, "image data URL has an empty payload");
    return QVL_OK;
  }
  if (has_scheme(url, "http") || has_scheme(url, "https")) {
    if (o && o->fetch_remote_stoppable)
      return o->fetch_remote_stoppable(o->fetch_user, url, cap, o->stop, o->stop_user, out);
    if (!o || !o->fetch_remote)
      return qvl_errorf(QVL_ERR_INVALID_ARG,
                        "image URL '%.200s': http(s) image URLs are not fetched here; send the image as a data: "
                        "URL (base64), or start qvl serve with --allow-image-url PREFIX (allow_image_url in its "
                        "config file) to fetch the images whose URLs start with PREFIX; on the command line, "
                        "download the image and pass its file",
                        url);
    return o->fetch_remote(o->fetch_user, url, cap, out);
  }
  const char *path = url;
  if (has_scheme(url, "file")) {
    path = url + 5;
    if (!strncmp(path, "//", 2))
      path += 2;
  } else if (strchr(url, ':') && strcspn(url, ":") < strcspn(url, "/")) {
    return qvl_errorf(QVL_ERR_INVALID_ARG, "image URL '%.200s': unsupported scheme (use a data: URL)", url);
  }
  if (!o || !o->allow_files)
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "image '%.200s': local file paths are not allowed here; send the image as a data: URL",
                      url);
  char full[4096];
  if (path[0] != '/' && o->base_dir && *o->base_dir) {
    int n = snprintf(full, sizeof full, "%s/%s", o->base_dir, path);
    if (n < 0 || (size_t)n >= sizeof full)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "image path too long: %.200s", path);
    path = full;
  }
  qvl_status s = buf_read_file(path, cap, out);
  if (s != QVL_OK)
    return qvl_error_prefix(s, "image: ");
  return QVL_OK;
}
