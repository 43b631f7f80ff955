/* ctlopt: what the options of several seckillctl commands share: their
 * limits, and the dispatch of a command with one subcommand. */
#ifndef SECKILL_CTLOPT_H
#define SECKILL_CTLOPT_H

#include <stdio.h>
#include <string.h>

struct cfg;

/* The longest duration in ms an option takes (sweep --age-ms,
 * lock --wait-ms): one day. */
#define CTL_MAX_MS (24 * 3600 * 1000)

/* A command with one subcommand (`token issue`, `payment sign`): runs it
 * with the arguments after the command's name, or prints the usage: on
 * stdout with exit 0 for --help or -h, else on stderr with exit 2. */
static inline int ctl_one_sub(const struct cfg *c, int argc, char **argv, const char *name,
                              int (*run)(const struct cfg *, int, char **), void (*usage)(FILE *))
{
    if (argc >= 2 && strcmp(argv[1], name) == 0)
        return run(c, argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}

#endif
