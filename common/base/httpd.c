#include "httpd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct httpd {
    struct MHD_Daemon *mhd;
    httpd_handler fn;
    void *arg;
};

int httpd_sockaddr(const char *addr, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, addr, &sa->sin_addr) == 1 ? 0 : -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct httpd *h = cls;
    struct mbuf body = { 0 };
    struct MHD_Response *resp;
    enum MHD_Result ret;
    int status;
    (void)version;
    (void)upload_data;
    (void)con_cls;
    /* HEAD: libmicrohttpd sends the headers of the GET and no body. */
    if ((strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) || *upload_data_size != 0) {
        mbuf_printf(&body, "{\"status\":\"method_not_allowed\"}\n");
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else {
        status = h->fn(url, &body, h->arg);
    }
    if (body.oom) {
        mbuf_free(&body);
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(body.len, body.data ? body.data : (char *)"",
                                           body.data ? MHD_RESPMEM_MUST_FREE
                                                     : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        mbuf_free(&body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            strcmp(url, "/metrics") == 0 ? "text/plain; version=0.0.4"
                                                         : "application/json");
    ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

int httpd_start(const char *addr, int port, httpd_handler fn, void *arg, struct httpd **out,
                char *err, size_t errlen)
{
    struct sockaddr_in sa;
    struct httpd *h;
    *out = NULL;
    if (port == 0)
        return 0;
    if (httpd_sockaddr(addr, port, &sa) != 0) {
        snprintf(err, errlen, "bad listen address '%s'", addr);
        return -1;
    }
    h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->fn = fn;
    h->arg = arg;
    /* Scrapes are rare and small: one polling thread, few connections, short
     * timeouts so an idle scraper cannot hold a slot. */
    h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port,
                              NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, &sa,
                              MHD_OPTION_CONNECTION_LIMIT, 32u, MHD_OPTION_CONNECTION_TIMEOUT,
                              10u, MHD_OPTION_END);
    if (!h->mhd) {
        snprintf(err, errlen, "cannot listen on %s:%d", addr, port);
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void httpd_stop(struct httpd *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->mhd);
    free(h);
}
