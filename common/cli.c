#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "version.h"

int cli_parse(struct cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    cli->config = SECKILL_DEFAULT_CONFIG;
    optind = 1;
    /* '+': stop at the first non-option, it belongs to a subcommand. */
    while ((o = getopt_long(argc, argv, "+c:thV", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            cli->config = optarg;
            break;
        case 't':
            cli->check_only = 1;
            break;
        case 'h':
            printf("usage: %s [-c FILE] [-t] %s\n"
                   "  -c, --config FILE    configuration file (default %s)\n"
                   "  -t, --check-config   validate the configuration and exit\n"
                   "  -h, --help           show this help\n"
                   "  -V, --version        show the version\n",
                   cli->prog, cli->usage, SECKILL_DEFAULT_CONFIG);
            return 0;
        case 'V':
            printf("%s %s\n", cli->prog, SECKILL_VERSION);
            return 0;
        default:
            fprintf(stderr, "Try '%s --help'.\n", cli->prog);
            return 2;
        }
    }
    cli->argi = optind;
    return -1;
}

int cli_load(struct cli *cli, struct cfg *c)
{
    char err[1024];
    if (cfg_load(cli->config, c, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err);
        return 1;
    }
    if (cli->check_only) {
        printf("%s: configuration %s is valid\n", cli->prog, cli->config);
        cfg_free(c);
        return 0;
    }
    log_setup(cli->prog, (enum log_level)c->logging.level, (enum log_format)c->logging.format);
    return -1;
}
