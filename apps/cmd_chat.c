/*
 * qvl chat — a multi-turn conversation in the terminal, through the serving engine (qvl_engine), so
 * that, as in the server, each turn reuses the KV of the conversation so far (prefix cache) and
 * the features of images already seen (image cache). Long conversations drop their oldest turns
 * (qvl_request_set_trim_history) instead of failing.
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

#include "answer.h"
#include "args.h"
#include "gen_args.h"
#include "qvl_options.h"
#include "commands.h"
#include "qvl.h"

#define CHAT_MAX_IMAGES 16 /* images attached to one message */
#define CHAT_MAX_LINE (1 << 20)

/* The options of qvl chat. */
typedef struct chat_opts {
  model_args m;
  gen_opts g;
  const char *system;
  char **images; /* attached to the first message */
  int n_images;
  char **videos; /* attached to the first message, after the images */
  int n_videos;
  int64_t ctx, min_px, max_px;
} chat_opts;

static const qvl_opt o_system = {"system", NULL, QVL_OPT_STR, .meta = "TEXT", .help = "a system message"};
static const qvl_opt o_image = {"image", NULL, QVL_OPT_LIST, .max = CHAT_MAX_IMAGES, .meta = "FILE",
                                .help = "an image for the first message (repeatable)"};
static const qvl_opt o_video = {"video", NULL, QVL_OPT_LIST, .max = CHAT_MAX_IMAGES, .meta = "FILE",
                                .help = "a clip (MP4/MOV, MKV/WebM, animated GIF) for the first message, after the "
                                        "images (repeatable; /video PATH attaches one later)"};

static const qvl_opt_bind chat_binds[] = {
    MODEL_ARGS_BINDS(chat_opts, m),
    QVL_OPT_FIELD(o_system, chat_opts, system),
    QVL_OPT_LIST_FIELD(o_image, chat_opts, images, n_images),
    QVL_OPT_LIST_FIELD(o_video, chat_opts, videos, n_videos),
    GEN_OPTS_BINDS(chat_opts, g),
    QVL_OPT_FIELD(qvl_opt_min_pixels, chat_opts, min_px),
    QVL_OPT_FIELD(qvl_opt_max_pixels, chat_opts, max_px),
    QVL_OPT_FIELD_HELP(qvl_opt_ctx, chat_opts, ctx, "context of the conversation (older turns are dropped)"),
    PRECISION_BIND(chat_opts, m),
    KV_TYPE_BIND(chat_opts, m),
};

static const qvl_opt_cmd chat_cmd = {
    .name = "qvl chat",
    .usage = "usage: qvl chat -m MODEL.gguf [--mmproj MMPROJ.gguf] [options]\n"
    "       qvl chat --hf REPO[:QUANT] [--offline] [options]\n"
    "A conversation in the terminal. Type a message and Enter; commands:\n"
    "  /image PATH    attach an image to the next message (repeatable)\n"
    "  /video PATH    attach a video (MP4, MKV, WebM, GIF; 2 frames per second) to the next message\n"
    "  /reset         start a new conversation\n"
    "  /save FILE     write the conversation as JSON (OpenAI messages, files inlined as data: URLs)\n"
    "  /stats         tokens, time to first token, tok/s, cache hits\n"
    "  /tokens N      tokens per answer at most from now on (as -n)\n"
    "  /help, /quit   (Ctrl-C stops an answer; Ctrl-D leaves)\n"
    "options:\n",
    .notes = GEN_OPTS_NOTES "An answer gets fewer than --max-tokens when the context is full.\n",
    .opts = chat_binds,
    .n_opts = sizeof chat_binds / sizeof chat_binds[0]};

static void chat_opts_init(chat_opts *o) {
  *o = (chat_opts){.ctx = 8192, .max_px = qvl_default_max_pixels()};
  gen_opts_init(&o->g);
}

static void chat_usage(FILE *f) {
  chat_opts d;
  chat_opts_init(&d);
  qvl_opts_usage(&chat_cmd, &d, f);
}

/* ---- Ctrl-C and the streamed text (the answer itself: answer.h) ------------------------------ */

static atomic_bool g_interrupted;

static void on_sigint(int sig) {
  (void)sig;
  atomic_store(&g_interrupted, true);
}


/* ---- the conversation ----------------------------------------------------------------------- */

