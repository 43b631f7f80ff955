/* rpipe: the one path of every Redis round trip of every program (issue #31).
 *
 * A caller fills a batch with commands, each with the key that routes it
 * (rp_add, rp_addf, rp_fcall), and runs it (rp_run). The batch goes out in
 * one pipelined round trip per node, and each command gets, in the caller's
 * order, a status and its reply:
 * - RP_OK: the reply is the server's answer, an error reply included;
 * - RP_UNKNOWN: it was sent and its reply was lost (timeout, connection
 *   closed): it may have run. It is never sent again: a retried write that
 *   had run would run twice;
 * - RP_NOT_SENT: it did not run (no connection, no node serves its slot).
 *
 * What each caller used to handle, or forget, is handled here once:
 * - Where a command goes. Without redis.cluster_nodes, one connection: to
 *   redis.host, or to the primary the Sentinels name, checked with ROLE
 *   (rconn.h). With it, a Redis Cluster: per slot, following MOVED and ASK,
 *   retrying TRYAGAIN, CLUSTERDOWN and LOADING (rcluster.h).
 * - Connections. A broken connection, or one opened before the primary moved
 *   (a Sentinel switch, a READONLY seen anywhere), is closed and opened again
 *   at the next run, no sooner than a backoff after a failed attempt, so a
 *   dead Redis is not hammered; a connection with unread replies is never
 *   reused.
 * - READONLY: the server was demoted. The command did not run; on one node
 *   its answer is the error (the next run reconnects to the new primary); on
 *   a Cluster the map is read again and the command sent to the slot's new
 *   primary.
 * - What a reply says, as far as every caller handles it alike
 *   (rp_classify): READONLY, and "ERR Function not found", Redis's answer
 *   to an FCALL of a function it does not hold. Both are counted per batch
 *   (the batch's readonly and missing), the latter for the caller to say
 *   once which function and how to load it (the daemons may not load code;
 *   rpipe knows no library, only the replies).
 * - Durability (rp_durable), the one rule for every writer: a batch that
 *   writes what a failover must not lose is marked durable, and after its
 *   commands every node it reached is asked (WAIT) for redis.min_replicas_ack
 *   replicas, up to redis.wait_timeout_ms, in the same round trip (on a
 *   Cluster, behind each primary's own commands; a command sent again after a
 *   redirection is asked after, in one more); the batch's acked is the smallest
 *   count, and rp_replicas_short says whether it fell short. The setting is
 *   read here and nowhere else, at each run (a reload applies to the next
 *   batch); 0 adds nothing. What a writer does when the replicas fall short
 *   is its own (docs/design.md, "Durability of the Redis writes"); that it
 *   asks is not.
 * - Commands that must visit every primary (SCAN, INFO) go to one primary
 *   at a time: rp_nodes() and rp_run_on().
 *
 * What it needs: an ACL user that may run the commands, and on a Cluster
 * CLUSTER SLOTS and ASKING too. Every key of one command shares one slot
 * (the project's keys carry hash tags: keys.h).
 *
 * Threads: an rp and the batches run on it belong to one thread;
 * rp_classify keeps no state (any thread). */
#ifndef SECKILL_RPIPE_H
#define SECKILL_RPIPE_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"
#include "secret.h"

enum rp_status { RP_OK, RP_UNKNOWN, RP_NOT_SENT };

struct rp_cmd; /* private */

struct rp_batch {
    struct rp_cmd *cmd;
    int n, cap;
    bool durable;                      /* rp_durable */
    int wait_replicas, wait_timeout_ms; /* what the last run asked for (0: no WAIT) */
    /* after rp_run */
    int acked;    /* WAIT: the fewest replicas any node confirmed; -1: no WAIT answered */
    int missing;  /* replies RP_REPLY_NO_FUNCTION (rp_classify) */
    int readonly; /* replies RP_REPLY_READONLY */
};

/* A thread's Redis, connected at once (one node, or the Cluster's map read):
 * as the configuration's role (rp_open) or as any ACL user and password
 * (rp_open_user: tools and tests; password NULL: no AUTH). 0 and *out, or
 * -1 with err (Redis cannot be reached or refuses). */
struct rp;
int rp_open(const struct cfg *c, enum cfg_role role, struct rp **out, char *err, size_t errlen);
int rp_open_user(const struct cfg *c, const char *user, struct secret *password, struct rp **out, char *err,
                 size_t errlen);
void rp_close(struct rp *p);

/* 1 on a Redis Cluster. */
int rp_cluster(const struct rp *p);
/* 1 while the next run needs no new connection: one node's connection is
 * open and current, or a Cluster's map is known. */
int rp_connected(const struct rp *p);
/* Changes whenever a new connection (one node) or a new slot map (Cluster)
 * is taken: what was checked on the old ones (the functions) is due again. */
unsigned long rp_epoch(const struct rp *p);
/* The primaries: 1 without a Cluster. Their addresses, "host:port". */
int rp_nodes(const struct rp *p);
const char *rp_node_name(const struct rp *p, int node, char *buf, size_t len);
/* The primary that serves key now (0 without a Cluster), or -1 when none
 * does (the map has a hole there). */
