/*
 * qvl chat — a multi-turn conversation in the terminal, through the serving engine (engine.h), so
 * that, as in the server, each turn reuses the KV of the conversation so far (prefix cache) and
 * the features of images already seen (image cache). Long conversations drop their oldest turns
 * (history trim, engine/history.h) instead of failing.
 *
 * On a terminal: line editing and history (libedit), answers streamed, Ctrl-C stops the answer
 * being written (the chat goes on), Ctrl-D leaves. With standard input not a terminal (a pipe, a
 * file) it reads one message per line, prints each answer followed by a newline, and leaves at the
 * end of input.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <editline/readline.h>

#include "args.h"
#include "gen_args.h"
#include "base/buf.h"
#include "base/cond.h"
#include "base/timing.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine/hf_model.h"
#include "engine/history.h"
#include "engine/vlm.h"
#include "kernels/kernels.h"
#include "model/wtable.h"

#define CHAT_MAX_IMAGES 16 /* images attached to one message */
#define CHAT_MAX_STOPS 8
#define CHAT_MAX_LINE (1 << 20)

static void chat_usage(FILE *f) {
  fprintf(f,
          "usage: qvl chat -m MODEL.gguf [--mmproj MMPROJ.gguf] [options]\n"
          "       qvl chat --hf REPO[:QUANT] [--offline] [options]\n"
          "A conversation in the terminal. Type a message and Enter; commands:\n"
          "  /image PATH    attach an image to the next message (repeatable)\n"
          "  /reset         start a new conversation\n"
          "  /save FILE     write the conversation as JSON (OpenAI messages)\n"
          "  /stats         tokens, time to first token, tok/s, cache hits\n"
          "  /tokens N      tokens per answer at most from now on (as -n)\n"
          "  /help, /quit   (Ctrl-C stops an answer; Ctrl-D leaves)\n"
          "options (as qvl run):\n"
          "  --system TEXT, --image FILE (for the first message), --dtype T\n"
          "  -n, --max-tokens N      tokens per answer at most (default 512; fewer when the context is full)\n"
          "  --temp T, --top-k K, --top-p P, --min-p P, --seed S (not given: the model's recommendation)\n"
          "  --repeat-penalty R, --presence-penalty P, --frequency-penalty F, --stop TEXT\n"
          "  --min-pixels N, --max-pixels N   image size bounds (default max %lld)\n"
          "  -t, --threads N         worker threads (default: physical cores)\n"
          "  --ctx N                 context of the conversation (default 8192; older turns are dropped)\n",
          (long long)IMAGE_CPU_DEFAULT_MAX_PIXELS);
}

/* ---- one answer: engine callbacks (engine thread) and the wait for them (main thread) -------- */

typedef struct answer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  buf text;                /* what was streamed */
  engine_result res;       /* text/ids pointers dropped */
  char error[512];
} answer;

static atomic_bool g_interrupted;

static void on_sigint(int sig) {
  (void)sig;
  atomic_store(&g_interrupted, true);
}

static bool on_text(void *user, const char *text, size_t len) {
  answer *a = user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  pthread_mutex_lock(&a->mu);
  buf_append(&a->text, text, len);
  pthread_mutex_unlock(&a->mu);
  return true;
}

