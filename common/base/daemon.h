/* daemon: the lifecycle both daemons share.
 *
 * Signal handlers only set flags; the main loop looks at them and makes the
 * state change explicitly (pgbouncer's and redis's way). Service manager
 * notifications go through sd_notify(3), which does nothing when the daemon
 * was not started by systemd with Type=notify.
 *
 * A reload (SIGHUP) changes the settings, and through hooks the program
 * registers (daemon_on_reload) whatever else follows from them; this module
 * knows none of the modules it reloads for. The reload, its hooks and their
 * registration belong to the main thread, the one whose loop takes the
 * signals. */
#ifndef SECKILL_DAEMON_H
#define SECKILL_DAEMON_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "cli.h"

/* Set by the handlers; read and cleared by the main loop. */
extern volatile sig_atomic_t daemon_stop_signals; /* SIGTERM/SIGINT count */
extern volatile sig_atomic_t daemon_reload_signal; /* SIGHUP seen */

/* Install the handlers for SIGTERM, SIGINT and SIGHUP and ignore SIGPIPE
 * (call before any thread). */
int daemon_signals_install(void);
/* Called by a thread it creates: block the daemon's signals in it. */
void daemon_signals_block_thread(void);
/* Only the main thread takes the daemon's signals: block them in it before
 * any thread starts (the libraries' threads, librdkafka's and
 * libmicrohttpd's, inherit the mask), and unblock them in it alone once
 * every thread is running. A signal sent in between waits, pending, and
 * reaches its handler at the unblock (daemon_retry takes a stop signal
 * meanwhile). Unblocking twice is harmless: call it on every way out. */
void daemon_signals_block(void);
void daemon_signals_unblock(void);

/* A startup step that needs a service which may not be up yet: err says
 * why it failed. 0 when done. */
typedef int (*daemon_attempt_fn)(void *arg, char *err, size_t errlen);
/* Run attempt until it succeeds, with backoff between tries, logging the
 * first failure and the recovery (not every try) and notifying
 * STATUS=waiting. 0 when done; -1 when a stop signal came first (it is
 * counted in daemon_stop_signals, blocked or not). */
int daemon_retry(const char *what, daemon_attempt_fn attempt, void *arg);
/* 1 (and cleared) when a SIGHUP came, pending or handled; else 0. For a
 * startup attempt that reloads the configuration before it tries again
 * (daemon_retry's wait ends at a SIGHUP). Main thread only. */
int daemon_reload_take(void);

/* sd_notify with a printf-formatted state ("READY=1", "STATUS=…"). */
void daemon_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Send WATCHDOG=1 if systemd asked for a watchdog and half its interval has
 * passed since the last one. Call from the main loop, so a stuck loop stops
 * the pings and gets the daemon restarted. */
void daemon_watchdog(void);

/* A module that owns CFG_SWAP settings (or files they name) takes part in a
 * reload: prepare builds its new state from the reloaded configuration, or
 * refuses it with err set and nothing kept (the whole reload is then
 * rejected); commit installs that state: nothing can fail between the two. */
struct daemon_reload_hook {
    int (*prepare)(void *arg, const struct cfg *next, char *err, size_t errlen);
    void (*commit)(void *arg);
    void *arg;
};

/* SIGHUP: load cli's file again (with cli's --instance applied, as at start)
 * and apply its reloadable settings to *cur; hook (may be NULL) takes part,
 * then the functions registered with daemon_on_reload run.
 * A broken file, a change to a setting that needs a restart, or a refusal
 * by the hook is rejected with the reason logged, and *cur and the hook's
 * state stay as they were. Notifies RELOADING=1 and READY=1 around it.
 * 0 if applied, -1 if rejected. */
int daemon_reload(const struct cli *cli, struct cfg *cur, const struct daemon_reload_hook *hook);

/* What follows from an applied reload beyond the settings themselves (the
 * Kafka clients take a rotated password, the log its new level); cur holds
 * the new values. It cannot refuse: what may is a daemon_reload_hook. */
typedef void (*daemon_reload_fn)(const struct cfg *cur, void *arg);
/* The most functions daemon_on_reload holds. */
#define DAEMON_RELOAD_FNS 8
/* Run fn(cur, arg) after every reload daemon_reload applies, never after a
 * rejected one: in the main thread (daemon_reload's), after the hook's
 * commit, in the order of registration, before "configuration reloaded" is
 * logged. Register from the main thread before the first daemon_reload.
 * 0, or -1 when DAEMON_RELOAD_FNS are registered already. */
int daemon_on_reload(daemon_reload_fn fn, void *arg);

#endif
