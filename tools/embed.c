/* embed — turns the files of the web UI into a C source file, so that `qvl serve` carries its
 * page inside the binary and needs neither Node nor the web/ directory at run time.
 *
 *   embed OUT.c ROOT FILE...
 *
 * Each FILE must lie under ROOT; it is served at the path FILE minus ROOT ("web/app.js" with
 * ROOT "web" becomes "/app.js"). A FILE written DISK@/URL is read from DISK and served at /URL:
 * the page's third-party scripts, which come from Debian's packages (tools/web_vendor.txt). OUT.c defines `web_assets[]` (sorted by path, so that
 * web_asset_find can binary-search it) and `web_assets_count`, with the types of
 * src/server/http/web_assets.h. The output is written to OUT.c.tmp and renamed, so a failed run never
 * leaves a half-written file that make would take as up to date.
 *
 * Built and run by the Makefile with the host compiler; it is a build tool, so it may exit(). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *file;    /* path on disk, as given */
  const char *path;    /* URL path, points into `file` at the '/' after ROOT */
  unsigned char *data; /* [len] file bytes */
  size_t len;
} asset;

static void die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "embed: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  exit(1);
}

/* Content types by extension; a file with an unknown extension is an error, because serving it
 * as application/octet-stream would hide a mistake (a file added to web/ by accident). */
static const char *content_type(const char *path) {
  static const struct {
    const char *ext, *type;
  } types[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
      {".md", "text/markdown; charset=utf-8"},
      {".txt", "text/plain; charset=utf-8"},
      {".LICENSE", "text/plain; charset=utf-8"},
  };
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (dot && (!slash || dot > slash)) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
      if (strcmp(dot, types[i].ext) == 0)
        return types[i].type;
  }
  return NULL;
}

/* URL paths go into C string literals and into a URL table: allow only a plain character set
 * and no "." or ".." segments. */
static int path_ok(const char *p) {
  if (p[0] != '/' || p[1] == '\0')
    return 0;
  for (const char *c = p; *c; c++) {
    int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
             *c == '_' || *c == '-' || *c == '/';
    if (!ok)
      return 0;
    if (*c == '/' && (c[1] == '/' || c[1] == '\0'))
      return 0;
    if (*c == '/' && c[1] == '.' &&
        (c[2] == '/' || c[2] == '\0' || (c[2] == '.' && (c[3] == '/' || c[3] == '\0'))))
      return 0;
  }
  return 1;
}

static unsigned char *read_all(const char *file, size_t *len) {
  FILE *f = fopen(file, "rb");
  if (!f)
    die("cannot open '%s': %s", file, strerror(errno));
  size_t cap = 65536, n = 0;
  unsigned char *d = malloc(cap);
  if (!d)
    die("out of memory reading '%s'%s", file, "");
  for (;;) {
    if (n == cap) {
      if (cap > SIZE_MAX / 2)
        die("'%s' is too large%s", file, "");
      cap *= 2;
      unsigned char *nd = realloc(d, cap);
      if (!nd)
        die("out of memory reading '%s'%s", file, "");
      d = nd;
    }
    size_t got = fread(d + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  if (ferror(f))
    die("error reading '%s': %s", file, strerror(errno));
  fclose(f);
  *len = n;
  return d;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const asset *)a)->path, ((const asset *)b)->path);
}

/* FNV-1a 64: a content fingerprint for the ETag, not a security hash. */
static uint64_t fnv1a64(const unsigned char *d, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= d[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: embed OUT.c ROOT FILE...\n");
    return 2;
  }
  const char *out = argv[1], *root = argv[2];
  size_t root_len = strlen(root);
  while (root_len > 0 && root[root_len - 1] == '/')
    root_len--;
  size_t n = (size_t)(argc - 3);
  asset *as = calloc(n, sizeof *as);
  if (!as)
    die("out of memory%s%s", "", "");

  for (size_t i = 0; i < n; i++) {
    char *file = argv[3 + i];
    char *at = strchr(file, '@');
    if (at) {
      *at = '\0'; /* DISK@/URL */
      as[i].path = at + 1;
    } else {
      if (strncmp(file, root, root_len) != 0 || file[root_len] != '/')
        die("'%s' is not under '%s'", file, root);
      as[i].path = file + root_len;
    }
    as[i].file = file;
    if (!path_ok(as[i].path))
      die("'%s': unsupported characters or segments in URL path '%s'", file, as[i].path);
    if (!content_type(as[i].path))
      die("'%s': no content type known for this extension%s", file, "");
    as[i].data = read_all(file, &as[i].len);
  }
  qsort(as, n, sizeof *as, by_path);
  for (size_t i = 1; i < n; i++)
    if (strcmp(as[i - 1].path, as[i].path) == 0)
      die("'%s' given twice%s", as[i].file, "");

  size_t tmp_len = strlen(out) + 5;
  char *tmp = malloc(tmp_len);
  if (!tmp)
    die("out of memory%s%s", "", "");
  snprintf(tmp, tmp_len, "%s.tmp", out);
  FILE *f = fopen(tmp, "w");
  if (!f)
    die("cannot create '%s': %s", tmp, strerror(errno));

  fprintf(f, "/* Generated by tools/embed.c from %.*s/ at build time. Do not edit. */\n", (int)root_len,
          root);
  fprintf(f, "#include \"server/http/web_assets.h\"\n\n");
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "/* %s */\nstatic const unsigned char asset_%zu[%zu] = {", as[i].path, i, as[i].len + 1);
    for (size_t j = 0; j < as[i].len; j++)
      fprintf(f, "%s%u,", j % 20 == 0 ? "\n" : "", as[i].data[j]);
    /* A trailing NUL (not counted in len) lets text assets be used as C strings in tests. */
    fprintf(f, "0};\n\n");
  }
  fprintf(f, "const web_asset web_assets[] = {\n");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "    {\"%s\", \"%s\", asset_%zu, %zu, \"\\\"%016llx\\\"\"},\n", as[i].path,
            content_type(as[i].path), i, as[i].len, (unsigned long long)fnv1a64(as[i].data, as[i].len));
  fprintf(f, "};\nconst size_t web_assets_count = %zu;\n", n);

  if (ferror(f) || fclose(f) != 0)
    die("error writing '%s': %s", tmp, strerror(errno));
  if (rename(tmp, out) != 0)
    die("cannot rename to '%s': %s", out, strerror(errno));
  for (size_t i = 0; i < n; i++)
    free(as[i].data);
  free(as);
  free(tmp);
  return 0;
}
