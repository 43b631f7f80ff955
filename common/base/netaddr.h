/* netaddr: client addresses and the networks they belong to, for the
 * producer's front door (producer/ratelimit.h) and the check of
 * producer.trusted_proxies at load.
 *
 * One form for both families: an IPv4 address is kept IPv4-mapped
 * (::ffff:a.b.c.d), so a table or a comparison needs no second case, and
 * "10.0.0.0/8" matches the mapped form of 10.1.2.3. Parsing takes the text
 * inet_pton(3) takes, nothing else: no host names (a name would need a DNS
 * round trip on the request path), no ports, no zone ids.
 *
 * Plain functions on caller-owned values: any thread. */
#ifndef SECKILL_NETADDR_H
#define SECKILL_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

struct na_addr {
    uint8_t b[16];
};

/* A network: an address and the number of leading bits that name it. */
struct na_net {
    struct na_addr a; /* bits past the prefix are zero */
    int bits;         /* 0..128, IPv4 prefixes counted in the mapped form (96 + n) */
};

/* The address in s[0..len) (IPv4 or IPv6 text, nothing around it) into
 * *out. 0, or -1 when it is not one. */
int na_parse(const char *s, size_t len, struct na_addr *out);
/* The address of a peer (AF_INET or AF_INET6). 0, or -1 for another family. */
int na_from_sockaddr(const struct sockaddr *sa, struct na_addr *out);
/* "ADDR" (the address alone: /32 or /128) or "ADDR/BITS" into *out. 0, or
 * -1 when it is neither, or the prefix is out of the family's range. */
int na_net_parse(const char *s, struct na_net *out);
bool na_net_has(const struct na_net *n, const struct na_addr *a);
/* a is IPv4 (mapped). */
bool na_is_v4(const struct na_addr *a);
/* The text of a into buf (INET6_ADDRSTRLEN is enough); IPv4 as a.b.c.d. */
void na_format(const struct na_addr *a, char *buf, size_t len);

#endif
