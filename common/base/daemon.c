#include "daemon.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "util.h"

volatile sig_atomic_t daemon_stop_signals;
volatile sig_atomic_t daemon_reload_signal;

/* Startup retries: exponential backoff from RETRY_BASE_MS to RETRY_CAP_MS
 * (doubling stops after RETRY_MAX_DOUBLINGS), with jitter, plus
 * RETRY_FLOOR_MS. A service coming back is found within a second or two at
 * first, and a long outage costs one attempt every few seconds, not a
 * flood of connections and log lines; the floor keeps a zero jitter draw
 * from retrying at once. */
#define RETRY_BASE_MS 100
#define RETRY_CAP_MS 5000
#define RETRY_MAX_DOUBLINGS 10
#define RETRY_FLOOR_MS 100

static int64_t watchdog_ms;
static int64_t watchdog_last_ms;

/* daemon_on_reload's functions, in the order of registration: main thread. */
static struct {
    daemon_reload_fn fn;
    void *arg;
} on_reload[DAEMON_RELOAD_FNS];
static size_t on_reload_n;

static void on_stop(int sig)
{
    (void)sig;
    daemon_stop_signals++;
}

static void on_hup(int sig)
{
    (void)sig;
    daemon_reload_signal = 1;
}

static void daemon_sigset(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
}

int daemon_signals_install(void)
{
    struct sigaction sa = { 0 };
    uint64_t usec = 0;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocking call in the main loop returns with EINTR and
     * the loop sees the flag at once. */
    sa.sa_handler = on_stop;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    sa.sa_handler = on_hup;
    if (sigaction(SIGHUP, &sa, NULL) != 0)
        return -1;
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) != 0)
        return -1;
    if (sd_watchdog_enabled(0, &usec) > 0)
        watchdog_ms = (int64_t)(usec / 1000);
    return 0;
}

void daemon_signals_block_thread(void)
{
    sigset_t set;
    daemon_sigset(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void daemon_signals_block(void)
{
    sigset_t set;
    daemon_sigset(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void daemon_signals_unblock(void)
{
    sigset_t set;
    daemon_sigset(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Wait up to ms for a stop signal. -1 if one came (or had come), else 0.
 * With the signals blocked (startup), sigtimedwait takes a pending one and
 * it is counted here as the handler would have; unblocked, the handler
 * counts it and the wait ends with EINTR. A SIGHUP ends the wait early (0),
 * recorded in daemon_reload_signal: a password file put right while a
 * service refused the old one is read before the next attempt
 * (daemon_reload_take), not after the backoff. */
static int stop_wait_ms(int64_t ms)
{
    sigset_t stop;
    int64_t end = util_mono_ms() + ms;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    /* Only a SIGHUP of this wait ends it: one a step left unread must not
     * turn every later wait into a busy loop. */
    int hup_before = daemon_reload_signal;
    while (!daemon_stop_signals) {
        int64_t left = end - util_mono_ms();
        if (left <= 0 || (!hup_before && daemon_reload_signal))
            return 0;
        struct timespec ts = { .tv_sec = left / 1000, .tv_nsec = (left % 1000) * 1000000 };
        int sig = sigtimedwait(&stop, NULL, &ts);
        if (sig == SIGHUP)
            daemon_reload_signal = 1;
        else if (sig > 0)
            daemon_stop_signals++;
        else if (errno == EAGAIN)
            return 0;
    }
    return -1;
}

int daemon_reload_take(void)
{
    sigset_t hup;
    struct timespec now = { 0, 0 };
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    /* Blocked (startup): take a pending one; unblocked, the handler has. */
    if (sigtimedwait(&hup, NULL, &now) == SIGHUP)
        daemon_reload_signal = 1;
    if (!daemon_reload_signal)
        return 0;
    daemon_reload_signal = 0;
    return 1;
}

int daemon_retry(const char *what, daemon_attempt_fn attempt, void *arg)
{
    char err[1024];
    int n;
    for (n = 0; attempt(arg, err, sizeof(err)) != 0; n++) {
        if (n == 0)
            log_error("%s: %s; retrying", what, err);
        daemon_notify("STATUS=waiting: %s", err);
        int64_t pause = util_backoff_ms(n < RETRY_MAX_DOUBLINGS ? n : RETRY_MAX_DOUBLINGS,
                                        RETRY_BASE_MS, RETRY_CAP_MS) + RETRY_FLOOR_MS;
        if (stop_wait_ms(pause) != 0)
            return -1;
    }
    if (n > 0)
        log_notice("%s: ok after %d attempts", what, n + 1);
    return 0;
}

void daemon_notify(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    sd_notify(0, buf);
}

void daemon_watchdog(void)
{
    int64_t now;
    if (watchdog_ms <= 0)
        return;
    now = util_mono_ms();
    if (now - watchdog_last_ms >= watchdog_ms / 2) {
        sd_notify(0, "WATCHDOG=1");
        watchdog_last_ms = now;
    }
}

int daemon_on_reload(daemon_reload_fn fn, void *arg)
{
    if (on_reload_n == DAEMON_RELOAD_FNS)
        return -1;
    on_reload[on_reload_n].fn = fn;
    on_reload[on_reload_n++].arg = arg;
    return 0;
}

int daemon_reload(const struct cli *cli, struct cfg *cur, const struct daemon_reload_hook *hook)
{
    const char *path = cli->config;
    struct cfg next = { 0 };
    char err[1024];
    int ret = -1;
    daemon_notify("RELOADING=1\nSTATUS=reloading %s", path);
    if (cfg_load(path, &next, err, sizeof(err)) != 0) {
        log_error("reload rejected, keeping the running configuration: %s", err);
        goto out;
    }
    cli_apply_instance(cli, &next);
    if (cfg_reload_check(cur, &next, err, sizeof(err)) != 0) {
        log_error("reload rejected, keeping the running configuration: %s", err);
        goto out;
    }
    if (hook && hook->prepare(hook->arg, &next, err, sizeof(err)) != 0) {
        log_error("reload rejected, keeping the running configuration: %s", err);
        goto out;
    }
    cfg_apply_reload(cur, &next);
    if (hook)
        hook->commit(hook->arg);
    for (size_t i = 0; i < on_reload_n; i++)
        on_reload[i].fn(cur, on_reload[i].arg);
    log_notice("configuration reloaded from %s", path);
    ret = 0;
out:
    cfg_free(&next);
    daemon_notify("READY=1\nSTATUS=%s", ret == 0 ? "configuration reloaded" : "reload rejected");
    return ret;
}
