#include "daemon.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "util.h"

volatile sig_atomic_t daemon_stop_signals;
volatile sig_atomic_t daemon_reload_signal;

static int64_t watchdog_ms;
static int64_t watchdog_last_ms;

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

void daemon_notify(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    sd_notify(0, buf);
}

int64_t daemon_watchdog_ms(void) { return watchdog_ms; }

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
    log_set_level((enum log_level)cur->logging.level);
    log_notice("configuration reloaded from %s", path);
    ret = 0;
out:
    cfg_free(&next);
    daemon_notify("READY=1\nSTATUS=%s", ret == 0 ? "configuration reloaded" : "reload rejected");
    return ret;
}
