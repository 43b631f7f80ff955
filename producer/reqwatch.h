/* reqwatch: the deadline for a whole request, head and body
 * (producer.request_timeout_s).
 *
 * libmicrohttpd's connection timeout counts inactivity: a client sending a
 * byte every few seconds keeps a connection for ever, whether in its head or
 * in a body its Content-Length or its chunks promise, and a crowd of them
 * holds every slot of producer.max_connections. Here a connection waiting
 * for a request is armed: from its accept, and again from each answer on a
 * kept-alive connection; the whole request's arrival (its body's end, or an
 * answer given from the head alone) disarms it. rw_expire() shuts down the
 * sockets of those armed for longer than the deadline, whatever trickled in
 * meanwhile: shutdown(2), not close(2), so that libmicrohttpd, which owns
 * the socket, reads its end and closes the connection itself, in its own
 * thread and order.
 *
 * A slot is armed and disarmed on the HTTP thread (libmicrohttpd's
 * callbacks); rw_expire runs on another (the ingress's timer). The list is
 * under a mutex, and a slot leaves it (rw_disarm, in the connection's close
 * callback) before libmicrohttpd closes its descriptor, so a descriptor is
 * never shut after it was closed and reused. */
#ifndef SECKILL_REQWATCH_H
#define SECKILL_REQWATCH_H

#include <pthread.h>
#include <stdint.h>

/* One connection's place in the watch; zeroed, it is disarmed. */
struct rw_slot {
    struct rw_slot *prev, *next;
    int fd;
    int64_t since_us; /* armed at (util_mono_us) */
};

/* The armed slots, oldest first: arming appends, so the order is by since_us. */
struct rw {
    pthread_mutex_t mu;
    struct rw_slot armed; /* the list's head: armed.next is the oldest */
};

/* 0, or -1 (the mutex could not be made). */
int rw_init(struct rw *w);
/* Once no slot is armed and no thread calls in any more. */
void rw_destroy(struct rw *w);
/* The connection on fd waits for a request from now_us on (armed again if
 * it was). */
void rw_arm(struct rw *w, struct rw_slot *s, int fd, int64_t now_us);
/* Its request is whole, or it closes. Nothing if it is not armed. */
void rw_disarm(struct rw *w, struct rw_slot *s);
/* Shut down the sockets armed at or before cutoff_us, disarming them; how
 * many. Any thread. */
int rw_expire(struct rw *w, int64_t cutoff_us);

#endif
