/* bench/rsvfloor: the reservation's floor, each call as a producer sends it
 * (issue #57: "each shard does more").
 *
 * The floor is seckill_reserve called straight at Redis, every call a new
 * buyer, at the concurrency redis-benchmark uses for the trivial calls
 * beside it (-c CONNS: CONNS connections, one call in flight on each).
 * redis-benchmark replays one command line with random numbers in it, so
 * every reservation it sent had the same stamp and a random order id. The
 * unpublished set is sorted by stamp, then by order id: each of its entries
 * went to a random place among millions, and that ZADD cost 3.3-3.6 us of
 * the function's 13-15 (INFO commandstats). A producer stamps each
 * reservation with its clock and hands out order ids in order from its
 * block (producer/orderid.h): each entry lands at the set's end, where the
 * same ZADD costs 0.8 us. This client sends what a producer sends:
 *   - a new random buyer per call;
 *   - the next order id (ids of one width, so that their order as strings
 *     is their order as numbers, as within a producer's block);
 *   - the wall clock in ms as reserved_at_ms, in the message too.
 * Prints "key value" lines: rsvfloor_calls (replies), rsvfloor_reserved
 * (replies 1), rsvfloor_rps. Exits 1 on an error reply or a lost connection.
 *   build/bench/rsvfloor HOST PORT USER PREFIX ITEM CALLS CONNS
 * USER is a Redis user without a password (bench/ingress makes one). */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "util.h"

#define CONNS_MAX 256
#define OID_FIRST 1000000000000LL /* 13 digits for the whole run */

struct floor_run {
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    char nkeys[4]; /* KEYS_ITEM_PARTS, as FCALL's argument */
    int64_t item, calls, sent, replies, reserved, next_oid;
};

/* The next call, written to c's socket. 0 or -1. */
static int send_call(struct floor_run *f, redisContext *c)
{
    char user[24], oid[24], at[24], msg[256];
    int64_t u = (int64_t)util_rand_below(INT64_MAX) + 1, now = util_wall_ms();
    snprintf(user, sizeof(user), "%" PRId64, u);
    snprintf(oid, sizeof(oid), "%" PRId64, f->next_oid++);
    snprintf(at, sizeof(at), "%" PRId64, now);
    snprintf(msg, sizeof(msg),
             "{\"v\":1,\"order_id\":\"%s\",\"user_id\":%s,\"item_id\":%" PRId64 ",\"qty\":1,\"reserved_at_ms\":%s}", oid,
             user, f->item, at);
    const char *argv[] = { "FCALL", "seckill_reserve", f->nkeys, f->keys[0], f->keys[1], f->keys[2], f->keys[3],
                           f->keys[4], f->keys[5], user, oid, msg, at };
    int done = 0;
    if (redisAppendCommandArgv(c, (int)(sizeof(argv) / sizeof(argv[0])), argv, NULL) != REDIS_OK)
        return -1;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return -1;
    f->sent++;
    return 0;
}

/* The replies waiting on c, each followed by the next call while any are
 * left to send. The sockets block, but each is read only once poll says it
 * has data, and a reply is taken only from what was read. 0 or -1. */
static int take_replies(struct floor_run *f, redisContext *c)
{
    void *v;
    if (redisBufferRead(c) != REDIS_OK)
        return -1;
    for (;;) {
        if (redisGetReplyFromReader(c, &v) != REDIS_OK)
            return -1;
        if (!v)
            return 0;
        redisReply *r = v;
        int bad = r->type == REDIS_REPLY_ERROR;
        if (bad)
            fprintf(stderr, "rsvfloor: %s\n", r->str);
        f->reserved += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        f->replies++;
        freeReplyObject(r);
        if (bad || (f->sent < f->calls && send_call(f, c) != 0))
            return -1;
    }
}

/* A connection logged in as user, its first call sent; NULL (said why on
 * stderr) when it cannot be. */
static redisContext *open_conn(struct floor_run *f, const char *host, int port, const char *user)
{
    redisContext *c = redisConnect(host, port);
    redisReply *r = c && !c->err ? redisCommand(c, "AUTH %s %s", user, "-") : NULL;
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "rsvfloor: %s:%d as %s: %s\n", host, port, user,
                r ? r->str : c && c->err ? c->errstr : "no connection");
    freeReplyObject(r);
    if (ok && f->sent < f->calls && send_call(f, c) != 0)
        ok = 0;
    if (!ok)
        redisFree(c);
    return ok ? c : NULL;
}

/* Until every call sent has its reply: each reply read as it comes, the
 * next call sent on its connection. 0, or -1 (said why on stderr). */
static int drive(struct floor_run *f, redisContext **cs, int n)
{
    struct pollfd pf[CONNS_MAX];
    for (int i = 0; i < n; i++)
        pf[i] = (struct pollfd){ .fd = cs[i]->fd, .events = POLLIN };
    while (f->replies < f->sent) {
        if (poll(pf, (nfds_t)n, 10000) <= 0) {
            fprintf(stderr, "rsvfloor: no reply for 10 s\n");
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (pf[i].revents && take_replies(f, cs[i]) != 0) {
                fprintf(stderr, "rsvfloor: connection %d: %s\n", i, cs[i]->err ? cs[i]->errstr : "bad reply");
                return -1;
            }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct floor_run f = { .next_oid = OID_FIRST };
    redisContext *cs[CONNS_MAX] = { 0 };
    int64_t port, conns;
    int ret = 1, n = 0;
    if (argc != 8 || util_parse_i64(argv[2], 1, 65535, &port) != 0 ||
        util_parse_i64(argv[5], 1, INT64_MAX - 1, &f.item) != 0 ||
        util_parse_i64(argv[6], 1, 100000000, &f.calls) != 0 || util_parse_i64(argv[7], 1, CONNS_MAX, &conns) != 0 ||
        keys_item_all(f.keys, argv[4], f.item) != 0) {
        fprintf(stderr, "usage: rsvfloor HOST PORT USER PREFIX ITEM CALLS CONNS(1-%d)\n", CONNS_MAX);
        return 2;
    }
    snprintf(f.nkeys, sizeof(f.nkeys), "%d", KEYS_ITEM_PARTS);
    int64_t t0 = util_mono_us();
    for (; n < conns; n++)
        if (!(cs[n] = open_conn(&f, argv[1], (int)port, argv[3])))
            goto fail;
    if (drive(&f, cs, n) != 0)
        goto fail;
    int64_t us = util_max_i64(util_mono_us() - t0, 1);
    printf("rsvfloor_calls %" PRId64 "\nrsvfloor_reserved %" PRId64 "\nrsvfloor_rps %.0f\n", f.replies, f.reserved,
           (double)f.replies * 1e6 / (double)us);
    ret = 0;
fail:
    for (int i = 0; i < n; i++)
        redisFree(cs[i]);
    return ret;
}
