/* The test plays systemd: it owns a NOTIFY_SOCKET, starts a daemon with it
 * (and WATCHDOG_USEC), and checks the Type=notify conversation: READY=1
 * once it can work, WATCHDOG=1 keeps coming, SIGHUP gives RELOADING=1 then
 * READY=1, a broken config on SIGHUP keeps the daemon on the old one,
 * SIGTERM gives STOPPING=1 and exit status 0. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct mgr {
    int fd;
    char path[108];
    char seen[65536]; /* every message received, newline separated */
    size_t len;
};

static void mgr_open(struct mgr *m)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memset(m, 0, sizeof(*m));
    snprintf(m->path, sizeof(m->path), "/tmp/seckill-notify-%d-%u.sock", (int)getpid(),
             (unsigned)util_rand_below(1000000));
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m->path);
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    assert_true(m->fd >= 0);
    unlink(m->path);
    assert_int_equal(bind(m->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static void mgr_close(struct mgr *m)
{
    close(m->fd);
    unlink(m->path);
}

/* Read what arrived; true when needle (a line) appears after offset from. */
static bool mgr_has(struct mgr *m, size_t from, const char *needle)
{
    char buf[4096];
    ssize_t n;
    while ((n = recv(m->fd, buf, sizeof(buf) - 1, 0)) > 0) {
        if (m->len + (size_t)n + 2 >= sizeof(m->seen))
            break;
        memcpy(m->seen + m->len, buf, (size_t)n);
        m->len += (size_t)n;
        m->seen[m->len++] = '\n';
        m->seen[m->len] = 0;
    }
    return from <= m->len && strstr(m->seen + from, needle) != NULL;
}

static int count_lines(struct mgr *m, const char *needle)
{
    int c = 0;
    mgr_has(m, 0, "");
    for (const char *p = m->seen; (p = strstr(p, needle)); p += strlen(needle))
        c++;
    return c;
}

static pid_t start(const char *prog, const char *cfgpath, struct mgr *m, const char *log)
{
    char bin[512];
    pid_t pid;
    harness_bin(prog, bin, sizeof(bin));
    char *argv[] = { bin, "-c", (char *)cfgpath, NULL };
    setenv("NOTIFY_SOCKET", m->path, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* a ping at least every 200 ms */
    pid = harness_spawn(argv, log);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    return pid;
}

/* Every line of the exposition is a HELP or TYPE comment or "name{labels} value",
 * every sample's family was declared with a TYPE first. */
static void metrics_parse(int port, const char *prefix)
{
    static char m[262144];
    char *save, *line, typed[128][128];
    int ntyped = 0, samples = 0;
    assert_int_equal(harness_http(port, "GET", "/metrics", NULL, NULL, m, sizeof(m)), 200);
    for (line = strtok_r(m, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128], type[32];
        double v;
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (sscanf(line, "# TYPE %127s %31s", name, type) == 2) {
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                        strcmp(type, "histogram") == 0);
            assert_true(ntyped < 128);
            snprintf(typed[ntyped++], sizeof(typed[0]), "%s", name);
            continue;
        }
        assert_int_equal(sscanf(line, "%127[a-zA-Z0-9_:]", name), 1);
        assert_true(strncmp(name, prefix, strlen(prefix)) == 0);
        const char *val = strrchr(line, ' ');
        assert_non_null(val);
        assert_int_equal(sscanf(val, " %lf", &v), 1);
        bool declared = false;
        for (int i = 0; i < ntyped; i++)
            declared |= strncmp(name, typed[i], strlen(typed[i])) == 0;
        if (!declared)
            fail_msg("sample %s before its TYPE line", name);
        samples++;
    }
    assert_true(samples > 10);
}

static void lifecycle(const char *prog, struct cfg *c, int metrics_port, const char *prefix)
{
    struct mgr m;
    char cfgpath[128], log[128];
    size_t mark;
    bool ok;
    FILE *f;
    pid_t pid;

    mgr_open(&m);
    harness_cfg_file(c, cfgpath, sizeof(cfgpath));
    snprintf(log, sizeof(log), "/tmp/seckill-test-notify-%s-%d.log", prog, (int)getpid());
    pid = start(prog, cfgpath, &m, log);

    WAIT_UNTIL(mgr_has(&m, 0, "READY=1"), 30000, ok);
    if (!ok)
        fail_msg("%s: no READY=1; see %s", prog, log);
    /* The main loop keeps the watchdog fed. */
    int before = count_lines(&m, "WATCHDOG=1");
    WAIT_UNTIL(count_lines(&m, "WATCHDOG=1") >= before + 3, 5000, ok);
    assert_true(ok);
    assert_true(mgr_has(&m, 0, "STATUS="));
    metrics_parse(metrics_port, prefix);

    /* A valid reload: a reloadable setting changes. */
    mark = m.len;
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(mgr_has(&m, mark, "RELOADING=1"), 10000, ok);
    assert_true(ok);
    WAIT_UNTIL(mgr_has(&m, mark, "RELOADING=1") && strstr(strstr(m.seen + mark, "RELOADING=1"), "READY=1"),
               10000, ok);
    assert_true(ok);
    assert_true(mgr_has(&m, mark, "configuration reloaded"));

    /* A broken file: rejected, the daemon stays up on the old one. */
    f = fopen(cfgpath, "a");
    assert_non_null(f);
    fputs("this is not libconfig\n", f);
    fclose(f);
    mark = m.len;
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(mgr_has(&m, mark, "reload rejected"), 10000, ok);
    assert_true(ok);
    assert_int_equal(kill(pid, 0), 0);
    before = count_lines(&m, "WATCHDOG=1");
    WAIT_UNTIL(count_lines(&m, "WATCHDOG=1") >= before + 2, 5000, ok);
    assert_true(ok);

    /* A clean stop. */
    mark = m.len;
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st = harness_wait_exit(pid, 60000);
    assert_true(mgr_has(&m, mark, "STOPPING=1"));
    if (st != 0)
        fail_msg("%s: exit status %d after SIGTERM; see %s", prog, st, log);
    unlink(cfgpath);
    unlink(log);
    mgr_close(&m);
}

static void test_producer(void **state)
{
    (void)state;
    struct cfg c;
    harness_cfg(&c);
    harness_producer_ports(&c);
    lifecycle("seckill-producer", &c, c.producer.metrics_port, "seckill_producer_");
    cfg_free(&c);
}

static void test_consumer(void **state)
{
    (void)state;
    struct cfg c;
    char group[64];
    harness_cfg(&c);
    c.consumer.metrics_port = harness_free_port();
    snprintf(group, sizeof(group), "seckill-test-notify-%d", (int)getpid());
    free(c.consumer.group_id);
    c.consumer.group_id = strdup(group);
    lifecycle("seckill-consumer", &c, c.consumer.metrics_port, "seckill_consumer_");
    cfg_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer),
        cmocka_unit_test(test_consumer),
    };
    return cmocka_run_group_tests_name("notify", tests, NULL, NULL);
}
