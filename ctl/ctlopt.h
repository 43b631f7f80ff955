/* ctlopt: the limits that options of several seckillctl commands share. */
#ifndef SECKILL_CTLOPT_H
#define SECKILL_CTLOPT_H

/* The longest duration in ms an option takes (sweep --age-ms,
 * lock --wait-ms): one day. */
#define CTL_MAX_MS (24 * 3600 * 1000)

#endif
