/*
 * The context policy of a chat request: what to do when a long conversation no longer fits the
 * context (prompt + tokens to generate > n_ctx), and how many tokens to generate when the client
 * gave no max_tokens.
 *
 * A "turn" starts at a user message and runs up to the next user message (the assistant's answer
 * and tool messages belong to the turn that asked). Messages before the first user message that are
 * not system messages form a turn of their own. The current turn is the last one. System
 * messages are never dropped; images go with the message that holds them.
 *
 *   HISTORY_ERROR  the prompt is used as given; too long is the caller's error (400).
 *   HISTORY_TRIM   the oldest earlier turns are dropped, as few as possible, until the prompt
 *                  leaves room for the tokens to generate (and fits max_prompt_tokens).
 * Either way max_turns >= 0 keeps at most that many earlier turns (0: the current turn alone).
 *
 * Without a max_tokens from the client (auto_max_tokens) the request generates up to the room
 * left, at most the server's cap: max_tokens = min(cap, n_ctx - prompt). Trimming then aims to
 * leave min(cap, n_ctx / 4) tokens of room, so that a trimmed conversation can still answer.
 *
 * The policy works on a prompt plan (prompt/plan.h): the tokens each turn takes are known from the
 * plan, so which turns to drop is arithmetic, and only the kept turns' media are ever decoded.
 *
 * Thread safety: like prompt_materialize (history_build_prompt calls it).
 */
#ifndef QVL_PROMPT_HISTORY_H
#define QVL_PROMPT_HISTORY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "prompt/prompt.h"
#include "qvl.h"

typedef enum history_mode { HISTORY_ERROR = 0, HISTORY_TRIM = 1 } history_mode;

typedef struct history_policy {
  history_mode mode;
  int max_turns;        /* earlier turns kept at most; < 0: no cap (history_policy_default) */
  bool auto_max_tokens; /* the client gave no max_tokens: generate up to the room left */
} history_policy;

/* mode error, no turn cap, max_tokens as given. */
history_policy history_policy_default(void);

/* What the policy did to one request. */
typedef struct history_report {
  bool applied;            /* a policy ran (engine_request.history was set) */
  history_mode mode;
  int turns, kept_turns;   /* turns in the request (current included) and kept */
  int dropped_turns, dropped_messages, dropped_images;
  int64_t dropped_tokens;  /* prompt tokens (images included) the dropped turns took */
  int64_t max_tokens;      /* tokens it may generate after the policy */
} history_report;

/* "error" / "trim" -> mode; false for anything else. */
bool history_mode_parse(const char *s, history_mode *out);
const char *history_mode_name(history_mode m);

/* Turn layout of a messages array: n_turns and, for each message, its turn (-1 for system
 * messages). turn_of has cJSON_GetArraySize(messages) entries (caller allocates). Returns the
 * number of turns. */
int history_turns(const cJSON *messages, int *turn_of);

/* A shallow copy of messages without the first `drop` turns (system messages kept), as cJSON
 * references into the original (which must outlive it). NULL when out of memory. */
cJSON *history_without_turns(const cJSON *messages, const int *turn_of, int drop, int *dropped_messages);

struct prompt_plan;

/* The turns to drop from a plan under policy p (arithmetic only): the fewest that leave room for
 * the tokens to generate (and fit prompt_cap > 0 and max_images > 0) in trim mode, at least what
 * max_turns asks. Returns the count; rep receives the turn counts. */
int history_select(const struct prompt_plan *plan, const history_policy *p, int64_t n_ctx, int64_t prompt_cap,
                   int max_images, int64_t max_tokens, history_report *rep);

/* Builds the prompt of `messages` under policy p: plan, select, materialize (only the kept turns'
 * media are decoded, each once). *max_tokens is the cap in, the tokens to generate out.
 * prompt_cap > 0 limits the prompt too (max_prompt_tokens). On success out holds the prompt (which
 * may still not fit: the caller's checks report that) and rep what was dropped. */
qvl_status history_build_prompt(const prompt_model *m, const cJSON *messages, const prompt_opts *o,
                                const history_policy *p, int64_t n_ctx, int64_t prompt_cap, int64_t *max_tokens,
                                prompt_built *out, history_report *rep);

#endif
