#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/logsink.h"

static log_level current_level = LOG_WARN;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void level_from_env(void) {
  const char *e = getenv("QVL_LOG");
  if (!e)
    return;
  if (!strcmp(e, "error"))
    current_level = LOG_ERROR;
  else if (!strcmp(e, "warn"))
    current_level = LOG_WARN;
  else if (!strcmp(e, "info"))
    current_level = LOG_INFO;
  else if (!strcmp(e, "debug"))
    current_level = LOG_DEBUG;
}

void log_set_level(log_level level) {
  pthread_once(&level_once, level_from_env);
  current_level = level;
}

log_level log_get_level(void) {
  pthread_once(&level_once, level_from_env);
  return current_level;
}

void log_msg(log_level level, const char *fmt, ...) {
  if (level > log_get_level())
    return;
  static const char *const names[] = {"error", "warn", "info", "debug"};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  if (logsink_json()) {
    /* --log-format json: the message as one logfmt line, turned into JSON by the sink */
    char msg[2048], line[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
      if (*p == '"')
        *p = '\'';
    int n = snprintf(line, sizeof line, "ts=%s.%03ldZ level=%s msg=\"%s\"", stamp, ts.tv_nsec / 1000000, names[level],
                     msg);
    logsink_write(line, n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    return;
  }
  pthread_mutex_lock(&log_lock);
  fprintf(stderr, "%s.%03ldZ qvl %s: ", stamp, ts.tv_nsec / 1000000, names[level]);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  pthread_mutex_unlock(&log_lock);
}
