#include "clrefuse.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* The library's words, as parse_connection_headers() says them just before
 * it answers (0.9.75). */
static const char *const refusals[] = {
    "Failed to parse `Content-Length' header. Closing connection.\n",
    "Too large value of 'Content-Length' header. Closing connection.\n",
};

#define NOT_A_NUMBER "a Content-Length that is not a number"
#define TOO_LARGE "body too large"

void clr_init(struct clr_list *l) { l->head.prev = l->head.next = &l->head; }

void clr_leave(struct clr_slot *s)
{
    if (!s->next)
        return;
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

void clr_enter(struct clr_list *l, struct clr_slot *s, struct MHD_Connection *conn)
{
    clr_leave(s);
    s->conn = conn;
    s->prev = l->head.prev;
    s->next = &l->head;
    l->head.prev->next = s;
    l->head.prev = s;
}

int clr_is_refusal(const char *fmt)
{
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        if (strcmp(fmt, refusals[i]) == 0)
            return 1;
    return 0;
}

/* Why the library cannot read conn's length, as it reads it: the first
 * Content-Length, unless any Transfer-Encoding is there; only digits, within
 * 64 bits. NULL: it can. */
static const char *unreadable_length(struct MHD_Connection *conn)
{
    const char *v = NULL;
    size_t vlen = 0;
    uint64_t n = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING,
                                      strlen(MHD_HTTP_HEADER_TRANSFER_ENCODING), NULL, NULL) == MHD_YES)
        return NULL;
    if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH,
                                      strlen(MHD_HTTP_HEADER_CONTENT_LENGTH), &v, &vlen) != MHD_YES)
        return NULL;
    if (!v || vlen == 0)
        return NOT_A_NUMBER;
    for (size_t i = 0; i < vlen; i++) {
        unsigned d = (unsigned)(v[i] - '0');
        if (d > 9)
            return NOT_A_NUMBER;
        if (n > (UINT64_MAX - d) / 10)
            return TOO_LARGE;
        n = n * 10 + d;
    }
    return NULL;
}

/* Newest first: the head just read is nearly always the last request line
 * to have come. */
struct MHD_Connection *clr_find(struct clr_list *l, const char **why)
{
    for (struct clr_slot *s = l->head.prev; s != &l->head; s = s->prev) {
        /* A whole head, no answer queued: the library is between the two. */
        if (!MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE) ||
            MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_HTTP_STATUS))
            continue;
        if (!(*why = unreadable_length(s->conn)))
            continue;
        clr_leave(s);
        return s->conn;
    }
    return NULL;
}

/* RFC 9110 5.6.7: IMF-fixdate, in English whatever the locale. */
static void http_date(char *buf, size_t len)
{
    static const char days[][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    struct tm tm;
    time_t now = time(NULL);
    gmtime_r(&now, &tm);
    snprintf(buf, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
             months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void clr_answer(struct MHD_Connection *conn, unsigned status, const char *body)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char date[40], resp[512];
    int len;
    if (!ci || ci->connect_fd < 0)
        return;
    http_date(date, sizeof(date));
    len = snprintf(resp, sizeof(resp),
                   "HTTP/1.1 %u %s\r\nDate: %s\r\nConnection: close\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                   status, MHD_get_reason_phrase_for(status), date, strlen(body), body);
    /* Non-blocking, as the library keeps the socket; never a cut answer's
     * length either (the body is an error of ours: it always fits). */
    if (len > 0 && (size_t)len < sizeof(resp))
        (void)send(ci->connect_fd, resp, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    /* Sent or not: the library's answer must find the socket shut. */
    shutdown(ci->connect_fd, SHUT_WR);
}
