/* bench/bucketcap: one hot item's reservation capacity on a Redis Cluster,
 * in K buckets (issue #57: common/sale/bucket.h), by each shard's own CPU.
 *
 * The item gets K buckets placed as seckillctl places them (bucket_place:
 * one per primary wherever the Cluster has K), each loaded with more units
 * than the run takes (K = 1: the item's own slot, today's layout). Then
 * CALLS buys, each from a new random buyer, go to the buyer's bucket
 * (bucket_of) as seckill_reserve calls of the producer's ACL user,
 * pipelined BATCH at a time to one primary at a time (see drive): a light
 * client, so that the shards, not the client, do the work measured. Each primary's
 * own counters (INFO cpu, INFO commandstats) before and after give its
 * function calls and its CPU; the replies give its reservations (every call
 * must reserve: proven). Printed, one "key value" per line:
 *   bucketcap_kK_nodeN_reservations, _cpu_us_per_reservation (each primary
 *     that served any);
 *   bucketcap_kK_capacity_per_cpu_s: the sum over those primaries of their
 *     reservations per CPU-second of their own (two cores cannot run three
 *     busy Redis processes at once: the capacity by CPU is the honest
 *     figure here, not a rate);
 *   bucketcap_kK_max_share: the busiest primary's reservations over its
 *     even share (all / K);
 *   bucketcap_kK_cpu_us_per_reservation: all their CPU over all reservations.
 * The buyers sets are left behind (the prefix is the caller's to drop).
 *   build/bench/bucketcap CONFIG ITEM K CALLS   (bench/run runs it) */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "cfg.h"
#include "funclibs.h"
#include "keys.h"
#include "rfunc.h"
#include "rpipe.h"
#include "util.h"

#define BATCH 512
#define NODES_MAX 16

struct node_stat {
    double cpu_s;       /* used_cpu_sys + used_cpu_user */
    long long fcalls;   /* cmdstat_fcall calls */
    long long reserved; /* this run's reservations on it (from the replies) */
};

/* A number after "name:" (or "name=" inside a commandstats line) in text. */
static double info_field(const char *text, const char *name)
{
    const char *at = strstr(text, name);
    return at ? strtod(at + strlen(name), NULL) : 0;
}

/* Every primary's CPU and function calls now. 0 or -1. */
static int sample(struct rp *admin, struct node_stat *out, int nodes)
{
    char err[256];
    for (int n = 0; n < nodes; n++) {
        redisContext *rc = rp_node_conn(admin, n, err, sizeof(err));
        redisReply *r = rc ? redisCommand(rc, "INFO everything") : NULL;
        if (!r || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "bucketcap: INFO on node %d: %s\n", n, r ? r->str : err);
            freeReplyObject(r);
            return -1;
        }
        out[n].cpu_s = info_field(r->str, "used_cpu_sys:") + info_field(r->str, "used_cpu_user:");
        out[n].fcalls = (long long)info_field(r->str, "cmdstat_fcall:calls=");
        freeReplyObject(r);
    }
    return 0;
}

/* Each bucket's stock set to units (seckill_item_load: a new sale's empty
 * buyers, reservations and window), as the admin user. 0 or -1. */
static int load(struct rp *admin, const struct cfg *c, int64_t item, int k, const int salts[],
                const char *units)
{
    const struct rfunc s = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    char kk[KEYS_ITEM_PARTS][KEYS_MAX], err[256];
    struct rp_batch b;
    int ret = 0;
    rp_batch_init(&b);
    for (int i = 0; i < k; i++) {
        if (keys_item_all_at(kk, c->redis.key_prefix, item, k > 1 ? salts[i] : BUCKET_HOME) != 0)
            return -1;
        const char *argv[] = { kk[KEYS_ITEM_STOCK], kk[KEYS_ITEM_BUYERS], kk[KEYS_ITEM_PENDING],
                               kk[KEYS_ITEM_WINDOW], kk[KEYS_ITEM_ORDERS], units, "", "" };
        if (rp_fcall(&b, s.name, 5, 3, argv, NULL) < 0)
            ret = -1;
    }
    if (ret == 0 && rp_run(admin, &b, err, sizeof(err)) != 0)
        ret = -1;
    for (int i = 0; ret == 0 && i < k; i++)
        if (rp_reply(&b, i)->type != REDIS_REPLY_INTEGER || rp_reply(&b, i)->integer != 1)
            ret = -1;
    if (ret != 0)
        fprintf(stderr, "bucketcap: loading item %" PRId64 "'s buckets failed (buyers left from a run?)\n",
                item);
    rp_batch_free(&b);
    return ret;
}

