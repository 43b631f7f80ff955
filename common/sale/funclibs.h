/* funclibs: the sale's Redis function libraries (issue #34), listed once.
 *
 * Five libraries, one Lua file each, compiled into every binary
 * (scripts/embed): seckill_producer (producer/lua: the reservation, the
 * sold-out check, a give-back), seckill_consumer (consumer/lua: settling
 * orders), seckill_lock (common/sale/lua: the consumer's and seckillctl's
 * locks), seckill_ctl (ctl/lua: loading, rebuilding and reconciling items)
 * and seckill_return (consumer/lua: units back on sale and the states after
 * the sale, issue #44). The link layer (common/redis/rfunc.h) checks and
 * loads a library it is handed and knows none by name; a program names the
 * ones it needs from here. Constant data: any thread. */
#ifndef SECKILL_FUNCLIBS_H
#define SECKILL_FUNCLIBS_H

#include "rfunc.h"

extern const struct rfunc_lib funclib_producer, funclib_consumer, funclib_lock, funclib_ctl, funclib_return;

/* Every library, NULL-terminated (`seckillctl functions load` and check). */
extern const struct rfunc_lib *const funclib_all[];

#endif
