/* The context policy of a chat request over a prompt plan: trimming old turns, the default
 * max_tokens (history.h). */
#include "prompt/history.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "prompt/plan.h"

history_policy history_policy_default(void) {
  history_policy p = {.mode = HISTORY_ERROR, .max_turns = -1, .auto_max_tokens = false};
  return p;
}

bool history_mode_parse(const char *s, history_mode *out) {
  if (s && !strcmp(s, "error")) {
    *out = HISTORY_ERROR;
    return true;
  }
  if (s && !strcmp(s, "trim")) {
    *out = HISTORY_TRIM;
    return true;
  }
  return false;
}

const char *history_mode_name(history_mode m) { return m == HISTORY_TRIM ? "trim" : "error"; }

static bool is_role(const cJSON *m, const char *role) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
  return cJSON_IsString(r) && !strcmp(r->valuestring, role);
}

int history_turns(const cJSON *messages, int *turn_of) {
  int turn = -1, i = 0;
  bool open = false; /* a turn has started (a user message, or leading non-system messages) */
  for (const cJSON *m = messages ? messages->child : NULL; m; m = m->next, i++) {
    if (is_role(m, "system") || is_role(m, "developer")) {
      turn_of[i] = -1;
      continue;
    }
    if (is_role(m, "user") || !open) {
      turn++;
      open = true;
    }
    turn_of[i] = turn;
  }
  return turn + 1;
}

cJSON *history_without_turns(const cJSON *messages, const int *turn_of, int drop, int *dropped_messages) {
  cJSON *out = cJSON_CreateArray();
  if (!out)
    return NULL;
  int i = 0, dropped = 0;
  for (cJSON *m = messages->child; m; m = m->next, i++) {
    if (turn_of[i] >= 0 && turn_of[i] < drop) {
      dropped++;
      continue;
    }
    if (!cJSON_AddItemReferenceToArray(out, m)) {
      cJSON_Delete(out);
      return NULL;
    }
  }
  if (dropped_messages)
    *dropped_messages = dropped;
  return out;
}

static bool fits(const prompt_plan_size *z, int64_t room, int64_t n_ctx, int64_t prompt_cap, int max_images) {
  return z->n_tokens + room <= n_ctx && (prompt_cap <= 0 || z->n_tokens <= prompt_cap) &&
         (max_images <= 0 || z->n_media <= max_images);
}

int history_select(const prompt_plan *plan, const history_policy *p, int64_t n_ctx, int64_t prompt_cap,
                   int max_images, int64_t max_tokens, history_report *rep) {
  memset(rep, 0, sizeof *rep);
  rep->applied = true;
  rep->mode = p->mode;
  int turns = plan->n_turns, earlier = turns > 0 ? turns - 1 : 0;
  rep->turns = turns;
  /* Room trimming aims at: the client's max_tokens, or for an automatic one a useful share. */
  int64_t room = max_tokens;
  if (p->auto_max_tokens && n_ctx / 4 < room)
    room = n_ctx / 4 > 0 ? n_ctx / 4 : 1;
  int drop = 0;
  if (p->max_turns >= 0 && earlier > p->max_turns)
    drop = earlier - p->max_turns;
  if (p->mode == HISTORY_TRIM) {
    /* The fewest drops that fit; when even the current turn alone does not, all earlier turns go
     * and the caller's checks report the overflow. */
    int d = drop;
    prompt_plan_size z = prompt_plan_size_without(plan, d);
    while (d < earlier && !fits(&z, room, n_ctx, prompt_cap, max_images))
      z = prompt_plan_size_without(plan, ++d);
    drop = d;
  }
  rep->dropped_turns = drop;
  rep->kept_turns = turns - drop;
  return drop;
}

qvl_status history_build_prompt(const prompt_model *m, const cJSON *messages, const prompt_opts *o,
                                const history_policy *p, int64_t n_ctx, int64_t prompt_cap, int64_t *max_tokens,
                                prompt_built *out, history_report *rep) {
  memset(rep, 0, sizeof *rep);
  memset(out, 0, sizeof *out);
  int64_t cap = *max_tokens;
  /* Trimming may drop images too: the conversation as a whole may hold more than max_images,
   * what is kept may not. */
  prompt_opts all = *o;
  if (p->mode == HISTORY_TRIM)
    all.max_images = 0;
  prompt_plan plan;
  QVL_TRY(prompt_plan_build(m, messages, &all, &plan));
  int drop = history_select(&plan, p, n_ctx, prompt_cap, p->mode == HISTORY_TRIM ? o->max_images : 0, cap, rep);
  prompt_plan_size kept = prompt_plan_size_without(&plan, drop);
  qvl_status s = QVL_OK;
  if (o->max_images > 0 && kept.n_media > o->max_images)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the current turn has %d images; the limit is %d", kept.n_media,
                   o->max_images);
  if (s == QVL_OK)
    s = prompt_materialize(m, &plan, messages, drop, o, out);
  if (s != QVL_OK) {
    prompt_plan_free(&plan);
    return s;
  }
  rep->dropped_messages = plan.n_messages - kept.n_messages;
  if (drop > 0) {
    rep->dropped_images = plan.n_media - out->n_images;
    rep->dropped_tokens = plan.n_tokens - out->n;
  }
  prompt_plan_free(&plan);
  /* Generate up to the room left, at most the cap; with no room at all keep the cap, so that the
   * caller's context check reports the overflow. */
  if (p->auto_max_tokens && out->n < n_ctx && n_ctx - out->n < cap)
    *max_tokens = n_ctx - out->n;
  rep->max_tokens = *max_tokens;
  return QVL_OK;
}
