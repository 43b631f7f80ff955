/* headwatch: the deadline for a request head (producer.request_head_timeout_s).
 *
 * libmicrohttpd's connection timeout counts inactivity: a client sending a
 * byte every few seconds keeps a connection for ever, and a crowd of them
 * holds every slot of producer.max_connections. Here a connection waiting
 * for a head is armed: from its accept, and again from each answer on a
 * kept-alive connection; the head's arrival disarms it. hw_expire() shuts
 * down the sockets of those armed for longer than the deadline, whatever
 * trickled in meanwhile: shutdown(2), not close(2), so that libmicrohttpd,
 * which owns the socket, reads its end and closes the connection itself, in
 * its own thread and order.
 *
 * A slot is armed and disarmed on the HTTP thread (libmicrohttpd's
 * callbacks); hw_expire runs on another (the ingress's timer). The list is
 * under a mutex, and a slot leaves it (hw_disarm, in the connection's close
 * callback) before libmicrohttpd closes its descriptor, so a descriptor is
 * never shut after it was closed and reused. */
#ifndef SECKILL_HEADWATCH_H
#define SECKILL_HEADWATCH_H

#include <pthread.h>
#include <stdint.h>

/* One connection's place in the watch; zeroed, it is disarmed. */
struct hw_slot {
    struct hw_slot *prev, *next;
    int fd;
    int64_t since_us; /* armed at (util_mono_us) */
};

/* The armed slots, oldest first: arming appends, so the order is by since_us. */
struct hw {
    pthread_mutex_t mu;
    struct hw_slot armed; /* the list's head: armed.next is the oldest */
};

/* 0, or -1 (the mutex could not be made). */
int hw_init(struct hw *w);
/* Once no slot is armed and no thread calls in any more. */
void hw_destroy(struct hw *w);
/* The connection on fd waits for a head from now_us on (armed again if it
 * was). */
void hw_arm(struct hw *w, struct hw_slot *s, int fd, int64_t now_us);
/* Its head arrived, or it closes. Nothing if it is not armed. */
void hw_disarm(struct hw *w, struct hw_slot *s);
/* Shut down the sockets armed at or before cutoff_us, disarming them; how
 * many. Any thread. */
int hw_expire(struct hw *w, int64_t cutoff_us);

#endif
