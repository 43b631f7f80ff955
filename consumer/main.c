/* seckill-consumer: Kafka consumer group -> per-user lock -> PostgreSQL. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "cli.h"
#include "cmetrics.h"
#include "daemon.h"
#include "deadline.h"
#include "funclibs.h"
#include "httpd.h"
#include "kconf.h"
#include "log.h"
#include "ordersig.h"
#include "payments.h"
#include "paysig.h"
#include "pipeline.h"
#include "rconn.h"
#include "replay.h"
#include "rfunc.h"
#include "util.h"

static int on_http(const char *path, struct mbuf *body, void *arg)
{
    struct pipe *p = arg;
    if (strcmp(path, "/metrics") == 0) {
        cm_render(body);
        return 200;
    }
    if (strcmp(path, "/healthz") == 0) {
        /* The producer's schema: status, then each dependency up or down.
         * Paused consumption is not a dependency: it is in /metrics. */
        int ok = pipe_healthy(p);
        mbuf_printf(body, "{\"status\":\"%s\",\"kafka\":\"%s\",\"postgres\":\"%s\",\"redis\":\"%s\"}\n",
                    ok ? "ok" : "unavailable", pipe_fatal(p) ? "down" : "up",
                    CM_GET(pg_down) == 0 ? "up" : "down", CM_GET(redis_down) == 0 ? "up" : "down");
        return ok ? 200 : 503;
    }
    mbuf_printf(body, "{\"status\":\"not_found\"}\n");
    return 404;
}


enum { OPT_REPLAY = 256, OPT_FROM_BEGINNING, OPT_FROM_TIME, OPT_TO_TIME };

struct replay_args {
    int replay, from_beginning;
    struct replay_opts o;
};

static int on_option(int val, const char *arg, void *ctx)
{
    struct replay_args *ra = ctx;
    int64_t *dst = val == OPT_FROM_TIME ? &ra->o.from_ms : &ra->o.to_ms;
    switch (val) {
    case OPT_REPLAY:
        ra->replay = 1;
        return 0;
    case OPT_FROM_BEGINNING:
        ra->from_beginning = 1;
        return 0;
    case OPT_FROM_TIME:
    case OPT_TO_TIME:
        if (util_parse_time_ms(arg, dst) != 0) {
            fprintf(stderr,
                    "seckill-consumer: %s: '%s' is not a time: give epoch milliseconds or ISO 8601, "
                    "e.g. 2026-11-21T10:00:00Z\n",
                    val == OPT_FROM_TIME ? "--from-time" : "--to-time", arg);
            return 2;
        }
        return 0;
    }
    return 2;
}

/* The replay options make sense only together. 0 or an exit status. */
static int check_replay_args(const struct replay_args *ra, int instance)
{
    const char *why = NULL;
    if (!ra->replay && (ra->from_beginning || ra->o.from_ms >= 0 || ra->o.to_ms >= 0))
        why = "--from-beginning, --from-time and --to-time need --replay";
    else if (ra->replay && ra->from_beginning == (ra->o.from_ms >= 0))
        why = "--replay needs exactly one of --from-beginning and --from-time";
    else if (ra->replay && ra->o.to_ms >= 0 && ra->o.from_ms >= ra->o.to_ms)
        why = "--to-time must be later than --from-time";
    else if (ra->replay && instance >= 0)
        why = "--replay reads with assigned partitions; --instance does not apply";
    if (!why)
        return 0;
    fprintf(stderr, "seckill-consumer: %s\n", why);
    return 2;
}

/* The order keys every message is checked with (ordersig.h): before any
 * message is read, the live consumer's and a replay's alike, so both judge
 * a message the same way. 0, or -1 (logged). */
static int load_order_keys(const struct cfg *c)
{
    char err[1024];
    if (osig_load(c, err, sizeof(err)) == 0)
        return 0;
    log_error("%s", err);
    return -1;
}

/* The live consumer's keys: the order keys, and the payment keys every
 * payment is checked with (paysig.h). 0, or -1 (logged). */
static int load_keys(const struct cfg *c)
{
    char err[1024];
    if (load_order_keys(c) != 0)
        return -1;
    if (psig_load(c, err, sizeof(err)) == 0)
        return 0;
    log_error("%s", err);
    return -1;
}

