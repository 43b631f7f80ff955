#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"
#include "pmetrics.h"

struct ops {
    struct httpd *h;
    struct ingress *g;
};

/* httpd's thread. */
static int on_http(const char *path, struct mbuf *body, void *arg)
{
    struct ops *o = arg;
    if (strcmp(path, "/metrics") == 0) {
        pm_render(body);
        return 200;
    }
    if (strcmp(path, "/healthz") == 0)
        return ing_health_render(o->g, body);
    mbuf_printf(body, "{\"status\":\"not_found\"}");
    return 404;
}

int ops_start(const struct cfg *c, struct ingress *g, struct ops **out, char *err, size_t errlen)
{
    char why[256];
    struct ops *o;
    *out = NULL;
    if (c->producer.metrics_port == 0)
        return 0;
    if (!(o = calloc(1, sizeof(*o)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->g = g;
    if (httpd_start(c->producer.metrics_listen, c->producer.metrics_port, on_http, o, &o->h, why,
                    sizeof(why)) != 0) {
        snprintf(err, errlen, "operator listener (producer.metrics_listen, metrics_port): %s", why);
        free(o);
        return -1;
    }
    *out = o;
    return 0;
}

void ops_stop(struct ops *o)
{
    if (!o)
        return;
    httpd_stop(o->h);
    free(o);
}