static void on_done(void *user, const engine_result *r) {
  answer *a = user;
  pthread_mutex_lock(&a->mu);
  a->res = *r;
  a->res.text = NULL;
  a->res.ids = NULL;
  snprintf(a->error, sizeof a->error, "%s", r->error);
  a->done = true;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* Waits for the answer; a Ctrl-C meanwhile cancels it. */
static void wait_answer(engine *e, uint64_t id, answer *a) {
  bool cancelled = false;
  pthread_mutex_lock(&a->mu);
  while (!a->done) {
    if (!cancelled && atomic_exchange(&g_interrupted, false)) {
      cancelled = true;
      pthread_mutex_unlock(&a->mu);
      engine_cancel(e, id);
      pthread_mutex_lock(&a->mu);
      continue;
    }
    cond_wait_ms(&a->cv, &a->mu, 20);
  }
  pthread_mutex_unlock(&a->mu);
}

/* ---- the conversation ----------------------------------------------------------------------- */

typedef struct chat {
  engine *e;
  const char *system;
  cJSON *msgs;                       /* OpenAI messages so far */
  char *pending[CHAT_MAX_IMAGES];    /* images for the next message (paths, owned) */
  int n_pending;
  bool has_vision;
  gen_params gen;                    /* max_tokens is the cap */
  int64_t ctx;
  vlm_prompt_opts po;
  /* /stats */
  int turns;
  int64_t prompt_tokens, completion_tokens, cached_tokens, dropped_turns;
  int prefix_hits, image_hits, image_misses;
  double last_ttft_ms, last_tok_s;
  int64_t last_prompt, last_cached;
} chat;

static void chat_reset(chat *c) {
  cJSON_Delete(c->msgs);
  c->msgs = cJSON_CreateArray();
  if (c->system) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", c->system);
    cJSON_AddItemToArray(c->msgs, m);
  }
  for (int i = 0; i < c->n_pending; i++)
    free(c->pending[i]);
  c->n_pending = 0;
}

static bool add_image(chat *c, const char *path, bool quiet) {
  if (!c->has_vision) {
    fprintf(stderr, "qvl chat: images need the vision projector (--mmproj MMPROJ.gguf)\n");
    return false;
  }
  if (c->n_pending == CHAT_MAX_IMAGES) {
    fprintf(stderr, "qvl chat: at most %d images per message\n", CHAT_MAX_IMAGES);
    return false;
  }
  if (access(path, R_OK) != 0) {
    fprintf(stderr, "qvl chat: %s: %s\n", path, strerror(errno));
    return false;
  }
  c->pending[c->n_pending++] = strdup(path);
  if (!quiet)
    fprintf(stderr, "[image %d attached to the next message: %s]\n", c->n_pending, path);
  return true;
}

