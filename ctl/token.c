#include "token.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlopt.h"
#include "jwt.h"
#include "util.h"

#define TTL_MAX_S (366 * 86400)
#define USERS_MAX 1000000

static void token_usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] token issue (--user ID | --users FIRST-LAST) [--ttl DURATION] [--key "
          "KID]\n"
          "  DURATION: seconds, or with a suffix s, m, h or d (\"15m\", \"7d\"); 1s to 366d, default 1h\n"
          "  --key: a kid of jwt.keys (default jwt.signing_key, else the first key that can sign)\n",
          f);
}

/* "90", "90s", "15m", "2h", "7d" into seconds in [1, TTL_MAX_S]. 0 or -1. */
static int parse_duration(const char *s, int64_t *out)
{
    char num[24];
    size_t n = strlen(s);
    int64_t mult = 1, v;
    if (n == 0 || n >= sizeof(num))
        return -1;
    switch (s[n - 1]) {
    case 's': mult = 1; n--; break;
    case 'm': mult = 60; n--; break;
    case 'h': mult = 3600; n--; break;
    case 'd': mult = 86400; n--; break;
    default: break;
    }
    memcpy(num, s, n);
    num[n] = '\0';
    /* Bounding the number first keeps the product from overflowing. */
    if (util_parse_i64(num, 1, TTL_MAX_S, &v) != 0 || v > TTL_MAX_S / mult)
        return -1;
    *out = v * mult;
    return 0;
}

/* "FIRST-LAST", both positive, at most USERS_MAX of them. 0 or -1. */
static int parse_users(const char *s, int64_t *first, int64_t *last)
{
    char a[24];
    const char *dash = strchr(s, '-');
    if (!dash || (size_t)(dash - s) >= sizeof(a))
        return -1;
    memcpy(a, s, (size_t)(dash - s));
    a[dash - s] = '\0';
    if (util_parse_i64(a, 1, INT64_MAX, first) != 0 || util_parse_i64(dash + 1, 1, INT64_MAX, last) != 0 ||
        *last < *first || *last - *first >= USERS_MAX)
        return -1;
    return 0;
}

/* What token issue's command line asks for. */
struct token_args {
    int64_t first, last, ttl;
    const char *kid;
};

/* -1 to go on, else the exit status (0 after --help). */
static int token_parse(int argc, char **argv, struct token_args *a)
{
    static const struct option opts[] = {
        { "user", required_argument, NULL, 'u' },
        { "users", required_argument, NULL, 'U' },
        { "ttl", required_argument, NULL, 't' },
        { "key", required_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    *a = (struct token_args){ 0, 0, 3600, NULL };

    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            if (a->first != 0 || util_parse_i64(optarg, 1, INT64_MAX, &a->first) != 0) {
                fprintf(stderr,
                        "seckillctl: --user must be a positive 64-bit integer, given once; got '%s'\n",
                        optarg);
                return 2;
            }
            a->last = a->first;
            break;
        case 'U':
            if (a->first != 0 || parse_users(optarg, &a->first, &a->last) != 0) {
                fprintf(stderr,
                        "seckillctl: --users must be FIRST-LAST, positive, FIRST <= LAST, at most %d users, "
                        "instead of --user; got '%s'\n",
                        USERS_MAX, optarg);
                return 2;
            }
            break;
        case 't':
            if (parse_duration(optarg, &a->ttl) != 0) {
                fprintf(stderr,
                        "seckillctl: --ttl must be 1s to 366d (seconds, or a number with s, m, h or d); got "
                        "'%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'k':
            a->kid = optarg;
            break;
        case 'h':
            token_usage(stdout);
            return 0;
        default:
            token_usage(stderr);
            return 2;
        }
    }
    if (a->first == 0 || optind != argc) {
        token_usage(stderr);
        return 2;
    }
    return -1;
}

static int token_issue(const struct cfg *c, int argc, char **argv)
{
    struct token_args a;
    int ret = token_parse(argc, argv, &a);
    if (ret >= 0)
        return ret;
    char err[512];
    struct jwt_keyset *ks = NULL;
    if (jwt_keyset_load(c, JWT_USE_SIGN, &ks, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return 1;
    }
    int64_t iat = util_wall_ms() / 1000;
    ret = 0;
    for (int64_t u = a.first;; u++) {
        char *tok = NULL;
        if (jwt_sign(ks, a.kid, u, iat, iat + a.ttl, &tok, err, sizeof(err)) != 0) {
            /* Nothing else fails here but the choice of key. */
            fprintf(stderr, "seckillctl: %s\n", err);
            ret = 2;
            break;
        }
        int w = fputs(tok, stdout);
        free(tok);
        if (w == EOF || putchar('\n') == EOF)
            break;
        if (u == a.last)
            break;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "seckillctl: writing the tokens: %s\n", strerror(errno));
        ret = ret ? ret : 1;
    }
    jwt_keyset_free(ks);
    return ret;
}

int token_cmd(const struct cfg *c, int argc, char **argv)
{
    return ctl_one_sub(c, argc, argv, "issue", token_issue, token_usage);
}
