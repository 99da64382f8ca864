/* The embedded web UI table (tools/embed.c + src/server/web_assets.c) against the files in web/
 * and the third-party scripts of tools/web_vendor.txt (from Debian's packages): every one must be
 * served, byte for byte, at its path, with a sensible content type. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "server/http/web_assets.h"
#include "test.h"

static int n_files_on_disk;

/* Compares one file with the asset served at url. */
static void check_file(const char *file, const char *url) {
  n_files_on_disk++;
  buf b = {0};
  CHECK(buf_read_file(file, 16u << 20, &b) == QVL_OK, "read %s", file);
  const web_asset *a = web_asset_find(url);
  CHECK(a != NULL, "%s is not embedded at %s", file, url);
  if (a) {
    CHECK(strcmp(a->path, url) == 0, "path %s vs %s", a->path, url);
    CHECK(a->len == b.len, "%s: embedded %zu bytes, file has %zu", url, a->len, b.len);
    CHECK(a->len == b.len && memcmp(a->data, b.data, b.len) == 0, "%s: bytes differ", url);
    CHECK(a->data[a->len] == 0, "%s: no trailing NUL", url);
    CHECK(a->etag[0] == '"' && strlen(a->etag) == 18, "%s: etag %s", url, a->etag);
  }
  buf_free(&b);
}

/* Walks web/ (relative to the repo root, where tests run) and compares each file with its asset. */
static void check_dir(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d != NULL, "cannot open %s (run from the repository root)", dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char file[1024];
    snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(file, &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      check_dir(file);
      continue;
    }
    check_file(file, file + strlen("web"));
  }
  closedir(d);
}

/* The lines "URL FILE PACKAGE" of tools/web_vendor.txt. */
static void check_vendor(void) {
  FILE *f = fopen("tools/web_vendor.txt", "r");
  CHECK(f != NULL, "cannot open tools/web_vendor.txt (run from the repository root)");
  if (!f)
    return;
  char line[1024], url[256], file[512], pkg[128];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (line[0] != '#' && sscanf(line, "%255s %511s %127s", url, file, pkg) == 3) {
      check_file(file, url);
      n++;
    }
  fclose(f);
  CHECK(n >= 2, "%d scripts in tools/web_vendor.txt", n);
}

static const char *type_of(const char *path) {
  const web_asset *a = web_asset_find(path);
  return a ? a->content_type : "(missing)";
}

int main(void) {
  check_dir("web");
  check_vendor();
  CHECK((size_t)n_files_on_disk == web_assets_count, "%d files in web/ and tools/web_vendor.txt, %zu embedded", n_files_on_disk,
        web_assets_count);
  for (size_t i = 1; i < web_assets_count; i++)
    CHECK(strcmp(web_assets[i - 1].path, web_assets[i].path) < 0, "table not sorted at %zu", i);

  /* "/" is the page; a query string or fragment does not change the file. */
  const web_asset *idx = web_asset_find("/index.html");
  CHECK(idx != NULL, "no /index.html");
  CHECK(web_asset_find("/") == idx, "/ is not /index.html");
  CHECK(web_asset_find("/?x=1") == idx, "/?x=1 is not /index.html");
  CHECK(web_asset_find("/index.html#top") == idx, "fragment not ignored");
  CHECK(idx && strstr((const char *)idx->data, "<!doctype html>") != NULL, "index.html is not HTML");

  CHECK(strcmp(type_of("/index.html"), "text/html; charset=utf-8") == 0, "%s", type_of("/index.html"));
  CHECK(strcmp(type_of("/app.js"), "text/javascript; charset=utf-8") == 0, "%s", type_of("/app.js"));
  CHECK(strcmp(type_of("/style.css"), "text/css; charset=utf-8") == 0, "%s", type_of("/style.css"));
  CHECK(strcmp(type_of("/vendor/marked.umd.js"), "text/javascript; charset=utf-8") == 0, "marked");
  CHECK(strcmp(type_of("/vendor/purify.min.js"), "text/javascript; charset=utf-8") == 0, "purify");

  /* Near misses and traversal attempts are not found. */
  CHECK(web_asset_find(NULL) == NULL, "NULL path");
  CHECK(web_asset_find("") == NULL, "empty path");
  CHECK(web_asset_find("index.html") == NULL, "path without leading slash");
  CHECK(web_asset_find("/index.htm") == NULL, "prefix of a path");
  CHECK(web_asset_find("/index.html2") == NULL, "extension of a path");
  CHECK(web_asset_find("/../Makefile") == NULL, "traversal");
  CHECK(web_asset_find("/vendor/../index.html") == NULL, "dot-dot segment");
  CHECK(web_asset_find("//index.html") == NULL, "double slash");
  CHECK(web_asset_find("/vendor") == NULL, "directory");
  return TEST_SUMMARY("web_assets");
}
