/* qvl_serve (qvl_tools.h), `qvl serve` — the OpenAI-compatible HTTP service (src/server/,
 * docs/API.md): settings, model, engine, server, then signals until a drain. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands/serve_ops.h"
#include "base/logsink.h"
#include "engine/engine.h"
#include "engine/vlm.h"
#include "text/kv_cache.h"
#include "kernels/kernels.h"
#include "engine/hf_model.h"
#include "server/config/settings.h"
#include "qvl_tools.h"
#include "server/http/server.h"

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: qvl serve -m MODEL.gguf [--mmproj MMPROJ.gguf] [options]\n"
          "       qvl serve --hf REPO[:QUANT] [--offline] [options]\n"
          "Serves the OpenAI chat API (POST /v1/chat/completions, /v1/jobs, GET /v1/models, /health, /metrics)\n"
          "and the web UI at /. Settings come from flags > environment (QVL_...) > --config FILE.yaml > defaults:\n");
  server_config_usage(f);
}

static qvl_status be_submit(void *ctx, const engine_request *r, uint64_t *id) { return engine_submit(ctx, r, id); }
static void be_cancel(void *ctx, uint64_t id) { engine_cancel(ctx, id); }
static void be_stats(void *ctx, engine_stats *out) { engine_get_stats(ctx, out); }

static const char *getenv_fn(const char *name) { return getenv(name); }

/* "qvl: WHAT: message" and exit code 1, as the command line reports a failed step. */
static int report(const char *what, qvl_status s) {
  const char *msg = qvl_last_error();
  fprintf(stderr, "qvl: %s: %s\n", what, msg && *msg ? msg : qvl_status_text(s));
  return 1;
}

