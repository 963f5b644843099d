/* log.h — one-line log records on stderr, journald-friendly: each line
 * starts with a syslog priority prefix ("<6>") that journald understands and
 * a terminal ignores harmlessly.  Prompt text is never logged unless the
 * log_prompts setting is on.  Thread-safe (one write(2) per line). */
#ifndef GPT2D_LOG_H
#define GPT2D_LOG_H

enum {
    LOG_LEVEL_ERROR = 3,
    LOG_LEVEL_WARN = 4,
    LOG_LEVEL_INFO = 6,
    LOG_LEVEL_DEBUG = 7
};

void log_set_level(int level);
void log_msg(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
