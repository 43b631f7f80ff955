/* seckill-producer: HTTP ingress -> atomic Redis reservation -> Kafka.
 *
 * Threads: the HTTP thread (ingress) authenticates, parses and suspends,
 * the reserving thread batches scripts and publishes (reserve), librdkafka's
 * poll thread returns delivery reports to it (publish), the status thread
 * answers the buyers' polls (status), the waiting room's thread its joins
 * and asks (wroom), its admission thread opens and admits (admitter),
 * housekeeping checks health, fetches order id blocks and sweeps
 * (housekeep), the operators' listener serves /metrics (ops). This main
 * thread only watches signals and drives the lifecycle, reloads included
 * (auth's keys, the order and admission keys). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admitter.h"
#include "admtoken.h"
#include "auth.h"
#include "cancel.h"
#include "cfg.h"
#include "cli.h"
#include "daemon.h"
#include "housekeep.h"
#include "ingress.h"
#include "kconf.h"
#include "log.h"
#include "ops.h"
#include "orderid.h"
#include "ordersig.h"
#include "pmetrics.h"
#include "publish.h"
#include "rconn.h"
#include "reserve.h"
#include "rfunc.h"
#include "status.h"
#include "util.h"
#include "wroom.h"

#define TICK_MS 100
/* Draining: how often to look at the in-flight count (short: the exit
 * waits on it), and how long purged messages may take to be reported
 * (librdkafka reports them at once; 5 s is slack for a loaded machine). */
#define DRAIN_POLL_MS 10
#define PURGE_REPORT_MS 5000


/* The reload hooks of the buyers' token keys and of the MAC keys (the
 * orders', the admissions'), as one:
 * both prepare (either may refuse the whole reload), then both commit. A
 * refusal by the second leaves the first's prepared state uncommitted; its
 * next prepare (or close) frees it. */
struct two_hooks {
    struct daemon_reload_hook a, b;
};

static int two_prepare(void *arg, const struct cfg *next, char *err, size_t errlen)
{
    struct two_hooks *h = arg;
    return h->a.prepare(h->a.arg, next, err, errlen) == 0 && h->b.prepare(h->b.arg, next, err, errlen) == 0
               ? 0
               : -1;
}

static void two_commit(void *arg)
{
    struct two_hooks *h = arg;
    h->a.commit(h->a.arg);
    h->b.commit(h->b.arg);
}

static void reload(const struct cli *cli, struct cfg *c, struct auth *a)
{
    static struct keyring_live *macs[3];
    macs[0] = osig_live();
    macs[1] = adm_live();
    struct two_hooks two = { auth_reload_hook(a), keyring_reload_hook(macs) };
    struct daemon_reload_hook hook = { .prepare = two_prepare, .commit = two_commit, .arg = &two };
    daemon_reload(cli, c, &hook);
}

/* The startup steps that wait for a service (daemon_retry). A SIGHUP while
 * a service refused us (a wrong password, the file since put right) is
 * taken before the next attempt, so that attempt uses the new password. */
static void reload_if_asked(const struct cli *cli, struct cfg *c, struct auth *a)
{
    if (daemon_reload_take())
        reload(cli, c, a);
}

struct take_block_arg {
    const struct cli *cli;
    struct cfg *c;
    struct auth *a;
    int64_t *block;
};

static int try_take_block(void *arg, char *err, size_t errlen)
{
    struct take_block_arg *a = arg;
    reload_if_asked(a->cli, a->c, a->a);
    return oid_take_block(a->c, a->block, err, errlen);
}

struct rsv_start_arg {
    const struct cli *cli;
    struct cfg *c;
    struct auth *a;
    struct pub *p;
    struct oid_gen *gen;
    struct rsv **r;
    char missing[512]; /* set when Redis lacks the functions: no start */
};

/* Redis down or refusing our password is waited for; Redis without the
 * producer's functions is not: only an operator can load them, so the
 * step ends and start() refuses, saying what is missing. */
static int try_rsv_start(void *arg, char *err, size_t errlen)
{
    struct rsv_start_arg *a = arg;
    reload_if_asked(a->cli, a->c, a->a);
    int st = rsv_start(a->c, a->p, a->gen, a->r, err, errlen);
    if (st == RFUNC_MISSING)
        snprintf(a->missing, sizeof(a->missing), "%s", err);
    return st == RFUNC_MISSING ? 0 : st;
}

/* Stop: no new orders, let in-flight ones finish, then make every one
 * that is left hear its fate from Kafka (purged: not persisted -> unit given
 * back; possibly persisted -> kept for the sweeper). */
