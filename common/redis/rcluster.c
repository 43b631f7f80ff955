/* rcluster: routing a pipelined batch over a Redis Cluster (see rcluster.h). */
#include "rcluster.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rconn.h"
#include "util.h"

struct rcl {
    const struct cfg *cfg;
    char *user;
    struct secret *password;
    int nseeds;
    struct slot_node seed[RCL_MAX_SEEDS];
    struct slot_map map;
    redisContext *conn[SLOT_MAX_NODES]; /* per map node; NULL: not open */
    bool refresh_due;  /* before the next batch, throttled (a MOVED) */
    bool unreachable;  /* now, within the batch (a node that cannot be reached, a slot with no primary) */
    int64_t refreshed_ms;
    unsigned long epoch; /* +1 per map installed: node indices before it mean other nodes */
    struct rcl_stats stats;
};

/* --- the map ------------------------------------------------------------ */

static int parse_seed(const char *s, struct slot_node *out)
{
    const char *colon = strrchr(s, ':');
    int64_t port;
    if (colon == NULL || colon == s || (size_t)(colon - s) >= sizeof(out->host) ||
        util_parse_i64(colon + 1, 1, 65535, &port) != 0)
        return -1;
    memcpy(out->host, s, (size_t)(colon - s));
    out->host[colon - s] = '\0';
    out->port = (int)port;
    return 0;
}

static void close_conn(struct rcl *cl, int i)
{
    if (cl->conn[i] != NULL)
        redisFree(cl->conn[i]);
    cl->conn[i] = NULL;
}

/* The connection to map node i, opened when it has none (or a broken one). */
static redisContext *conn_of(struct rcl *cl, int i, char *err, size_t errlen)
{
    if (cl->conn[i] != NULL && rconn_broken(cl->conn[i]))
        close_conn(cl, i);
    if (cl->conn[i] == NULL) {
        const struct slot_node *n = &cl->map.node[i];
        if (rconn_open_node(cl->cfg, n->host, n->port, cl->user, cl->password, &cl->conn[i], err, errlen) !=
            0) {
            cl->unreachable = true; /* it may have gone: ask who serves its slots now */
            return NULL;
        }
    }
    return cl->conn[i];
}

/* CLUSTER SLOTS from one address, into *m. Through the pooled connection
 * when that address is a node of the current map, else a passing one. */
static int ask_slots(struct rcl *cl, const struct slot_node *at, struct slot_map *m, char *err, size_t errlen)
{
    int i;
    for (i = 0; i < cl->map.nnodes; i++)
        if (cl->map.node[i].port == at->port && strcmp(cl->map.node[i].host, at->host) == 0)
            break;
    redisContext *rc = NULL;
    if (i < cl->map.nnodes)
        rc = conn_of(cl, i, err, errlen);
    else if (rconn_open_node(cl->cfg, at->host, at->port, cl->user, cl->password, &rc, err, errlen) != 0)
        rc = NULL;
    if (rc == NULL)
        return -1;
    redisReply *r = redisCommand(rc, "CLUSTER SLOTS");
    int ret = r ? slot_map_read(r, m, err, errlen) : -1;
    if (r == NULL)
        snprintf(err, errlen, "redis %s:%d: CLUSTER SLOTS: %s", at->host, at->port, rc->errstr);
    freeReplyObject(r);
    if (i < cl->map.nnodes) {
        if (r == NULL)
            close_conn(cl, i);
    } else {
        redisFree(rc);
    }
    return ret;
}

static bool same_map(const struct slot_map *a, const struct slot_map *b)
{
    if (a->nnodes != b->nnodes || memcmp(a->owner, b->owner, sizeof(a->owner)) != 0)
        return false;
    for (int i = 0; i < a->nnodes; i++)
        if (a->node[i].port != b->node[i].port || strcmp(a->node[i].host, b->node[i].host) != 0)
            return false;
    return true;
}

/* Keep the connections of nodes the new map still names (moved to their new
 * index), close the others, install the map. The same map again (the
 * periodic refresh, mostly) changes nothing: no new epoch, whose users
 * would check every primary again for nothing. */
