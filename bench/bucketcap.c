/* bench/bucketcap: one hot item's reservation capacity on a Redis Cluster,
 * in K buckets (issue #57: common/sale/bucket.h) beside the same in one
 * slot, by each shard's own CPU.
 *
 * Two items: ITEM with its stock in its own slot (K = 1, today's layout)
 * and ITEM + 1 in K buckets placed as seckillctl places them (bucket_place:
 * one per primary wherever the Cluster has K), every slot loaded with more
 * units than the run takes. CALLS buys of each, each from a new random
 * buyer, go to the buyer's slot (bucket_of) as seckill_reserve calls of the
 * producer's ACL user, pipelined BATCH at a time to one primary at a time,
 * the two items' batches interleaved as they fill (see drive): a light
 * client, so that the shards, not the client, do the work measured. Each
 * batch's primary's own CPU (INFO cpu) is read just before and just after
 * it, so that
 *   - each primary is measured as if it had a core of its own (the others
 *     wait meanwhile), which two cores cannot give three busy Redis
 *     processes at once: the capacity by CPU is the honest figure here,
 *     not a rate;
 *   - the machine's speed, which drifts by the minute here, falls on both
 *     layouts alike.
 * The replies give each primary's reservations, its function calls (INFO
 * commandstats, before and after the run) prove every call reserved.
 * Printed, one "key value" per line, for K = 1 and for K:
 *   bucketcap_kK_nodeN_reservations, _cpu_us_per_reservation (each primary
 *     that served any);
 *   bucketcap_kK_capacity_per_cpu_s: the sum over those primaries of their
 *     reservations per CPU-second of their own;
 *   bucketcap_kK_max_share: the busiest primary's reservations over its
 *     even share (all / K);
 *   bucketcap_kK_cpu_us_per_reservation: all their CPU over all reservations;
 *   bucketcap_kK_primaries: the primaries the item's slots sit on.
 * The buyers sets are left behind (the prefix is the caller's to drop).
 *   build/bench/bucketcap CONFIG ITEM K CALLS   (bench/bucketcap.sh runs it) */
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
    double cpu_s;       /* used_cpu_sys + used_cpu_user (a side's: over its batches) */
    long long fcalls;   /* cmdstat_fcall calls */
    long long reserved; /* this run's reservations on it (from the replies) */
};

/* One layout of the hot item: K = 1 (its own slot) or K buckets. */
struct side {
    int64_t item;
    int k;
    int salts[BUCKET_MAX];
    struct node_stat st[NODES_MAX]; /* cpu_s and reserved of its batches */
};

/* A number after "name:" (or "name=" inside a commandstats line) in text. */
static double info_field(const char *text, const char *name)
{
    const char *at = strstr(text, name);
    return at ? strtod(at + strlen(name), NULL) : 0;
}

/* Node n's INFO section (cpu or commandstats): its CPU seconds and its
 * function calls into *out. 0 or -1. */
static int sample_node(struct rp *admin, int n, const char *section, struct node_stat *out)
{
    char err[256];
    redisContext *rc = rp_node_conn(admin, n, err, sizeof(err));
    redisReply *r = rc ? redisCommand(rc, "INFO %s", section) : NULL;
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "bucketcap: INFO on node %d: %s\n", n, r ? r->str : err);
        freeReplyObject(r);
        return -1;
    }
    out->cpu_s = info_field(r->str, "used_cpu_sys:") + info_field(r->str, "used_cpu_user:");
    out->fcalls = (long long)info_field(r->str, "cmdstat_fcall:calls=");
    freeReplyObject(r);
    return 0;
}

/* Every primary's function calls now. 0 or -1. */
static int sample(struct rp *admin, struct node_stat *out, int nodes)
{
    for (int n = 0; n < nodes; n++)
        if (sample_node(admin, n, "commandstats", &out[n]) != 0)
            return -1;
    return 0;
}

/* The side's slots' stock set to units (seckill_item_load: a new sale's
 * empty buyers, reservations and window), as the admin user. 0 or -1. */
static int load(struct rp *admin, const struct cfg *c, const struct side *sd, const char *units)
{
    const struct rfunc s = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    char kk[KEYS_ITEM_PARTS][KEYS_MAX], err[256];
    struct rp_batch b;
    int ret = 0;
    rp_batch_init(&b);
    for (int i = 0; i < sd->k; i++) {
        if (keys_item_all_at(kk, c->redis.key_prefix, sd->item, sd->k > 1 ? sd->salts[i] : BUCKET_HOME) != 0)
            return -1;
        const char *argv[] = { kk[KEYS_ITEM_STOCK], kk[KEYS_ITEM_BUYERS], kk[KEYS_ITEM_PENDING],
                               kk[KEYS_ITEM_WINDOW], kk[KEYS_ITEM_ORDERS], units, "", "" };
        if (rp_fcall(&b, s.name, 5, 3, argv, NULL) < 0)
            ret = -1;
    }
    if (ret == 0 && rp_run(admin, &b, err, sizeof(err)) != 0)
        ret = -1;
    for (int i = 0; ret == 0 && i < sd->k; i++)
        if (rp_reply(&b, i)->type != REDIS_REPLY_INTEGER || rp_reply(&b, i)->integer != 1)
            ret = -1;
    if (ret != 0)
        fprintf(stderr, "bucketcap: loading item %" PRId64 "'s slots failed (buyers left from a run?)\n",
                sd->item);
    rp_batch_free(&b);
    return ret;
}

