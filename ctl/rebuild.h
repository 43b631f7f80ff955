/* rebuild: give items their Redis state back after Redis lost it (a restart
 * without persistence, a failover to an empty replica, a flush).
 *
 * The database is the truth for what is sold; the topic may still hold
 * orders on their way there. So the rebuild waits until nothing can still be
 * on its way: first for Kafka's delivery window, so that every order
 * reserved before the loss is in the topic or failed for good, then for the
 * consumer group to have consumed the topic up to its end. Only then does it
 * set stock = stock_left and buyers = the users holding orders, in one
 * script that refuses if any of the item's keys came back meanwhile. While
 * the keys are missing the producers answer 404 for the item, so no new
 * reservation can slip in between. */
#ifndef SECKILL_REBUILD_H
#define SECKILL_REBUILD_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

/* Rebuild items ids[0..n) (all items in the database when all). wait_ms
 * bounds the wait for the consumer group. 0 when every item asked for was
 * rebuilt (with all, items Redis still holds are skipped), 1 when refused. */
int rebuild_items(const struct cfg *c, const int64_t *ids, size_t n, int all, int64_t wait_ms);

#endif
