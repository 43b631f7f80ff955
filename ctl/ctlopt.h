/* ctlopt: what the options of several seckillctl commands share: their
 * limits, and the dispatch of a command with one subcommand. */
#ifndef SECKILL_CTLOPT_H
#define SECKILL_CTLOPT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

struct cfg;

/* The longest duration in ms an option takes (sweep --age-ms,
 * lock --wait-ms): one day. */
#define CTL_MAX_MS (24 * 3600 * 1000)

/* An item's --id (a positive 64-bit integer) into *id: 0, or -1 after
 * saying what is wrong (the caller exits 2). */
static inline int ctl_opt_item_id(const char *v, int64_t *id)
{
    if (util_parse_i64(v, 1, INT64_MAX, id) == 0)
        return 0;
    fprintf(stderr, "seckillctl: --id must be a positive 64-bit integer, got '%s'\n", v);
    return -1;
}

/* An integer option (opt: its name, "--units") in [lo, hi] into *out: 0,
 * or -1 after saying what is wrong (the caller exits 2). */
static inline int ctl_opt_range(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (util_parse_i64(v, lo, hi, out) == 0)
        return 0;
    fprintf(stderr, "seckillctl: %s must be an integer in [%lld, %lld], got '%s'\n", opt, (long long)lo,
            (long long)hi, v);
    return -1;
}

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