/* -t: both key lists load (a replay needs only the order keys, but the
 * file is the live consumer's). */
static int check_keys(const struct cfg *c, char *err, size_t errlen)
{
    return osig_check(c, err, errlen) == 0 && psig_check(c, err, errlen) == 0 ? 0 : -1;
}

static int run_replay(struct cfg *c, struct replay_args *ra)
{
    cm_init();
    if (load_order_keys(c) != 0)
        return 1;
    if (daemon_signals_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    return replay_run(c, &ra->o, &daemon_stop_signals, stdout);
}

static const struct option replay_opts[] = {
    { "replay", no_argument, NULL, OPT_REPLAY },
    { "from-beginning", no_argument, NULL, OPT_FROM_BEGINNING },
    { "from-time", required_argument, NULL, OPT_FROM_TIME },
    { "to-time", required_argument, NULL, OPT_TO_TIME },
    { NULL, 0, NULL, 0 },
};

struct pipe_open_arg {
    struct cfg *c;
    struct pipe **p;
};

static int try_pipe_open(void *arg, char *err, size_t errlen)
{
    struct pipe_open_arg *a = arg;
    return pipe_open(a->c, a->p, err, errlen);
}

/* The pipeline and the metrics endpoint, their threads started with the
 * signals blocked so only the main loop takes them. A service that is down
 * is waited for; a stop signal ends the wait. 0 when running; 1 when stopped
 * before start (*p, *h NULL); -1 when the endpoint failed (logged). */
static int start(struct cfg *c, struct pipe **p, struct httpd **h)
{
    char err[1024];
    daemon_signals_block();
    /* The Sentinel watcher first: a failover while the pipeline waits for
     * Redis is then heard too. */
    if (rconn_watch_start(c, err, sizeof(err)) != 0) {
        daemon_signals_unblock();
        log_error("%s", err);
        return -1;
    }
    /* Its functions before anything else: without them it could take
     * orders off Kafka and never settle them. Missing or older ones are not
     * waited for (an operator must load them): no start. */
    static const struct rfunc_lib *const libs[] = { &funclib_consumer, &funclib_lock, &funclib_return };
    struct rfunc_need need = { .cfg = c, .libs = libs, .n = ARRAY_SIZE(libs) };
    if (daemon_retry("redis functions", rfunc_need_attempt, &need) != 0) {
        daemon_signals_unblock();
        log_notice("stopped before start");
        return 1;
    }
    if (need.missing) {
        daemon_signals_unblock();
        log_error("refusing to start: %s", need.why);
        return -1;
    }
    if (daemon_retry("pipeline", try_pipe_open, &(struct pipe_open_arg){ c, p }) != 0) {
        daemon_signals_unblock();
        log_notice("stopped before start");
        return 1;
    }
    if (httpd_start(c->consumer.metrics_listen, c->consumer.metrics_port, on_http, *p, h, err,
                    sizeof(err)) != 0) {
        daemon_signals_unblock();
        log_error("metrics endpoint: %s", err);
        pipe_close(*p);
        *p = NULL;
        return -1;
    }
    daemon_signals_unblock();
    return 0;
}

/* The deadline thread (expiry and returns) and the payments, started after
 * the pipeline with the signals blocked, as the pipeline's threads are (the
 * payments' librdkafka threads too). 0, or -1 (logged). */
static int start_threads(const struct cfg *c, struct deadline **e, struct payments **pay)
{
    char err[256];
    daemon_signals_block();
    int ret = dl_start(c, e, err, sizeof(err));
    if (ret == 0)
        ret = payments_start(c, pay, err, sizeof(err));
    daemon_signals_unblock();
    if (ret != 0)
        log_error("%s", err);
    return ret;
}

/* Consume until a stop signal or a fatal pipeline (or payments) error (1),
 * reloading on SIGHUP. */
static int run(const struct cli *cli, struct cfg *c, struct pipe *p, const struct payments *pay)
{
    log_notice("consuming %s as group %s with %d workers", c->kafka.topic, c->consumer.group_id,
               c->consumer.workers);
    daemon_notify("READY=1\nSTATUS=consuming %s", c->kafka.topic);
    while (daemon_stop_signals == 0) {
        if (daemon_reload_signal) {
            daemon_reload_signal = 0;
            /* Both key lists are read again; a bad file in either
             * refuses the reload and keeps both sets as they were. */
            static struct keyring_live *lives[3];
            lives[0] = osig_live(), lives[1] = psig_live(), lives[2] = NULL;
            struct daemon_reload_hook hook = keyring_reload_hook(lives);
            daemon_reload(cli, c, &hook);
        }
        if (pipe_poll(p, 100) != 0)
            return 1;
        if (payments_fatal(pay)) {
            log_error("payments: a fatal Kafka error (logged above): stopping for a fresh start");
            return 1;
        }
        daemon_watchdog();
    }
    return 0;
}

/* Finish what is in flight, then stop. The payments and the deadline
 * thread first: a payment waiting for its order is read again by the next
 * consumer (its offset never moved), and what the outbox has not returned to
 * Redis stays in order_returns for the next consumer. */
static void stop(const struct cfg *c, struct pipe *p, struct httpd *h, struct deadline *e,
                 struct payments *pay)
{
    daemon_notify("STOPPING=1\nSTATUS=finishing in-flight orders");
    payments_stop(pay);
    dl_stop(e);
    if (pipe_drain(p, CFG_GET(c->consumer.drain_timeout_ms), &daemon_stop_signals) < 0) {
        /* A second signal: the operator wants out now. Nothing unsettled
         * was stored, so what is lost here is only time. */
        log_warn("second stop signal: exiting without finishing");
        _exit(1);
    }
    httpd_stop(h);
    pipe_close(p);
}

int main(int argc, char **argv)
{
    struct replay_args ra = { .o = { .from_ms = -1, .to_ms = -1, .progress_ms = 2000 } };
    struct cli cli = {
        .prog = "seckill-consumer",
        .check = check_keys,
        .usage = "[-i N] | --replay (--from-beginning | --from-time T) [--to-time T]",
        .allow_instance = 1,
        .extra = replay_opts,
        .extra_help = "      --replay         apply the topic's orders again, from\n"
                      "      --from-beginning   the oldest message, or\n"
                      "      --from-time T      the first stamped at or after T (epoch ms or\n"
                      "                         ISO 8601), up to the end offsets at the start,\n"
                      "      --to-time T        or to the last stamped before T; prints a\n"
                      "                         summary per partition and exits\n",
        .on_option = on_option,
        .ctx = &ra,
    };
    struct cfg c;
    struct pipe *p = NULL;
    struct httpd *h = NULL;
    struct deadline *e = NULL;
    struct payments *pay = NULL;
    /* Its own database role: cfg_load reads that role's password file only. */
    cfg_role_set(CFG_ROLE_CONSUMER, 0);
    int ret = cli_parse(&cli, argc, argv);
    if (ret >= 0)
        return ret;
    if ((ret = check_replay_args(&ra, cli.instance)) != 0)
        return ret;
    if ((ret = cli_load(&cli, &c)) >= 0)
        return ret;
    if (ra.replay) {
        ret = run_replay(&c, &ra);
        goto out;
    }
    if (daemon_signals_install() != 0) {
        log_error("cannot install signal handlers");
        ret = 1;
        goto out;
    }
    /* What an applied reload changes beyond the settings: librdkafka's
     * clients take the rotated SASL password for their next connections,
     * the log its new level. */
    if (daemon_on_reload(kconf_rotate, NULL) != 0 || daemon_on_reload(cli_log_level, NULL) != 0) {
        log_error("cannot register the reload hooks");
        ret = 1;
        goto out;
    }
    cm_init();
    if (load_keys(&c) != 0) {
        ret = 1;
        goto out;
    }
    ret = start(&c, &p, &h);
    if (ret != 0) {
        /* Stopped before start is a clean stop. */
        ret = ret > 0 ? 0 : 1;
        goto out;
    }
    ret = start_threads(&c, &e, &pay) != 0 ? 1 : run(&cli, &c, p, pay);
    stop(&c, p, h, e, pay);
    log_notice("stopped");
out:
    rconn_watch_stop();
    osig_unload();
    psig_unload();
    cfg_free(&c);
    return ret;
}
