#include "ratelimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "i64map.h"

/* Ways of a rate table's set: a key lives in one of the 4 slots of its set,
 * so a lookup reads one cache line or two, and a full set forgets its most
 * rested key. */
#define RL_WAYS 4

struct rl_slot {
    struct na_addr key;
    int64_t tat_us; /* theoretical arrival time; 0: free */
};

/* Open connections of an address: linear probing, count 0 is a free slot. */
struct rl_conn {
    struct na_addr key;
    int n;
};

struct rl {
    const struct cfg *cfg;
    struct na_net *proxies;
    size_t nproxies;
    const char *header; /* NULL: none */
    struct rl_slot *addr, *buyer;
    struct rl_conn *conns;
    size_t conns_mask;
};

/* An address's 16 bytes hashed as two words. (Not an i64map: an IPv4
 * address's first word is 0, which would read as a free slot.) */
static uint64_t hash_key(const struct na_addr *k)
{
    int64_t w[2];
    memcpy(w, k->b, sizeof(w));
    return i64map_hash(w, 2);
}

int rl_new(const struct cfg *c, struct rl **out, char *err, size_t errlen)
{
    struct rl *r = calloc(1, sizeof(*r));
    size_t n = 16;
    if (!r)
        goto oom;
    r->cfg = c;
    r->header = c->producer.client_address_header[0] ? c->producer.client_address_header : NULL;
    /* At most max_connections addresses hold one: at most half full. */
    while (n < (size_t)c->producer.max_connections * 2)
        n <<= 1;
    r->conns_mask = n - 1;
    r->addr = calloc(RL_SLOTS, sizeof(*r->addr));
    r->buyer = calloc(RL_SLOTS, sizeof(*r->buyer));
    r->conns = calloc(n, sizeof(*r->conns));
    if (!r->addr || !r->buyer || !r->conns)
        goto oom;
    if (c->producer.trusted_proxies.n &&
        !(r->proxies = calloc(c->producer.trusted_proxies.n, sizeof(*r->proxies))))
        goto oom;
    for (; r->nproxies < c->producer.trusted_proxies.n; r->nproxies++)
        if (na_net_parse(c->producer.trusted_proxies.v[r->nproxies], &r->proxies[r->nproxies]) != 0) {
            /* cfg_load checked them: only a caller's own cfg gets here */
            snprintf(err, errlen, "producer.trusted_proxies: \"%s\" is not an address or network",
                     c->producer.trusted_proxies.v[r->nproxies]);
            goto fail;
        }
    *out = r;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    rl_free(r);
    return -1;
}

void rl_free(struct rl *r)
{
    if (!r)
        return;
    free(r->proxies);
    free(r->addr);
    free(r->buyer);
    free(r->conns);
    free(r);
}

const char *rl_client_header(const struct rl *r) { return r->header; }

static bool trusted(const struct rl *r, const struct na_addr *a)
{
    for (size_t i = 0; i < r->nproxies; i++)
        if (na_net_has(&r->proxies[i], a))
            return true;
    return false;
}

/* The last list element of s[0..len) (comma-separated, spaces around
 * elements ignored): its start and length; *len becomes what precedes it. */
static const char *last_element(const char *s, size_t *len, size_t *elen)
{
    size_t end = *len, start;
    while (end > 0 && (s[end - 1] == ' ' || s[end - 1] == '\t'))
        end--;
    start = end;
    while (start > 0 && s[start - 1] != ',')
        start--;
    *len = start > 0 ? start - 1 : 0;
    while (start < end && (s[start] == ' ' || s[start] == '\t'))
        start++;
    *elen = end - start;
    return s + start;
}

void rl_client(const struct rl *r, const struct na_addr *peer, const char *const *vals, size_t n,
               struct na_addr *out)
{
    *out = *peer;
    if (!r->header || !trusted(r, peer))
        return;
    /* out is a trusted hop until the walk reaches one that is not. */
    for (size_t v = n; v-- > 0;) {
        size_t len = strlen(vals[v]), elen;
        while (len > 0) {
            const char *e = last_element(vals[v], &len, &elen);
            struct na_addr a;
            if (elen == 0)
                continue; /* "a,,b": an empty element names nobody */
            if (na_parse(e, elen, &a) != 0)
                return;
            *out = a;
            if (!trusted(r, &a))
                return;
        }
    }
}

