/* auth: who the buyer is, for the producer's HTTP API.
 *
 * With producer.auth = "jwt" the buyer is the sub of a bearer token that a
 * configured key signed (common/base/jwt.h); with "none" nothing is loaded and the
 * caller believes the request body (development only).
 *
 *  - A token verified once is remembered until exp + leeway (jwt.cache_entries),
 *    so a buyer hammering "buy" costs one SHA-256 per request, not a signature
 *    check.
 *  - SIGHUP re-reads every key file (a rotated file is picked up even when
 *    the configuration did not change). A broken key file refuses the reload
 *    and the running keys stay. An installed keyset starts a new generation:
 *    every cached token is verified again against the new keys, so a removed
 *    key stops working at once.
 *
 * auth_buyer runs on the HTTP thread while reloads run on the main thread; a
 * mutex (uncontended but during a reload's swap) guards the keyset, the
 * generation and the cache. */
#ifndef SECKILL_AUTH_H
#define SECKILL_AUTH_H

#include <stdint.h>

#include "cfg.h"
#include "daemon.h"
#include "jwt.h"

struct auth;

/* Load the keys and the cache when c's producer.auth is "jwt": public keys
 * and HS256 secrets only (JWT_USE_VERIFY: a private key is refused, signing
 * is seckillctl's). 0, or -1 with err, "file:line" of jwt.keys first (a key
 * file that cannot be used, or none at all). */
int auth_open(const struct cfg *c, struct auth **out, char *err, size_t errlen);
void auth_close(struct auth *a);
/* 1 when buyers must present a token. */
int auth_enabled(const struct auth *a);

/* The buyer of a request from its raw Authorization header value (NULL when
 * absent). JWT_OK with *user, or the reason for the 401 (jwt_err_str).
 * Counts auth_verified, auth_cached or auth_denied. With auth disabled,
 * JWT_MISSING: there is no token to trust. */
enum jwt_err auth_buyer(struct auth *a, const char *authorization, int64_t *user);

/* The reload hook for daemon_reload: prepare loads a fresh keyset from the
 * reloaded configuration (or refuses it), commit swaps it in. */
struct daemon_reload_hook auth_reload_hook(struct auth *a);

/* For -t: with producer.auth = "jwt", load the keys c names and drop them.
 * 0, or -1 with err as auth_open's. */
int auth_check(const struct cfg *c, char *err, size_t errlen);

#endif