int qvl_serve(int argc, char **argv, int first) {
  for (int i = first; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      serve_usage(stdout);
      return 0;
    }
  server_config cfg;
  server_config_init(&cfg);
  if (server_config_load(&cfg, argc, argv, first, getenv_fn) != QVL_OK) {
    fprintf(stderr, "qvl serve: %s\n", qvl_last_error());
    server_config_free(&cfg);
    return 2;
  }
  if (cfg.print_config) {
    server_config_print_yaml(&cfg, stdout);
    server_config_free(&cfg);
    return 0;
  }
  if (serve_apply_process_settings(&cfg) != 0) {
    server_config_free(&cfg);
    return 2;
  }
  if (cfg.precision && qvl_set_precision(cfg.precision) != QVL_OK) { /* the name was checked with the settings */
    fprintf(stderr, "qvl serve: precision: %s\n", qvl_last_error());
    server_config_free(&cfg);
    return 2;
  }
  const char *model = cfg.model, *mmproj = cfg.mmproj;
  char *got_model = NULL, *got_mmproj = NULL; /* what --hf resolved to, freed at the end */
  if (cfg.hf) {
    int rc = qvl_hf_files(cfg.hf, cfg.offline, &model, &mmproj, &got_model, &got_mmproj);
    if (rc) {
      free(got_model);
      free(got_mmproj);
      server_config_free(&cfg);
      return rc;
    }
  }

  /* Signals go to the main thread only (sigwait below): every thread started from here on
   * inherits the blocked mask. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP); /* reopen --log-file (logrotate) */
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  server *srv = NULL;
  qvl_status st = server_start(&cfg, &srv);
  if (st != QVL_OK) {
    int rc = report("serve", st);
    server_config_free(&cfg);
    free(got_model);
    free(got_mmproj);
    return rc;
  }
  const char *host = cfg.host;
  bool v6 = strchr(host, ':') != NULL;
  fprintf(stderr, "qvl serve: listening on http://%s%s%s:%d (loading %s)\n", v6 ? "[" : "", host, v6 ? "]" : "",
          server_port(srv), model);

  vlm *m = NULL;
  engine *eng = NULL;
  st = kernels_init(NULL, (int)cfg.threads);
  if (st == QVL_OK) {
    vlm_paths paths = {model, mmproj};
    vlm_load_opts lo = {.hf_dir = NULL, .dtype = cfg.dtype};
    st = vlm_load_with(&paths, &lo, &m);
  }
  if (st == QVL_OK) {
    engine_config ec;
    engine_config_default(&ec);
    ec.max_batch_size = (int)cfg.max_batch_size;
    ec.max_wait_ms = (int)cfg.max_wait_ms;
    ec.queue_capacity = (int)cfg.queue;
    ec.n_ctx = cfg.ctx;
    ec.max_prompt_tokens = cfg.max_prompt_tokens;
    if (cfg.kv_cache_mb > 0)
      ec.kv_cache_mb = cfg.kv_cache_mb;
    ec.image_cache_mb = cfg.image_cache_mb;
    ec.prefix_cache_mb = cfg.prefix_cache_mb;
    if (cfg.kv_type && kv_type_parse(cfg.kv_type, &ec.kv_type) == QVL_OK) /* checked with the config */
      kv_set_default_type(ec.kv_type);
    ec.request_timeout_ms = cfg.timeout_s * 1000;
    st = engine_start(m, &ec, &eng);
  }
  if (st != QVL_OK) {
    int rc = report("loading the model", st);
    server_drain(srv, 0);
    server_stop(srv);
    vlm_free(m);
    server_config_free(&cfg);
    free(got_model);
    free(got_mmproj);
    return rc;
  }
  /* The model id: --alias, else the file name (for a Hugging Face directory: the repository or
   * directory name, not a snapshot hash); that name and "qvl" are accepted too. */
  char name[256];
  const char *src = hf_model_is_dir(model) && cfg.hf ? cfg.hf : model;
  snprintf(name, sizeof name, "%s", src);
  size_t nl = strlen(name);
  while (nl > 1 && name[nl - 1] == '/')
    name[--nl] = '\0';
  if (src == cfg.hf && strchr(name, ':'))
    *strchr(name, ':') = '\0';
  const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
  const char *ids[3];
  int n_ids = 0;
  if (cfg.alias)
    ids[n_ids++] = cfg.alias;
  ids[n_ids++] = base;
  if (strcmp(base, "qvl") && (!cfg.alias || strcmp(cfg.alias, "qvl")))
    ids[n_ids++] = "qvl";
  server_backend be = {be_submit, be_cancel, be_stats, eng, &m->sampling,
                       m->vision ? kn_precision_name(m->vision->precision) : NULL, m};
  server_set_ready(srv, &be, ids, n_ids);
  fprintf(stderr, "qvl serve: ready: model '%s', %d threads (%s), batch %lld, queue %lld, ctx %lld\n", ids[0],
          kernels_threads(), kernels_isa(), (long long)cfg.max_batch_size, (long long)cfg.queue, (long long)cfg.ctx);

  int sig = 0;
  while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
    if (logsink_reopen() != QVL_OK)
      fprintf(stderr, "qvl serve: SIGHUP: %s\n", qvl_last_error());
    else if (cfg.log_file)
      fprintf(stderr, "qvl serve: SIGHUP: reopened %s\n", cfg.log_file);
  fprintf(stderr, "qvl serve: %s: draining (no new requests; running ones finish; a second signal exits at once)\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  /* Only this thread unblocks them, with the default action: a second signal ends the process. */
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
  double grace = (double)cfg.drain_timeout_s; /* then what is left is cancelled (and answered) */
  bool clean = server_drain(srv, grace);
  engine_stop(eng, clean); /* after a drain that ran out of time, whatever is left is cancelled */
  server_stop(srv);
  vlm_free(m);
  server_config_free(&cfg);
  free(got_model);
  free(got_mmproj);
  fprintf(stderr, "qvl serve: stopped%s\n", clean ? "" : " (some requests did not finish in time)");
  return 0;
}
