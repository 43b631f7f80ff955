/* cli: what every binary's main() shares: the common options, config
 * loading with a clear error, and logger setup. */
#ifndef SECKILL_CLI_H
#define SECKILL_CLI_H

#include "cfg.h"

struct cli {
    const char *prog;       /* "seckill-producer" */
    const char *usage;      /* the rest of the --help text */
    const char *config;     /* -c FILE, or the default */
    int check_only;         /* -t / --check-config */
    int argi;               /* index of the first argument after the options */
};

/* Parse -c/--config, -t/--check-config, -h/--help, -V/--version, stopping at
 * the first non-option. Returns -1 to continue, else an exit status. */
int cli_parse(struct cli *cli, int argc, char **argv);

/* Load cli->config into *c and set up logging; prints "prog: file:line: ..."
 * on failure. With -t prints a verdict. Returns -1 to continue, else an exit
 * status. */
int cli_load(struct cli *cli, struct cfg *c);

#endif
