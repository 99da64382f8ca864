/* qvl batch — one prompt over a folder (or files) of images and videos, one output line per input,
 * on the serving engine (several inputs decoded together, the image cache on), resumable: the
 * output file is the record of what is done, so running the same command again after Ctrl-C, a
 * crash or a kill -9 does only what is missing. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "batch_out.h"
#include "commands.h"
#include "gen_args.h"
#include "qvl.h"

typedef struct batch_opts {
  model_args m;
  gen_opts g;
  const char *prompt, *out;
  int64_t parallel, ctx, min_px, max_px;
} batch_opts;

static const qvl_opt o_prompt = {"prompt", "-p", QVL_OPT_STR, .meta = "TEXT", .help = "the question asked of every input"};
static const qvl_opt o_out = {"out", "-o", QVL_OPT_STR, .meta = "OUT.jsonl|OUT.csv",
                              .help = "one line per input (JSON Lines, or CSV when the name ends in .csv); "
                                      "inputs it already holds are skipped"};
static const qvl_opt o_parallel = {"parallel", NULL, QVL_OPT_INT, .min = 1, .max = 64,
                                   .help = "inputs decoded together (the engine's batch)"};

static const qvl_opt_bind batch_binds[] = {
    MODEL_ARGS_BINDS(batch_opts, m),
    PRECISION_BIND(batch_opts, m),
    KV_TYPE_BIND(batch_opts, m),
    QVL_OPT_FIELD(o_prompt, batch_opts, prompt),
    QVL_OPT_FIELD(o_out, batch_opts, out),
    QVL_OPT_FIELD(o_parallel, batch_opts, parallel),
    QVL_OPT_FIELD_HELP(qvl_opt_ctx, batch_opts, ctx, "tokens per sequence, prompt + output"),
    QVL_OPT_FIELD(qvl_opt_min_pixels, batch_opts, min_px),
    QVL_OPT_FIELD(qvl_opt_max_pixels, batch_opts, max_px),
    GEN_OPTS_BINDS(batch_opts, g),
};

static const qvl_opt_cmd batch_cmd = {
    .name = "qvl batch",
    .usage = "usage: qvl batch -m MODEL.gguf --mmproj MMPROJ.gguf -p PROMPT -o OUT.jsonl DIR_OR_FILES...\n",
    .notes = "Images (.jpg .jpeg .png .webp) and videos (.mp4 .m4v .mov .mkv .webm .gif) in the folders, at any\n"
             "depth, in path order, and the files named. Each finished input is one line of OUT: its path,\n"
             "the answer, why it ended and the tokens (JSON Lines: {\"path\", \"answer\", \"finish\", \"usage\"}, or\n"
             "\"error\" for an input that could not be read; CSV: path,answer,finish,prompt_tokens,completion_tokens,\n"
             "error). Ctrl-C stops after cancelling what is running; the same command again goes on where it\n"
             "stopped (an input is done once its line is in OUT). Progress (done/total, rate, time left) on stderr.\n"
             GEN_OPTS_NOTES,
    .opts = batch_binds,
    .n_opts = sizeof batch_binds / sizeof batch_binds[0],
    .max_args = 1 << 20};

/* ---- inputs ---- */

static bool has_ext(const char *path, const char *const *exts) {
  const char *dot = strrchr(path, '.');
  if (!dot || strchr(dot, '/'))
    return false;
  for (int i = 0; exts[i]; i++)
    if (!strcasecmp(dot + 1, exts[i]))
      return true;
  return false;
}
static const char *const image_exts[] = {"jpg", "jpeg", "png", "webp", NULL};
static const char *const video_exts[] = {"mp4", "m4v", "mov", "mkv", "webm", "gif", NULL};

typedef struct paths {
  char **v;
  size_t n, cap;
} paths;

static bool paths_add(paths *p, char *s) {
  if (!s)
    return false;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    char **v = realloc(p->v, cap * sizeof *v);
    if (!v) {
      free(s);
      return false;
    }
    p->v = v, p->cap = cap;
  }
  p->v[p->n++] = s;
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The media files under dir (any depth), appended in path order; false on an unreadable folder. */
static bool walk(const char *dir, paths *out) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "qvl batch: cannot read the folder %s: %s\n", dir, strerror(errno));
    return false;
  }
  paths here = {0};
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue; /* also hidden files and folders */
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(n);
    if (p)
      snprintf(p, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
    ok = paths_add(&here, p);
  }
  closedir(d);
  if (here.n)
    qsort(here.v, here.n, sizeof *here.v, cmp_str);
  for (size_t i = 0; i < here.n; i++) {
    struct stat st;
    char *p = here.v[i];
    here.v[i] = NULL;
    if (ok && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
      ok = walk(p, out);
      free(p);
    } else if (ok && (has_ext(p, image_exts) || has_ext(p, video_exts))) {
      ok = paths_add(out, p);
    } else {
      free(p);
    }
  }
  free(here.v);
  return ok;
}

/* ---- running ---- */

