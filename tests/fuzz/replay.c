/* Replays fuzz corpus files (or directories of them) through a libFuzzer-style target, so that
 * `make test` exercises every saved input under the regular and sanitizer builds. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
  if (!data || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) {
    fclose(f);
    free(data);
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data, (size_t)n);
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, errors = 0;
  for (int a = 1; a < argc; a++) {
    struct stat st;
    if (stat(argv[a], &st) != 0) {
      fprintf(stderr, "no such corpus: %s\n", argv[a]);
      errors++;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR *d = opendir(argv[a]);
      struct dirent *e;
      while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
          continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
        errors += replay_file(path);
        files++;
      }
      if (d)
        closedir(d);
    } else {
      errors += replay_file(argv[a]);
      files++;
    }
  }
  printf("%s: %d passed, %d failed\n", argv[0], files - errors, errors);
  return errors ? 1 : 0;
}
