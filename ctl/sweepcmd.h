/* sweepcmd: `seckillctl sweep`, the producer's sweeper run by hand. */
#ifndef SECKILL_SWEEPCMD_H
#define SECKILL_SWEEPCMD_H

#include "cfg.h"

int sweepcmd(const struct cfg *c, int argc, char **argv);

#endif
