/* token: `seckillctl token issue`, bearer tokens for buyers, signed with a
 * jwt.keys key: for tests, the demo, load generators and support. A shop's
 * login service issues the real ones. */
#ifndef SECKILL_TOKEN_H
#define SECKILL_TOKEN_H

#include "cfg.h"

/* argv[0] is "token". Prints the tokens on stdout, one a line. 0; 2 for bad
 * arguments or a key that cannot sign; 1 when the keys cannot be loaded or
 * stdout cannot be written. */
int token_cmd(const struct cfg *c, int argc, char **argv);

#endif
