/* funccmd: `seckillctl functions load|check`, the programs' Redis functions
 * (common/redis/rfunc.h): loaded by the operator as the admin user, never by a
 * daemon. */
#ifndef SECKILL_FUNCCMD_H
#define SECKILL_FUNCCMD_H

#include "cfg.h"

/* 0 when every library is loaded (load) or loaded at this release's
 * version or newer (check); 1 otherwise (each library's line says why); 2
 * for a usage error. */
int funccmd(const struct cfg *c, int argc, char **argv);

#endif
