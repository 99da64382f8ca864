/* Log-probabilities (see logprobs.h). */
#include "text/logprobs.h"

#include <math.h>

void logprobs_compute(const float *logits, int64_t n, int32_t chosen, int n_top, float *chosen_lp,
                      int32_t *top_ids, float *top_lp) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (logits[i] > mx)
      mx = logits[i];
  double sum = 0.0;
  if (mx > -INFINITY)
    for (int64_t i = 0; i < n; i++)
      if (logits[i] > -INFINITY)
        sum += exp((double)logits[i] - (double)mx);
  double lse = mx > -INFINITY ? (double)mx + log(sum) : 0.0;
  float lc = chosen >= 0 && chosen < n ? logits[chosen] : -INFINITY;
  *chosen_lp = lc > -INFINITY ? (float)((double)lc - lse) : -INFINITY;
  int k = 0;
  for (int j = 0; j < n_top; j++) {
    top_ids[j] = -1;
    top_lp[j] = -INFINITY;
  }
  /* One pass keeping the n_top best in order: most logits fail the first comparison. */
  for (int64_t i = 0; i < n && n_top > 0; i++) {
    float v = logits[i];
    if (!(v > -INFINITY) || (k == n_top && !(v > top_lp[k - 1])))
      continue;
    int at = k < n_top ? k++ : n_top - 1;
    while (at > 0 && v > top_lp[at - 1]) {
      top_lp[at] = top_lp[at - 1];
      top_ids[at] = top_ids[at - 1];
      at--;
    }
    top_lp[at] = v;
    top_ids[at] = (int32_t)i;
  }
  for (int j = 0; j < k; j++)
    top_lp[j] = (float)((double)top_lp[j] - lse);
}
