/* log: one logger for the daemons, their libraries and the tools.
 *
 * Lines go to stderr. Plain lines carry a syslog priority prefix ("<6>") that
 * journald turns into the record's priority; on a terminal a readable level
 * name is printed instead. format "json" writes one JSON object per line. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

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

/* A failure that repeats while a state lasts (a dependency that refuses
 * every attempt): logged when it begins, counted while it lasts, and said
 * once more, with the count, when it ends. key names the failure (an error
 * reply's text); a different key is a new state: the old one ends first.
 * Belongs to one thread (not locked); zero-initialised it is "no failure". */
#define LOG_REPEAT_KEY_MAX 160
struct log_repeat {
    char key[LOG_REPEAT_KEY_MAX];
    unsigned long long times;
};
/* Log fmt at level unless key is the failure already being repeated (then
 * only count it). */
void log_repeat(struct log_repeat *r, enum log_level level, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The failure is over, what says how ("a lock acquired"): "<key>: over
 * (<what>) after N times" at notice, once; nothing when no failure was
 * being repeated. */
void log_repeat_end(struct log_repeat *r, const char *what);

/* Events each worth knowing that come in bursts (late payments, dead
 * letters), where a line each would flood the log: said in one line per
 * period at most, with how many came since the last line and the last
 * one's words. Belongs to one thread; zero-initialised it has said nothing
 * (its first line goes out at the first log_summary_flush). */
#define LOG_SUMMARY_TEXT_MAX 320
struct log_summary {
    long long n;     /* events since the last line */
    int64_t last_ms; /* when the last line went out (monotonic), 0: never */
    char last[LOG_SUMMARY_TEXT_MAX];
};
/* One more event, in fmt's words; said at the next flush. */
void log_summary_add(struct log_summary *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "<who><n> <what> since the last report; the last: <words>" at level,
 * when events came since the last line and every_ms passed since it (at
 * once when force: a stop). */
void log_summary_flush(struct log_summary *s, enum log_level level, const char *who, const char *what,
                       int64_t every_ms, bool force);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_enabled(LOG_LVL_DEBUG)) log_msg(LOG_LVL_DEBUG, __VA_ARGS__); } while (0)

#endif
