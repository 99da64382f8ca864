/* Logging to stderr with a level set once from QVL_LOG (error|warn|info|debug). */
#ifndef QVL_BASE_LOG_H
#define QVL_BASE_LOG_H

typedef enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

void log_set_level(log_level level);
log_level log_get_level(void);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
