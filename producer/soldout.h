/* soldout: what this producer knows about sold-out items, so that the
 * requests arriving after the stock is gone - most of a flash sale's
 * traffic - are answered 410 on the HTTP thread, without a Redis round trip.
 *
 * Redis stays the only judge of a sale. An item is known sold out here only
 * after seckill_reserve answered sold out for it AND its buyers (the users who
 * hold a unit) were copied from Redis; from then on a buyer who holds no unit
 * is answered 410 locally, and one who holds a unit still goes to Redis, so
 * a holder asking again is told 409 as before.
 *
 * A thread of its own checks every known item each producer.soldout_refresh_ms,
 * all items in one pipelined round trip (seckill_soldout: stock, number of
 * buyers, units given back). An item with buckets (bucket.h) is checked in
 * each of its slots, the reserve and every bucket, in that same round trip:
 * it is sold out when every slot is at zero (the producer refills a dry
 * bucket before it answers 410: reserve.h), its buyers are those of every
 * bucket, and its counts are the sums over the slots. The same pass checks the items the winners
 * table asks for (winners.h), an item both want once: in a sale of many
 * items these checks are most of Redis's calls, so none is made twice. A
 * unit back in stock (a give-back after Kafka refused an order, `seckillctl
 * item load`, a recreated item) or a missing item makes it forget the item:
 * its requests go to Redis again. A buyers set
 * that changed while the stock stayed at zero (a unit given back and bought
 * again between two checks: the given-back count moved) is copied again.
 * Once Redis's clock is past the item's sale window, the crowd hears
 * "ended" instead; near the end it is asked again, so neither word is
 * given before Redis would give it.
 *
 * So the view is wrong in one direction only, for at most one refresh
 * period plus a round trip: it may turn a buyer away (410) from a unit that
 * has just come back, or tell a buyer who has just taken it 410 instead of
 * 409. It never accepts an order: only Redis does.
 *
 * While Redis is unreachable the view is kept: no unit comes back without
 * Redis, and answering the sold-out crowd is what must not depend on it.
 *
 * so_sold_out() may be called from any thread (the HTTP thread does);
 * so_mark() from any (the reserving thread does). */
#ifndef SECKILL_SOLDOUT_H
#define SECKILL_SOLDOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "cfg.h"
#include "winners.h"

struct so;

/* Start the refresh thread (it connects to Redis itself, with backoff); it
 * also checks the items of the winners table w (may be NULL), which must
 * outlive so_stop. With producer.soldout_max_buyers = 0 the view stays
 * empty: every request goes to Redis. 0, or -1 with err set. */
int so_start(const struct cfg *c, struct win *w, struct so **out, char *err, size_t errlen);
void so_stop(struct so *s);

/* Redis answered sold out for item: copy its buyers soon. */
void so_mark(struct so *s, int64_t item_id);

enum so_answer {
    SO_ASK_REDIS, /* not known, a holder, or near the window's end */
    SO_SOLD_OUT,  /* 410 sold_out */
    SO_ENDED,     /* 410 ended: Redis said the window is past */
};

/* What to answer a buyer of item who is user, without asking Redis. Near a
 * sale window's end (by this host's clock) the answer is SO_ASK_REDIS until
 * Redis says the window is past: its clock decides. s may be NULL. */
enum so_answer so_sold_out(struct so *s, int64_t item_id, int64_t user_id);

#endif
