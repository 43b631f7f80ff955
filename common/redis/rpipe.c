/* rpipe: every Redis round trip, on one node or a Cluster (see rpipe.h). */
#include "rpipe.h"

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rcluster.h"
#include "rconn.h"
#include "slot.h"
#include "util.h"

#define RECONNECT_BASE_MS 50
#define RECONNECT_CAP_MS 1000

struct rp_cmd {
    char *fmt; /* the command in the protocol (hiredis formatted it) */
    size_t fmtlen;
    char *key; /* NULL: any primary */
    size_t keylen;
    enum rp_status status;
    redisReply *reply;
};

struct rp {
    const struct cfg *cfg;
    int role;              /* a cfg_role, or -1: user and password below */
    char *user;
    struct secret *password;
    redisContext *rc;      /* one node; NULL while closed */
    struct rcl *cl;        /* or a Cluster */
    int attempt;           /* failed connects in a row */
    int64_t next_try_ms;   /* no connect before (the backoff) */
    char why[256];         /* the last connect's failure, said again while backing off */
    unsigned long epoch;
    struct rp_stats stats;
};

/* --- connecting ---------------------------------------------------------- */

static int open_one(struct rp *p, char *err, size_t errlen)
{
    if (p->role >= 0)
        return rconn_open_as(p->cfg, (enum cfg_role)p->role, &p->rc, err, errlen);
    return rconn_open_user(p->cfg, p->user, p->password, &p->rc, err, errlen);
}

/* One node: a current connection, reopened when broken or stale (the
 * primary moved), no sooner than the backoff after a failed attempt. */
static int connect_one(struct rp *p, char *err, size_t errlen)
{
    if (p->rc != NULL && !rconn_broken(p->rc))
        return 0;
    if (p->rc != NULL)
        redisFree(p->rc);
    p->rc = NULL;
    int64_t now = util_mono_ms();
    if (now < p->next_try_ms) {
        snprintf(err, errlen, "%s", p->why);
        return -1;
    }
    if (open_one(p, err, errlen) != 0) {
        p->rc = NULL;
        p->next_try_ms = now + util_backoff_ms(p->attempt++, RECONNECT_BASE_MS, RECONNECT_CAP_MS);
        snprintf(p->why, sizeof(p->why), "%s", err);
        return -1;
    }
    p->attempt = 0;
    p->next_try_ms = 0;
    p->epoch++;
    p->stats.reconnects++;
    return 0;
}

static int open_cluster(struct rp *p, char *err, size_t errlen)
{
    const struct cfg_list *seeds = &p->cfg->redis.cluster_nodes;
    const char *user = p->role >= 0 ? p->cfg->redis.user[p->role] : p->user;
    struct secret *pw = p->role >= 0 ? p->cfg->redis.password[p->role] : p->password;
    return rcl_open(p->cfg, (const char *const *)seeds->v, (int)seeds->n, user, pw, &p->cl, err, errlen);
}

static int open_rp(const struct cfg *c, int role, const char *user, struct secret *password, struct rp **out,
                   char *err, size_t errlen)
{
    struct rp *p = calloc(1, sizeof(*p));
    if (p == NULL || (user && !(p->user = strdup(user))) ||
        (password && !(p->password = secret_dup(password)))) {
        snprintf(err, errlen, "redis: out of memory");
        goto fail;
    }
    p->cfg = c;
    p->role = role;
    if (c->redis.cluster_nodes.n > 0 ? open_cluster(p, err, errlen) : connect_one(p, err, errlen))
        goto fail;
    *out = p;
    return 0;
fail:
    rp_close(p);
    return -1;
}

int rp_open(const struct cfg *c, enum cfg_role role, struct rp **out, char *err, size_t errlen)
{
    return open_rp(c, (int)role, NULL, NULL, out, err, errlen);
}

int rp_open_user(const struct cfg *c, const char *user, struct secret *password, struct rp **out, char *err,
                 size_t errlen)
{
    return open_rp(c, -1, user ? user : "", password, out, err, errlen);
}