/* One buy: the keys of the buyer's slot and the arguments. */
struct call {
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    char user[24], oid[24], msg[160];
    int node;
};

/* The buys waiting for their batch, per side and primary. */
struct queue {
    struct call e[BATCH];
    int n;
};

static uint64_t rnd_state = 88172645463325252ULL;
static int64_t rnd_user(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (int64_t)(rnd_state >> 2) + 1;
}

/* One primary's round trip: q's buys (reserved_at_ms now), its CPU read
 * around it; the CPU and each reply that reserved counted in the side's
 * st[node]. 0 or -1. */
static int run_batch(struct rp *p, struct rp *admin, struct rp_batch *b, struct queue *q, struct side *sd,
                     const char *now)
{
    struct node_stat a, z;
    char err[256];
    int node = q->e[0].node;
    rp_batch_reset(b);
    for (int i = 0; i < q->n; i++) {
        const struct call *e = &q->e[i];
        const char *argv[] = { e->keys[0], e->keys[1], e->keys[2], e->keys[3], e->keys[4],
                               e->keys[5], e->user, e->oid, e->msg, now };
        if (rp_fcall(b, "seckill_reserve", KEYS_ITEM_PARTS, 4, argv, NULL) < 0)
            return -1;
    }
    if (sample_node(admin, node, "cpu", &a) != 0)
        return -1;
    if (rp_run(p, b, err, sizeof(err)) != 0) {
        fprintf(stderr, "bucketcap: %s\n", err);
        return -1;
    }
    if (sample_node(admin, node, "cpu", &z) != 0)
        return -1;
    sd->st[node].cpu_s += z.cpu_s - a.cpu_s;
    for (int i = 0; i < q->n; i++) {
        const redisReply *r = rp_reply(b, i);
        if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            sd->st[node].reserved++;
    }
    q->n = 0;
    return 0;
}

/* Buy number seq of the side, into its primary's queue: the queue, or NULL. */
static struct queue *enqueue(struct rp *p, const struct cfg *c, struct side *sd, struct queue *qs,
                             long long seq, const char *now)
{
    int64_t u = rnd_user();
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    if (keys_item_all_at(keys, c->redis.key_prefix, sd->item, sd->k > 1 ? sd->salts[bucket_of(u, sd->k)]
                                                                         : BUCKET_HOME) != 0)
        return NULL;
    int node = rp_node_of_key(p, keys[0], strlen(keys[0]));
    if (node < 0 || node >= NODES_MAX)
        return NULL;
    struct queue *q = &qs[node];
    struct call *e = &q->e[q->n++];
    memcpy(e->keys, keys, sizeof(keys));
    e->node = node;
    snprintf(e->user, sizeof(e->user), "%" PRId64, u);
    snprintf(e->oid, sizeof(e->oid), "%lld", seq);
    snprintf(e->msg, sizeof(e->msg),
             "{\"v\":1,\"order_id\":\"%lld\",\"user_id\":%" PRId64 ",\"item_id\":%" PRId64
             ",\"qty\":1,\"reserved_at_ms\":%s}", seq, u, sd->item, now);
    return q;
}

/* calls buys of each side, one of each in turn; a primary's queue goes as
 * one batch once it holds BATCH, so the two sides' batches interleave as
 * they fill (K buckets fill K queues, each at 1/K of the pace). 0 or -1. */
static int drive(struct rp *p, struct rp *admin, const struct cfg *c, struct side sides[2], long long calls)
{
    struct queue(*qs)[NODES_MAX] = calloc(2, sizeof(*qs));
    struct rp_batch b;
    char now[24];
    int ret = -1;
    if (!qs)
        return -1;
    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    rp_batch_init(&b);
    for (long long seq = 1; seq <= calls; seq++)
        for (int s = 0; s < 2; s++) {
            struct queue *q = enqueue(p, c, &sides[s], qs[s], seq, now);
            if (!q || (q->n == BATCH && run_batch(p, admin, &b, q, &sides[s], now) != 0))
                goto fail;
        }
    for (int s = 0; s < 2; s++)
        for (int n = 0; n < NODES_MAX; n++)
            if (qs[s][n].n > 0 && run_batch(p, admin, &b, &qs[s][n], &sides[s], now) != 0)
                goto fail;
    ret = 0;
fail:
    rp_batch_free(&b);
    free(qs);
    return ret;
}

