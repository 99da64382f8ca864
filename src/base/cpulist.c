/* CPU lists and worker pinning (see cpulist.h). */
#include "base/cpulist.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define CPULIST_MAX 1024

static int g_pin[CPULIST_MAX];
static int g_n_pin;

static bool parse_cpu(const char **p, long *out) {
  if (!isdigit((unsigned char)**p))
    return false;
  char *end;
  errno = 0;
  long v = strtol(*p, &end, 10);
  if (errno || v < 0 || v >= CPU_SETSIZE)
    return false;
  *p = end;
  *out = v;
  return true;
}

qvl_status cpulist_parse(const char *s, cpu_set_t *set, int *cpus, int max_cpus, int *n) {
  CPU_ZERO(set);
  if (n)
    *n = 0;
  if (!s || !*s)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list is empty (expected e.g. 0-3,8)");
  const char *p = s;
  while (*p) {
    const char *part = p;
    long a, b;
    if (!parse_cpu(&p, &a))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list '%s': expected a CPU number 0..%d at '%s'", s, CPU_SETSIZE - 1,
                        part);
    b = a;
    if (*p == '-') {
      p++;
      if (!parse_cpu(&p, &b))
        return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list '%s': expected the end of a range 0..%d at '%s'", s,
                          CPU_SETSIZE - 1, part);
      if (b < a)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list '%s': range %ld-%ld runs backwards", s, a, b);
    }
    for (long c = a; c <= b; c++)
      CPU_SET((int)c, set);
    if (*p == ',') {
      p++;
      if (!*p)
        return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list '%s' ends with a comma", s);
    } else if (*p) {
      return qvl_errorf(QVL_ERR_INVALID_ARG, "cpu list '%s': unexpected '%c' (expected e.g. 0-3,8)", s, *p);
    }
  }
  if (cpus && n)
    for (int c = 0; c < CPU_SETSIZE && *n < max_cpus; c++)
      if (CPU_ISSET(c, set))
        cpus[(*n)++] = c;
  return QVL_OK;
}

void cpulist_set_pinning(const int *cpus, int n) {
  if (!cpus || n <= 0) {
    g_n_pin = 0;
    return;
  }
  if (n > CPULIST_MAX)
    n = CPULIST_MAX;
  memcpy(g_pin, cpus, sizeof *cpus * (size_t)n);
  g_n_pin = n;
}

int cpulist_pin_cpu(int t) { return g_n_pin > 0 && t >= 0 ? g_pin[t % g_n_pin] : -1; }
