/* backoff: the producer's reconnect pacing, shared by its Redis clients. */
#ifndef SECKILL_BACKOFF_H
#define SECKILL_BACKOFF_H

/* Reconnecting to Redis (util_backoff_ms: jittered, doubling from base to
 * cap). 50 ms: a blip (a failover, a restart with AOF) is over before most
 * buyers notice. 2 s: once Redis is back, orders flow again within two
 * seconds, while a dead Redis costs each thread one connect every two
 * seconds, not one per request. */
#define REDIS_RECONNECT_BASE_MS 50
#define REDIS_RECONNECT_CAP_MS 2000

#endif