int rp_node_of_key(const struct rp *p, const char *key, size_t keylen);
/* The same for a C string key, with the rp passed as void *: the shape of a
 * callback that asks which primary serves a key (bucket.h's bucket_node_fn). */
int rp_node_fn(void *p, const char *key);
/* The connection to primary node (opened if need be), for a caller whose
 * command needs the context itself (checking a node's function libraries);
 * still the rp's. NULL with err. */
redisContext *rp_node_conn(struct rp *p, int node, char *err, size_t errlen);

/* Batches: zero-initialised, or rp_batch_init. rp_batch_reset drops the
 * commands and replies and keeps the memory; rp_batch_free frees it all. */
void rp_batch_init(struct rp_batch *b);
void rp_batch_reset(struct rp_batch *b);
void rp_batch_free(struct rp_batch *b);

/* Add a command (argv binary-safe; argvlen NULL for C strings), routed by
 * key (NULL: any primary). The arguments are copied: the caller's buffers
 * may go. The command's index, or -1 (out of memory). */
int rp_add(struct rp_batch *b, const char *key, int argc, const char **argv, const size_t *argvlen);
/* The same with hiredis's format ("HGET %s %s", "%b"): each placeholder is
 * one argument, never text spliced into the command. */
int rp_addf(struct rp_batch *b, const char *key, const char *format, ...);
/* FCALL function (its name in Redis) with nkeys keys then nargs arguments;
 * the first key routes it (none: any primary). */
int rp_fcall(struct rp_batch *b, const char *function, int nkeys, int nargs, const char **argv,
             const size_t *argvlen);
/* The batch writes what a failover must not lose: rp_run WAITs after its
 * commands for the replicas the configuration asks (see the contract). */
void rp_durable(struct rp_batch *b);
/* The replicas a durable batch run on p now waits for (0: none). */
int rp_durability(const struct rp *p);
/* After rp_run: whether the batch was durable and fewer replicas than asked
 * confirmed its writes on some node, so a failover could lose them. Its
 * writes are then not done, whatever their answers said. */
bool rp_replicas_short(const struct rp_batch *b);

/* Run the batch (see the contract). 0 when every command is RP_OK (its
 * answer may be an error reply), else -1 with err saying the first reason.
 * A batch may be run once; reset it to reuse it. */
int rp_run(struct rp *p, struct rp_batch *b, char *err, size_t errlen);
/* The same, every command to primary node, whatever its key; no redirection
 * is followed (a node's own keys: SCAN, INFO). */
int rp_run_on(struct rp *p, int node, struct rp_batch *b, char *err, size_t errlen);

/* Command i's status and reply (NULL unless RP_OK); the reply is the batch's
 * until reset, or the caller's after rp_take. */
enum rp_status rp_status(const struct rp_batch *b, int i);
const redisReply *rp_reply(const struct rp_batch *b, int i);
redisReply *rp_take(struct rp_batch *b, int i);
/* Command i as it goes out: its text in the protocol (an array of bulk
 * strings, which hiredis's reader reads back as an array reply) into *len
 * bytes, and the key that routes it into *key when key is not NULL (NULL:
 * any primary). The batch's until reset. For tests that check what a
 * caller put in a batch, without a Redis. */
const char *rp_command(const struct rp_batch *b, int i, size_t *len, const char **key);

/* What a reply is, for the cases every caller treats alike. The transport
 * knows them because they are Redis's own words, whatever was called. */
enum rp_reply_kind {
    RP_REPLY_NONE,        /* r NULL: no reply */
    RP_REPLY_ANSWER,      /* not an error reply */
    RP_REPLY_ERROR,       /* an error reply none of the kinds below */
    RP_REPLY_READONLY,    /* "READONLY ...": the server is a replica now; the command did not run */
    RP_REPLY_NO_FUNCTION, /* "ERR Function not found": an FCALL of a function the server does not
                           * hold (never loaded, flushed, lost with the dataset); nothing ran */
    RP_REPLY_LOADING,     /* "LOADING ...": the server is reading its dataset back (just
                           * restarted); the command did not run, and will once it is read */
};
enum rp_reply_kind rp_classify(const redisReply *r);

/* One command in its own round trip: its reply (the caller frees), or NULL
 * with *st (RP_UNKNOWN or RP_NOT_SENT) and err. */
redisReply *rp_call(struct rp *p, const char *key, int argc, const char **argv, const size_t *argvlen,
                    enum rp_status *st, char *err, size_t errlen);
redisReply *rp_callf(struct rp *p, const char *key, enum rp_status *st, char *err, size_t errlen,
                     const char *format, ...);

/* What the runs did, for metrics and tests. */
struct rp_stats {
    unsigned long roundtrips, unknown, not_sent, reconnects, readonly, missing;
    unsigned long rounds; /* network rounds: one per run on one node; on a Cluster each
                           * redirection's and each WAIT round's too (rcl_stats) */
};
const struct rp_stats *rp_stats(const struct rp *p);

#endif