static void install(struct rcl *cl, const struct slot_map *m)
{
    if (same_map(&cl->map, m))
        return;
    redisContext *keep[SLOT_MAX_NODES] = { 0 };
    for (int i = 0; i < cl->map.nnodes; i++) {
        for (int j = 0; j < m->nnodes && cl->conn[i] != NULL; j++) {
            if (m->node[j].port == cl->map.node[i].port &&
                strcmp(m->node[j].host, cl->map.node[i].host) == 0) {
                keep[j] = cl->conn[i];
                cl->conn[i] = NULL;
            }
        }
        close_conn(cl, i);
    }
    cl->map = *m;
    memcpy(cl->conn, keep, sizeof(keep));
    cl->epoch++;
}

/* Every address worth asking, the map's nodes and the seeds, shuffled, so
 * that many clients do not all ask the same node first. */
static int candidates(const struct rcl *cl, struct slot_node *out, int max)
{
    int n = 0;
    for (int i = 0; i < cl->map.nnodes && n < max; i++)
        out[n++] = cl->map.node[i];
    for (int i = 0; i < cl->nseeds && n < max; i++) {
        int dup = 0;
        for (int j = 0; j < n && !dup; j++)
            dup = out[j].port == cl->seed[i].port && strcmp(out[j].host, cl->seed[i].host) == 0;
        if (!dup)
            out[n++] = cl->seed[i];
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)util_rand_below((uint64_t)i + 1);
        struct slot_node t = out[i];
        out[i] = out[j], out[j] = t;
    }
    return n;
}

int rcl_refresh(struct rcl *cl, char *err, size_t errlen)
{
    /* (on the heap: a map is 66 KB, and this runs on threads with small stacks) */
    struct slot_node *list = malloc(sizeof(*list) * (SLOT_MAX_NODES + RCL_MAX_SEEDS));
    struct slot_map *fresh = malloc(sizeof(*fresh)), *best = malloc(sizeof(*best));
    unsigned best_holes = SLOT_COUNT + 1;
    int ret = -1;
    if (list == NULL || fresh == NULL || best == NULL) {
        snprintf(err, errlen, "redis cluster: out of memory");
        goto out;
    }
    int n = candidates(cl, list, SLOT_MAX_NODES + RCL_MAX_SEEDS);
    cl->stats.refreshes++;
    cl->refreshed_ms = util_mono_ms();
    /* A node that answers with holes (it lost sight of a primary) is worth
     * less than one that sees every slot: the first whole answer wins, else
     * the one with the fewest holes. Each node is asked once. */
    for (int k = 0; k < n && best_holes != 0; k++) {
        unsigned holes;
        if (ask_slots(cl, &list[k], fresh, err, errlen) == 0 && fresh->nnodes > 0 &&
            (holes = slot_map_holes(fresh)) < best_holes) {
            struct slot_map *t = best;
            best = fresh, fresh = t;
            best_holes = holes;
        }
    }
    if (best_holes <= SLOT_COUNT) {
        install(cl, best);
        cl->refresh_due = cl->unreachable = false;
        ret = 0;
    }
out:
    free(list);
    free(fresh);
    free(best);
    return ret;
}

/* --- a batch ------------------------------------------------------------ */

#define DONE (-2)    /* cmd->node of a command with its final status */
#define NOWHERE (-1) /* cmd->node of one whose slot no node serves (yet) */

/* A node refuses these before it runs anything, while the Cluster is between
 * two states (a slot half-migrated, a failover, a node loading its data):
 * the same command may be sent again. */
static bool is_transient(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "TRYAGAIN", 8) == 0 || strncmp(r->str, "CLUSTERDOWN", 11) == 0 ||
            strncmp(r->str, "LOADING", 7) == 0);
}

