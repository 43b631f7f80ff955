/* httpd: a small read-only HTTP endpoint (libmicrohttpd) for /metrics and
 * /healthz: the consumer's, and the producer's operator listener (apart
 * from its buyers' port). GET and HEAD only; anything else is 405.
 *
 * The handler runs on the server's own thread and must not block. */
#ifndef SECKILL_HTTPD_H
#define SECKILL_HTTPD_H

#include "metrics.h"

struct httpd;

/* Fill body for a GET of path; return the HTTP status. Content type is
 * Prometheus text for /metrics, JSON otherwise. */
typedef int (*httpd_handler)(const char *path, struct mbuf *body, void *arg);

/* Listen on addr:port (port 0 disables: returns 0 with *out NULL).
 * 0, or -1 with the reason in err. */
int httpd_start(const char *addr, int port, httpd_handler fn, void *arg, struct httpd **out,
                char *err, size_t errlen);
void httpd_stop(struct httpd *h);

/* Fill a sockaddr_in for addr:port; 0 or -1 (shared with the producer). */
struct sockaddr_in;
int httpd_sockaddr(const char *addr, int port, struct sockaddr_in *sa);

#endif
