#ifndef SECKILL_VERSION_H
#define SECKILL_VERSION_H
#define SECKILL_VERSION "0.1.0"
/* Where the daemons and tools look for their configuration without -c. */
#define SECKILL_DEFAULT_CONFIG "/etc/seckill/seckill.cfg"
#endif
