/* cli: what every binary's main() shares: the common options, config
 * loading with a clear error, and logger setup. */
#ifndef SECKILL_CLI_H
#define SECKILL_CLI_H

#include <getopt.h>

#include "cfg.h"

struct cli {
    const char *prog;       /* "seckill-producer" */
    const char *usage;      /* the rest of the --help text */
    const char *config;     /* -c FILE, or the default */
    int check_only;         /* -t / --check-config */
    int allow_instance;     /* accept -i / --instance N (the consumer) */
    int commands;           /* a command follows the options (seckillctl); else none may */
    int instance;           /* -i N, or -1 */
    /* Options of this program only (long options, val >= 256): each one
     * found is handed to on_option, which returns 0 or an exit status. */
    const struct option *extra;
    const char *extra_help;
    int (*on_option)(int val, const char *arg, void *ctx);
    void *ctx;
    /* What -t checks beyond the file itself: the files it names (the
     * producer's keys). 0, or -1 with err. NULL: nothing more. */
    int (*check)(const struct cfg *c, char *err, size_t errlen);
    int argi;               /* index of the first argument after the options */
};

/* Parse -c/--config, -t/--check-config, -h/--help, -V/--version, stopping at
 * the first non-option, which is refused unless cli->commands. Returns -1 to
 * continue, else an exit status. */
int cli_parse(struct cli *cli, int argc, char **argv);

/* With -i N: the Nth instance on this host (a systemd template's %i). Its
 * group.instance.id becomes "<consumer.instance_id or hostname>-N" and its
 * metrics port consumer.metrics_port + N, so instances never collide. */
void cli_apply_instance(const struct cli *cli, struct cfg *c);

/* Load cli->config into *c (with -i applied) and set up logging; prints "prog: file:line: ..."
 * on failure. With -t prints a verdict. Returns -1 to continue, else an exit
 * status. */
int cli_load(struct cli *cli, struct cfg *c);

/* The log takes c's level (logging.level, reloadable). arg is unused: the
 * shape of a daemon_on_reload function (daemon.h), which is how the daemons
 * call it after a reload. */
void cli_log_level(const struct cfg *c, void *arg);

#endif
