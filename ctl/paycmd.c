#include "paycmd.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlopt.h"
#include "paymsg.h"
#include "paysig.h"

static void pay_usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] payment sign [--key-separator SEP]\n"
          "  reads payment JSON lines on stdin, one a line:\n"
          "    {\"v\":1,\"order_id\":\"ID\",\"user_id\":N,\"paid_at_ms\":N,\"ref\":\"REF\"}\n"
          "  and writes each one signed with the first key of kafka.payment_keys (a \"sig\" already\n"
          "  there is replaced); --key-separator: each line begins with its Kafka key (the user id)\n"
          "  and SEP, as `kcat -P -K SEP` reads them\n",
          f);
}

/* -1 to go on, else the exit status (0 after --help). */
static int pay_parse(int argc, char **argv, const char **sep)
{
    static const struct option opts[] = {
        { "key-separator", required_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    *sep = NULL;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'k':
            /* The separator must not occur in a key (digits) nor start the JSON. */
            if (!optarg[0] || strpbrk(optarg, "0123456789{\n")) {
                fprintf(stderr, "seckillctl: --key-separator must be non-empty, without digits, '{' or a "
                                "newline; got '%s'\n", optarg);
                return 2;
            }
            *sep = optarg;
            break;
        case 'h': pay_usage(stdout); return 0;
        default: pay_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        pay_usage(stderr);
        return 2;
    }
    return -1;
}

/* Sign one line (without its newline) and write it. 0, 1 when it is not a
 * payment (said on stderr), -1 when stdout failed. */
static int sign_line(const struct keyring *ks, const char *line, size_t len, long no, const char *sep)
{
    struct pay_msg m;
    char err[256], buf[PAY_MSG_MAX];
    int n;
    if (paymsg_decode(line, len, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: stdin line %ld: not a payment: %s\n", no, err);
        return 1;
    }
    if (psig_keys_sign(ks, &m) != 0 || (n = paymsg_encode(&m, buf, sizeof(buf))) < 0) {
        fprintf(stderr, "seckillctl: stdin line %ld: cannot sign it\n", no);
        return 1;
    }
    if (sep && printf("%" PRId64 "%s", m.user_id, sep) < 0)
        return -1;
    return fwrite(buf, 1, (size_t)n, stdout) == (size_t)n && putchar('\n') != EOF ? 0 : -1;
}

static int pay_sign(const struct cfg *c, int argc, char **argv)
{
    const char *sep;
    int ret = pay_parse(argc, argv, &sep), r = 0;
    char err[1024], *line = NULL;
    size_t cap = 0;
    ssize_t len;
    struct keyring *ks = NULL;
    if (ret >= 0)
        return ret;
    if (psig_keys_load(c, &ks, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return 1;
    }
    ret = 0;
    for (long no = 1; r >= 0 && (len = getline(&line, &cap, stdin)) >= 0; no++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0) /* a blank line is no payment, nor an error */
            continue;
        if ((r = sign_line(ks, line, (size_t)len, no, sep)) > 0)
            ret = 1;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "seckillctl: reading stdin: %s\n", strerror(errno));
        ret = 1;
    }
    if (r < 0 || fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "seckillctl: writing the payments: %s\n", strerror(errno));
        ret = 1;
    }
    free(line);
    keyring_free(ks);
    return ret;
}

int paycmd(const struct cfg *c, int argc, char **argv)
{
    return ctl_one_sub(c, argc, argv, "sign", pay_sign, pay_usage);
}
