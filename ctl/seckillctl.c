/* seckillctl: the operator's tool. */
#include <stdio.h>
#include <string.h>

#include "cfg.h"
#include "cli.h"
#include "funccmd.h"
#include "inspect.h"
#include "item.h"
#include "lockcmd.h"
#include "paycmd.h"
#include "queuecmd.h"
#include "reconcile.h"
#include "sweepcmd.h"
#include "token.h"
#include "watch.h"

static const char usage[] =
    "COMMAND ...\n"
    "commands:\n"
    "  item create --id ID --stock N [--name NAME] [--starts-at T] [--ends-at T] [--pay-within SECONDS]\n"
    "              [--queue-opens-at T] [--buckets K] create an item, load its stock and sale window;\n"
    "                                                its orders unpaid after SECONDS expire; with a\n"
    "                                                waiting room open from T; its stock in K buckets\n"
    "  item show ID                                  stock, window, sold/pending/refused counts,\n"
    "                                                payment window, pending/expired orders\n"
    "  lock run --name NAME [--ttl-ms N] [--wait-ms N] -- CMD [ARGS...]\n"
    "                                                run CMD holding a distributed lock\n"
    "  lock show NAME                                show a lock's holder, lease and fence\n"
    "  item load (--id ID | --all) [--wait-ms N]      rebuild Redis from the database after\n"
    "                                                Redis lost its data\n"
    "  reconcile [--item ID] [--fix]                 check that Redis and the database account\n"
    "                                                for every unit; --fix repairs what is safe\n"
    "  inspect [--item ID]                           sold vs stock, duplicates, rates, latency,\n"
    "                                                refusals and dead letters\n"
    "  watch [--item ID]... [--interval MS] [--count N] [--producer HOST:PORT]... [--consumer HOST:PORT]...\n"
    "                                                a live view of a running sale: stock, accepted,\n"
    "                                                pending, persisted, refused and their rates per\n"
    "                                                item, the group's lag, the daemons' health\n"
    "  queue status --item ID                        an item's waiting room: seed, line, serving,\n"
    "                                                admissions, rate, the admitting producer\n"
    "  queue rate --item ID --per-s N                the item's admission ceiling, live (0: the setting)\n"
    "  queue pause --item ID | queue resume --item ID\n"
    "                                                stop or restart the item's admission, live\n"
    "  queue audit --item ID [--quiet]               recompute the line's order from the stored seed,\n"
    "                                                check it against Redis's, print it\n"
    "  sweep [--age-ms N]                            re-publish reservations Kafka never\n"
    "                                                acknowledged, older than N ms\n"
    "  functions load                                load this release's Redis functions (as the admin\n"
    "                                                user; on deploy, upgrade, or a Redis that lost them)\n"
    "  functions check                               are they loaded, at this release's version or newer?\n"
    "  token issue (--user ID | --users FIRST-LAST) [--ttl DURATION] [--key KID]\n"
    "                                                sign a buyer's bearer token (development, tests)\n"
    "  payment sign [--key-separator SEP]            sign payment JSON lines from stdin with\n"
    "                                                kafka.payment_keys (demo, tests, integration)\n"
    "  config show                                   print the effective configuration\n"
    "  config reference                              print every setting's reference in Markdown\n"
    "                                                (docs/configuration.md; reads no file)\n";

int main(int argc, char **argv)
{
    struct cli cli = { .prog = "seckillctl", .usage = usage, .commands = 1 };
    struct cfg c;
    /* Its own database role: cfg_load reads that role's password file only. */
    cfg_role_set(CFG_ROLE_ADMIN, 0);
    int ret = cli_parse(&cli, argc, argv);
    if (ret >= 0)
        return ret;
    /* The reference is the table itself: it needs no configuration file. */
    if (argc - cli.argi == 2 && strcmp(argv[cli.argi], "config") == 0 &&
        strcmp(argv[cli.argi + 1], "reference") == 0) {
        cfg_reference(stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if ((ret = cli_load(&cli, &c)) >= 0)
        return ret;

    int sub_argc = argc - cli.argi;
    char **sub_argv = argv + cli.argi;
    if (sub_argc < 1) {
        fprintf(stderr, "seckillctl: missing command; try 'seckillctl --help'\n");
        ret = 2;
    } else if (strcmp(sub_argv[0], "item") == 0) {
        ret = item_cmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "lock") == 0) {
        ret = lockcmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "inspect") == 0) {
        ret = inspect_cmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "reconcile") == 0) {
        ret = reconcile_cmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "token") == 0) {
        ret = token_cmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "payment") == 0) {
        ret = paycmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "watch") == 0) {
        ret = watch_cmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "functions") == 0) {
        ret = funccmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "queue") == 0) {
        ret = queuecmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "sweep") == 0) {
        ret = sweepcmd(&c, sub_argc, sub_argv);
    } else if (strcmp(sub_argv[0], "config") == 0 && sub_argc == 2 && strcmp(sub_argv[1], "show") == 0) {
        cfg_dump(&c, stdout);
        ret = 0;
    } else {
        fprintf(stderr, "seckillctl: unknown command '%s'; try 'seckillctl --help'\n", sub_argv[0]);
        ret = 2;
    }
    cfg_free(&c);
    return ret;
}
