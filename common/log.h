/* log: one logger for the daemons, their libraries and the tools.
 *
 * Lines go to stderr. Plain lines carry a syslog priority prefix ("<6>") that
 * journald turns into the record's priority; on a terminal a readable level
 * name is printed instead. format "json" writes one JSON object per line. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

#include <stdarg.h>

/* syslog(3) priorities, so the prefix is the journal's own. */
enum log_level {
    LOG_LVL_ERROR = 3,
    LOG_LVL_WARNING = 4,
    LOG_LVL_NOTICE = 5,
    LOG_LVL_INFO = 6,
    LOG_LVL_DEBUG = 7,
};

enum log_format { LOG_FMT_PLAIN = 0, LOG_FMT_JSON = 1 };

void log_setup(const char *ident, enum log_level level, enum log_format format);
void log_set_level(enum log_level level);
int log_enabled(enum log_level level);
/* "error" | "warning" | "notice" | "info" | "debug" -> level; -1 if unknown. */
int log_level_parse(const char *name);
/* The name log_level_parse() accepts for level. */
const char *log_level_name(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_enabled(LOG_LVL_DEBUG)) log_msg(LOG_LVL_DEBUG, __VA_ARGS__); } while (0)

#endif
