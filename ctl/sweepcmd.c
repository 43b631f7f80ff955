#include "sweepcmd.h"

#include <getopt.h>
#include <stdio.h>

#include "ctlopt.h"
#include "rpipe.h"
#include "sweep.h"
#include "sweepage.h"
#include "util.h"

int sweepcmd(const struct cfg *c, int argc, char **argv)
{
    static const struct option opts[] = {
        { "age-ms", required_argument, NULL, 'a' },
        { NULL, 0, NULL, 0 },
    };
    int64_t age = sweep_age_ms(c); /* --age-ms, the operator's explicit choice, is taken as given */
    struct sweep_stats st;
    struct pub *p = NULL;
    struct rp *rp = NULL;
    char err[512];
    int o, ret = 1;
    optind = 1;
    while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (o != 'a' || util_parse_i64(optarg, 0, CTL_MAX_MS, &age) != 0) {
            fprintf(stderr, "usage: seckillctl sweep [--age-ms N]   (N in 0..%d)\n", CTL_MAX_MS);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "seckillctl: sweep: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (rp_open(c, cfg_role_self(), &rp, err, sizeof(err)) != 0 || pub_open(c, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        goto fail;
    }
    if (sweep_once(c, rp, p, age, &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: sweep: %s\n", err);
        goto fail;
    }
    printf("items %lld  pending %lld  unpublished %lld  older than %lld ms: claimed %lld, "
           "re-published %lld, failed %lld (undecodable, left in place: %lld)\n",
           (long long)st.items, (long long)st.pending, (long long)st.unpublished, (long long)age,
           (long long)st.claimed, (long long)st.republished, (long long)st.failed, (long long)st.undecodable);
    if (st.buckets || st.bad_buckets)
        printf("buckets %lld swept beside the items' own slots; items whose buckets share a primary another "
               "could take: %lld; whose window names buckets seckillctl never writes: %lld; transfers "
               "between slots found half done and finished: %lld\n",
               (long long)st.buckets, (long long)st.crowded, (long long)st.bad_buckets,
               (long long)st.xfer_finished);
    ret = st.failed ? 1 : 0;
fail:
    pub_close(p, PUB_CLOSE_TIMEOUT_MS);
    rp_close(rp);
    return ret;
}
