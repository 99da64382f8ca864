/* qvl tokenize -m MODEL.gguf TEXT|- — prints the token ids as a JSON array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl.h"

int cmd_tokenize(int argc, char **argv) {
  const char *model = NULL, *text = NULL, *v;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      model = v;
    else if (arg_flag(argv, i, "--help", "-h")) {
      printf("usage: qvl tokenize -m MODEL.gguf|HF_DIR TEXT   ('-' reads raw bytes from standard input)\n");
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "qvl tokenize: unknown option '%s'\n", argv[i]);
      return 2;
    } else if (text) {
      fprintf(stderr, "qvl tokenize: give the text as one argument (quote it)\n");
      return 2;
    } else
      text = argv[i];
  }
  if (!model || !text) {
    fprintf(stderr, "usage: qvl tokenize -m MODEL.gguf TEXT|-\n");
    return 2;
  }
  char *in = NULL; /* standard input */
  size_t len = 0;
  if (!strcmp(text, "-")) {
    FILE *f = open_memstream(&in, &len);
    char chunk[65536];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
      if (fwrite(chunk, 1, n, f) != n)
        break;
    if (!f || fclose(f) != 0 || ferror(stdin)) {
      free(in);
      return report_error("reading standard input", QVL_ERR_NOMEM);
    }
    text = in;
  } else {
    len = strlen(text);
  }
  qvl_tokenizer *t = NULL;
  qvl_status s = qvl_tokenizer_load(model, &t);
  int32_t *ids = NULL;
  size_t n_ids = 0;
  if (s == QVL_OK)
    s = qvl_tokenize(t, text, len, &ids, &n_ids);
  if (s == QVL_OK) {
    printf("[");
    for (size_t i = 0; i < n_ids; i++)
      printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
  }
  qvl_free(ids);
  qvl_tokenizer_free(t);
  free(in);
  return s == QVL_OK ? 0 : report_error("tokenize", s);
}
