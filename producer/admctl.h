/* admctl: the waiting room's admission rate, a closed loop on what the sale
 * holds (issue #58).
 *
 * Under a ceiling (producer.queue_rate_per_s, or the item's own from
 * seckillctl queue rate), the rate moves by additive increase and
 * multiplicative decrease, once per ACTL_PERIOD_MS: down to
 * ACTL_DOWN_FACTOR of itself while either signal says the sale does not
 * hold it, up by ACTL_UP_SHARE of the ceiling while both say it does.
 * The signals: this producer's accepted buys' p99 over the last period
 * against producer.queue_p99_target_ms (none when too few buys were
 * answered to say: no signal is no objection), and the item's backlog, its
 * reservations not yet persisted (the consumer's lag behind Kafka, and
 * Kafka's behind the producer), against producer.queue_backlog_max.
 *
 * Why AIMD and not a PID loop (Shopify's throttle is one): the plant is a
 * chain of queues (HTTP, Redis, Kafka, the consumer, PostgreSQL) whose gain
 * changes through a sale and from one machine to the next, so there are no
 * gains to tune once; the p99 comes in coarse buckets and jumps. AIMD needs
 * no model: it backs off fast (a queue that overflows makes every buyer
 * wait, so halving-like steps end that in a few periods), probes back
 * slowly, and converges when several loops share a bottleneck, the same
 * reason TCP uses it. It starts at the ceiling: the ceiling is the
 * operator's pacing of the hot second, and the loop only ever takes from
 * it what the sale cannot hold.
 *
 * Pure: no clock, no thread, no I/O. One struct actl per item, owned by
 * the admitter (producer/admitter.h). */
#ifndef SECKILL_ADMCTL_H
#define SECKILL_ADMCTL_H

#include <stdint.h>

#define ACTL_PERIOD_MS 500
#define ACTL_DOWN_FACTOR 0.7
#define ACTL_UP_SHARE 0.1
/* The least rate, as a share of the ceiling (never below 1/s): a line that
 * a congested sale stopped altogether would tell its waiters nothing
 * true. */
#define ACTL_FLOOR_SHARE 0.02
/* The p99 objects only in a period whose buys were at least this share of
 * its admissions: see actl_in.buys. */
#define ACTL_BUYS_SHARE 0.5

struct actl {
    double rate_per_s; /* 0: not started: the first step starts it at the ceiling */
};

struct actl_in {
    double ceiling_per_s;
    int64_t p99_us;    /* the accepted buys' p99 over the last period; -1: too few to say */
    /* The period's accepted buys and admissions (this producer's). While
     * the admitted have mostly not bought yet (fewer buys than
     * ACTL_BUYS_SHARE of the admissions: at the opening, the crowd's asks
     * come first), a slow p99 is the machine's, busy with something else:
     * admitting fewer would not speed those few buys up, only leave the
     * stock unsold for longer. Then the backlog alone may object. */
    int64_t buys, admitted;
    int64_t target_us; /* producer.queue_p99_target_ms */
    int64_t backlog;   /* the item's reservations not yet persisted */
    int64_t backlog_max;
};

enum actl_move { ACTL_HOLD, ACTL_UP, ACTL_DOWN };

/* One period's step: the new rate in a->rate_per_s (within [floor,
 * ceiling]), and which way it moved. */
enum actl_move actl_step(struct actl *a, const struct actl_in *in);
/* The least rate the loop goes down to under this ceiling. */
double actl_floor(double ceiling_per_s);
/* 1 when the loop holds a (started) at the floor of this ceiling: the sale
 * holds no more than the least rate (the gauge an alert reads), else 0. */
int actl_at_floor(const struct actl *a, double ceiling_per_s);

/* The admission rate measured, for the waiters' ETAs: an exponential
 * average over about window_ms of each step's admissions a second. It is
 * divided by its weight so far: an average that starts at 0 reads low until
 * it has run for a few windows (a third of the rate after 2 s of a 5 s
 * window), and would tell waiters ETAs three times too long just when the
 * crowd asks. */
struct actl_avg {
    double mean, weight;
    int64_t ms; /* how long it has been measured */
};
void actl_avg_add(struct actl_avg *v, double per_s, int64_t dt_ms, int64_t window_ms);
/* The rate, or -1 while measured for less than min_ms. */
double actl_avg_rate(const struct actl_avg *v, int64_t min_ms);

#endif
