#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static const char *log_ident = "seckill";
static _Atomic int log_level = LOG_LVL_INFO;
static _Atomic int log_format = LOG_FMT_PLAIN;
static int log_tty;

static const char *const level_names[] = {
    [LOG_LVL_ERROR] = "error", [LOG_LVL_WARNING] = "warning", [LOG_LVL_NOTICE] = "notice",
    [LOG_LVL_INFO] = "info",   [LOG_LVL_DEBUG] = "debug",
};

void log_setup(const char *ident, enum log_level level, enum log_format format)
{
    log_ident = ident;
    log_level = level;
    log_format = format;
    log_tty = isatty(STDERR_FILENO);
}

const char *log_level_name(enum log_level level) { return level_names[level]; }

void log_set_level(enum log_level level) { log_level = level; }
int log_enabled(enum log_level level) { return (int)level <= log_level; }

int log_level_parse(const char *name)
{
    for (int l = LOG_LVL_ERROR; l <= LOG_LVL_DEBUG; l++)
        if (strcmp(name, level_names[l]) == 0)
            return l;
    return -1;
}

static void json_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

static void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char msg[2048];
    vsnprintf(msg, sizeof(msg), fmt, ap);

    /* One locked stdio call per line, so lines from threads never interleave. */
    flockfile(stderr);
    if (log_format == LOG_FMT_JSON) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fprintf(stderr, "{\"ts_ms\":%lld,\"level\":\"%s\",\"ident\":\"",
                (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, level_names[level]);
        json_escape(stderr, log_ident);
        fputs("\",\"msg\":\"", stderr);
        json_escape(stderr, msg);
        fputs("\"}\n", stderr);
    } else if (log_tty) {
        fprintf(stderr, "%s: %s: %s\n", log_ident, level_names[level], msg);
    } else {
        fprintf(stderr, "<%d>%s\n", (int)level, msg);
    }
    funlockfile(stderr);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

void log_repeat(struct log_repeat *r, enum log_level level, const char *key, const char *fmt, ...)
{
    va_list ap;
    char k[LOG_REPEAT_KEY_MAX];
    snprintf(k, sizeof(k), "%s", key);
    if (r->times > 0 && strcmp(r->key, k) == 0) {
        r->times++;
        return;
    }
    log_repeat_end(r, "another failure");
    memcpy(r->key, k, sizeof(k));
    r->times = 1;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

void log_repeat_end(struct log_repeat *r, const char *what)
{
    if (r->times == 0)
        return;
    log_msg(LOG_LVL_NOTICE, "%s: over (%s) after %llu time%s", r->key, what, r->times,
            r->times == 1 ? "" : "s");
    r->times = 0;
    r->key[0] = '\0';
}

void log_summary_add(struct log_summary *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->last, sizeof(s->last), fmt, ap);
    va_end(ap);
    s->n++;
}

void log_summary_flush(struct log_summary *s, enum log_level level, const char *who, const char *what,
                       int64_t every_ms, bool force)
{
    int64_t now = util_mono_ms();
    if (s->n == 0 || (!force && s->last_ms != 0 && now - s->last_ms < every_ms))
        return;
    log_msg(level, "%s%lld %s since the last report; the last: %s", who, s->n, what, s->last);
    s->n = 0;
    s->last_ms = now;
}
