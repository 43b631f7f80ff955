/* keys: the Redis key names, in one place.
 *
 * Every key of an item carries the hash tag {item:ID} and every key of a
 * lock the tag of its group {lk:G}, so a script touching them runs on one
 * Redis Cluster slot: one item's keys, or any number of locks of one group. */
#ifndef SECKILL_KEYS_H
#define SECKILL_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEYS_MAX 256

enum keys_item_part {
    KEYS_ITEM_STOCK,   /* string: units left to reserve */
    KEYS_ITEM_BUYERS,  /* set: user ids that hold a unit */
    KEYS_ITEM_PENDING, /* hash: order id -> order message, until persisted */
    KEYS_ITEM_UNPUB,   /* zset: order id -> reserved_at_ms, until Kafka acknowledged it
                        * (or the sweeper claimed it: then the score is the claim time) */
    KEYS_ITEM_WINDOW,  /* hash: starts_ms, ends_ms (each optional): the sale window;
                        * KEYS_WINDOW_PAY when its orders wait for a payment */
    KEYS_ITEM_ORDERS,  /* hash: what became of each order, for the buyers' status
                        * calls: "o:ORDER" -> its state (the value and its letters:
                        * ostate.h), "u:USER" -> ORDER; "given_back" -> units
                        * given back (producer/soldout.h) */
    /* Beyond KEYS_ITEM_PARTS, the keys every reservation passes (the
     * producer's ACL user knows none of these): */
    KEYS_ITEM_RETURNED, /* set: ids of expired or cancelled orders whose unit went back
                         * to stock (seckill_return: each once) */
    KEYS_ITEM_CHANGES,  /* hash: change id -> units, the live stock changes applied
                         * (seckill_stock_change: each once; ctl/stockchg.h) */
    KEYS_ITEM_XOUT,     /* hash: transfer id -> "SALT:UNITS", the units this slot's
                         * stock gave to another of the item's slots (xfer.h) */
    KEYS_ITEM_XIN,      /* hash: transfer id -> units, the transfers this slot's
                         * stock received (xfer.h): each once */
};
#define KEYS_ITEM_PARTS 6

/* The window hash's field that holds the item's payment window (s), set by
 * seckillctl (item create, item load, reconcile) for an item created with
 * --pay-within: what tells the producer that a persisted order of the item
 * is not final before PostgreSQL says so (producer/cancel.h). Absent: none
 * (or an item loaded before the field existed). */
#define KEYS_WINDOW_PAY "pay_within_s"

/* <prefix>:{item:ID}:stock|buyers|pending|unpub|window|orders|returned|changes|xout|xin. Returns the
 * length, or -1 if it does not fit. */
int keys_item(char *buf, size_t len, const char *prefix, int64_t item_id, enum keys_item_part part);

/* The same key of one of the item's buckets (bucket.h): <prefix>:{item:ID:S}:part
 * for salt S >= 0; salt BUCKET_HOME (-1) is the item's own, keys_item's. */
int keys_item_at(char *buf, size_t len, const char *prefix, int64_t item_id, int salt,
                 enum keys_item_part part);

/* The item's first KEYS_ITEM_PARTS keys, indexed by enum keys_item_part. 0 or -1. */
int keys_item_all(char k[KEYS_ITEM_PARTS][KEYS_MAX], const char *prefix, int64_t item_id);
/* The same for one of its buckets (salt S, or BUCKET_HOME: keys_item_all). */
int keys_item_all_at(char k[KEYS_ITEM_PARTS][KEYS_MAX], const char *prefix, int64_t item_id, int salt);

/* The window hash's field that names an item's buckets (issue #57,
 * common/sale/bucket.h): their salts, "S0,S1,...", in the item's own window
 * hash only (absent: no buckets). seckillctl writes it from the database
 * (item create --buckets, item load), and gives each bucket its own copy of
 * the rest of the window: a buy in a bucket reads its bucket's. */
#define KEYS_WINDOW_BUCKETS "buckets"

/* An item's waiting room (issue #58, producer/wroom.h), under the item's
 * hash tag like the sale's keys; what each holds is in the producer's
 * functions (producer/lua/seckill_producer.lua). */