void rp_close(struct rp *p)
{
    if (p == NULL)
        return;
    if (p->rc != NULL)
        redisFree(p->rc);
    rcl_close(p->cl);
    free(p->user);
    secret_free(p->password);
    free(p);
}

int rp_cluster(const struct rp *p) { return p->cl != NULL; }

int rp_connected(const struct rp *p)
{
    return p->cl ? rcl_primaries(p->cl) > 0 : (p->rc != NULL && !rconn_broken(p->rc));
}

unsigned long rp_epoch(const struct rp *p) { return p->cl ? rcl_epoch(p->cl) : p->epoch; }

int rp_nodes(const struct rp *p) { return p->cl ? rcl_primaries(p->cl) : 1; }

const char *rp_node_name(const struct rp *p, int node, char *buf, size_t len)
{
    const struct slot_node *n = p->cl ? rcl_primary(p->cl, node) : NULL;
    if (n != NULL)
        snprintf(buf, len, "%s:%d", n->host, n->port);
    else if (p->cl == NULL && node == 0 && p->rc != NULL)
        snprintf(buf, len, "%s:%d", p->rc->tcp.host ? p->rc->tcp.host : "?", p->rc->tcp.port);
    else
        snprintf(buf, len, "%s", p->cl ? "?" : p->cfg->redis.host);
    return buf;
}

int rp_node_of_key(const struct rp *p, const char *key, size_t keylen)
{
    return p->cl ? rcl_node_of_slot(p->cl, slot_of(key, keylen)) : 0;
}

int rp_node_fn(void *p, const char *key)
{
    return rp_node_of_key(p, key, strlen(key));
}

redisContext *rp_node_conn(struct rp *p, int node, char *err, size_t errlen)
{
    if (p->cl != NULL)
        return rcl_conn(p->cl, node, err, errlen);
    if (node != 0) {
        snprintf(err, errlen, "redis: no node %d (one Redis)", node);
        return NULL;
    }
    return connect_one(p, err, errlen) == 0 ? p->rc : NULL;
}

const struct rp_stats *rp_stats(const struct rp *p) { return &p->stats; }

/* --- batches ------------------------------------------------------------- */

void rp_batch_init(struct rp_batch *b) { memset(b, 0, sizeof(*b)); }

void rp_batch_reset(struct rp_batch *b)
{
    for (int i = 0; i < b->n; i++) {
        redisFreeCommand(b->cmd[i].fmt);
        free(b->cmd[i].key);
        if (b->cmd[i].reply != NULL)
            freeReplyObject(b->cmd[i].reply);
    }
    b->n = 0;
    b->durable = false;
    b->wait_replicas = b->wait_timeout_ms = 0;
    b->acked = -1;
    b->missing = b->readonly = 0;
}

void rp_batch_free(struct rp_batch *b)
{
    rp_batch_reset(b);
    free(b->cmd);
    memset(b, 0, sizeof(*b));
}

/* Take a formatted command (len < 0: hiredis could not format it). */
static int push(struct rp_batch *b, const char *key, size_t keylen, char *fmt, long long len)
{
    if (len < 0)
        return -1;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        struct rp_cmd *v = realloc(b->cmd, sizeof(*v) * (size_t)cap);
        if (v == NULL)
            goto fail;
        b->cmd = v, b->cap = cap;
    }
    struct rp_cmd *c = &b->cmd[b->n];
    memset(c, 0, sizeof(*c));
    if (key != NULL) {
        if ((c->key = malloc(keylen + 1)) == NULL)
            goto fail;
        memcpy(c->key, key, keylen);
        c->key[keylen] = '\0';
        c->keylen = keylen;
    }
    c->fmt = fmt, c->fmtlen = (size_t)len;
    c->status = RP_NOT_SENT;
    return b->n++;
fail:
    redisFreeCommand(fmt);
    return -1;
}

int rp_add(struct rp_batch *b, const char *key, int argc, const char **argv, const size_t *argvlen)
{
    char *fmt = NULL;
    long long len = redisFormatCommandArgv(&fmt, argc, argv, argvlen);
    return push(b, key, key ? strlen(key) : 0, fmt, len);
}