typedef struct slot {
  const char *path;
  bool busy, done;
  uint64_t id;
  qvl_status status;
  char error[512];
  qvl_finish finish;
  char *text;
  qvl_usage usage;
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
} slot;

static void on_done(void *user, const qvl_result *r) {
  slot *s = user;
  pthread_mutex_lock(s->mu);
  s->status = qvl_result_status(r);
  snprintf(s->error, sizeof s->error, "%s", qvl_result_error(r));
  s->finish = qvl_result_finish(r);
  size_t len;
  const char *t = qvl_result_text(r, &len);
  if ((s->text = malloc(len + 1))) {
    memcpy(s->text, t, len);
    s->text[len] = '\0';
  }
  qvl_result_usage(r, &s->usage);
  s->done = true;
  pthread_cond_broadcast(s->cv);
  pthread_mutex_unlock(s->mu);
}

static atomic_bool g_interrupted;
static void on_sigint(int sig) {
  (void)sig;
  atomic_store(&g_interrupted, true);
}

static qvl_status submit(qvl_engine *e, const qvl_model *m, const batch_opts *o, slot *s) {
  qvl_request *rq = NULL;
  qvl_status nst = qvl_request_new(&rq);
  if (nst != QVL_OK)
    return nst;
  bool video = has_ext(s->path, video_exts);
  qvl_status st = video ? qvl_request_add_video_file(rq, s->path) : qvl_request_add_image_file(rq, s->path);
  if (st == QVL_OK)
    st = qvl_request_add_message(rq, "user", o->prompt);
  if (st == QVL_OK && !video)
    qvl_request_set_pixels(rq, o->min_px, o->max_px);
  if (st == QVL_OK)
    st = gen_opts_apply(&o->g, m, rq);
  if (st == QVL_OK) {
    qvl_request_set_callbacks(rq, NULL, on_done, s);
    st = qvl_engine_submit(e, rq, &s->id);
  }
  qvl_request_free(rq);
  return st;
}

