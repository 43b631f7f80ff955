#include "lockcmd.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctlopt.h"
#include "lock.h"
#include "util.h"

static void lock_usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] lock run --name NAME [--ttl-ms N] [--wait-ms N] -- CMD [ARGS...]\n"
          "       seckillctl [-c FILE] lock show NAME\n",
          f);
}

/* Run argv as a child while the lease is renewed; forward termination
 * signals to it. wait_set is blocked and waited for here; the child gets the
 * old mask back. Returns the exit status for seckillctl. */
static int run_child(struct lock *l, char **argv, const sigset_t *wait_set, const sigset_t *old)
{
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "seckillctl: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, old, NULL);
        execvp(argv[0], argv);
        fprintf(stderr, "seckillctl: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }

    bool lost = false;
    int status = 0;
    for (;;) {
        /* Wake at least every 100 ms to look at the lease. */
        struct timespec tick = { 0, 100 * 1000000 };
        siginfo_t si;
        int sig = sigtimedwait(wait_set, &si, &tick);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
            kill(pid, sig);
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (!lost && lock_lost(l)) {
            lost = true;
            fprintf(stderr,
                    "seckillctl: lease (fence %" PRId64 ") was lost while the command ran; "
                    "terminating it\n",
                    lock_fence(l));
            kill(pid, SIGTERM);
        }
    }
    if (!lost && lock_lost(l)) {
        lost = true;
        fprintf(stderr, "seckillctl: lease (fence %" PRId64 ") was lost before the command finished\n",
                lock_fence(l));
    }
    if (lost)
        return LOCKCMD_EXIT_LOST;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* lock run's options: the name, the lease and the wait. -1 to go on, else
 * the exit status (0 after --help); optind is left at the command. */
static int lock_run_parse(const struct cfg *c, int argc, char **argv, const char **name, int64_t *ttl,
                          int64_t *wait)
{
    static const struct option opts[] = {
        { "name", required_argument, NULL, 'n' },
        { "ttl-ms", required_argument, NULL, 't' },
        { "wait-ms", required_argument, NULL, 'w' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    *name = NULL;
    *ttl = c->lock.ttl_ms;
    *wait = c->lock.wait_ms;
    optind = 1;
    while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (o) {
        case 'n':
            *name = optarg;
            break;
        case 't': {
            /* The same lease limits as lock.ttl_ms. */
            struct cfg_range r = CFG_RANGE(lock.ttl_ms);
            if (util_parse_i64(optarg, r.min, r.max, ttl) != 0) {
                fprintf(stderr, "seckillctl: --ttl-ms must be an integer in [%lld, %lld], got '%s'\n", r.min,
                        r.max, optarg);
                return 2;
            }
            break;
        }
        case 'w':
            if (util_parse_i64(optarg, 0, CTL_MAX_MS, wait) != 0) {
                fprintf(stderr, "seckillctl: --wait-ms must be an integer in [0, %d], got '%s'\n", CTL_MAX_MS,
                        optarg);
                return 2;
            }
            break;
        case 'h':
            lock_usage(stdout);
            return 0;
        default:
            lock_usage(stderr);
            return 2;
        }
    }
    if (*name == NULL || optind >= argc) {
        lock_usage(stderr);
        return 2;
    }
    return -1;
}

static int lock_run(const struct cfg *c, int argc, char **argv)
{
    const char *name;
    int64_t ttl, wait;
    int ret = lock_run_parse(c, argc, argv, &name, &ttl, &wait);
    if (ret >= 0)
        return ret;
    if (!lock_name_valid(name)) {
        fprintf(stderr, "seckillctl: invalid lock name '%s' (1..200 printable characters, no braces)\n",
                name);
        return 2;
    }

    /* Block the signals we wait for before any thread starts, so that only
     * sigtimedwait() sees them. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old);

    char err[256];
    struct lock_client *lc = NULL;
    struct lock *l = NULL;
    ret = 1;
    if (lock_client_open(c, &lc, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        goto out;
    }
    int st = lock_acquire(lc, name, (int)ttl, (int)wait, &l);
    if (st == LOCK_BUSY) {
        fprintf(stderr,
                "seckillctl: lock '%s' is held by another owner; not acquired within %" PRId64 " ms\n", name,
                wait);
        ret = LOCKCMD_EXIT_BUSY;
        goto out;
    }
    if (st != LOCK_OK) {
        fprintf(stderr, "seckillctl: could not acquire lock '%s' (Redis unreachable?)\n", name);
        goto out;
    }
    char fence[24];
    snprintf(fence, sizeof(fence), "%" PRId64, lock_fence(l));
    setenv("SECKILL_FENCE", fence, 1);
    setenv("SECKILL_LOCK", name, 1);
    ret = run_child(l, argv + optind, &set, &old);
    if (ret != LOCKCMD_EXIT_LOST && lock_release(lc, l) == LOCK_NOT_HELD) {
        fprintf(stderr, "seckillctl: lock '%s' was no longer held at release\n", name);
        ret = LOCKCMD_EXIT_LOST;
    }
out:
    lock_client_close(lc);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return ret;
}

static int lock_show(const struct cfg *c, int argc, char **argv)
{
    struct lock_info li;
    char err[256];
    if (argc != 2) {
        lock_usage(stderr);
        return 2;
    }
    if (lock_inspect(c, argv[1], &li, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return 1;
    }
    printf("name:       %s\n", argv[1]);
    printf("held:       %s\n", li.held ? "yes" : "no");
    if (li.held) {
        printf("owner:      %s\n", li.owner);
        printf("holds:      %" PRId64 "\n", li.holds);
        printf("ttl_ms:     %" PRId64 "\n", li.ttl_ms);
        printf("fence:      %" PRId64 "\n", li.fence);
    }
    printf("last_fence: %" PRId64 "\n", li.last_fence);
    /* Where it lives, for an operator with redis-cli (HGET key field): the
     * layout (a hash per group of names) is not something to work out by
     * hand. */
    printf("key:        %s\n", li.key);
    printf("field:      %s\n", argv[1]);
    return 0;
}

int lockcmd(const struct cfg *c, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return lock_run(c, argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "show") == 0)
        return lock_show(c, argc - 1, argv + 1);
    lock_usage(stderr);
    return 2;
}