typedef struct chat {
  qvl_engine *e;
  const qvl_model *m;
  const char *system;
  cJSON *msgs;                       /* OpenAI messages so far */
  char *pending[CHAT_MAX_IMAGES];    /* images and videos for the next message (paths, owned) */
  bool pending_video[CHAT_MAX_IMAGES];
  int n_pending;
  bool has_vision;
  gen_opts gen;                      /* max_tokens is the cap */
  int64_t ctx;
  int64_t min_px, max_px;
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

static bool add_media(chat *c, const char *path, bool quiet, bool video) {
  if (!c->has_vision) {
    fprintf(stderr, "qvl chat: %s need the vision projector (--mmproj MMPROJ.gguf)\n", video ? "videos" : "images");
    return false;
  }
  if (c->n_pending == CHAT_MAX_IMAGES) {
    fprintf(stderr, "qvl chat: at most %d images and videos per message\n", CHAT_MAX_IMAGES);
    return false;
  }
  if (access(path, R_OK) != 0) {
    fprintf(stderr, "qvl chat: %s: %s\n", path, strerror(errno));
    return false;
  }
  c->pending_video[c->n_pending] = video;
  c->pending[c->n_pending++] = strdup(path);
  if (!quiet)
    fprintf(stderr, "[%s %d attached to the next message: %s]\n", video ? "video" : "image", c->n_pending, path);
  return true;
}

static bool add_image(chat *c, const char *path, bool quiet) { return add_media(c, path, quiet, false); }

static void print_stats(const chat *c) {
  qvl_engine_stats st;
  qvl_engine_get_stats(c->e, &st);
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

/* The bytes of a whole file (malloc'd), or NULL with errno set. */
static void *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *data = NULL;
  size_t cap = 0;
  *len = 0;
  if (!f)
    return NULL;
  for (;;) {
    if (*len == cap) {
      char *d = realloc(data, cap = cap ? cap * 2 : 1 << 16);
      if (!d)
        break;
      data = d;
    }
    size_t n = fread(data + *len, 1, cap - *len, f);
    *len += n;
    if (n == 0) {
      bool ok = !ferror(f);
      fclose(f);
      if (ok)
        return data;
      free(data);
      errno = EIO;
      return NULL;
    }
  }
  fclose(f);
  free(data);
  errno = ENOMEM;
  return NULL;
}

/*
 * A copy of the conversation that the server takes back as it is (POST /v1/chat/completions): the
 * server reads no local files, so each attached file is inlined as the data: URL it accepts. NULL
 * when a file can no longer be read (said on stderr) or memory runs out.
 */
static cJSON *portable_messages(const cJSON *msgs) {
  cJSON *copy = cJSON_Duplicate(msgs, true), *m;
  cJSON_ArrayForEach(m, copy) {
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content"), *part;
    if (!cJSON_IsArray(content))
      continue;
    cJSON_ArrayForEach(part, content) {
      bool video = cJSON_HasObjectItem(part, "video_url");
      cJSON *media = cJSON_GetObjectItemCaseSensitive(part, video ? "video_url" : "image_url");
      cJSON *url = media ? cJSON_GetObjectItemCaseSensitive(media, "url") : NULL;
      if (!cJSON_IsString(url) || !strncmp(url->valuestring, "data:", 5))
        continue;
      size_t len;
      void *bytes = read_whole(url->valuestring, &len);
      char *inl = NULL;
      if (!bytes)
        fprintf(stderr, "qvl chat: /save: %s: %s\n", url->valuestring, strerror(errno));
      else if ((video ? qvl_video_data_url(bytes, len, &inl) : qvl_image_data_url(bytes, len, &inl)) != QVL_OK)
        fprintf(stderr, "qvl chat: /save: %s: %s\n", url->valuestring, qvl_last_error());
      free(bytes);
      cJSON *s = inl ? cJSON_CreateString(inl) : NULL;
      qvl_free(inl);
      if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(media, "url", s)) {
        cJSON_Delete(s);
        cJSON_Delete(copy);
        return NULL;
      }
    }
  }
  return copy;
}