enum keys_queue_part {
    KEYS_QUEUE_META, /* hash: the seed, the serving boundary, counters, the lease, the rate */
    KEYS_QUEUE_PRE,  /* set: who joined before the opening (equal places) */
    KEYS_QUEUE_LINE, /* zset: user -> place (the shuffled pre-queue, then later joiners) */
    KEYS_QUEUE_SEEN, /* hash: user -> "last_ask_ms:eta_at_ms" (abandonment, ETA error) */
    KEYS_QUEUE_ADM,  /* zset: user -> end of their admission, ms (outstanding) */
    KEYS_QUEUE_USED, /* zset: "user:nonce" -> end of that admission (spent) */
};
#define KEYS_QUEUE_PARTS 6

/* The line's places (KEYS_QUEUE_LINE's scores): the opening gives each
 * member of the pre-queue one below this (the first 13 hex digits of
 * SHA-1(seed ':' user), below 2^52); a later joiner gets this plus their
 * number of arrival, behind all of them (seckill_queue's LATE). */
#define KEYS_QUEUE_LATE 4503599627370496LL

/* The window hash's field that marks an item with a waiting room: when the
 * queue opens (ms), written by seckillctl (item create --queue-opens-at,
 * item load, reconcile --fix). seckill_reserve refuses such an item's buys
 * (an admission is required). */
#define KEYS_WINDOW_QUEUE "queue_opens_ms"

/* The window hash's field that pauses an item's sale: "1" while paused
 * (seckillctl item pause; absent after item resume), restored from the
 * database by item load and reconcile --fix. seckill_reserve answers a
 * paused sale's buyers 503 paused, and nobody is admitted from its waiting
 * room meanwhile. */
#define KEYS_WINDOW_PAUSED "paused"

/* <prefix>:{item:ID}:queue, :queue:pre, :queue:line, :queue:seen,
 * :queue:adm, :queue:used. The length, or -1 if it does not fit. */
int keys_queue(char *buf, size_t len, const char *prefix, int64_t item_id, enum keys_queue_part part);
/* All of them, indexed by enum keys_queue_part. 0 or -1. */
int keys_queue_all(char k[KEYS_QUEUE_PARTS][KEYS_MAX], const char *prefix, int64_t item_id);

/* <prefix>:items: the set of item ids with a sale loaded, for the sweeper
 * and the operator tools (never used inside a script). */
int keys_items(char *buf, size_t len, const char *prefix);

/* <prefix>:order:ix:{B}: the order index's hash that holds order_id
 * (common/sale/orderidx.h says what is in it). Returns the length, or -1. */
int keys_order_bucket(char *buf, size_t len, const char *prefix, int64_t order_id);
/* <prefix>:order:{ORDER}: the index's key per order ("ITEM:USER") before
 * the buckets, still read by status calls (orderidx.h). */
int keys_order_legacy(char *buf, size_t len, const char *prefix, int64_t order_id);

/* Locks come in KEYS_LOCK_GROUPS groups, by a stable hash of the name, so
 * that a batch of locks costs one script call per group rather than one per
 * lock, while each call still touches one slot (a Redis Cluster would spread
 * the groups over its nodes). More groups spread a cluster wider but cost a
 * batch more calls; 16 keeps a batch of 100 users at about 16 calls. Changing
 * the number or the hash moves every lock to another key: consumers must
 * then be upgraded stop-then-start (docs/design.md). */
#define KEYS_LOCK_GROUPS 16

/* The group of a lock name, 0 .. KEYS_LOCK_GROUPS-1. */
unsigned keys_lock_group(const char *name);

/* <prefix>:lock:{lk:G}, G the group of NAME: the hash that holds the group's
 * locks, one field per lock named after it, and the group's last fence
 * (seckill_lock_acquire). */
int keys_lock(char *buf, size_t len, const char *prefix, const char *name);

/* The name of a user's lock, "user:ID": the lock a consumer holds while it
 * writes that user's orders, cancels and payments (consumer/ulocks.h), so
 * that all three keep one order. keys_lock gives its key. Room for any id:
 * KEYS_USER_LOCK_MAX bytes. Returns the length, or -1 if it does not fit. */
#define KEYS_USER_LOCK_MAX 32
int keys_user_lock(char *buf, size_t len, int64_t user_id);

#endif