int rp_addf(struct rp_batch *b, const char *key, const char *format, ...)
{
    char *fmt = NULL;
    va_list ap;
    va_start(ap, format);
    int len = redisvFormatCommand(&fmt, format, ap);
    va_end(ap);
    return push(b, key, key ? strlen(key) : 0, fmt, len);
}

int rp_fcall(struct rp_batch *b, const char *function, int nkeys, int nargs, const char **argv,
             const size_t *argvlen)
{
    int argc = 3 + nkeys + nargs;
    const char **av = malloc(sizeof(*av) * (size_t)argc);
    size_t *al = malloc(sizeof(*al) * (size_t)argc);
    char nk[16];
    int ret = -1;
    if (av == NULL || al == NULL)
        goto out;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    av[0] = "FCALL", av[1] = function, av[2] = nk;
    for (int i = 0; i < 3; i++)
        al[i] = strlen(av[i]);
    for (int i = 0; i < nkeys + nargs; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    char *fmt = NULL;
    long long len = redisFormatCommandArgv(&fmt, argc, av, al);
    ret = push(b, nkeys > 0 ? argv[0] : NULL, nkeys > 0 ? al[3] : 0, fmt, len);
out:
    free(av);
    free(al);
    return ret;
}

void rp_durable(struct rp_batch *b) { b->durable = true; }

int rp_durability(const struct rp *p) { return CFG_GET(p->cfg->redis.min_replicas_ack); }

bool rp_replicas_short(const struct rp_batch *b)
{
    return b->wait_replicas > 0 && b->acked < b->wait_replicas;
}

enum rp_status rp_status(const struct rp_batch *b, int i) { return b->cmd[i].status; }
const redisReply *rp_reply(const struct rp_batch *b, int i) { return b->cmd[i].reply; }

redisReply *rp_take(struct rp_batch *b, int i)
{
    redisReply *r = b->cmd[i].reply;
    b->cmd[i].reply = NULL;
    return r;
}

const char *rp_command(const struct rp_batch *b, int i, size_t *len, const char **key)
{
    if (key)
        *key = b->cmd[i].key;
    *len = b->cmd[i].fmtlen;
    return b->cmd[i].fmt;
}

/* --- running ------------------------------------------------------------- */

enum rp_reply_kind rp_classify(const redisReply *r)
{
    if (r == NULL)
        return RP_REPLY_NONE;
    if (r->type != REDIS_REPLY_ERROR)
        return RP_REPLY_ANSWER;
    if (strncmp(r->str, "READONLY", 8) == 0)
        return RP_REPLY_READONLY;
    if (strncmp(r->str, "LOADING", 7) == 0)
        return RP_REPLY_LOADING;
    /* Redis 7's words for an FCALL of an unknown name, whole: a script's
     * own error that merely starts alike is the script's answer. */
    if (strcmp(r->str, "ERR Function not found") == 0)
        return RP_REPLY_NO_FUNCTION;
    return RP_REPLY_ERROR;
}

/* What every answer is checked for, whichever node gave it. */
static void note_reply(struct rp *p, struct rp_batch *b, const redisReply *r)
{
    switch (rp_classify(r)) {
    case RP_REPLY_READONLY: b->readonly++, p->stats.readonly++; break;
    case RP_REPLY_NO_FUNCTION: b->missing++, p->stats.missing++; break;
    default: break;
    }
}

static void count(struct rp *p, const struct rp_batch *b)
{
    for (int k = 0; k < b->n; k++) {
        p->stats.unknown += b->cmd[k].status == RP_UNKNOWN;
        p->stats.not_sent += b->cmd[k].status == RP_NOT_SENT;
    }
}

/* WAIT's answer: the replicas that confirmed, or -1 when it is no count. */
static int wait_count(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= INT_MAX ? (int)r->integer
                                                                                           : -1;
}

/* One node: the commands then WAIT in one pipeline; a lost reply makes it
 * and every later one RP_UNKNOWN and closes the connection. */
static int run_single(struct rp *p, struct rp_batch *b, char *err, size_t errlen)
{
    if (connect_one(p, err, errlen) != 0)
        return -1;
    int sent = 0;
    while (sent < b->n &&
           redisAppendFormattedCommand(p->rc, b->cmd[sent].fmt, b->cmd[sent].fmtlen) == REDIS_OK)
        sent++;
    bool wait = b->wait_replicas > 0 && sent > 0 &&
                redisAppendCommand(p->rc, "WAIT %d %d", b->wait_replicas, b->wait_timeout_ms) == REDIS_OK;
    p->stats.roundtrips++, p->stats.rounds++;
    bool lost = false;
    for (int k = 0; k < sent; k++) {
        struct rp_cmd *c = &b->cmd[k];
        redisReply *r = NULL;
        if (lost || redisGetReply(p->rc, (void **)&r) != REDIS_OK || r == NULL) {
            if (!lost)
                snprintf(err, errlen, "redis: %s", p->rc->errstr[0] ? p->rc->errstr : "no reply");
            lost = true;
            c->status = RP_UNKNOWN;
            continue;
        }
        c->status = RP_OK, c->reply = r;
        note_reply(p, b, r);
    }
    if (wait && !lost) {
        redisReply *r = NULL;
        if (redisGetReply(p->rc, (void **)&r) != REDIS_OK) {
            snprintf(err, errlen, "redis: WAIT: %s", p->rc->errstr[0] ? p->rc->errstr : "no reply");
            lost = true;
        }
        b->acked = wait_count(r);
        freeReplyObject(r);
    }
    if (lost) { /* never reused with replies unread */
        redisFree(p->rc);
        p->rc = NULL;
    }
    if (sent < b->n && err[0] == '\0')
        snprintf(err, errlen, "redis: out of memory");
    return lost || sent < b->n ? -1 : 0;
}

/* A Cluster, when the WAITs did not ride behind the commands (tail_waits):
 * wait (the batch's WAIT, as run_cluster built it) on every primary the
 * batch's commands were served by, each on the connection that carried its
 * writes. A primary that cannot be asked, or confirms too few, spoils the
 * batch. Nothing is confirmed (-1) when a command's reply was lost (its
 * node's connection was closed), when a READONLY came back (every
 * connection reopens, rconn.h), or when a command was served under an
 * earlier slot map than now (its node index may name another node): a WAIT
 * on a connection that did not carry the writes would wait for none of them
 * and confirm them falsely. */
static void cluster_wait(struct rp *p, struct rp_batch *b, const struct rcl_cmd *cc, const char **wait)
{
    unsigned long epoch = rcl_epoch(p->cl);
    b->acked = -1;
    if (b->readonly > 0)
        return;
    for (int k = 0; k < b->n; k++)
        if (cc[k].status == RCL_UNKNOWN || (cc[k].status == RCL_OK && cc[k].served_epoch != epoch))
            return;
    char err[256];
    /* One WAIT per primary that holds some of the writes, all in one round
     * trip: the batch waits for its slowest shard's replicas, not for each
     * shard's in turn. */
    struct rcl_cmd w[SLOT_MAX_NODES];
    int nw = 0, acked = INT_MAX; /* the fewest; one node that did not confirm spoils the batch (-1) */
    for (int i = 0; i < rcl_primaries(p->cl) && nw < SLOT_MAX_NODES; i++) {
        bool holds = false;
        for (int k = 0; k < b->n && !holds; k++)
            holds = cc[k].status == RCL_OK && cc[k].served == i;
        if (holds)
            w[nw++] = (struct rcl_cmd){ .argc = 3, .argv = wait, .on = i };
    }
    if (nw > 0)
        (void)rcl_run_each(p->cl, w, nw, err, sizeof(err));
    for (int j = 0; j < nw; j++) {
        int n = w[j].status == RCL_OK ? wait_count(w[j].reply) : -1;
        freeReplyObject(w[j].reply);
        acked = n < acked ? n : acked;
    }
    b->acked = acked == INT_MAX ? -1 : acked;
}

/* A durable batch's WAITs in the commands' own round trip: one WAIT per
 * primary the current map sends some of them to, after them in the array.
 * Each WAIT carries the key of one command of its primary (WAIT itself
 * takes no key and no node redirects it: the key only routes it), so it
 * goes out in the first round on the connection that carries that
 * primary's commands, behind them. Their number; 0 when some command has
 * no key (it could go to any node: the WAITs then go after, cluster_wait). */
static int tail_waits(const struct rp *p, const struct rp_batch *b, struct rcl_cmd *cc, const char **argv)
{
    bool on[SLOT_MAX_NODES] = { false };
    int nw = 0;
    for (int k = 0; k < b->n; k++)
        if (cc[k].key == NULL)
            return 0;
    for (int k = 0; k < b->n; k++) {
        int i = rp_node_of_key(p, cc[k].key, cc[k].keylen);
        if (i < 0 || i >= SLOT_MAX_NODES || on[i])
            continue;
        on[i] = true;
        cc[b->n + nw++] =
            (struct rcl_cmd){ .key = cc[k].key, .keylen = cc[k].keylen, .argc = 3, .argv = argv };
    }
    return nw;
}

/* Did the WAITs that rode behind the commands (cc[b->n ..], nw of them)
 * cover every write? A command covered was answered in the first round by
 * the node a WAIT was answered by in that round and map: that WAIT ran after
 * it on its connection. The fewest replicas those WAITs confirmed (-1: one
 * confirmed none, or a command's or a WAIT's reply was lost, or READONLY
 * came back: cluster_wait's rules), or TAIL_SHORT when some command was
 * sent again (a redirection, a refusal to try again) and cluster_wait must
 * ask after it. */
#define TAIL_SHORT (-2)
static int tail_acked(const struct rp_batch *b, const struct rcl_cmd *cc, int nw)
{
    const struct rcl_cmd *w = cc + b->n;
    int acked = INT_MAX;
    if (b->readonly > 0)
        return -1;
    for (int j = 0; j < nw; j++)
        if (w[j].status == RCL_UNKNOWN)
            return -1; /* its connection closed: a WAIT on a new one would confirm nothing it carried */
    for (int k = 0; k < b->n; k++) {
        if (cc[k].status == RCL_UNKNOWN)
            return -1;
        if (cc[k].status != RCL_OK)
            continue; /* never ran: nothing to confirm */
        int j = 0;
        while (j < nw && !(w[j].status == RCL_OK && w[j].sends == 1 && cc[k].sends == 1 &&
                           w[j].served == cc[k].served && w[j].served_epoch == cc[k].served_epoch))
            j++;
        if (j == nw)
            return TAIL_SHORT;
        int n = wait_count(w[j].reply);
        acked = n < acked ? n : acked;
    }
    return acked == INT_MAX ? -1 : acked;
}

/* After a run with WAITs behind the commands: the batch's acked (asking
 * after the commands when they did not cover every write), the WAITs'
 * replies freed, and the run's result as the commands' alone. */
static int settle_tail(struct rp *p, struct rp_batch *b, struct rcl_cmd *cc, int nw, const char **wait,
                       int ret, char *err)
{
    b->acked = tail_acked(b, cc, nw);
    for (int j = 0; j < nw; j++)
        freeReplyObject(cc[b->n + j].reply);
    if (b->acked == TAIL_SHORT)
        cluster_wait(p, b, cc, wait);
    if (ret != 0) {
        ret = 0;
        for (int k = 0; k < b->n; k++)
            ret = cc[k].status == RCL_OK ? ret : -1;
        if (ret == 0)
            err[0] = '\0'; /* only a WAIT failed: the batch's acked says so */
    }
    return ret;
}

static int run_cluster(struct rp *p, struct rp_batch *b, int node, char *err, size_t errlen)
{
    struct rcl_cmd *cc = calloc((size_t)b->n + SLOT_MAX_NODES, sizeof(*cc));
    char ws[16], wt[16];
    const char *wait[] = { "WAIT", ws, wt }; /* WAIT replicas timeout_ms: the batch's, built once */
    if (cc == NULL) {
        snprintf(err, errlen, "redis cluster: out of memory");
        return -1;
    }
    for (int k = 0; k < b->n; k++) {
        cc[k].key = b->cmd[k].key, cc[k].keylen = b->cmd[k].keylen;
        cc[k].fmt = b->cmd[k].fmt, cc[k].fmtlen = b->cmd[k].fmtlen;
    }
    snprintf(ws, sizeof(ws), "%d", b->wait_replicas);
    snprintf(wt, sizeof(wt), "%d", b->wait_timeout_ms);
    int nw = node < 0 && b->wait_replicas > 0 ? tail_waits(p, b, cc, wait) : 0;
    unsigned long trips = rcl_stats(p->cl)->refreshes, rounds = rcl_stats(p->cl)->rounds;
    int ret = node < 0 ? rcl_run(p->cl, cc, b->n + nw, err, errlen)
                       : rcl_run_on(p->cl, node, cc, b->n, err, errlen);
    static const enum rp_status st[] = {
        [RCL_OK] = RP_OK, [RCL_UNKNOWN] = RP_UNKNOWN, [RCL_NOT_SENT] = RP_NOT_SENT
    };
    for (int k = 0; k < b->n; k++) {
        b->cmd[k].status = st[cc[k].status];
        b->cmd[k].reply = cc[k].reply;
        note_reply(p, b, cc[k].reply);
    }
    p->stats.roundtrips++;
    p->stats.reconnects += rcl_stats(p->cl)->refreshes - trips;
    if (nw > 0)
        ret = settle_tail(p, b, cc, nw, wait, ret, err);
    else if (b->wait_replicas > 0)
        cluster_wait(p, b, cc, wait);
    p->stats.rounds += rcl_stats(p->cl)->rounds - rounds;
    free(cc);
    return ret;
}

static int run(struct rp *p, struct rp_batch *b, int node, char *err, size_t errlen)
{
    err[0] = '\0';
    b->acked = -1;
    b->missing = b->readonly = 0;
    b->wait_replicas = b->wait_timeout_ms = 0;
    for (int k = 0; k < b->n; k++)
        b->cmd[k].status = RP_NOT_SENT;
    if (b->n == 0)
        return 0;
    /* The durability rule, read at each run (a reload applies to the next). */
    if (b->durable) {
        b->wait_replicas = rp_durability(p);
        b->wait_timeout_ms = CFG_GET(p->cfg->redis.wait_timeout_ms);
    }
    int ret;
    if (p->cl != NULL) {
        ret = run_cluster(p, b, node, err, errlen);
    } else if (node > 0) {
        snprintf(err, errlen, "redis: no node %d (one Redis)", node);
        ret = -1;
    } else {
        ret = run_single(p, b, err, errlen);
    }
    count(p, b);
    return ret;
}

int rp_run(struct rp *p, struct rp_batch *b, char *err, size_t errlen) { return run(p, b, -1, err, errlen); }

int rp_run_on(struct rp *p, int node, struct rp_batch *b, char *err, size_t errlen)
{
    return run(p, b, node, err, errlen);
}

static redisReply *call_one(struct rp *p, struct rp_batch *b, int i, enum rp_status *st, char *err,
                            size_t errlen)
{
    redisReply *r = NULL;
    if (i < 0) {
        snprintf(err, errlen, "redis: out of memory");
        *st = RP_NOT_SENT;
    } else {
        (void)rp_run(p, b, err, errlen);
        *st = rp_status(b, i);
        r = rp_take(b, i);
    }
    rp_batch_free(b);
    return r;
}

redisReply *rp_call(struct rp *p, const char *key, int argc, const char **argv, const size_t *argvlen,
                    enum rp_status *st, char *err, size_t errlen)
{
    struct rp_batch b;
    rp_batch_init(&b);
    return call_one(p, &b, rp_add(&b, key, argc, argv, argvlen), st, err, errlen);
}

redisReply *rp_callf(struct rp *p, const char *key, enum rp_status *st, char *err, size_t errlen,
                     const char *format, ...)
{
    struct rp_batch b;
    char *fmt = NULL;
    va_list ap;
    rp_batch_init(&b);
    va_start(ap, format);
    int len = redisvFormatCommand(&fmt, format, ap);
    va_end(ap);
    return call_one(p, &b, push(&b, key, key ? strlen(key) : 0, fmt, len), st, err, errlen);
}
