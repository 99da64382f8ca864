#include "text/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"

typedef struct cand {
  double w;      /* exp(logit - max logit), filled once the max is known */
  float logit;
  int32_t id;
} cand;

struct sampler {
  sampler_params p;
  int64_t n_vocab;
  uint64_t rng[4];
  uint8_t *seen;      /* [n_vocab] 1 if in prompt or output (repetition penalty) */
  int32_t *seen_ids;  /* [n_vocab] distinct ids with seen = 1, in first-seen order */
  int64_t n_seen;
  int32_t *count;     /* [n_vocab] occurrences in the output */
  int32_t *out_ids;   /* [n_vocab] distinct output ids */
  int64_t n_out;
  cand *cands;        /* [n_vocab] work array */
};

sampler_params sampler_default_params(void) {
  sampler_params p;
  memset(&p, 0, sizeof p);
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  return p;
}

qvl_status sampler_check_params(const sampler_params *p) {
  if (!isfinite(p->temperature) || p->temperature < 0.0f)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "temperature %g must be >= 0 (0: greedy)", (double)p->temperature);
  if (p->top_k < 0)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "top_k %d must be >= 0 (0: off)", (int)p->top_k);
  if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "top_p %g must be in [0, 1] (1: off)", (double)p->top_p);
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "min_p %g must be in [0, 1] (0: off)", (double)p->min_p);
  if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "repetition_penalty %g must be > 0 (1: off)",
                      (double)p->repetition_penalty);
  if (p->n_bias < 0 || p->n_bias > SAMPLER_MAX_BIAS)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "%d logit biases; at most %d", (int)p->n_bias, SAMPLER_MAX_BIAS);
  for (int32_t i = 0; i < p->n_bias; i++)
    if (p->bias_ids[i] < 0 || !isfinite(p->bias[i]))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "logit bias %d: token %d, bias %g", (int)i, (int)p->bias_ids[i],
                        (double)p->bias[i]);
  if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "presence_penalty %g must be in [-2, 2]", (double)p->presence_penalty);
  if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "frequency_penalty %g must be in [-2, 2]",
                      (double)p->frequency_penalty);
  return QVL_OK;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna). */
static uint64_t rng_next(uint64_t s[4]) {
  uint64_t r = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

double sampler_uniform(sampler *s) { return (double)(rng_next(s->rng) >> 11) * 0x1.0p-53; }

void sampler_reset(sampler *s) {
  for (int64_t i = 0; i < s->n_seen; i++)
    s->seen[s->seen_ids[i]] = 0;
  for (int64_t i = 0; i < s->n_out; i++)
    s->count[s->out_ids[i]] = 0;
  s->n_seen = s->n_out = 0;
  uint64_t x = s->p.seed;
  for (int i = 0; i < 4; i++)
    s->rng[i] = splitmix64(&x);
}

qvl_status sampler_init(const sampler_params *p, int64_t n_vocab, sampler **out) {
  *out = NULL;
  QVL_TRY(sampler_check_params(p));
  if (n_vocab <= 0 || n_vocab > INT32_MAX)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "sampler: vocabulary of %lld tokens", (long long)n_vocab);
  for (int32_t i = 0; i < p->n_bias; i++)
    if (p->bias_ids[i] >= n_vocab)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "logit_bias: token id %d is outside the vocabulary (0..%lld)",
                        (int)p->bias_ids[i], (long long)n_vocab - 1);
  sampler *s = calloc(1, sizeof *s);
  if (!s)
    return qvl_errorf(QVL_ERR_NOMEM, "sampler: out of memory");
  s->p = *p;
  s->n_vocab = n_vocab;
  size_t n = (size_t)n_vocab;
  s->seen = calloc(n, 1);
  s->seen_ids = malloc(n * sizeof(int32_t));
  s->count = calloc(n, sizeof(int32_t));
  s->out_ids = malloc(n * sizeof(int32_t));
  s->cands = malloc(n * sizeof(cand));
  if (!s->seen || !s->seen_ids || !s->count || !s->out_ids || !s->cands) {
    sampler_free(s);
    return qvl_errorf(QVL_ERR_NOMEM, "sampler: out of memory for a vocabulary of %lld", (long long)n_vocab);
  }
  sampler_reset(s);
  *out = s;
  return QVL_OK;
}

void sampler_free(sampler *s) {
  if (!s)
    return;
  FREE_EACH(s->seen, s->seen_ids, s->count, s->out_ids, s->cands, s);
}

static void mark_seen(sampler *s, int32_t id) {
  if (!s->seen[id]) {
    s->seen[id] = 1;
    s->seen_ids[s->n_seen++] = id;
  }
}

qvl_status sampler_add_prompt(sampler *s, const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= s->n_vocab)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "sampler: token id %d at index %lld is outside the vocabulary "
                        "(0..%lld)", (int)ids[i], (long long)i, (long long)s->n_vocab - 1);
  for (int64_t i = 0; i < n; i++)
    mark_seen(s, ids[i]);
  return QVL_OK;
}

qvl_status sampler_accept(sampler *s, int32_t id) {
  if (id < 0 || id >= s->n_vocab)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "sampler: token id %d is outside the vocabulary (0..%lld)", (int)id,
                      (long long)s->n_vocab - 1);
  mark_seen(s, id);
  if (s->count[id]++ == 0)
    s->out_ids[s->n_out++] = id;
  return QVL_OK;
}

