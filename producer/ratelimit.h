/* ratelimit: the producer's front door, so that no client can lean on it.
 *
 *  - a cap on the connections one client address holds at once
 *    (producer.max_connections_per_address): the extra connection is closed
 *    as it is accepted, before a byte of it is read;
 *  - a request rate per client address (producer.address_rate_per_s,
 *    producer.address_burst) and per buyer (producer.buyer_rate_per_s,
 *    producer.buyer_burst), each a GCRA (generic cell rate algorithm): one
 *    timestamp per key, its theoretical arrival time. A key may send burst
 *    requests at once, then one per 1/rate s; a request over it is refused
 *    with the time until the next one would pass, never queued. No Redis
 *    round trip: each producer limits what reaches it (docs/operations.md
 *    says how the limits add up behind a load balancer).
 *
 * The client address is the TCP peer's, unless the peer is one of
 * producer.trusted_proxies and producer.client_address_header is set: then
 * it is read from that header, right to left, skipping the trusted proxies'
 * own addresses (each proxy appends the address it saw); a header from any
 * other peer is ignored, since anyone can write one. IPv6 clients are keyed
 * by their /64 (one subscriber's usual allocation), IPv4 ones by the whole
 * address. Trusted proxies are not held to the connection cap: every client
 * behind them reaches us over their connections.
 *
 * Rates and the cap are read on every call (CFG_GET): a reload applies at
 * once; 0 switches a limit off. The tables are fixed at rl_new: the rate
 * tables hold RL_SLOTS keys each, and when full a key that has rested longest
 * is forgotten (it would pass anyway); the connection counts hold every
 * address with an open connection (at most producer.max_connections).
 *
 * A struct rl belongs to one thread (the HTTP thread: libmicrohttpd's
 * accept policy, connection notices and requests all run there). */
#ifndef SECKILL_RATELIMIT_H
#define SECKILL_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "netaddr.h"

/* Keys per rate table (address, buyer): a power of two. */
#define RL_SLOTS 65536

struct rl;

/* Tables sized for c (producer.max_connections), trusted proxies parsed
 * from c, which must outlive it. 0, or -1 with err set. */
int rl_new(const struct cfg *c, struct rl **out, char *err, size_t errlen);
void rl_free(struct rl *r);

/* The header that names the client behind a trusted proxy, or NULL. */
const char *rl_client_header(const struct rl *r);
/* The client's address: peer, or, when peer is a trusted proxy, the
 * rightmost address in the header's values (vals[0..n), in the order they
 * came: a later header field continues the list) that is not a trusted
 * proxy. A value that is not an address ends the walk: the hop that wrote it
 * is the client then, as far as we can tell. */
void rl_client(const struct rl *r, const struct na_addr *peer, const char *const *vals, size_t n,
               struct na_addr *out);

/* GCRA on one key at now_us (a monotonic clock): 0 when admitted (and
 * counted), else how many microseconds until a request of the key would be.
 * rate_per_s 0: always admitted, nothing kept. */
int64_t rl_address(struct rl *r, const struct na_addr *client, int64_t now_us);
int64_t rl_buyer(struct rl *r, int64_t buyer, int64_t now_us);
/* Retry-After for a wait: whole seconds, rounded up, at least 1. */
int64_t rl_retry_after_s(int64_t wait_us);

/* Accept policy: may the peer open one more connection? */
bool rl_conn_allowed(const struct rl *r, const struct na_addr *peer);
/* A connection of peer opened / closed (every one, capped or not). */
void rl_conn_opened(struct rl *r, const struct na_addr *peer);
void rl_conn_closed(struct rl *r, const struct na_addr *peer);
/* Open connections of peer (tests). */
int rl_conn_count(const struct rl *r, const struct na_addr *peer);

#endif