/* "12/100 done, 1.3 inputs/s, 1m08s left" on stderr: in place on a terminal, else every 10%. */
static void progress(size_t done, size_t total, size_t skipped, double t0, bool final) {
  static int last_tenth = -1;
  bool tty = isatty(2);
  int tenth = total ? (int)(done * 10 / total) : 10;
  if (!tty && !final && tenth == last_tenth)
    return;
  last_tenth = tenth;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double el = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0, rate = el > 0 ? (double)(done - skipped) / el : 0;
  char eta[32] = "-";
  if (rate > 0 && done < total) {
    double left = (double)(total - done) / rate;
    snprintf(eta, sizeof eta, "%dm%02ds", (int)(left / 60), (int)left % 60);
  }
  fprintf(stderr, "%s[qvl batch] %zu/%zu done (%zu from before), %.2f inputs/s, %s left%s", tty ? "\r\033[K" : "",
          done, total, skipped, rate, eta, tty && !final ? "" : "\n");
  fflush(stderr);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_batch(int argc, char **argv) {
  batch_opts o = {.parallel = 4, .max_px = qvl_default_max_pixels()};
  gen_opts_init(&o.g);
  const char **args = calloc((size_t)argc + 1, sizeof *args);
  int n_args = 0;
  if (!args)
    return report_error("qvl batch", QVL_ERR_NOMEM);
  int rc = args_parse(&batch_cmd, argc, argv, &o, args, &n_args);
  if (rc < 0 && o.prompt && o.out && n_args > 0)
    rc = args_resolve_model("qvl batch", &o.m) ? 2 : -1;
  if (rc < 0 && (!o.m.model || !o.prompt || !o.out || n_args == 0))
    rc = args_usage_error(&batch_cmd, &o, !o.m.model ? "-m MODEL.gguf is required" : !o.prompt ? "-p PROMPT is required"
                                                      : !o.out ? "-o OUT.jsonl is required" : "give a folder or files");
  if (rc >= 0) {
    free(args);
    return rc;
  }
  paths in = {0};
  bool ok = true;
  for (int i = 0; ok && i < n_args; i++) {
    struct stat st;
    if (stat(args[i], &st) != 0) {
      fprintf(stderr, "qvl batch: %s: %s\n", args[i], strerror(errno));
      ok = false;
    } else if (S_ISDIR(st.st_mode)) {
      ok = walk(args[i], &in);
    } else {
      ok = paths_add(&in, strdup(args[i]));
    }
  }
  free(args);
  batch_out out = {0};
  if (ok && in.n == 0) {
    fprintf(stderr, "qvl batch: no images or videos found (%s, %s)\n", "jpg jpeg png webp", "mp4 m4v mov mkv webm gif");
    ok = false;
  }
  if (ok && !o.m.mmproj && !qvl_path_is_hf_dir(o.m.model)) {
    fprintf(stderr, "qvl batch: images and videos need the vision projector: --mmproj MMPROJ.gguf\n");
    ok = false;
  }
  if (ok && batch_out_open(&out, o.out) != QVL_OK) {
    fprintf(stderr, "qvl batch: %s\n", out.err);
    ok = false;
  }
  qvl_model *m = NULL;
  qvl_engine *e = NULL;
  if (ok) {
    qvl_model_params mp;
    qvl_model_params_default(&mp);
    mp.threads = (int)o.m.threads;
    mp.dtype = o.m.dtype;
    mp.precision = o.m.precision;
    qvl_status s = qvl_model_load(o.m.model, o.m.mmproj, &mp, &m);
    qvl_engine_params ep;
    qvl_engine_params_default(&ep);
    ep.max_batch_size = (int)o.parallel;
    ep.queue_capacity = (int)o.parallel;
    ep.kv_type = o.m.kv_type;
    if (o.ctx > 0)
      ep.n_ctx = o.ctx;
    if (s == QVL_OK)
      s = qvl_engine_start(m, &ep, &e);
    if (s != QVL_OK) {
      fprintf(stderr, "qvl batch: %s\n", qvl_last_error());
      ok = false;
    }
  }
  if (!ok) {
    batch_out_close(&out);
    for (size_t i = 0; i < in.n; i++)
      free(in.v[i]);
    free(in.v);
    qvl_model_free(m);
    return 2;
  }

  struct sigaction sa = {.sa_handler = on_sigint};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  slot *slots = calloc((size_t)o.parallel, sizeof *slots);
  size_t next = 0, done = 0, skipped = 0, failed = 0, running = 0;
  double t0 = now_s();
  int exit_code = slots ? 0 : 1;
  for (size_t i = 0; i < in.n; i++)
    if (batch_out_has(&out, in.v[i]))
      done++, skipped++;
  progress(done, in.n, skipped, t0, false);
  while (slots && ((next < in.n && !atomic_load(&g_interrupted)) || running > 0)) {
    /* fill the free slots, unless interrupted */
    for (int k = 0; k < o.parallel && next < in.n && !atomic_load(&g_interrupted); k++) {
      if (slots[k].busy)
        continue;
      while (next < in.n && batch_out_has(&out, in.v[next]))
        next++;
      if (next == in.n)
        break;
      slots[k] = (slot){.path = in.v[next++], .busy = true, .mu = &mu, .cv = &cv};
      if (submit(e, m, &o, &slots[k]) != QVL_OK) { /* a file that could not be read: its line says why */
        slots[k].status = QVL_ERR_INVALID_ARG;
        snprintf(slots[k].error, sizeof slots[k].error, "%s", qvl_last_error());
        slots[k].done = true;
      }
      running++;
    }
    /* wait for one to finish (polling the interrupt flag: a signal does not wake a condition) */
    pthread_mutex_lock(&mu);
    bool any = false;
    for (int k = 0; k < o.parallel; k++)
      any |= slots[k].busy && slots[k].done;
    if (!any) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000L;
      if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&cv, &mu, &ts);
    }
    pthread_mutex_unlock(&mu);
    if (atomic_load(&g_interrupted))
      for (int k = 0; k < o.parallel; k++)
        if (slots[k].busy && !slots[k].done && slots[k].id)
          qvl_engine_cancel(e, slots[k].id); /* ignored when already cancelled or done */
    for (int k = 0; k < o.parallel; k++) {
      pthread_mutex_lock(&mu);
      bool fin = slots[k].busy && slots[k].done;
      pthread_mutex_unlock(&mu);
      if (!fin)
        continue;
      slot *s = &slots[k];
      /* a cancelled input has no line: the next run does it again */
      if (!(s->finish == QVL_FINISH_CANCELLED || s->status == QVL_ERR_CANCELLED)) {
        batch_line line = {.path = s->path, .answer = s->status == QVL_OK ? s->text : NULL,
                           .finish = qvl_finish_name(s->finish), .prompt_tokens = s->usage.prompt_tokens,
                           .completion_tokens = s->usage.completion_tokens,
                           .error = s->status == QVL_OK ? NULL : s->error};
        if (batch_out_write(&out, &line) != QVL_OK) {
          fprintf(stderr, "\nqvl batch: %s\n", out.err);
          atomic_store(&g_interrupted, true);
          exit_code = 1;
        } else {
          done++;
          failed += s->status != QVL_OK;
        }
      }
      free(s->text);
      *s = (slot){0};
      running--;
      progress(done, in.n, skipped, t0, false);
    }
  }
  bool stopped = atomic_load(&g_interrupted) && done < in.n;
  progress(done, in.n, skipped, t0, true);
  if (stopped) {
    fprintf(stderr, "qvl batch: stopped with %zu of %zu done; the same command goes on from there\n", done, in.n);
    if (!exit_code)
      exit_code = 130;
  } else if (failed) {
    fprintf(stderr, "qvl batch: %zu of %zu inputs failed (their lines in %s say why)\n", failed, in.n, o.out);
  }
  free(slots);
  qvl_engine_stop(e, false);
  qvl_model_free(m);
  if (batch_out_close(&out) != QVL_OK && !exit_code) {
    fprintf(stderr, "qvl batch: %s\n", out.err);
    exit_code = 1;
  }
  for (size_t i = 0; i < in.n; i++)
    free(in.v[i]);
  free(in.v);
  return exit_code;
}
