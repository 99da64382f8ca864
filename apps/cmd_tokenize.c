/* qvl tokenize -m MODEL.gguf TEXT|- — prints the token ids as a JSON array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qvl.h"

typedef struct tokenize_opts {
  const char *model;
} tokenize_opts;

static const qvl_opt_bind tokenize_binds[] = {QVL_OPT_FIELD(qvl_opt_model, tokenize_opts, model)};

static const qvl_opt_cmd tokenize_cmd = {
    .name = "qvl tokenize",
    .usage = "usage: qvl tokenize -m MODEL.gguf|HF_DIR TEXT   ('-' reads raw bytes from standard input)\n",
    .notes = NULL,
    .opts = tokenize_binds,
    .n_opts = 1,
    .max_args = 1};

int cmd_tokenize(int argc, char **argv) {
  tokenize_opts o = {0};
  const char *text = NULL;
  int n_args = 0;
  int rc = args_parse(&tokenize_cmd, argc, argv, &o, &text, &n_args);
  if (rc >= 0)
    return rc;
  if (!o.model || !text)
    return args_usage_error(&tokenize_cmd, &o, !o.model ? "-m MODEL.gguf is required" : "give the text as one argument");
  const char *model = o.model;
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