/* The rate table's key of an address: an IPv6 client by its /64. */
static struct na_addr addr_key(const struct na_addr *a)
{
    struct na_addr k = *a;
    if (!na_is_v4(a))
        memset(k.b + 8, 0, 8);
    return k;
}

/* GCRA: a key may be at most burst emission intervals ahead of now. */
static int64_t take(struct rl_slot *t, const struct na_addr *key, int rate_per_s, int burst, int64_t now_us)
{
    if (rate_per_s <= 0)
        return 0;
    int64_t interval = 1000000 / rate_per_s, tolerance = interval * (burst > 0 ? burst : 1);
    struct rl_slot *set = &t[(hash_key(key) & (RL_SLOTS - 1)) & ~(size_t)(RL_WAYS - 1)], *s = NULL;
    for (int i = 0; i < RL_WAYS && !s; i++)
        if (set[i].tat_us && memcmp(&set[i].key, key, sizeof(*key)) == 0)
            s = &set[i];
    if (!s) {
        /* A free slot, else the one whose arrival time is earliest: its
         * key is the most rested, and would pass anyway once past it. */
        s = &set[0];
        for (int i = 1; i < RL_WAYS; i++)
            if (set[i].tat_us < s->tat_us)
                s = &set[i];
        s->key = *key;
        s->tat_us = 0;
    }
    int64_t tat = (s->tat_us > now_us ? s->tat_us : now_us) + interval;
    if (tat - now_us > tolerance)
        return tat - now_us - tolerance;
    s->tat_us = tat;
    return 0;
}

int64_t rl_address(struct rl *r, const struct na_addr *client, int64_t now_us)
{
    struct na_addr k = addr_key(client);
    return take(r->addr, &k, CFG_GET(r->cfg->producer.address_rate_per_s),
                CFG_GET(r->cfg->producer.address_burst), now_us);
}

int64_t rl_buyer(struct rl *r, int64_t buyer, int64_t now_us)
{
    struct na_addr k = { { 0 } };
    memcpy(k.b, &buyer, sizeof(buyer));
    return take(r->buyer, &k, CFG_GET(r->cfg->producer.buyer_rate_per_s),
                CFG_GET(r->cfg->producer.buyer_burst), now_us);
}

int64_t rl_retry_after_s(int64_t wait_us)
{
    int64_t s = (wait_us + 999999) / 1000000;
    return s < 1 ? 1 : s;
}

/* --- connections per address ------------------------------------------- */

static size_t conn_home(const struct rl *r, const struct na_addr *k) { return hash_key(k) & r->conns_mask; }

static struct rl_conn *conn_find(const struct rl *r, const struct na_addr *k)
{
    for (size_t i = conn_home(r, k); r->conns[i].n; i = (i + 1) & r->conns_mask)
        if (memcmp(&r->conns[i].key, k, sizeof(*k)) == 0)
            return &r->conns[i];
    return NULL;
}

int rl_conn_count(const struct rl *r, const struct na_addr *peer)
{
    const struct rl_conn *c = conn_find(r, peer);
    return c ? c->n : 0;
}

bool rl_conn_allowed(const struct rl *r, const struct na_addr *peer)
{
    int cap = CFG_GET(r->cfg->producer.max_connections_per_address);
    return cap == 0 || trusted(r, peer) || rl_conn_count(r, peer) < cap;
}

void rl_conn_opened(struct rl *r, const struct na_addr *peer)
{
    size_t i = conn_home(r, peer);
    /* libmicrohttpd opens at most max_connections: a free slot exists. */
    while (r->conns[i].n && memcmp(&r->conns[i].key, peer, sizeof(*peer)) != 0)
        i = (i + 1) & r->conns_mask;
    r->conns[i].key = *peer;
    r->conns[i].n++;
}

/* Empty slot i, moving back the entries after it that probed past it, so
 * that no lookup stops early (linear probing without tombstones). */
static void conn_remove(struct rl *r, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & r->conns_mask;
        if (!r->conns[j].n)
            break;
        size_t home = conn_home(r, &r->conns[j].key);
        /* j's entry may move to i when its home is not in (i, j] cyclically */
        bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            r->conns[i] = r->conns[j];
            i = j;
        }
    }
    r->conns[i].n = 0;
}

void rl_conn_closed(struct rl *r, const struct na_addr *peer)
{
    struct rl_conn *c = conn_find(r, peer);
    if (c && --c->n == 0)
        conn_remove(r, (size_t)(c - r->conns));
}
