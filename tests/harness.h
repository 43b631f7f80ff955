/* harness: what the C tests share. Tests use cmocka and print TAP
 * (tests/run sets CMOCKA_MESSAGE_OUTPUT=TAP and adds up the results). */
#ifndef SECKILL_HARNESS_H
#define SECKILL_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "cfg.h"
#include "util.h"

/* Wait for a condition with a deadline, polling every 10 ms; sets ok. Never
 * a fixed sleep: the test moves on as soon as the condition holds. */
#define WAIT_UNTIL(cond, timeout_ms, ok)                                 \
    do {                                                                 \
        int64_t wait_end_ = util_mono_ms() + (timeout_ms);               \
        (ok) = false;                                                    \
        for (;;) {                                                       \
            if (cond) {                                                  \
                (ok) = true;                                             \
                break;                                                   \
            }                                                            \
            if (util_mono_ms() >= wait_end_)                             \
                break;                                                   \
            util_sleep_ms(10);                                           \
        }                                                                \
    } while (0)

/* Load the test configuration (SECKILL_TEST_CONFIG, else config/seckill.cfg)
 * with a Redis key prefix of its own, so runs never see each other's keys. */
void harness_cfg(struct cfg *c);

/* The configuration of an integration suite, loaded by harness_setup (a
 * cmocka group setup) and freed by harness_teardown, which also deletes
 * every Redis key under the suite's prefix. */
extern struct cfg harness_conf;
int harness_setup(void **state);
int harness_teardown(void **state);
const char *harness_root(void);

redisContext *harness_redis(const struct cfg *c);
/* Run a command; returns the reply (caller frees). Fails the test on I/O error. */
redisReply *harness_cmd(redisContext *rc, const char *fmt, ...);
/* Integer value of a string/integer reply to fmt, or -1 for nil. */
long long harness_int(redisContext *rc, const char *fmt, ...);
/* Delete every key under c's prefix. */
void harness_redis_cleanup(const struct cfg *c);

PGconn *harness_pg(const struct cfg *c);

/* Restart the stack's Redis (SHUTDOWN, then scripts/stack up), wait for PING. */
void harness_redis_restart(void);

#endif