/* One batch's entries: the keys of the buyer's slot and the arguments. */
struct call {
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    char user[24], oid[24], msg[160], now[24];
    int node;
};

static uint64_t rnd_state = 88172645463325252ULL;
static int64_t rnd_user(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (int64_t)(rnd_state >> 2) + 1;
}

/* One primary's round trip: its n calls in e, each reply that reserved
 * counted in st[node].reserved. The reservations, or -1. */
static long long run_node(struct rp *p, struct rp_batch *b, struct call *e, int n, struct node_stat *st)
{
    char err[256];
    long long reserved = 0;
    rp_batch_reset(b);
    for (int i = 0; i < n; i++) {
        const char *argv[] = { e[i].keys[0], e[i].keys[1], e[i].keys[2], e[i].keys[3], e[i].keys[4],
                               e[i].keys[5], e[i].user, e[i].oid, e[i].msg, e[i].now };
        if (rp_fcall(b, "seckill_reserve", KEYS_ITEM_PARTS, 4, argv, NULL) < 0)
            return -1;
    }
    if (rp_run(p, b, err, sizeof(err)) != 0) {
        fprintf(stderr, "bucketcap: %s\n", err);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const redisReply *r = rp_reply(b, i);
        if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
            st[e[i].node].reserved++;
            reserved++;
        }
    }
    return reserved;
}

/* calls buys of item, each to its buyer's bucket. A primary's calls go in
 * BATCH at a time, one primary at a time: while one works the others wait,
 * so each is measured as if it had a core of its own (which two cores
 * cannot give three busy Redis processes at once), and K = 1's one primary
 * the same way. The reservations, or -1. */
static long long drive(struct rp *p, const struct cfg *c, int64_t item, int k, const int salts[],
                       long long calls, struct node_stat *st)
{
    struct call(*e)[BATCH] = calloc(NODES_MAX, sizeof(*e));
    int fill[NODES_MAX] = { 0 };
    struct rp_batch b;
    char now[24];
    long long reserved = 0, got;
    if (!e)
        return -1;
    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    rp_batch_init(&b);
    for (long long done = 0; done < calls; done++) {
        int64_t u = rnd_user();
        int salt = k > 1 ? salts[bucket_of(u, k)] : BUCKET_HOME;
        char keys[KEYS_ITEM_PARTS][KEYS_MAX];
        if (keys_item_all_at(keys, c->redis.key_prefix, item, salt) != 0)
            goto fail;
        int node = rp_node_of_key(p, keys[0], strlen(keys[0]));
        if (node < 0 || node >= NODES_MAX)
            goto fail;
        struct call *x = &e[node][fill[node]++];
        memcpy(x->keys, keys, sizeof(keys));
        x->node = node;
        snprintf(x->now, sizeof(x->now), "%s", now);
        snprintf(x->user, sizeof(x->user), "%" PRId64, u);
        snprintf(x->oid, sizeof(x->oid), "%lld", done + 1);
        snprintf(x->msg, sizeof(x->msg),
                 "{\"v\":1,\"order_id\":\"%lld\",\"user_id\":%" PRId64 ",\"item_id\":%" PRId64
                 ",\"qty\":1,\"reserved_at_ms\":%s}", done + 1, u, item, now);
        if (fill[node] == BATCH) {
            if ((got = run_node(p, &b, e[node], BATCH, st)) < 0)
                goto fail;
            reserved += got;
            fill[node] = 0;
        }
    }
    for (int n = 0; n < NODES_MAX; n++)
        if (fill[n] > 0) {
            if ((got = run_node(p, &b, e[n], fill[n], st)) < 0)
                goto fail;
            reserved += got;
        }
    rp_batch_free(&b);
    free(e);
    return reserved;
fail:
    rp_batch_free(&b);
    free(e);
    return -1;
}

