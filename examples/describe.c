/* describe MODEL.gguf MMPROJ.gguf IMAGE [QUESTION] — asks the model about an image and streams
 * the answer. Written against include/qvl.h only and linked with libqvl.so (docs/LIBRARY.md). */
#include <pthread.h>
#include <stdio.h>

#include "qvl.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static qvl_status result = QVL_ERR_INTERNAL;
static int finished;

static bool on_text(void *user, const char *text, size_t len) {
  fwrite(text, 1, len, stdout); /* runs on the engine thread */
  fflush(stdout);
  return true;
}

static void on_done(void *user, const qvl_result *r) {
  pthread_mutex_lock(&mu);
  result = qvl_result_status(r);
  if (result != QVL_OK)
    fprintf(stderr, "describe: %s\n", qvl_result_error(r));
  finished = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: describe MODEL.gguf MMPROJ.gguf IMAGE [QUESTION]\n");
    return 2;
  }
  qvl_model *m = NULL;
  qvl_engine *e = NULL;
  qvl_request *rq = NULL;
  if (qvl_model_load(argv[1], argv[2], NULL, &m) != QVL_OK || qvl_engine_start(m, NULL, &e) != QVL_OK ||
      qvl_request_new(&rq) != QVL_OK || qvl_request_add_image_file(rq, argv[3]) != QVL_OK ||
      qvl_request_add_message(rq, "user", argc > 4 ? argv[4] : "Describe this image.") != QVL_OK) {
    fprintf(stderr, "describe: %s\n", qvl_last_error());
    return 1;
  }
  qvl_request_set_max_tokens(rq, 64);
  qvl_request_set_callbacks(rq, on_text, on_done, NULL);
  if (qvl_engine_submit(e, rq, NULL) != QVL_OK) {
    fprintf(stderr, "describe: %s\n", qvl_last_error());
    return 1;
  }
  pthread_mutex_lock(&mu);
  while (!finished)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  printf("\n");
  qvl_request_free(rq);
  qvl_engine_stop(e, true);
  qvl_model_free(m);
  return result == QVL_OK ? 0 : 1;
}
