#include "text/stop.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "text/unicode.h"

struct stop_state {
  int32_t eos[STOP_MAX_EOS];
  int n_eos;
  char *strings[STOP_MAX_STRINGS];
  size_t lens[STOP_MAX_STRINGS];
  int n_strings;
  int64_t max_tokens;
  buf text;
  int64_t n_tokens;
  qvl_finish reason;
  int matched; /* 1 + index of the stop string that matched; 0: none */
  qvl_status error;
};

qvl_status stop_init(const stop_params *p, stop_state **out) {
  *out = NULL;
  if (p->n_eos < 0 || p->n_eos > STOP_MAX_EOS || (p->n_eos > 0 && !p->eos_ids))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%d end-of-sequence ids given, at most %d allowed", p->n_eos,
                      STOP_MAX_EOS);
  if (p->n_strings < 0 || p->n_strings > STOP_MAX_STRINGS || (p->n_strings > 0 && !p->strings))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%d stop strings given, at most %d allowed", p->n_strings,
                      STOP_MAX_STRINGS);
  for (int i = 0; i < p->n_strings; i++) {
    size_t n = p->strings[i] ? strlen(p->strings[i]) : 0;
    if (n == 0)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "stop string %d is empty", i);
    if (n > STOP_MAX_STRING_BYTES)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "stop string %d has %zu bytes, at most %d allowed", i, n,
                        STOP_MAX_STRING_BYTES);
  }
  stop_state *s = calloc(1, sizeof *s);
  if (!s)
    return qvl_errorf(QVL_ERR_NOMEM, "stop conditions: out of memory");
  s->reason = QVL_FINISH_NONE; /* -1: calloc's zero is QVL_FINISH_EOS */
  for (int i = 0; i < p->n_eos; i++)
    s->eos[i] = p->eos_ids[i];
  s->n_eos = p->n_eos;
  for (int i = 0; i < p->n_strings; i++) {
    s->lens[i] = strlen(p->strings[i]);
    if (!(s->strings[i] = malloc(s->lens[i] + 1))) {
      s->n_strings = i;
      stop_free(s);
      return qvl_errorf(QVL_ERR_NOMEM, "stop conditions: out of memory");
    }
    memcpy(s->strings[i], p->strings[i], s->lens[i] + 1);
  }
  s->n_strings = p->n_strings;
  s->max_tokens = p->max_tokens;
  if (buf_reserve(&s->text, 256) != QVL_OK) {
    stop_free(s);
    return qvl_errorf(QVL_ERR_NOMEM, "stop conditions: out of memory");
  }
  s->text.data[0] = 0;
  *out = s;
  return QVL_OK;
}

void stop_free(stop_state *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n_strings; i++)
    free(s->strings[i]);
  buf_free(&s->text);
  free(s);
}

void stop_reset(stop_state *s) {
  s->text.len = 0;
  if (s->text.data)
    s->text.data[0] = 0;
  s->n_tokens = 0;
  s->reason = QVL_FINISH_NONE;
  s->matched = 0;
  s->error = QVL_OK;
}

qvl_finish stop_push(stop_state *s, int32_t id, const char *bytes, size_t n) {
  if (s->reason != QVL_FINISH_NONE || s->error != QVL_OK)
    return s->reason;
  s->n_tokens++;
  for (int i = 0; i < s->n_eos; i++)
    if (id == s->eos[i])
      return s->reason = QVL_FINISH_EOS;
  size_t old = s->text.len;
  if (n > 0) {
    qvl_status st = buf_append(&s->text, bytes, n);
    if (st != QVL_OK) {
      s->error = st;
      return QVL_FINISH_NONE;
    }
  }
  /* Only matches that end in the new bytes are new; the earliest start wins. */
  size_t best = SIZE_MAX;
  int which = 0;
  for (int i = 0; i < s->n_strings; i++) {
    size_t L = s->lens[i];
    if (L > s->text.len)
      continue;
    size_t from = old >= L - 1 ? old - (L - 1) : 0;
    for (size_t p = from; p + L <= s->text.len && p < best; p++)
      if (memcmp(s->text.data + p, s->strings[i], L) == 0) {
        best = p;
        which = i + 1;
        break;
      }
  }
  if (best != SIZE_MAX) {
    s->text.len = best;
    s->text.data[best] = 0;
    s->matched = which;
    return s->reason = QVL_FINISH_STOP_STRING;
  }
  if (s->max_tokens > 0 && s->n_tokens >= s->max_tokens)
    return s->reason = QVL_FINISH_LENGTH;
  return QVL_FINISH_NONE;
}

const char *stop_text(const stop_state *s, size_t *len) {
  if (len)
    *len = s->text.len;
  return s->text.data ? s->text.data : "";
}

size_t stop_ready(const stop_state *s) {
  size_t len = s->text.len;
  if (s->reason != QVL_FINISH_NONE)
    return len;
  size_t hold = 0;
  const char *t = s->text.data;
  for (int i = 0; i < s->n_strings; i++) {
    size_t L = s->lens[i];
    /* Longest proper prefix of the stop string that the text ends with. */
    for (size_t k = (L - 1 < len ? L - 1 : len); k > hold; k--)
      if (memcmp(t + len - k, s->strings[i], k) == 0) {
        hold = k;
        break;
      }
  }
  size_t u = utf8_incomplete_tail(t, len);
  if (u > hold)
    hold = u;
  return len - hold;
}

int64_t stop_n_tokens(const stop_state *s) { return s->n_tokens; }

qvl_finish stop_reason_of(const stop_state *s) { return s->reason; }
int stop_matched(const stop_state *s) { return s->matched; }
qvl_status stop_error(const stop_state *s) { return s->error; }
