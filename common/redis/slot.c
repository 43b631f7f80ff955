/* slot: hash slots, the slot map and redirections (see slot.h). */
#include "slot.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

/* CRC16-CCITT (XMODEM), bit by bit: a key is a few dozen bytes, and a table
 * would be 512 bytes of constants to get right for nothing measurable. The
 * specification's check value, crc16("123456789") = 0x31C3, is in
 * tests/unit/test_slot.c. */
static uint16_t crc16(const unsigned char *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned slot_of(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        /* "{}" is no tag: the whole key is hashed */
        if (close != NULL && close > open + 1)
            return crc16((const unsigned char *)open + 1, (size_t)(close - open - 1)) & (SLOT_COUNT - 1);
    }
    return crc16((const unsigned char *)key, len) & (SLOT_COUNT - 1);
}

void slot_map_clear(struct slot_map *m)
{
    m->nnodes = 0;
    for (unsigned s = 0; s < SLOT_COUNT; s++)
        m->owner[s] = -1;
}

int slot_map_node(struct slot_map *m, const char *host, int port)
{
    if (strlen(host) >= SLOT_HOST_MAX || port < 1 || port > 65535)
        return -1;
    for (int i = 0; i < m->nnodes; i++)
        if (m->node[i].port == port && strcmp(m->node[i].host, host) == 0)
            return i;
    if (m->nnodes == SLOT_MAX_NODES)
        return -1;
    struct slot_node *n = &m->node[m->nnodes];
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    return m->nnodes++;
}

int slot_map_set(struct slot_map *m, unsigned slot, const char *host, int port)
{
    int i = slot_map_node(m, host, port);
    if (i < 0 || slot >= SLOT_COUNT)
        return -1;
    m->owner[slot] = (int16_t)i;
    return 0;
}

unsigned slot_map_holes(const struct slot_map *m)
{
    unsigned n = 0;
    for (unsigned s = 0; s < SLOT_COUNT; s++)
        n += m->owner[s] < 0;
    return n;
}

/* One range of CLUSTER SLOTS: [start, end, [host, port, id, ...], replicas...]. */
static int read_range(const redisReply *e, struct slot_map *m, char *err, size_t errlen)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(err, errlen, "CLUSTER SLOTS: a range is not [start, end, [host, port, ...], ...]");
        return -1;
    }
    long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    if (lo < 0 || hi < lo || hi >= SLOT_COUNT) {
        snprintf(err, errlen, "CLUSTER SLOTS: range %lld-%lld is outside 0-%d", lo, hi, SLOT_COUNT - 1);
        return -1;
    }
    const redisReply *primary = e->element[2];
    long long port = primary->element[1]->integer;
    int i = port >= 1 && port <= 65535 ? slot_map_node(m, primary->element[0]->str, (int)port) : -1;
    if (i < 0) {
        snprintf(err, errlen, "CLUSTER SLOTS: primary %.64s:%lld does not fit (or more than %d primaries)",
                 primary->element[0]->str, port, SLOT_MAX_NODES);
        return -1;
    }
    for (long long s = lo; s <= hi; s++)
        m->owner[s] = (int16_t)i;
    return 0;
}

int slot_map_read(const redisReply *r, struct slot_map *m, char *err, size_t errlen)
{
    slot_map_clear(m);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "CLUSTER SLOTS: %s",
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "the answer is not an array");
        return -1;
    }
    for (size_t k = 0; k < r->elements; k++) {
        if (read_range(r->element[k], m, err, errlen) != 0) {
            slot_map_clear(m);
            return -1;
        }
    }
    return 0;
}

enum slot_redirect slot_redirect_of(const redisReply *r, unsigned *slot, char *host, size_t hostlen,
                                    int *port)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR)
        return SLOT_NO_REDIRECT;
    enum slot_redirect kind;
    const char *p;
    if (strncmp(r->str, "MOVED ", 6) == 0) {
        kind = SLOT_MOVED, p = r->str + 6;
    } else if (strncmp(r->str, "ASK ", 4) == 0) {
        kind = SLOT_ASK, p = r->str + 4;
    } else {
        return SLOT_NO_REDIRECT;
    }
    /* "<slot> <host>:<port>": the host may be an IPv6 address, so the port
     * is after the last colon; an empty host means the node that answered
     * (Redis 7's cluster-preferred-endpoint-type unknown-endpoint), which we
     * do not follow: the caller refreshes the map instead. */
    const char *sp = strchr(p, ' ');
    const char *colon = sp ? strrchr(sp + 1, ':') : NULL;
    if (sp == NULL || colon == NULL || colon == sp + 1 || (size_t)(colon - sp - 1) >= hostlen)
        return SLOT_NO_REDIRECT;
    char num[16];
    int64_t s, pt;
    size_t n = (size_t)(sp - p);
    if (n == 0 || n >= sizeof(num))
        return SLOT_NO_REDIRECT;
    memcpy(num, p, n), num[n] = '\0';
    if (util_parse_i64(num, 0, SLOT_COUNT - 1, &s) != 0 || util_parse_i64(colon + 1, 1, 65535, &pt) != 0)
        return SLOT_NO_REDIRECT;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = '\0';
    *slot = (unsigned)s;
    *port = (int)pt;
    return kind;
}
