/* slot: Redis Cluster's key space, as data. Which of the 16384 hash slots a
 * key belongs to, which primary serves each slot, and what a redirection
 * reply says. No I/O: rcluster asks the nodes and keeps a map up to date
 * with what is here.
 *
 * The slot of a key is CRC16 (XMODEM: polynomial 0x1021, initial 0) of its
 * hash tag, or of the whole key when it has none, modulo 16384, as the
 * Cluster specification defines it: the tag is what stands between the first
 * '{' and the first '}' after it, when that is not empty. Every key of an
 * item carries the tag {item:ID} and every lock key its group's {NAME}
 * (common/sale/keys.c), so each script touches one slot.
 *
 * A map belongs to its owner (one thread): no locking. */
#ifndef SECKILL_SLOT_H
#define SECKILL_SLOT_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384
/* Primaries a map can name: far above any cluster this project runs (a slot
 * moved to a node the map lacks adds it; a map that is full is read again). */
#define SLOT_MAX_NODES 128
#define SLOT_HOST_MAX 256

struct slot_node {
    char host[SLOT_HOST_MAX];
    int port;
};

struct slot_map {
    int nnodes;
    struct slot_node node[SLOT_MAX_NODES];
    int16_t owner[SLOT_COUNT]; /* index into node[], -1: no primary known */
};

/* The slot of a key of len bytes (binary-safe). */
unsigned slot_of(const char *key, size_t len);

/* An empty map: no slot has a primary. */
void slot_map_clear(struct slot_map *m);

/* The map from a reply to CLUSTER SLOTS: each range's first node is its
 * primary (the replicas after it are not used). A reply that is not that
 * shape, or a node address that does not fit, is an error: 0, or -1 with err
 * (the map is then left empty). A slot no range names stays -1. */
int slot_map_read(const redisReply *r, struct slot_map *m, char *err, size_t errlen);

/* The index of host:port in the map, added when new; -1 when the map is full
 * or the address does not fit. */
int slot_map_node(struct slot_map *m, const char *host, int port);

/* The primary of one slot is now host:port (a MOVED reply). 0, or -1 (full). */
int slot_map_set(struct slot_map *m, unsigned slot, const char *host, int port);

/* How many slots have no primary in the map. */
unsigned slot_map_holes(const struct slot_map *m);

enum slot_redirect {
    SLOT_NO_REDIRECT, /* not a redirection: the node's own answer */
    SLOT_MOVED,       /* the slot lives elsewhere now: follow it, and update the map */
    SLOT_ASK,         /* the slot is being migrated and this key has gone: ASKING there, once */
};

/* What an error reply "MOVED 3999 127.0.0.1:6381" or "ASK 3999 host:port"
 * says: the slot and the node to ask. Anything else, a malformed one
 * included, is SLOT_NO_REDIRECT (the caller then treats it as an error of
 * its own). host gets at most hostlen bytes, NUL included. */
enum slot_redirect slot_redirect_of(const redisReply *r, unsigned *slot, char *host, size_t hostlen,
                                    int *port);

#endif