static bool is_readonly(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

static int route(const struct rcl *cl, const struct rcl_cmd *c)
{
    if (c->key != NULL)
        return cl->map.owner[slot_of(c->key, c->keylen)];
    for (int i = 0; i < cl->map.nnodes; i++) /* no key: any node, an open one first */
        if (cl->conn[i] != NULL)
            return i;
    return cl->map.nnodes > 0 ? 0 : NOWHERE;
}

static void finish(struct rcl_cmd *c, enum rcl_status st, redisReply *r)
{
    if (c->reply != NULL && c->reply != r)
        freeReplyObject(c->reply);
    c->status = st;
    c->reply = r;
    c->node = DONE;
}

/* A redirection or a refusal to try again: the command stays pending, its
 * node (and ASKING) set for the next round. Anything else is its answer. */
static void take_reply(struct rcl *cl, struct rcl_cmd *c, redisReply *r, bool follow, bool *backoff)
{
    char host[SLOT_HOST_MAX];
    unsigned slot;
    int port, i;
    enum slot_redirect kind = follow ? slot_redirect_of(r, &slot, host, sizeof(host), &port)
                                     : SLOT_NO_REDIRECT;
    if (kind == SLOT_MOVED && slot_map_set(&cl->map, slot, host, port) == 0) {
        cl->stats.moved++;
        c->node = cl->map.owner[slot], c->asking = 0;
        /* one slot moved; others may have with it: read the whole map again
         * before a later batch (run() throttles it) */
        cl->refresh_due = true;
        freeReplyObject(r);
    } else if (kind == SLOT_ASK && (i = slot_map_node(&cl->map, host, port)) >= 0) {
        cl->stats.ask++;
        c->node = i, c->asking = 1;
        freeReplyObject(r);
    } else if (follow && (is_transient(r) || is_readonly(r))) {
        cl->stats.retried++;
        *backoff = true;
        if (is_readonly(r))
            cl->unreachable = true; /* a demoted primary: who serves its slots now? */
        if (c->reply != NULL)
            freeReplyObject(c->reply);
        c->reply = r; /* the answer, if no later round does better */
    } else {
        finish(c, RCL_OK, r);
    }
}

/* The first half of a round trip to node i: every pending command for it,
 * pipelined and written out. The number sent (0: none for it, or it could
 * not be reached: those stay pending). Every node is written to before any
 * is read from, so a batch over three shards costs one round trip's wait,
 * not three in a row. A write that fails leaves the context in error: the
 * read then finds every reply of the node lost (they may have gone out). */
static int node_send(struct rcl *cl, int i, struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    int k0 = 0, sent = 0, done = 0;
    while (k0 < n && cmds[k0].node != i)
        k0++;
    if (k0 == n)
        return 0; /* nothing for this node: no connection opened for nothing */
    redisContext *rc = conn_of(cl, i, err, errlen);
    if (rc == NULL)
        return 0;
    for (int k = k0; k < n; k++) {
        struct rcl_cmd *c = &cmds[k];
        if (c->node != i)
            continue;
        if (c->asking)
            redisAppendCommand(rc, "ASKING");
        if (c->fmt != NULL)
            redisAppendFormattedCommand(rc, c->fmt, c->fmtlen);
        else
            redisAppendCommandArgv(rc, c->argc, c->argv, c->argvlen);
        c->served = i, c->served_epoch = cl->epoch, c->inflight = 1, c->sends++;
        sent++;
    }
    while (!done && redisBufferWrite(rc, &done) == REDIS_OK)
        ;
    return sent;
}

/* The second half: the replies of the commands sent to node i in this
 * round, read back in order (by inflight and served, not by node: a
 * command another node redirected here meanwhile was not sent here yet). A
 * lost reply loses the ones after it. */
static void node_read(struct rcl *cl, int i, int sent, struct rcl_cmd *cmds, int n, bool follow,
                      bool *backoff, char *err, size_t errlen)
{
    redisContext *rc = cl->conn[i];
    bool lost = false;
    for (int k = 0; k < n && sent > 0; k++) {
        struct rcl_cmd *c = &cmds[k];
        if (!c->inflight || c->served != i)
            continue;
        c->inflight = 0;
        sent--;
        redisReply *r = NULL;
        if (!lost && c->asking && redisGetReply(rc, (void **)&r) == REDIS_OK)
            freeReplyObject(r), r = NULL;
        if (lost || redisGetReply(rc, (void **)&r) != REDIS_OK || r == NULL) {
            if (!lost)
                snprintf(err, errlen, "redis %s:%d: %s", cl->map.node[i].host, cl->map.node[i].port,
                         rc->errstr);
            lost = true;
            cl->stats.lost++;
            finish(c, RCL_UNKNOWN, NULL);
            continue;
        }
        take_reply(cl, c, r, follow, backoff);
    }
    if (lost) { /* never reused with replies unread */
        close_conn(cl, i);
        cl->unreachable = true;
    }
}

static bool any_pending(const struct rcl_cmd *cmds, int n)
{
    for (int k = 0; k < n; k++)
        if (cmds[k].node != DONE)
            return true;
    return false;
}

/* After a refresh the node indices are the new map's: route again. */
static void reroute(struct rcl *cl, struct rcl_cmd *cmds, int n)
{
    for (int k = 0; k < n; k++)
        if (cmds[k].node != DONE)
            cmds[k].node = route(cl, &cmds[k]), cmds[k].asking = 0;
}

/* Everything still pending after the last round: its last refusal, or
 * NOT_SENT. 0, or -1 with err when any command is not RCL_OK. */
static int settle(struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    int ret = 0;
    for (int k = 0; k < n; k++) {
        struct rcl_cmd *c = &cmds[k];
        if (c->node != DONE) {
            if (c->reply == NULL && ret == 0 && (err[0] == '\0' || c->node == NOWHERE))
                snprintf(err, errlen, "redis cluster: %s",
                         c->node == NOWHERE ? "no primary serves the slot" : "no node could be reached");
            finish(c, c->reply ? RCL_OK : RCL_NOT_SENT, c->reply);
        }
        if (c->status != RCL_OK)
            ret = -1;
    }
    return ret;
}

#define FOLLOW (-1) /* run()'s fixed: each command to its key's primary, redirections followed */
#define EACH (-2)   /* run()'s fixed: each command to its own cmd->on, as it is */

static int run(struct rcl *cl, struct rcl_cmd *cmds, int n, int fixed, char *err, size_t errlen)
{
    bool follow = fixed == FOLLOW;
    err[0] = '\0';
    int64_t since = util_mono_ms() - cl->refreshed_ms;
    if (follow &&
        (cl->unreachable || (cl->refresh_due && since >= RCL_REFRESH_MIN_MS) || since >= RCL_REFRESH_MAX_MS))
        (void)rcl_refresh(cl, err, errlen); /* (a failed one keeps the old map: it may still do) */
    for (int k = 0; k < n; k++) {
        cmds[k].status = RCL_NOT_SENT, cmds[k].reply = NULL, cmds[k].asking = 0, cmds[k].served = -1;
        cmds[k].inflight = cmds[k].sends = 0;
        cmds[k].node = follow ? route(cl, &cmds[k]) : fixed == EACH ? cmds[k].on : fixed;
    }
    for (int round = 0; round < RCL_ROUNDS && any_pending(cmds, n); round++) {
        bool backoff = false;
        int sent[SLOT_MAX_NODES], nodes = cl->map.nnodes; /* (a MOVED may add a node while reading) */
        cl->stats.rounds++;
        for (int i = 0; i < nodes; i++)
            sent[i] = node_send(cl, i, cmds, n, err, errlen);
        for (int i = 0; i < nodes; i++)
            if (sent[i] > 0)
                node_read(cl, i, sent[i], cmds, n, follow, &backoff, err, errlen);
        if (!follow || !any_pending(cmds, n))
            break;
        for (int k = 0; k < n; k++)
            if (cmds[k].node == NOWHERE)
                cl->unreachable = true; /* a slot without a primary: a failover may have named one */
        if (backoff || cl->unreachable)
            util_sleep_ms(util_backoff_ms(round, 10, 200));
        if (cl->unreachable && rcl_refresh(cl, err, errlen) == 0)
            reroute(cl, cmds, n);
    }
    return settle(cmds, n, err, errlen);
}

int rcl_run(struct rcl *cl, struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    return run(cl, cmds, n, FOLLOW, err, errlen);
}

/* Every command not sent: the caller named a node the map does not have. */
static int no_node(struct rcl *cl, int node, struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    snprintf(err, errlen, "redis cluster: no node %d (the map has %d)", node, cl->map.nnodes);
    for (int k = 0; k < n; k++)
        cmds[k].status = RCL_NOT_SENT, cmds[k].reply = NULL, cmds[k].node = DONE, cmds[k].served = -1,
        cmds[k].sends = 0;
    return -1;
}

int rcl_run_on(struct rcl *cl, int node, struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    if (node < 0 || node >= cl->map.nnodes)
        return no_node(cl, node, cmds, n, err, errlen);
    return run(cl, cmds, n, node, err, errlen);
}

int rcl_run_each(struct rcl *cl, struct rcl_cmd *cmds, int n, char *err, size_t errlen)
{
    for (int k = 0; k < n; k++)
        if (cmds[k].on < 0 || cmds[k].on >= cl->map.nnodes)
            return no_node(cl, cmds[k].on, cmds, n, err, errlen);
    return run(cl, cmds, n, EACH, err, errlen);
}

/* --- open, close, what it knows ------------------------------------------ */

int rcl_open(const struct cfg *c, const char *const *seeds, int nseeds, const char *user,
             struct secret *password, struct rcl **out, char *err, size_t errlen)
{
    struct rcl *cl = calloc(1, sizeof(*cl));
    if (cl == NULL || (user && !(cl->user = strdup(user))) ||
        (password && !(cl->password = secret_dup(password)))) {
        snprintf(err, errlen, "redis cluster: out of memory");
        goto fail;
    }
    if (nseeds < 1 || nseeds > RCL_MAX_SEEDS) {
        snprintf(err, errlen, "redis cluster: %d seeds (1 to %d)", nseeds, RCL_MAX_SEEDS);
        goto fail;
    }
    for (int i = 0; i < nseeds; i++) {
        if (parse_seed(seeds[i], &cl->seed[i]) != 0) {
            snprintf(err, errlen, "redis cluster: seed \"%.64s\" is not host:port", seeds[i]);
            goto fail;
        }
    }
    cl->cfg = c;
    cl->nseeds = nseeds;
    slot_map_clear(&cl->map);
    if (rcl_refresh(cl, err, errlen) != 0)
        goto fail;
    *out = cl;
    return 0;
fail:
    rcl_close(cl);
    return -1;
}

void rcl_close(struct rcl *cl)
{
    if (cl == NULL)
        return;
    for (int i = 0; i < SLOT_MAX_NODES; i++)
        close_conn(cl, i);
    free(cl->user);
    secret_free(cl->password);
    free(cl);
}

redisContext *rcl_conn(struct rcl *cl, int node, char *err, size_t errlen)
{
    if (node < 0 || node >= cl->map.nnodes) {
        snprintf(err, errlen, "redis cluster: no node %d (the map has %d)", node, cl->map.nnodes);
        return NULL;
    }
    return conn_of(cl, node, err, errlen);
}

int rcl_primaries(const struct rcl *cl) { return cl->map.nnodes; }
const struct slot_node *rcl_primary(const struct rcl *cl, int node)
{
    return node >= 0 && node < cl->map.nnodes ? &cl->map.node[node] : NULL;
}
int rcl_node_of_slot(const struct rcl *cl, unsigned slot)
{
    return slot < SLOT_COUNT ? cl->map.owner[slot] : -1;
}
const struct rcl_stats *rcl_stats(const struct rcl *cl) { return &cl->stats; }
unsigned long rcl_epoch(const struct rcl *cl) { return cl->epoch; }