static void save(const chat *c, const char *path) {
  cJSON *msgs = portable_messages(c->msgs);
  if (!msgs) {
    fprintf(stderr, "qvl chat: /save %s: nothing written\n", path);
    return;
  }
  char *js = cJSON_Print(msgs);
  cJSON_Delete(msgs);
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
      const char *kind = c->pending_video[i] ? "video_url" : "image_url";
      cJSON_AddStringToObject(part, "type", kind);
      cJSON_AddStringToObject(cJSON_AddObjectToObject(part, kind), "url", c->pending[i]);
      cJSON_AddItemToArray(content, part);
    }
    cJSON *tp = cJSON_CreateObject();
    cJSON_AddStringToObject(tp, "type", "text");
    cJSON_AddStringToObject(tp, "text", text);
    cJSON_AddItemToArray(content, tp);
  }
  cJSON_AddItemToArray(c->msgs, u);

  answer a;
  answer_init(&a);
  qvl_request *rq = NULL;
  char *js = cJSON_PrintUnformatted(c->msgs);
  qvl_status s = js ? qvl_request_new(&rq) : QVL_ERR_NOMEM;
  if (s == QVL_OK)
    s = qvl_request_set_messages(rq, js);
  free(js);
  if (s == QVL_OK)
    s = gen_opts_apply(&c->gen, c->m, rq);
  if (s == QVL_OK) {
    qvl_request_allow_files(rq, true); /* the user's own files */
    qvl_request_set_pixels(rq, c->min_px, c->max_px);
    qvl_request_set_trim_history(rq, true);
    qvl_request_set_callbacks(rq, gen_show_text, answer_on_done, &a);
    qvl_request_set_reasoning_callback(rq, gen_show_reasoning);
    gen_show_begin(&c->gen);
  }
  uint64_t id = 0;
  if (s == QVL_OK)
    s = qvl_engine_submit(c->e, rq, &id);
  qvl_request_free(rq);
  if (s != QVL_OK) {
    fprintf(stderr, "qvl chat: %s\n", qvl_last_error());
    cJSON_DeleteItemFromArray(c->msgs, cJSON_GetArraySize(c->msgs) - 1); /* the message was not sent */
  } else {
    for (int i = 0; i < c->n_pending; i++)
      free(c->pending[i]);
    c->n_pending = 0;
    answer_wait(&a, c->e, id, &g_interrupted);
    gen_show_end();
    bool stopped = a.finish == QVL_FINISH_CANCELLED;
    if (a.status != QVL_OK && !stopped)
      fprintf(stderr, "%sqvl chat: %s\n", a.text_len ? "\n" : "", a.error[0] ? a.error : qvl_status_text(a.status));
    /* the answer as far as it got stays in the conversation, so the next turn follows it */
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", a.text ? a.text : "");
    cJSON_AddItemToArray(c->msgs, m);
    if (stopped)
      printf("%s[stopped]", a.text_len ? " " : "");
    printf("\n");
    if (tty && a.usage.dropped_turns > 0)
      fprintf(stderr, "[the %d oldest turn(s) no longer fit the context and were left out]\n", a.usage.dropped_turns);
    fflush(stdout);
    c->turns++;
    const qvl_usage *us = &a.usage;
    c->prompt_tokens += us->prompt_tokens;
    c->completion_tokens += us->completion_tokens;
    c->cached_tokens += us->cached_prompt_tokens;
    c->prefix_hits += us->cached_prompt_tokens > 0;
    c->image_hits += us->image_cache_hits;
    c->image_misses += us->image_cache_misses;
    c->dropped_turns = us->dropped_turns;
    c->last_ttft_ms = a.t.ttft_ms;
    c->last_tok_s = a.t.decode_tok_s;
    c->last_prompt = us->prompt_tokens;
    c->last_cached = us->cached_prompt_tokens;
  }
  answer_free(&a);
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
    } else if (!strcmp(p, "/video")) {
      if (!arg || !*arg)
        fprintf(stderr, "usage: /video PATH\n");
      else
        add_media(c, arg, false, true);
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

static int chat_main(chat_opts *o, int argc, char **argv) {
  int rc = args_parse(&chat_cmd, argc, argv, o, NULL, NULL);
  if (rc >= 0)
    return rc;
  if (args_apply_process("qvl chat", o->m.precision, o->m.kv_type))
    return 2;
  if ((rc = args_resolve_model("qvl chat", &o->m)) != 0)
    return rc;
  if (!o->m.model)
    return args_usage_error(&chat_cmd, o, "-m MODEL.gguf is required");
  if (o->min_px > o->max_px) {
    fprintf(stderr, "qvl chat: --min-pixels is larger than --max-pixels\n");
    return 2;
  }
  if (o->g.max_tokens >= o->ctx) {
    fprintf(stderr, "qvl chat: --max-tokens %lld leaves no room for a prompt in --ctx %lld\n", (long long)o->g.max_tokens,
            (long long)o->ctx);
    return 2;
  }
  qvl_model_params mp;
  qvl_model_params_default(&mp);
  mp.dtype = o->m.dtype;
  mp.threads = (int)o->m.threads;
  const char *model = o->m.model, *system = o->system;
  int64_t ctx = o->ctx;
  qvl_model *m = NULL;
  qvl_engine *e = NULL;
  rc = answer_engine_open(model, o->m.mmproj, &mp, ctx, true, &m, &e);
  if (rc)
    return rc;
  chat c;
  memset(&c, 0, sizeof c);
  c.e = e;
  c.m = m;
  c.system = system;
  c.gen = o->g;
  c.ctx = ctx;
  c.min_px = o->min_px;
  c.max_px = o->max_px;
  c.has_vision = qvl_model_has_vision(m);
  chat_reset(&c);
  for (int i = 0; i < o->n_images; i++)
    if (!add_image(&c, o->images[i], true))
      rc = 2;
  for (int i = 0; i < o->n_videos; i++)
    if (!add_media(&c, o->videos[i], true, true))
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
  qvl_engine_stop(e, false);
  qvl_model_free(m);
  return rc;
}

/* What parsing allocated is freed here, whichever way chat_main returns. */
int cmd_chat(int argc, char **argv) {
  chat_opts o;
  chat_opts_init(&o);
  int rc = chat_main(&o, argc, argv);
  qvl_opts_free(&chat_cmd, &o);
  return rc;
}