/* One side's figures. */
static void report(const struct side *sd, int nodes)
{
    double cap = 0, cpu_all = 0, share = 0;
    long long reserved = 0;
    for (int n = 0; n < nodes; n++) {
        const struct node_stat *st = &sd->st[n];
        if (st->reserved == 0)
            continue;
        printf("bucketcap_k%d_node%d_reservations %lld\n", sd->k, n, st->reserved);
        printf("bucketcap_k%d_node%d_cpu_us_per_reservation %.2f\n", sd->k, n,
               st->cpu_s * 1e6 / (double)st->reserved);
        cap += (double)st->reserved / (st->cpu_s > 0 ? st->cpu_s : 1e-9);
        cpu_all += st->cpu_s;
        reserved += st->reserved;
        if ((double)st->reserved > share)
            share = (double)st->reserved;
    }
    printf("bucketcap_k%d_reservations %lld\n", sd->k, reserved);
    printf("bucketcap_k%d_capacity_per_cpu_s %.0f\n", sd->k, cap);
    printf("bucketcap_k%d_max_share %.3f\n", sd->k, reserved > 0 ? share / ((double)reserved / sd->k) : 0);
    printf("bucketcap_k%d_cpu_us_per_reservation %.2f\n", sd->k,
           reserved > 0 ? cpu_all * 1e6 / (double)reserved : 0);
}

/* Every call each primary ran reserved (a 0.1 % slack for repeated random
 * buyers), and every buy was a reservation: else the figures are another
 * branch's. 0 or -1. */
static int proven(const struct side sides[2], int nodes, const struct node_stat *a, const struct node_stat *z,
                  long long calls)
{
    int ret = 0;
    for (int s = 0; s < 2; s++) {
        long long reserved = 0;
        for (int n = 0; n < nodes; n++)
            reserved += sides[s].st[n].reserved;
        if (reserved < 0.999 * (double)calls) {
            fprintf(stderr, "bucketcap: K = %d: %lld of %lld calls reserved\n", sides[s].k, reserved, calls);
            ret = -1;
        }
    }
    for (int n = 0; n < nodes; n++) {
        long long fc = z[n].fcalls - a[n].fcalls, got = sides[0].st[n].reserved + sides[1].st[n].reserved;
        if (got < 0.999 * (double)fc) {
            fprintf(stderr, "bucketcap: node %d ran %lld calls, %lld reserved: not the reservation's branch\n", n,
                    fc, got);
            ret = -1;
        }
    }
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    struct rp *admin = NULL, *prod = NULL;
    struct node_stat a[NODES_MAX] = { 0 }, z[NODES_MAX] = { 0 };
    static struct side sides[2];
    int64_t item, k, calls;
    int nodes, ret = 1;
    char err[512], units[24];
    if (argc != 5 || util_parse_i64(argv[2], 1, INT64_MAX - 1, &item) != 0 ||
        util_parse_i64(argv[3], 2, BUCKET_MAX, &k) != 0 || util_parse_i64(argv[4], 1, 100000000, &calls) != 0) {
        fprintf(stderr, "usage: bucketcap CONFIG ITEM K(2-%d) CALLS  (ITEM in one slot, ITEM + 1 in K buckets)\n",
                BUCKET_MAX);
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
    sides[0] = (struct side){ .item = item, .k = 1 };
    sides[1] = (struct side){ .item = item + 1, .k = (int)k };
    snprintf(units, sizeof(units), "%" PRId64, calls + 1);
    for (int s = 0; s < 2; s++) {
        if (nodes < 1 || nodes > NODES_MAX || bucket_place(c.redis.key_prefix, sides[s].item, sides[s].k, nodes,
                                                           rp_node_fn, admin, sides[s].salts) != 0) {
            fprintf(stderr, "bucketcap: cannot place %d buckets on %d primaries\n", sides[s].k, nodes);
            goto fail;
        }
        if (load(admin, &c, &sides[s], units) != 0)
            goto fail;
    }
    if (sample(admin, a, nodes) != 0 || drive(prod, admin, &c, sides, calls) != 0 || sample(admin, z, nodes) != 0)
        goto fail;
    for (int s = 0; s < 2; s++) {
        printf("bucketcap_k%d_primaries %d\n", sides[s].k,
               bucket_spread(c.redis.key_prefix, sides[s].item, sides[s].k, sides[s].salts, rp_node_fn, admin));
        report(&sides[s], nodes);
    }
    ret = proven(sides, nodes, a, z, calls) == 0 ? 0 : 1;
fail:
    rp_close(prod);
    rp_close(admin);
    cfg_free(&c);
    return ret;
}
