/* paycmd: `seckillctl payment sign`, payments signed as the shop's payment
 * service signs them (paysig.h, kafka.payment_keys): for the demo, the
 * tests and a shop's integration test. The payment service signs its own in
 * production (docs/api.md shows how, with openssl alone). */
#ifndef SECKILL_PAYCMD_H
#define SECKILL_PAYCMD_H

#include "cfg.h"

/* argv[0] is "payment". Reads payment JSON lines on stdin and writes each
 * one signed on stdout, in the same order. 0; 1 when a line is not a
 * payment (each said on stderr with its line number; the others are still
 * written), the keys cannot be loaded or stdout cannot be written; 2 for
 * bad arguments. */
int paycmd(const struct cfg *c, int argc, char **argv);

#endif
