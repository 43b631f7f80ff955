/* seckill-consumer: Kafka consumer group -> per-user lock -> PostgreSQL. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "cli.h"
#include "cmetrics.h"
#include "daemon.h"
#include "httpd.h"
#include "log.h"
#include "pipeline.h"
#include "replay.h"
#include "util.h"

static int on_http(const char *path, struct mbuf *body, void *arg)
{
    struct pipe *p = arg;
    if (strcmp(path, "/metrics") == 0) {
        cm_render(body);
        return 200;
    }
    if (strcmp(path, "/healthz") == 0) {
        int ok = pipe_healthy(p);
        mbuf_printf(body, "{\"status\":\"%s\",\"kafka\":%s,\"postgres\":%s,\"redis\":%s,\"paused\":%s}\n",
                    ok ? "ok" : "degraded", pipe_fatal(p) ? "false" : "true",
                    CM_GET(pg_down) == 0 ? "true" : "false", CM_GET(redis_down) == 0 ? "true" : "false",
                    CM_GET(paused) ? "true" : "false");
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

static int run_replay(struct cfg *c, struct replay_args *ra)
{
    cm_init();
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

int main(int argc, char **argv)
{
    struct replay_args ra = { .o = { .from_ms = -1, .to_ms = -1, .progress_ms = 2000 } };
    struct cli cli = {
        .prog = "seckill-consumer",
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
    sigset_t block, old;
    char err[1024];
    int ret = cli_parse(&cli, argc, argv), fatal = 0, drained;
    if (ret >= 0)
        return ret;
    if ((ret = check_replay_args(&ra, cli.instance)) != 0)
        return ret;
    if ((ret = cli_load(&cli, &c)) >= 0)
        return ret;
    if (ra.replay) {
        ret = run_replay(&c, &ra);
        cfg_free(&c);
        return ret;
    }
    if (daemon_signals_install() != 0) {
        log_error("cannot install signal handlers");
        cfg_free(&c);
        return 1;
    }
    cm_init();
    /* Threads started by the libraries (librdkafka, the lock watchdogs,
     * libmicrohttpd) inherit this mask: only the main loop takes signals. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    /* A service that is down at start is waited for, with backoff, logging
     * the first failure and the recovery only; a stop signal ends the wait. */
    for (int attempt = 0; pipe_open(&c, &p, err, sizeof(err)) != 0; attempt++) {
        if (attempt == 0)
            log_error("cannot start yet: %s; retrying", err);
        daemon_notify("STATUS=waiting: %s", err);
        /* Signals are blocked here: look at them without taking them. */
        sigset_t pending;
        if (sigpending(&pending) == 0 &&
            (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT))) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            log_notice("stopped before start");
            cfg_free(&c);
            return 0;
        }
        util_sleep_ms(util_backoff_ms(attempt < 10 ? attempt : 10, 100, 5000) + 100);
    }
    if (httpd_start(c.consumer.metrics_listen, c.consumer.metrics_port, on_http, p, &h, err, sizeof(err)) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        log_error("metrics endpoint: %s", err);
        pipe_close(p);
        cfg_free(&c);
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    log_notice("consuming %s as group %s with %d workers", c.kafka.topic, c.consumer.group_id, c.consumer.workers);
    daemon_notify("READY=1\nSTATUS=consuming %s", c.kafka.topic);
    while (daemon_stop_signals == 0) {
        if (daemon_reload_signal) {
            daemon_reload_signal = 0;
            daemon_reload(&cli, &c, NULL);
        }
        if (pipe_poll(p, 100) != 0) {
            fatal = 1;
            break;
        }
        daemon_watchdog();
    }

    daemon_notify("STOPPING=1\nSTATUS=finishing in-flight orders");
    drained = pipe_drain(p, CFG_GET(c.consumer.drain_timeout_ms), &daemon_stop_signals);
    if (drained < 0) {
        /* A second signal: the operator wants out now. Nothing unsettled
         * was stored, so what is lost here is only time. */
        log_warn("second stop signal: exiting without finishing");
        _exit(1);
    }
    httpd_stop(h);
    pipe_close(p);
    log_notice("stopped");
    cfg_free(&c);
    return fatal ? 1 : 0;
}
