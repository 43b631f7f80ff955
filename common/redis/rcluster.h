/* rcluster: one thread's connections to a Redis Cluster, and the routing of a
 * pipelined batch of commands over them (issue #31).
 *
 * What it promises:
 * - Each command goes to the primary that serves its key's slot (slot.h),
 *   from a map read with CLUSTER SLOTS from the seeds and the known nodes,
 *   asked in random order.
 * - A batch is split per node, each node's part pipelined in one round trip,
 *   and the replies come back in the caller's order.
 * - MOVED: the map takes that slot's new primary, the command is sent there
 *   again, and one refresh of the whole map is due (at most one per
 *   RCL_REFRESH_MIN_MS). ASK: ASKING and that command on the named node, once;
 *   the map is not changed. TRYAGAIN, CLUSTERDOWN, LOADING: sent again after a
 *   backoff with jitter. A command a node refused that way never ran, so it
 *   is safe to send again; after RCL_ROUNDS rounds the caller gets that last
 *   refusal as the node's answer. READONLY (the node was demoted, and no
 *   MOVED told us yet) is such a refusal too, and the map is read again.
 * - A command whose reply was lost (timeout, connection closed) is never
 *   sent again: its status is RCL_UNKNOWN, it may have run. A connection with
 *   unread replies is closed, never reused. A failed connection, or a node
 *   that refuses a connection, makes the map due for a refresh.
 * - The map is read again at least every RCL_REFRESH_MAX_MS, as a safety
 *   net for changes no reply revealed.
 *
 * What it needs: an ACL user that may run CLUSTER SLOTS (+cluster|slots) and
 * ASKING, with rights on the keys the caller sends; a command's key is the
 * one its node checks (a script's or function's first key: every key of a
 * call shares one slot).
 *
 * Threads: an rcl and everything it returns belong to one thread. */
#ifndef SECKILL_RCLUSTER_H
#define SECKILL_RCLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "cfg.h"
#include "secret.h"
#include "slot.h"

#define RCL_ROUNDS 8             /* sends of one command, redirections and refusals included */
#define RCL_REFRESH_MIN_MS 100   /* throttle of the refresh a MOVED asks for */
#define RCL_REFRESH_MAX_MS 10000 /* the safety net */
#define RCL_MAX_SEEDS 32

enum rcl_status {
    RCL_OK,       /* reply holds the node's answer (an error reply included) */
    RCL_UNKNOWN,  /* sent, and the reply was lost: it may have run */
    RCL_NOT_SENT, /* it reached no node (none serves its slot, or none
                   * could be reached): it did not run */
};

struct rcl_cmd {
    /* in: the key that routes it (NULL: any node), and the command */
    const char *key;
    size_t keylen;
    int argc;
    const char **argv;
    const size_t *argvlen;
    const char *fmt; /* or the command already in the protocol (fmtlen bytes): used when set */
    size_t fmtlen;
    int on; /* in, for rcl_run_each only: the primary it goes to */
    /* out: set by rcl_run; the caller frees reply (freeReplyObject) */
    enum rcl_status status;
    redisReply *reply;
    int served; /* the primary sent to last (an index of the map of rcl_epoch() served_epoch), or -1 */
    unsigned long served_epoch;
    int sends; /* how often it was sent: 1 when the first round's node answered it */
    /* private */
    int node;
    int asking;
    int inflight; /* sent in this round, its reply not read yet */
};

/* What the routing did, for metrics and tests. */
struct rcl_stats {
    unsigned long moved, ask, retried, refreshes, lost;
    unsigned long rounds; /* network rounds: every node written to, then every reply read */
};

struct rcl;

/* Read the slot map from the seeds ("host:port", tried in random order) as
 * the ACL user user with password (rconn_open_node). The configuration gives
 * the timeouts and must outlive the rcl. 0 and *out, or -1 with err (no seed
 * answered CLUSTER SLOTS). */
int rcl_open(const struct cfg *c, const char *const *seeds, int nseeds, const char *user,
             struct secret *password, struct rcl **out, char *err, size_t errlen);
void rcl_close(struct rcl *cl);

/* Send the n commands, each to its slot's primary, following redirections
 * as the contract says; every command gets a status, and a reply when
 * RCL_OK. 0, or -1 when some command is not RCL_OK (err says the first
 * reason). */
int rcl_run(struct rcl *cl, struct rcl_cmd *cmds, int n, char *err, size_t errlen);

/* The same, every command to the primary node (0 .. rcl_primaries()-1)
 * whatever its key: what must visit every primary (SCAN, INFO). No
 * redirection is followed: a node's answer is its own. */
int rcl_run_on(struct rcl *cl, int node, struct rcl_cmd *cmds, int n, char *err, size_t errlen);

/* The same, each command to its own primary cmds[k].on, all in one round
 * trip: what one command must ask of several primaries at once (WAIT after
 * a batch over several shards waits for the slowest, not for their sum). */
int rcl_run_each(struct rcl *cl, struct rcl_cmd *cmds, int n, char *err, size_t errlen);

/* Read the map again now (it may have changed: the nodes after it are
 * others). 0, or -1 with err, the old map kept. */
int rcl_refresh(struct rcl *cl, char *err, size_t errlen);

/* The connection to primary node, opened if it has none, for a command
 * that needs the context itself (FUNCTION LIST); still the rcl's. NULL with
 * err when it cannot be reached. */
redisContext *rcl_conn(struct rcl *cl, int node, char *err, size_t errlen);

/* The primaries of the current map, and one's address. */
int rcl_primaries(const struct rcl *cl);
const struct slot_node *rcl_primary(const struct rcl *cl, int node);
/* The primary that serves a slot now, or -1. */
int rcl_node_of_slot(const struct rcl *cl, unsigned slot);

const struct rcl_stats *rcl_stats(const struct rcl *cl);
/* Changes whenever a map unlike the current one is installed: a node index
 * (rcl_cmd.served) taken before it may name another node after it. */
unsigned long rcl_epoch(const struct rcl *cl);

#endif
