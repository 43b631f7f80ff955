#include "funclibs.h"

#include "embed.h"

const struct rfunc_lib funclib_producer = { "seckill_producer", embed_seckill_producer };
const struct rfunc_lib funclib_consumer = { "seckill_consumer", embed_seckill_consumer };
const struct rfunc_lib funclib_lock = { "seckill_lock", embed_seckill_lock };
const struct rfunc_lib funclib_ctl = { "seckill_ctl", embed_seckill_ctl };
const struct rfunc_lib funclib_return = { "seckill_return", embed_seckill_return };

const struct rfunc_lib *const funclib_all[] = {
    &funclib_producer, &funclib_consumer, &funclib_lock, &funclib_ctl, &funclib_return, NULL,
};
