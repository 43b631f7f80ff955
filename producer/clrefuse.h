/* clrefuse: a Content-Length that libmicrohttpd 0.9.75 refuses by itself,
 * answered once by the producer, before the library writes anything.
 *
 * The library reads Content-Length in parse_connection_headers()
 * (src/microhttpd/connection.c), after the head's empty line and before the
 * access handler's first call. One it cannot read (not only digits, or past
 * 64 bits) it answers itself with transmit_error_response_len() (400, or 413)
 * and never calls the access handler. That answer leaves its status line and
 * headers twice on the wire: transmit_error_response_len() builds them into
 * the write buffer and sets the state HEADERS_SENDING, then its caller,
 * MHD_connection_handle_idle(), sets HEADERS_PROCESSED over that; the state
 * machine walks on to START_REPLY, whose build_header_response() appends
 * them again. No option of 0.9.75 changes this, and no callback given the
 * connection runs between the empty line and that answer. The error logger
 * does run: the library says "Failed to parse `Content-Length' header" (or
 * "Too large value of 'Content-Length' header") just before it answers, on
 * the connection's thread, with no connection named.
 *
 * So the producer keeps the connections whose request line has come (the
 * URI callback) and whose head has not reached the access handler. When the
 * logger hears one of those two messages, the connection refused is the one
 * of them the library holds a whole head for (MHD_CONNECTION_INFO_REQUEST_
 * HEADER_SIZE) with no answer queued (MHD_CONNECTION_INFO_HTTP_STATUS), and
 * whose Content-Length the library cannot read. It is alone: any other whole
 * head has gone to the access handler (and left the list) or been answered
 * by the library. The producer writes its 400 on the socket and shuts it for
 * writing; the library's own answer then fails (EPIPE) and it closes the
 * connection. The bytes after the head are never read as a request.
 *
 * A library whose messages or states differ (another version) is never
 * answered here: it answers alone, as 0.9.75 does without this module.
 *
 * HTTP thread only (libmicrohttpd's callbacks): the list is that thread's. */
#ifndef SECKILL_CLREFUSE_H
#define SECKILL_CLREFUSE_H

#include <microhttpd.h>

/* One connection's place in the list; zeroed, it is in none. */
struct clr_slot {
    struct clr_slot *prev, *next;
    struct MHD_Connection *conn;
};

/* The connections whose head is being read, by their request line's
 * arrival: the last is the newest. */
struct clr_list {
    struct clr_slot head;
};

void clr_init(struct clr_list *l);
/* conn's request line has come (from the URI callback): its head is being
 * read. Put last, moved there if it was in. */
void clr_enter(struct clr_list *l, struct clr_slot *s, struct MHD_Connection *conn);
/* Its head reached the access handler, or it closes. Nothing if not in. */
void clr_leave(struct clr_slot *s);

/* fmt (a message format of the library's) says it is refusing a
 * Content-Length it cannot read: 1, else 0. */
int clr_is_refusal(const char *fmt);

/* After clr_is_refusal(): the connection refused, out of the list, and in
 * *why the reason for its client; NULL if none is found. */
struct MHD_Connection *clr_find(struct clr_list *l, const char **why);

/* Writes status (400, 413) with the JSON body (Connection: close) on conn's
 * socket and shuts it for writing, whether or not all of it went (a client
 * that reads nothing may get it cut short). The library closes the
 * connection once its own write fails, or its read ends. Also the answer
 * to a chunked body refused while it is read (ingress.c), when the library
 * takes no answer of the producer's. */
void clr_answer(struct MHD_Connection *conn, unsigned status, const char *body);

#endif
