/* The context policy of a chat request: trimming old turns, the default max_tokens (history.h). */
#include "engine/history.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

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

/* The prompt without the first `drop` turns. */
static qvl_status build_dropping(const vlm *m, const cJSON *messages, const int *turn_of, int drop,
                                 const vlm_prompt_opts *o, vlm_prompt *out, int *dropped_messages) {
  memset(out, 0, sizeof *out);
  *dropped_messages = 0;
  if (drop == 0)
    return vlm_prompt_build(m, messages, o, out);
  cJSON *kept = history_without_turns(messages, turn_of, drop, dropped_messages);
  if (!kept)
    return qvl_errorf(QVL_ERR_NOMEM, "history: out of memory");
  qvl_status s = vlm_prompt_build(m, kept, o, out);
  cJSON_Delete(kept);
  return s;
}

static bool fits(const vlm_prompt *t, int64_t room, int64_t n_ctx, int64_t prompt_cap, int max_images) {
  return t->n + room <= n_ctx && (prompt_cap <= 0 || t->n <= prompt_cap) &&
         (max_images <= 0 || t->n_images <= max_images);
}

qvl_status history_build_prompt(const vlm *m, const cJSON *messages, const vlm_prompt_opts *o, const history_policy *p,
                                int64_t n_ctx, int64_t prompt_cap, int64_t *max_tokens, vlm_prompt *out,
                                history_report *rep) {
  memset(rep, 0, sizeof *rep);
  memset(out, 0, sizeof *out);
  rep->applied = true;
  rep->mode = p->mode;
  int64_t cap = *max_tokens;
  int n_msgs = cJSON_GetArraySize(messages);
  int *turn_of = calloc(n_msgs > 0 ? (size_t)n_msgs : 1, sizeof *turn_of);
  if (!turn_of)
    return qvl_errorf(QVL_ERR_NOMEM, "history: out of memory");
  int turns = history_turns(messages, turn_of);
  int earlier = turns > 0 ? turns - 1 : 0;
  rep->turns = turns;
  /* Trimming may drop images too: the conversation as a whole may hold more than max_images,
   * what is kept may not. */
  vlm_prompt_opts all = *o;
  if (p->mode == HISTORY_TRIM)
    all.max_images = 0;
  /* Room trimming aims at: the client's max_tokens, or for an automatic one a useful share. */
  int64_t room = cap;
  if (p->auto_max_tokens && n_ctx / 4 < room)
    room = n_ctx / 4 > 0 ? n_ctx / 4 : 1;

  /* The whole conversation first: its size is what the report measures drops against. */
  vlm_prompt full;
  qvl_status s = vlm_prompt_build(m, messages, &all, &full);
  if (s != QVL_OK) {
    free(turn_of);
    return s;
  }
  int drop = 0, dropped_msgs = 0;
  if (p->max_turns >= 0 && earlier > p->max_turns)
    drop = earlier - p->max_turns;
  vlm_prompt cur = full;
  bool cur_is_full = true;
  if (drop > 0) {
    s = build_dropping(m, messages, turn_of, drop, &all, &cur, &dropped_msgs);
    cur_is_full = false;
  }
  if (s == QVL_OK && p->mode == HISTORY_TRIM && !fits(&cur, room, n_ctx, prompt_cap, o->max_images) &&
      drop < earlier) {
    /* The fewest drops that fit: dropping more turns never makes the prompt longer, so a binary
     * search over [drop+1, earlier] needs log2(turns) builds, not one per turn. */
    vlm_prompt best;
    int best_msgs = 0;
    s = build_dropping(m, messages, turn_of, earlier, &all, &best, &best_msgs);
    int lo = drop + 1, hi = earlier; /* hi: the fewest drops known to fit (or `earlier`) */
    if (s == QVL_OK && fits(&best, room, n_ctx, prompt_cap, o->max_images)) {
      while (lo < hi && s == QVL_OK) {
        int mid = lo + (hi - lo) / 2;
        vlm_prompt t;
        int t_msgs = 0;
        s = build_dropping(m, messages, turn_of, mid, &all, &t, &t_msgs);
        if (s != QVL_OK)
          break;
        if (fits(&t, room, n_ctx, prompt_cap, o->max_images)) {
          vlm_prompt_free(&best);
          best = t;
          best_msgs = t_msgs;
          hi = mid;
        } else {
          vlm_prompt_free(&t);
          lo = mid + 1;
        }
      }
    }
    if (s == QVL_OK) {
      if (!cur_is_full)
        vlm_prompt_free(&cur);
      cur = best;
      cur_is_full = false;
      dropped_msgs = best_msgs;
      drop = hi;
    } else {
      vlm_prompt_free(&best);
    }
  }
  if (s == QVL_OK && o->max_images > 0 && cur.n_images > o->max_images)
    s = qvl_errorf(QVL_ERR_TOO_LARGE, "the current turn has %d images; the limit is %d", cur.n_images,
                   o->max_images);
  if (s != QVL_OK) {
    if (!cur_is_full)
      vlm_prompt_free(&cur);
    vlm_prompt_free(&full);
    free(turn_of);
    return s;
  }
  rep->dropped_turns = drop;
  rep->dropped_messages = dropped_msgs;
  rep->kept_turns = turns - drop;
  if (!cur_is_full) {
    rep->dropped_images = full.n_images - cur.n_images;
    rep->dropped_tokens = full.n - cur.n;
    vlm_prompt_free(&full);
  }
  /* Generate up to the room left, at most the cap; with no room at all keep the cap, so that the
   * caller's context check reports the overflow. */
  if (p->auto_max_tokens && cur.n < n_ctx && n_ctx - cur.n < cap)
    *max_tokens = n_ctx - cur.n;
  rep->max_tokens = *max_tokens;
  *out = cur;
  free(turn_of);
  return QVL_OK;
}
