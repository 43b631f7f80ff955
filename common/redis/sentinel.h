/* sentinel: where the Redis primary is, as Redis Sentinel says, and a
 * watcher that hears when it moves.
 *
 * Contract. Redis Sentinel, not this code, decides which Redis is the
 * primary: it promotes a replica when the primary stops answering and
 * announces the switch on its +switch-master channel. sentinel_ask() asks
 * the configured Sentinels in turn for the address of redis.master_name and
 * returns the first answer; it never guesses. The caller still checks with
 * ROLE that the address really is a primary (a Sentinel may answer from
 * before a failover it has not seen yet). The watcher is one thread per
 * process, subscribed to one Sentinel at a time; on a switch, or when the
 * address it reads after (re)subscribing differs from the last one it knew,
 * it calls on_switch once. A switch it missed while every Sentinel was
 * unreachable is still caught: connections see an error or READONLY from
 * the old primary (rconn). */
#ifndef SECKILL_SENTINEL_H
#define SECKILL_SENTINEL_H

#include <stddef.h>

#include "cfg.h"

/* The primary's host and port. 0, or -1 with the reason of the last
 * Sentinel tried in err. */
int sentinel_ask(const struct cfg *c, char *host, size_t hostlen, int *port, char *err, size_t errlen);

/* Start the watcher when c names Sentinels (nothing to do otherwise).
 * on_switch(from, to) runs on the watcher's thread, "host:port" each (from
 * may be "" when unknown). 0, or -1 with err. */
int sentinel_watch_start(const struct cfg *c, void (*on_switch)(const char *from, const char *to), char *err,
                         size_t errlen);
/* Stop and join the watcher (no-op when none runs). */
void sentinel_watch_stop(void);

#endif
