#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "util.h"
#include "version.h"

/* Room for the common options, a program's own and the end mark. */
#define CLI_MAX_OPTS 24

int cli_parse(struct cli *cli, int argc, char **argv)
{
    static const struct option common_opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "instance", required_argument, NULL, 'i' },
        { NULL, 0, NULL, 0 },
    };
    struct option opts[CLI_MAX_OPTS];
    size_t nopts = 0;
    int o;
    int64_t n;
    /* The common options first, then the program's own, then the end mark. */
    for (const struct option *x = common_opts; x->name; x++)
        opts[nopts++] = *x;
    for (const struct option *x = cli->extra; x && x->name && nopts < CLI_MAX_OPTS - 1; x++)
        opts[nopts++] = *x;
    opts[nopts] = (struct option){ NULL, 0, NULL, 0 };
    cli->config = SECKILL_DEFAULT_CONFIG;
    cli->instance = -1;
    optind = 1;
    /* '+': stop at the first non-option, it belongs to a subcommand. */
    while ((o = getopt_long(argc, argv, "+c:thVi:", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (!cli->allow_instance || util_parse_i64(optarg, 0, 1000, &n) != 0) {
                fprintf(stderr, "%s: %s\n", cli->prog,
                        cli->allow_instance ? "--instance takes a number in 0..1000"
                                            : "--instance is not an option of this program");
                return 2;
            }
            cli->instance = (int)n;
            break;
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
                   "  -V, --version        show the version\n%s%s",
                   cli->prog, cli->usage, SECKILL_DEFAULT_CONFIG,
                   cli->allow_instance
                       ? "  -i, --instance N     instance N on this host: group.instance.id\n"
                         "                       <consumer.instance_id or hostname>-N,\n"
                         "                       metrics port consumer.metrics_port + N\n"
                       : "",
                   cli->extra_help ? cli->extra_help : "");
            return 0;
        case 'V':
            printf("%s %s\n", cli->prog, SECKILL_VERSION);
            return 0;
        default:
            if (o >= 256 && cli->on_option) {
                int rc = cli->on_option(o, optarg, cli->ctx);
                if (rc != 0)
                    return rc;
                break;
            }
            fprintf(stderr, "Try '%s --help'.\n", cli->prog);
            return 2;
        }
    }
    cli->argi = optind;
    if (!cli->commands && optind != argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", cli->prog, argv[optind]);
        return 2;
    }
    return -1;
}

int cli_load(struct cli *cli, struct cfg *c)
{
    char err[1024];
    if (cfg_load(cli->config, c, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err);
        return 1;
    }
    cli_apply_instance(cli, c);
    if (cli->check_only) {
        if (cli->check && cli->check(c, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s: %s\n", cli->prog, err);
            cfg_free(c);
            return 1;
        }
        printf("%s: configuration %s is valid\n", cli->prog, cli->config);
        cfg_free(c);
        return 0;
    }
    log_setup(cli->prog, (enum log_level)c->logging.level, (enum log_format)c->logging.format);
    return -1;
}

void cli_apply_instance(const struct cli *cli, struct cfg *c)
{
    char id[300], host[256] = "localhost";
    if (cli->instance < 0)
        return;
    if (c->consumer.instance_id[0] == '\0')
        gethostname(host, sizeof(host) - 1);
    snprintf(id, sizeof(id), "%s-%d", c->consumer.instance_id[0] ? c->consumer.instance_id : host,
             cli->instance);
    char *dup = strdup(id);
    if (dup) {
        free(c->consumer.instance_id);
        c->consumer.instance_id = dup;
    }
    if (c->consumer.metrics_port != 0 && c->consumer.metrics_port + cli->instance <= 65535)
        c->consumer.metrics_port += cli->instance;
}

void cli_log_level(const struct cfg *c, void *arg)
{
    (void)arg;
    log_set_level((enum log_level)c->logging.level);
}