/* The figures, from the counters before (a) and after (z) and the replies. */
static int report(int k, int nodes, const struct node_stat *a, const struct node_stat *z,
                  const struct node_stat *st, long long calls, long long reserved)
{
    double cap = 0, cpu_all = 0, share = 0;
    int ret = 0;
    for (int n = 0; n < nodes; n++) {
        long long fc = z[n].fcalls - a[n].fcalls;
        double cpu = z[n].cpu_s - a[n].cpu_s;
        if (st[n].reserved == 0)
            continue;
        /* Every call the node ran reserved (a 0.1 % slack for repeated
         * random buyers): else the figure is another branch's. */
        if (st[n].reserved < 0.999 * (double)fc) {
            fprintf(stderr, "bucketcap: node %d ran %lld calls, %lld reserved: not the reservation's branch\n",
                    n, fc, st[n].reserved);
            ret = -1;
        }
        printf("bucketcap_k%d_node%d_reservations %lld\n", k, n, st[n].reserved);
        printf("bucketcap_k%d_node%d_cpu_us_per_reservation %.2f\n", k, n, cpu * 1e6 / (double)st[n].reserved);
        cap += (double)st[n].reserved / (cpu > 0 ? cpu : 1e-9);
        cpu_all += cpu;
        if ((double)st[n].reserved > share)
            share = (double)st[n].reserved;
    }
    if (reserved < 0.999 * (double)calls) {
        fprintf(stderr, "bucketcap: %lld of %lld calls reserved\n", reserved, calls);
        ret = -1;
    }
    printf("bucketcap_k%d_reservations %lld\n", k, reserved);
    printf("bucketcap_k%d_capacity_per_cpu_s %.0f\n", k, cap);
    printf("bucketcap_k%d_max_share %.3f\n", k, reserved > 0 ? share / ((double)reserved / k) : 0);
    printf("bucketcap_k%d_cpu_us_per_reservation %.2f\n", k, reserved > 0 ? cpu_all * 1e6 / (double)reserved : 0);
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    struct rp *admin = NULL, *prod = NULL;
    struct node_stat a[NODES_MAX] = { 0 }, z[NODES_MAX] = { 0 }, st[NODES_MAX] = { 0 };
    int64_t item, k, calls;
    int salts[BUCKET_MAX], nodes, ret = 1;
    char err[512], units[24];
    if (argc != 5 || util_parse_i64(argv[2], 1, INT64_MAX, &item) != 0 ||
        util_parse_i64(argv[3], 1, BUCKET_MAX, &k) != 0 || util_parse_i64(argv[4], 1, 100000000, &calls) != 0) {
        fprintf(stderr, "usage: bucketcap CONFIG ITEM K(1-%d) CALLS\n", BUCKET_MAX);
        return 2;
    }
    /* seckillctl's user loads and reads the counters, the producer's buys */
    cfg_role_set(CFG_ROLE_ADMIN, CFG_ROLE_BIT(CFG_ROLE_PRODUCER));
    if (cfg_load(argv[1], &c, err, sizeof(err)) != 0 || rp_open(&c, CFG_ROLE_ADMIN, &admin, err, sizeof(err)) != 0 ||
        rp_open(&c, CFG_ROLE_PRODUCER, &prod, err, sizeof(err)) != 0) {
        fprintf(stderr, "bucketcap: %s\n", err);
        goto fail;
    }
    nodes = rp_nodes(admin);
    if (nodes < 1 || nodes > NODES_MAX || bucket_place(c.redis.key_prefix, item, (int)k, nodes, rp_node_fn, admin,
                                                       salts) != 0) {
        fprintf(stderr, "bucketcap: cannot place %" PRId64 " buckets on %d primaries\n", k, nodes);
        goto fail;
    }
    snprintf(units, sizeof(units), "%" PRId64, calls + 1);
    if (load(admin, &c, item, (int)k, salts, units) != 0 || sample(admin, a, nodes) != 0)
        goto fail;
    long long reserved = drive(prod, &c, item, (int)k, salts, calls, st);
    if (reserved < 0 || sample(admin, z, nodes) != 0)
        goto fail;
    printf("bucketcap_k%" PRId64 "_primaries %d\n", k,
           bucket_spread(c.redis.key_prefix, item, (int)k, salts, rp_node_fn, admin));
    ret = report((int)k, nodes, a, z, st, calls, reserved) == 0 ? 0 : 1;
fail:
    rp_close(prod);
    rp_close(admin);
    cfg_free(&c);
    return ret;
}