static void drain(const struct cfg *c, struct ingress *g, struct pub *p)
{
    int64_t end = util_mono_ms() + CFG_GET(c->producer.drain_timeout_ms);
    int stop_seen = daemon_stop_signals;
    ing_stop_accepting(g);
    daemon_notify("STOPPING=1\nSTATUS=draining %ld requests", ing_inflight(g));
    log_notice("stopping: draining %ld in-flight requests", ing_inflight(g));
    while (ing_inflight(g) > 0 && util_mono_ms() < end) {
        if (daemon_stop_signals > stop_seen) {
            log_warn("second stop signal: exiting without draining");
            _exit(1);
        }
        daemon_watchdog();
        util_sleep_ms(DRAIN_POLL_MS);
    }
    if (ing_inflight(g) > 0) {
        log_warn("drain deadline passed with %ld requests in flight; purging", ing_inflight(g));
        pub_purge(p, 1);
        /* Purged messages are reported at once; their answers follow. */
        end = util_mono_ms() + PURGE_REPORT_MS;
        while (ing_inflight(g) > 0 && util_mono_ms() < end)
            util_sleep_ms(DRAIN_POLL_MS);
        if (ing_inflight(g) > 0) {
            /* Tearing down with suspended connections is not safe; what is
             * unanswered is in Redis, and the sweeper publishes it. */
            log_error("%ld requests still unanswered; exiting, their reservations are left to "
                      "the sweeper", ing_inflight(g));
            _exit(1);
        }
    }
}

/* What the daemon runs; NULL members were not started. */
struct producer {
    struct cfg c;
    struct pub *p;
    struct rsv *r;
    struct hk *k;
    struct st *st;
    struct cx *x;
    struct so *so;
    struct win *w;
    struct wr *wr;
    struct adt *adt;
    struct qcopy *qc; /* the waiting rooms' lines: the admitter keeps them, wr reads them */
    struct auth *a;
    struct ingress *g;
    struct ops *o;
    struct ing_health health;
    struct oid_gen gen;
    int64_t block;
};

/* Every thread started, in dependency order, with the signals blocked so
 * that only the main thread takes them (the caller unblocks). Services that
 * are down are waited for. 0, or -1 (logged, or a stop signal came). */
static int start(const struct cli *cli, struct producer *d)
{
    struct cfg *c = &d->c;
    char err[1024];
    daemon_notify("STATUS=starting");
    /* Keys first: a broken key file is a configuration error, not a wait. */
    if (auth_open(c, &d->a, err, sizeof(err)) != 0 || osig_load(c, err, sizeof(err)) != 0 ||
        adm_load(c, err, sizeof(err)) != 0 || rconn_watch_start(c, err, sizeof(err)) != 0)
        goto fail;
    /* cfg_load refused this unless producer.allow_insecure_auth allowed it:
     * said at every start (before any wait for a service), so that nobody
     * forgets it is on. */
    if (!auth_enabled(d->a) && !cfg_addr_loopback(c->producer.listen))
        log_warn("producer.auth = \"none\" on %s, which is not loopback (producer.allow_insecure_auth): "
                 "anyone who reaches it buys as any user_id",
                 c->producer.listen);
    if (daemon_retry("order ids", try_take_block, &(struct take_block_arg){ cli, c, d->a, &d->block }) != 0)
        return -1;
    oid_init(&d->gen, d->block);
    PM_SET(id_block, d->block);
    if (pub_open(c, &d->p, err, sizeof(err)) != 0)
        goto fail;
    struct rsv_start_arg ra = { cli, c, d->a, d->p, &d->gen, &d->r, "" };
    if (daemon_retry("redis", try_rsv_start, &ra) != 0)
        return -1;
    if (ra.missing[0]) {
        snprintf(err, sizeof(err), "refusing to start: %s", ra.missing);
        goto fail;
    }
    if (hk_start(c, d->p, &d->gen, &d->health, &d->k, err, sizeof(err)) != 0 ||
        st_start(c, &d->st, err, sizeof(err)) != 0 || cx_new(d->st, d->p, &d->x, err, sizeof(err)) != 0 ||
        win_new(c, &d->w, err, sizeof(err)) != 0 || so_start(c, d->w, &d->so, err, sizeof(err)) != 0 ||
        qc_new(&d->qc, err, sizeof(err)) != 0 || wr_start(c, d->qc, &d->wr, err, sizeof(err)) != 0 ||
        adt_start(c, d->qc, &d->adt, err, sizeof(err)) != 0 ||
        ing_start(c, d->r, d->st, d->x, d->so, d->w, d->wr, d->a, &d->health, &d->g, err, sizeof(err)) != 0 ||
        ops_start(c, d->g, &d->o, err, sizeof(err)) != 0)
        goto fail;
    log_notice("taking orders on http://%s:%d/api/v1/seckill (order id block %lld, auth %s)",
               c->producer.listen, c->producer.port, (long long)d->block,
               auth_enabled(d->a) ? "jwt" : "none");
    if (d->o)
        log_notice("operators: /metrics and /healthz on http://%s:%d", c->producer.metrics_listen,
                   c->producer.metrics_port);
    else
        log_notice("operators: no /metrics (producer.metrics_port = 0)");
    return 0;
fail:
    log_error("%s", err);
    return -1;
}