static void apply_penalties(sampler *s, float *logits) {
  float rp = s->p.repetition_penalty;
  if (rp != 1.0f)
    for (int64_t i = 0; i < s->n_seen; i++) {
      float *l = &logits[s->seen_ids[i]];
      *l = *l < 0.0f ? *l * rp : *l / rp; /* HF: where(score < 0, score * p, score / p) */
    }
  float pp = s->p.presence_penalty, fp = s->p.frequency_penalty;
  if (pp != 0.0f || fp != 0.0f)
    for (int64_t i = 0; i < s->n_out; i++) {
      int32_t id = s->out_ids[i];
      logits[id] -= fp * (float)s->count[id] + pp;
    }
}

/* Lowest id on ties (strict >); NaN never wins; all -inf gives 0. */
static int32_t argmax(const float *x, int64_t n) {
  int32_t best = 0;
  float bv = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > bv) {
      bv = x[i];
      best = (int32_t)i;
    }
  return best;
}

/* Descending logit, then ascending id: a total order, so results do not depend on qsort. */
static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->logit > y->logit)
    return -1;
  if (x->logit < y->logit)
    return 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* k-th largest value (1-based) of v[0..n) by quickselect on a scratch copy held in c. */
static float kth_largest(cand *c, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1, want = k - 1;
  while (lo < hi) {
    float pivot = c[lo + (hi - lo) / 2].logit;
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (c[i].logit > pivot)
        i++;
      while (c[j].logit < pivot)
        j--;
      if (i <= j) {
        cand t = c[i];
        c[i] = c[j];
        c[j] = t;
        i++;
        j--;
      }
    }
    if (want <= j)
      hi = j;
    else if (want >= i)
      lo = i;
    else
      break;
  }
  return c[want].logit;
}

/*
 * Top-p without sorting the vocabulary: in the order of cand_cmp (logit descending, then id), a
 * token is kept while the mass ranked strictly above it is < P (= p * total mass); at least one.
 * A quickselect that partitions by rank and descends by mass finds the cut in O(n) expected time
 * and leaves exactly the kept tokens in c[0 .. keep), unordered. Returns keep.
 */
static int64_t top_p_select(cand *c, int64_t n, double P) {
  int64_t lo = 0, hi = n;
  double acc = 0.0; /* mass of the ranks below lo, all kept */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    cand t = c[mid];
    c[mid] = c[hi - 1];
    c[hi - 1] = t;
    const cand *pivot = &c[hi - 1];
    int64_t store = lo;
    double above = 0.0;
    for (int64_t i = lo; i < hi - 1; i++)
      if (cand_cmp(&c[i], pivot) < 0) {
        t = c[i];
        c[i] = c[store];
        c[store] = t;
        above += c[store].w;
        store++;
      }
    t = c[store];
    c[store] = c[hi - 1];
    c[hi - 1] = t;
    /* c[lo .. store) rank above the pivot, now at c[store]. */
    if (store > 0 && acc + above >= P) {
      hi = store; /* the cut is among the ranks above the pivot */
    } else {
      acc += above + c[store].w; /* the pivot is kept: the mass above it is < P */
      if (acc >= P)
        return store + 1;
      lo = store + 1;
    }
  }
  return lo > 0 ? lo : 1;
}

int32_t sampler_sample(sampler *s, float *logits) {
  int64_t V = s->n_vocab;
  /* NaN is never a candidate: treat it as filtered out. */
  for (int64_t i = 0; i < V; i++)
    if (isnan(logits[i]))
      logits[i] = -INFINITY;
  for (int32_t i = 0; i < s->p.n_bias; i++) /* logit_bias, as OpenAI: on the raw logits */
    logits[s->p.bias_ids[i]] += s->p.bias[i];
  apply_penalties(s, logits);
  if (s->p.temperature <= 0.0f)
    return argmax(logits, V);

  float T = s->p.temperature;
  if (T != 1.0f)
    for (int64_t i = 0; i < V; i++)
      logits[i] /= T;

  cand *c = s->cands;
  int64_t n = 0;
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; i++)
    if (logits[i] > -INFINITY) {
      c[n++] = (cand){0.0, logits[i], (int32_t)i};
      if (logits[i] > mx)
        mx = logits[i];
    }
  if (n == 0)
    return 0;

  if (s->p.top_k > 0 && s->p.top_k < n) {
    float thr = kth_largest(c, n, s->p.top_k);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
      if (c[i].logit >= thr)
        c[m++] = c[i];
    n = m;
  }
  /* Relative to the largest logit every weight is <= 1: nothing overflows even for tiny
   * temperatures, and min-p compares weights directly (p_i / p_max = w_i). */
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) {
    c[i].w = exp((double)c[i].logit - (double)mx);
    total += c[i].w;
  }
  if (s->p.top_p < 1.0f) {
    n = top_p_select(c, n, (double)s->p.top_p * total);
    total = 0.0;
    for (int64_t i = 0; i < n; i++)
      total += c[i].w;
  }
  if (s->p.min_p > 0.0f) {
    /* HF removes p_i < min_p * p_max; the top token (w = 1) always stays. */
    double lim = (double)s->p.min_p;
    int64_t m = 0;
    total = 0.0;
    for (int64_t i = 0; i < n; i++)
      if (!(c[i].w < lim)) {
        c[m++] = c[i];
        total += c[i].w;
      }
    n = m;
  }

  /* Draw in the candidates' current order, which depends only on the logits (the selections
   * above are deterministic), so a seed reproduces its tokens. */
  for (int64_t i = 0; i < V; i++)
    logits[i] = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    logits[c[i].id] = c[i].logit;
  double u = sampler_uniform(s) * total, acc = 0.0;
  for (int64_t i = 0; i < n; i++) {
    acc += c[i].w;
    if (u < acc)
      return c[i].id;
  }
  return c[n - 1].id;
}
