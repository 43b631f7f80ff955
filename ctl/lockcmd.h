/* lockcmd: `seckillctl lock run|show`, a distributed flock(1). */
#ifndef SECKILL_LOCKCMD_H
#define SECKILL_LOCKCMD_H

#include "cfg.h"

/* Exit statuses besides the command's own. */
#define LOCKCMD_EXIT_BUSY 75 /* EX_TEMPFAIL: not acquired within --wait-ms */
#define LOCKCMD_EXIT_LOST 76 /* the lease was lost while the command ran */

int lockcmd(const struct cfg *c, int argc, char **argv);

#endif
