/* Process settings of `qvl serve` (serve_ops.h). */
#include "commands/serve_ops.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "base/cpulist.h"
#include "base/logsink.h"

int serve_apply_process_settings(const server_config *c) {
  if (c->log_file && logsink_open(c->log_file) != QVL_OK) {
    fprintf(stderr, "qvl serve: %s\n", qvl_last_error());
    return 2;
  }
  logsink_set_json(c->log_format && !strcmp(c->log_format, "json"));
  if (c->cpu_affinity) {
    cpu_set_t set;
    static int cpus[CPU_SETSIZE];
    int n = 0;
    if (cpulist_parse(c->cpu_affinity, &set, cpus, CPU_SETSIZE, &n) != QVL_OK) {
      fprintf(stderr, "qvl serve: cpu_affinity: %s\n", qvl_last_error());
      return 2;
    }
    /* the process (and so every thread started later) on the set; workers one per CPU of it */
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      fprintf(stderr, "qvl serve: cpu_affinity %s: %s (are those CPUs online and allowed?)\n", c->cpu_affinity,
              strerror(errno));
      return 2;
    }
    cpulist_set_pinning(cpus, n);
  }
  if (c->nice != 0) {
    errno = 0;
    if (setpriority(PRIO_PROCESS, 0, (int)c->nice) != 0) {
      fprintf(stderr, "qvl serve: nice %lld: %s%s\n", (long long)c->nice, strerror(errno),
              c->nice < 0 ? " (a negative nice needs root or CAP_SYS_NICE)" : "");
      return 2;
    }
  }
  return 0;
}