/* Take orders until a stop signal or a fatal Kafka error, reloading on
 * SIGHUP. */
static void run(const struct cli *cli, struct producer *d)
{
    daemon_notify("READY=1\nSTATUS=taking orders on %s:%d", d->c.producer.listen, d->c.producer.port);
    while (!daemon_stop_signals && !pub_fatal(d->p)) {
        if (daemon_reload_signal) {
            daemon_reload_signal = 0;
            reload(cli, &d->c, d->a);
        }
        daemon_watchdog();
        util_sleep_ms(TICK_MS);
    }
}

/* Stop what was started, the HTTP side before what it calls. */
static void stop(struct producer *d)
{
    if (!d->g)
        daemon_notify("STOPPING=1");
    hk_stop(d->k);
    adt_stop(d->adt);
    ops_stop(d->o);
    ing_stop(d->g);
    /* After the HTTP side, whose queue calls it answers. */
    wr_stop(d->wr);
    qc_free(d->qc); /* after both its users */
    /* After the HTTP side, which drained its cancels; before the status
     * thread and the Kafka producer it uses. */
    cx_free(d->x);
    st_stop(d->st);
    rsv_stop(d->r);
    /* After the reserving thread, which marks items sold out and records
     * winners (a new winners item wakes the sold-out thread). */
    so_stop(d->so);
    win_free(d->w);
    pub_close(d->p, CFG_GET(d->c.producer.drain_timeout_ms));
    auth_close(d->a);
    osig_unload();
    adm_unload();
    rconn_watch_stop();
}

/* What -t checks beyond the file: the token keys, the order keys and the
 * admission keys load. */
static int check(const struct cfg *c, char *err, size_t errlen)
{
    return auth_check(c, err, errlen) == 0 && osig_check(c, err, errlen) == 0 &&
                   adm_check_cfg(c, err, errlen) == 0
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    struct cli cli = { .prog = "seckill-producer", .usage = "", .check = check };
    /* static: the order id generator in it is shared with the threads */
    static struct producer d;
    /* Its own database role: cfg_load reads that role's password file only. */
    cfg_role_set(CFG_ROLE_PRODUCER, 0);
    int ret = cli_parse(&cli, argc, argv), status = 1;

    if (ret >= 0)
        return ret;
    if ((ret = cli_load(&cli, &d.c)) >= 0)
        return ret;
    if (daemon_signals_install() != 0) {
        log_error("cannot install signal handlers");
        goto out;
    }
    /* What an applied reload changes beyond the settings: librdkafka's
     * clients take the rotated SASL password for their next connections,
     * the log its new level. Before start: a SIGHUP while a service is
     * waited for reloads too. */
    if (daemon_on_reload(kconf_rotate, NULL) != 0 || daemon_on_reload(cli_log_level, NULL) != 0) {
        log_error("cannot register the reload hooks");
        goto out;
    }
    /* Before pub_open and ing_start start librdkafka's and libmicrohttpd's
     * threads; unblocked once they all run. */
    daemon_signals_block();
    if (start(&cli, &d) != 0)
        goto out;
    daemon_signals_unblock();
    run(&cli, &d);
    drain(&d.c, d.g, d.p);
    status = pub_fatal(d.p) ? 1 : 0;
out:
    /* A stop signal still pending from startup is counted now. */
    daemon_signals_unblock();
    /* Stopped while still starting up is a clean stop too. */
    if (status != 0 && daemon_stop_signals && !(d.p && pub_fatal(d.p)))
        status = 0;
    stop(&d);
    log_notice("stopped");
    cfg_free(&d.c);
    return status;
}