static void print_stats(const chat *c) {
  engine_stats st;
  engine_get_stats(c->e, &st);
  printf("turns %d | prompt tokens %lld (%lld from the prefix cache) | generated %lld\n"
         "last answer: prompt %lld tokens, %lld cached, TTFT %.0f ms, %.1f tok/s\n"
         "prefix cache hits %llu, misses %llu | image cache hits %llu, misses %llu | older turns dropped %lld\n",
         c->turns, (long long)c->prompt_tokens, (long long)c->cached_tokens, (long long)c->completion_tokens,
         (long long)c->last_prompt, (long long)c->last_cached, c->last_ttft_ms, c->last_tok_s,
         (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_misses,
         (unsigned long long)st.image_cache_hits, (unsigned long long)st.image_cache_misses,
         (long long)c->dropped_turns);
  fflush(stdout);
}

static void save(const chat *c, const char *path) {
  char *js = cJSON_Print(c->msgs);
  FILE *f = js ? fopen(path, "w") : NULL;
  if (!f) {
    fprintf(stderr, "qvl chat: /save %s: %s\n", path, js ? strerror(errno) : "out of memory");
    free(js);
    return;
  }
  fprintf(f, "%s\n", js);
  bool ok = fclose(f) == 0;
  free(js);
  if (ok)
    fprintf(stderr, "[saved %d messages to %s]\n", cJSON_GetArraySize(c->msgs), path);
  else
    fprintf(stderr, "qvl chat: /save %s: write failed\n", path);
}

/* One user message -> one streamed answer, both kept in the conversation. */
static void turn(chat *c, const char *text, bool tty) {
  cJSON *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  if (c->n_pending == 0) {
    cJSON_AddStringToObject(u, "content", text);
  } else {
    cJSON *content = cJSON_AddArrayToObject(u, "content");
    for (int i = 0; i < c->n_pending; i++) {
      cJSON *part = cJSON_CreateObject();
      cJSON_AddStringToObject(part, "type", "image_url");
      cJSON_AddStringToObject(cJSON_AddObjectToObject(part, "image_url"), "url", c->pending[i]);
      cJSON_AddItemToArray(content, part);
    }
    cJSON *tp = cJSON_CreateObject();
    cJSON_AddStringToObject(tp, "type", "text");
    cJSON_AddStringToObject(tp, "text", text);
    cJSON_AddItemToArray(content, tp);
  }
  cJSON_AddItemToArray(c->msgs, u);

  answer a;
  memset(&a, 0, sizeof a);
  pthread_mutex_init(&a.mu, NULL);
  cond_init_monotonic(&a.cv);
  history_policy hp = history_policy_default();
  hp.mode = HISTORY_TRIM;
  hp.auto_max_tokens = true;
  engine_request rq;
  memset(&rq, 0, sizeof rq);
  rq.messages = c->msgs;
  rq.prompt = c->po;
  rq.gen = c->gen;
  rq.on_text = on_text;
  rq.on_done = on_done;
  rq.user = &a;
  rq.history = &hp;
  /* The flag is cleared before a line is read, not here: a Ctrl-C typed right after Enter, while
   * the line is still being handled, stops this answer as the user meant. */
  uint64_t id = 0;
  qvl_status s = engine_submit(c->e, &rq, &id);
  if (s != QVL_OK) {
    fprintf(stderr, "qvl chat: %s\n", qvl_last_error());
    cJSON_DeleteItemFromArray(c->msgs, cJSON_GetArraySize(c->msgs) - 1); /* the message was not sent */
  } else {
    for (int i = 0; i < c->n_pending; i++)
      free(c->pending[i]);
    c->n_pending = 0;
    wait_answer(c->e, id, &a);
    const engine_result *r = &a.res;
    bool stopped = r->finish_reason == ENGINE_FINISH_CANCELLED;
    if (r->status != QVL_OK && !stopped)
      fprintf(stderr, "%sqvl chat: %s\n", a.text.len ? "\n" : "", a.error[0] ? a.error : qvl_status_text(r->status));
    /* the answer as far as it got stays in the conversation, so the next turn follows it */
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", a.text.data ? a.text.data : "");
    cJSON_AddItemToArray(c->msgs, m);
    if (stopped)
      printf("%s[stopped]", a.text.len ? " " : "");
    printf("\n");
    if (tty && r->history.dropped_turns > 0)
      fprintf(stderr, "[the %d oldest turn(s) no longer fit the context and were left out]\n", r->history.dropped_turns);
    fflush(stdout);
    c->turns++;
    c->prompt_tokens += r->prompt_tokens;
    c->completion_tokens += r->completion_tokens;
    c->cached_tokens += r->cached_prompt_tokens;
    c->prefix_hits += r->cached_prompt_tokens > 0;
    c->image_hits += r->image_cache_hits;
    c->image_misses += r->image_cache_misses;
    c->dropped_turns = r->history.dropped_turns;
    c->last_ttft_ms = r->t.ttft_ms;
    c->last_tok_s = r->t.decode_tok_s;
    c->last_prompt = r->prompt_tokens;
    c->last_cached = r->cached_prompt_tokens;
  }
  buf_free(&a.text);
  pthread_mutex_destroy(&a.mu);
  pthread_cond_destroy(&a.cv);
}

/* Handles a line; false to leave. */
static bool handle_line(chat *c, char *line, bool tty) {
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
    line[--n] = '\0';
  char *p = line;
  while (*p == ' ' || *p == '\t')
    p++;
  if (!*p)
    return true;
  if (*p == '/') {
    char *arg = strchr(p, ' ');
    if (arg) {
      *arg++ = '\0';
      while (*arg == ' ')
        arg++;
    }
    if (!strcmp(p, "/quit") || !strcmp(p, "/exit"))
      return false;
    if (!strcmp(p, "/image")) {
      if (!arg || !*arg)
        fprintf(stderr, "usage: /image PATH\n");
      else
        add_image(c, arg, false);
    } else if (!strcmp(p, "/reset")) {
      chat_reset(c);
      fprintf(stderr, "[new conversation]\n");
    } else if (!strcmp(p, "/save")) {
      if (!arg || !*arg)
        fprintf(stderr, "usage: /save FILE\n");
      else
        save(c, arg);
    } else if (!strcmp(p, "/tokens")) {
      char *end = NULL;
      long long n_tok = arg ? strtoll(arg, &end, 10) : 0;
      if (!arg || end == arg || *end || n_tok < 1 || n_tok >= c->ctx)
        fprintf(stderr, "usage: /tokens N (1..%lld)\n", (long long)c->ctx - 1);
      else
        c->gen.max_tokens = n_tok;
    } else if (!strcmp(p, "/stats")) {
      print_stats(c);
    } else if (!strcmp(p, "/help")) {
      chat_usage(stdout);
    } else {
      fprintf(stderr, "qvl chat: unknown command %s (/help lists them)\n", p);
    }
    return true;
  }
  turn(c, p, tty);
  return true;
}

int cmd_chat(int argc, char **argv) {
  const char *model = NULL, *mmproj = NULL, *hf = NULL, *dtype = NULL, *system = NULL, *v;
  const char *images[CHAT_MAX_IMAGES], *stops[CHAT_MAX_STOPS];
  int n_images = 0, n_stops = 0, threads = 0;
  int64_t ctx = 8192;
  bool offline = false;
  gen_params gp = gen_params_default();
  gen_args_unset_sampling(&gp);
  gp.max_tokens = 512;
  vlm_prompt_opts po;
  vlm_prompt_opts_default(&po);
  int taken;
  for (int i = 2; i < argc; i++) {
    if (arg_value(argc, argv, &i, "--model", "-m", &v))
      model = v;
    else if (arg_value(argc, argv, &i, "--mmproj", NULL, &v))
      mmproj = v;
    else if (arg_value(argc, argv, &i, "--hf", NULL, &v))
      hf = v;
    else if (arg_flag(argv, i, "--offline", NULL))
      offline = true;
    else if (arg_value(argc, argv, &i, "--dtype", NULL, &v)) {
      qvl_dtype dt;
      if (!wtable_parse_dtype(v, &dt)) {
        fprintf(stderr, "qvl chat: --dtype '%s': expected f32, bf16, f16, q8_0, q4_0 or q4_k\n", v);
        return 2;
      }
      dtype = v;
    } else if (arg_value(argc, argv, &i, "--system", NULL, &v))
      system = v;
    else if (arg_value(argc, argv, &i, "--image", NULL, &v)) {
      if (n_images == CHAT_MAX_IMAGES) {
        fprintf(stderr, "qvl chat: at most %d images\n", CHAT_MAX_IMAGES);
        return 2;
      }
      images[n_images++] = v;
    } else if ((taken = gen_args_take(argc, argv, &i, &gp, stops, &n_stops, CHAT_MAX_STOPS, "qvl chat")) != 0) {
      if (taken == 2)
        return 2;
    } else if (arg_value(argc, argv, &i, "--min-pixels", NULL, &v))
      po.pre.min_pixels = arg_int("--min-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--max-pixels", NULL, &v))
      po.pre.max_pixels = arg_int("--max-pixels", v, 1, INT64_MAX);
    else if (arg_value(argc, argv, &i, "--threads", "-t", &v))
      threads = (int)arg_int("--threads", v, 1, 1024);
    else if (arg_value(argc, argv, &i, "--ctx", NULL, &v))
      ctx = arg_int("--ctx", v, 64, 262144);
    else if (arg_flag(argv, i, "--help", "-h")) {
      chat_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "qvl chat: unknown option '%s'\n", argv[i]);
      chat_usage(stderr);
      return 2;
    }
  }
  if (hf && model) {
    fprintf(stderr, "qvl chat: give either -m MODEL.gguf or --hf REPO[:QUANT], not both\n");
    return 2;
  }
  if (hf) {
    int rc = resolve_hf(hf, offline, &model, &mmproj);
    if (rc)
      return rc;
  }
  if (!model) {
    fprintf(stderr, "qvl chat: -m MODEL.gguf is required\n");
    chat_usage(stderr);
    return 2;
  }
  if (po.pre.min_pixels > po.pre.max_pixels) {
    fprintf(stderr, "qvl chat: --min-pixels is larger than --max-pixels\n");
    return 2;
  }
  if (gp.max_tokens >= ctx) {
    fprintf(stderr, "qvl chat: --max-tokens %lld leaves no room for a prompt in --ctx %lld\n", (long long)gp.max_tokens,
            (long long)ctx);
    return 2;
  }
  gp.stop = stops;
  gp.n_stop = n_stops;
  po.source.allow_files = true; /* the user's own files */

  qvl_status s = kernels_init(NULL, threads);
  if (s != QVL_OK)
    return report_error("kernels", s);
  vlm *m = NULL;
  vlm_paths paths = {model, mmproj};
  vlm_load_opts lo = {.hf_dir = NULL, .dtype = dtype};
  s = vlm_load_with(&paths, &lo, &m);
  if (s != QVL_OK)
    return report_error("loading the model", s);
  gen_args_model_defaults(&gp, &m->sampling);
  engine_config ec;
  engine_config_default(&ec);
  ec.max_batch_size = 1;
  ec.max_wait_ms = 0;
  ec.queue_capacity = 1;
  ec.n_ctx = ctx;
  engine *e = NULL;
  s = engine_start(m, &ec, &e);
  if (s != QVL_OK) {
    vlm_free(m);
    return report_error("starting the engine", s);
  }

  chat c;
  memset(&c, 0, sizeof c);
  c.e = e;
  c.system = system;
  c.gen = gp;
  c.ctx = ctx;
  c.po = po;
  c.has_vision = m->vision != NULL;
  chat_reset(&c);
  int rc = 0;
  for (int i = 0; i < n_images; i++)
    if (!add_image(&c, images[i], true))
      rc = 2;

  /* Ctrl-C: stop the current answer, never the program (no SA_RESTART: a blocked read returns) */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);

  bool tty = isatty(STDIN_FILENO) && rc == 0;
  if (tty) {
    fprintf(stderr, "qvl chat: %s%s, context %lld tokens. /help for commands, Ctrl-D to leave.\n", model,
            c.has_vision ? " (with vision)" : "", (long long)ctx);
    rl_readline_name = "qvl";
    using_history();
    stifle_history(1000);
    for (;;) {
      atomic_store(&g_interrupted, false);
      char *line = readline("> ");
      if (!line) {
        if (atomic_exchange(&g_interrupted, false)) {
          printf("\n");
          continue; /* Ctrl-C at the prompt: a fresh line */
        }
        printf("\n");
        break; /* Ctrl-D */
      }
      if (*line)
        add_history(line);
      bool go_on = handle_line(&c, line, true);
      free(line);
      if (!go_on)
        break;
    }
  } else if (rc == 0) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    for (;;) {
      atomic_store(&g_interrupted, false);
      if ((n = getline(&line, &cap, stdin)) < 0)
        break;
      if (n > CHAT_MAX_LINE) {
        fprintf(stderr, "qvl chat: a line of %zd bytes; at most %d\n", n, CHAT_MAX_LINE);
        continue;
      }
      if (!handle_line(&c, line, false))
        break;
    }
    free(line);
  }
  chat_reset(&c);
  cJSON_Delete(c.msgs);
  engine_stop(e, false);
  vlm_free(m);
  return rc;
}
