/* ctlrp: the Redis calls seckillctl's commands share, on the one path of
 * every round trip (rpipe.h): one Redis or a Redis Cluster alike. Every
 * failure is printed once, as "seckillctl: redis: why", where it happens:
 * a lost reply says the command may have run (it is never sent again), a
 * missing function says the command that loads it. */
#ifndef SECKILL_CTLRP_H
#define SECKILL_CTLRP_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "cfg.h"
#include "rfunc.h"
#include "rpipe.h"

/* Connect as seckillctl's own user (redis.admin_user). NULL after printing
 * why. */
struct rp *ctlrp_open(const struct cfg *c);

/* FCALL f (its first key routes it) in its own round trip; the reply when
 * its type is type, else NULL after printing why. The caller frees it.
 * With durable (a write a failover must not lose: rpipe.h), a call fewer
 * replicas hold than redis.min_replicas_ack asks is a failure too, said as
 * such: the operator runs the command again once the replicas are back
 * (every function seckillctl writes with is safe to run again). */
redisReply *ctlrp_fcall(struct rp *p, const struct rfunc *f, bool durable, int nkeys, int nargs,
                        const char **argv, int type);

/* An item's payment window of pay_within_s seconds into its window hash
 * (window_key; the field KEYS_WINDOW_PAY, keys.h); nothing for 0. Called
 * after each function that writes the window hash anew (item create, item
 * load, reconcile's window fix), durable as ctlrp_fcall's writes. 0, or -1
 * after printing why. */
int ctlrp_pay_window(struct rp *p, const char *window_key, int64_t pay_within_s);

/* An item's waiting room (issue #58) in Redis: its opening (opens_ms; 0:
 * none) into the window hash's KEYS_WINDOW_QUEUE (keys.h), after each
 * function that writes the hash anew (item create, item load); with
 * reset, the room's keys of an earlier sale of the item deleted first (item
 * create: a new sale, a new queue). Durable as ctlrp_fcall's writes. 0, or
 * -1 after printing why. */
int ctlrp_queue_window(struct rp *p, const struct cfg *c, int64_t item_id, int64_t opens_ms, bool reset);

/* An item's sale paused (or not) in Redis: the window hash's
 * KEYS_WINDOW_PAUSED (keys.h) set, or removed, after the database says so
 * (item pause and resume, item load). Durable as ctlrp_fcall's writes. 0,
 * or -1 after printing why. (reconcile --fix writes the whole hash in one
 * call: seckill_recon_window2.) */
int ctlrp_pause_window(struct rp *p, const char *window_key, bool paused);

/* Run b on p; 0 when every command has a reply that is no error reply,
 * else -1 after saying why, once (what: what the batch does, as "reading
 * the item's window"). */
int ctlrp_run_all(struct rp *p, struct rp_batch *b, const char *what);

/* Run b on p durable (rp_durable); 0 when every command has a reply that is
 * no error and enough replicas hold them, else -1 after saying why, once
 * (what: the change, as "setting the item's waiting room"). */
int ctlrp_run_durable(struct rp *p, struct rp_batch *b, const char *what);

/* Say that a durable batch (rp_durable) ran but fewer replicas than
 * redis.min_replicas_ack confirmed it: what, the change ("setting the
 * item's waiting room"), may be lost to a failover; run it again. */
void ctlrp_say_short(const struct rp_batch *b, const char *what);

/* Why command i of a run batch has no usable answer ("" when it has one
 * that is no error reply), for a message. Returns buf. */
const char *ctlrp_why(const struct rp_batch *b, int i, const char *runerr, char *buf, size_t len);

#endif
