/* qvl tokenize -m MODEL.gguf TEXT|- — prints the token ids as a JSON array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "base/buf.h"
#include "commands.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

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
  buf in = {0};
  if (!strcmp(text, "-")) {
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
      if (buf_append(&in, chunk, n) != QVL_OK)
        return report_error("reading standard input", QVL_ERR_NOMEM);
  } else {
    buf_append_str(&in, text);
  }
  gguf *g = NULL;
  tokenizer *t = NULL;
  qvl_status s;
  struct stat st;
  if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
    /* A Hugging Face model directory: its tokenizer.json. */
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    s = tokenizer_init_hf(path, &t);
  } else {
    s = gguf_open(model, &g);
    if (s == QVL_OK)
      s = tokenizer_init_gguf(g, &t);
  }
  int32_t *ids = NULL;
  size_t n_ids = 0;
  if (s == QVL_OK)
    s = tokenizer_encode(t, in.data ? in.data : "", in.len, &ids, &n_ids);
  if (s == QVL_OK) {
    buf out = {0};
    buf_append_str(&out, "[");
    for (size_t i = 0; i < n_ids; i++)
      buf_printf(&out, "%s%d", i ? ", " : "", ids[i]);
    buf_append_str(&out, "]\n");
    fwrite(out.data, 1, out.len, stdout);
    buf_free(&out);
  }
  free(ids);
  tokenizer_free(t);
  gguf_close(g);
  buf_free(&in);
  return s == QVL_OK ? 0 : report_error("tokenize", s);
}
