/* keys: the Redis key names, in one place.
 *
 * Every key of an item carries the hash tag {item:ID} and every key of a
 * lock the tag {NAME}, so a script touching them runs on one Redis Cluster
 * slot. */
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
    KEYS_ITEM_WINDOW,  /* hash: starts_ms, ends_ms (each optional): the sale window */
    KEYS_ITEM_ORDERS,  /* hash: what became of each order, for the buyers' status
                        * calls: "o:ORDER" -> state (see order_state.h), "u:USER" -> ORDER;
                        * "given_back" -> units given back (producer/soldout.h) */
};
#define KEYS_ITEM_PARTS 6

/* <prefix>:{item:ID}:stock|buyers|pending|unpub|window|orders. Returns the
 * length, or -1 if it does not fit. */
int keys_item(char *buf, size_t len, const char *prefix, int64_t item_id, enum keys_item_part part);

/* All of an item's keys, indexed by enum keys_item_part. 0 or -1. */
int keys_item_all(char k[KEYS_ITEM_PARTS][KEYS_MAX], const char *prefix, int64_t item_id);

/* <prefix>:items: the set of item ids with a sale loaded, for the sweeper
 * and the operator tools (never used inside a script). */
int keys_items(char *buf, size_t len, const char *prefix);

/* <prefix>:order:{ORDER}: "ITEM:USER", so a buyer who only has the order id
 * finds the item whose keys hold its state. */
int keys_order(char *buf, size_t len, const char *prefix, int64_t order_id);

/* <prefix>:lock:{NAME} and <prefix>:fence:{NAME}. */
int keys_lock(char *buf, size_t len, const char *prefix, const char *name);
int keys_fence(char *buf, size_t len, const char *prefix, const char *name);

#endif
