#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static void from_v4(const void *in4, struct na_addr *out)
{
    memcpy(out->b, v4_mapped, 12);
    memcpy(out->b + 12, in4, 4);
}

bool na_is_v4(const struct na_addr *a) { return memcmp(a->b, v4_mapped, 12) == 0; }

int na_parse(const char *s, size_t len, struct na_addr *out)
{
    char buf[INET6_ADDRSTRLEN];
    struct in_addr v4;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    if (inet_pton(AF_INET, buf, &v4) == 1) {
        from_v4(&v4, out);
        return 0;
    }
    return inet_pton(AF_INET6, buf, out->b) == 1 ? 0 : -1;
}

int na_from_sockaddr(const struct sockaddr *sa, struct na_addr *out)
{
    if (sa && sa->sa_family == AF_INET) {
        from_v4(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, out);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(out->b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

/* Zero the bits of a past the first bits. */
static void mask(struct na_addr *a, int bits)
{
    for (int i = 0; i < 16; i++) {
        int keep = bits - i * 8;
        if (keep <= 0)
            a->b[i] = 0;
        else if (keep < 8)
            a->b[i] &= (uint8_t)(0xff << (8 - keep));
    }
}

int na_net_parse(const char *s, struct na_net *out)
{
    const char *slash = strchr(s, '/');
    size_t len = slash ? (size_t)(slash - s) : strlen(s);
    int64_t bits;
    if (na_parse(s, len, &out->a) != 0)
        return -1;
    int v4 = na_is_v4(&out->a);
    if (!slash)
        bits = v4 ? 32 : 128;
    else if (util_parse_i64(slash + 1, 0, v4 ? 32 : 128, &bits) != 0)
        return -1;
    out->bits = (int)bits + (v4 ? 96 : 0);
    mask(&out->a, out->bits);
    return 0;
}

bool na_net_has(const struct na_net *n, const struct na_addr *a)
{
    struct na_addr m = *a;
    mask(&m, n->bits);
    return memcmp(m.b, n->a.b, 16) == 0;
}

void na_format(const struct na_addr *a, char *buf, size_t len)
{
    if (na_is_v4(a))
        inet_ntop(AF_INET, a->b + 12, buf, (socklen_t)len);
    else
        inet_ntop(AF_INET6, a->b, buf, (socklen_t)len);
}
