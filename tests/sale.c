#include "sale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "harness.h"
#include "jwt.h"
#include "keys.h"
#include "pgconn.h"
#include "rconn.h"
#include "rpipe.h"
#include "util.h"

#define SALE_PARTS_MAX 256

struct sale {
    struct sale_params p;
    int *ports;
    /* with p.keys: the token of user user_base + i at i, the hammer's after them */
    char **tokens;
    size_t ntokens;
    struct sale_rec *recs; /* requests, then hammer */
    size_t nrecs;
    pthread_t *threads;
    size_t nthreads;
    /* the hammer's threads start together: the last one connected opens the gate */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate_ready;
    bool gate_open;
    struct timespec t0;
    _Atomic long next;
    _Atomic long answered;
    _Atomic long accepted;
    _Atomic long hammer_left;
    _Atomic int stop;
    bool joined;
};

struct worker {
    struct sale *s;
    int slot; /* connection number, or the hammer request's index */
};

/* --- HTTP/1.1 over a kept-alive connection -------------------------------- */

struct conn {
    int fd;
    int port_i; /* index into ports: where fd goes */
};

static int connect_port(int port, int timeout_ms)
{
    struct sockaddr_in sa = { 0 };
    struct timeval tv = util_timeval_ms(timeout_ms);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void conn_close(struct conn *cn)
{
    if (cn->fd >= 0)
        close(cn->fd);
    cn->fd = -1;
}

/* A connection to the first producer that takes one, starting at the
 * connection's own; a load balancer would do the same. */
static int conn_ensure(struct sale *s, struct conn *cn)
{
    char c;
    /* A kept-alive connection whose server went away (killed, restarted)
     * has its end of stream waiting: a request sent on it would count as
     * unanswered although no server ever saw it. */
    if (cn->fd >= 0 && recv(cn->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        conn_close(cn);
    if (cn->fd >= 0)
        return 0;
    for (int k = 0; k < s->p.nports; k++) {
        int i = (cn->port_i + k) % s->p.nports;
        cn->fd = connect_port(s->ports[i], s->p.timeout_ms);
        if (cn->fd >= 0) {
            cn->port_i = i;
            return 0;
        }
    }
    return -1;
}

/* Read one response; its status, or SALE_NO_ANSWER. *keep says whether the
 * connection may carry the next request. */
static int read_response(int fd, char *body, size_t bodylen, bool *keep)
{
    char buf[4096];
    size_t got = 0, hlen = 0;
    long clen = -1;
    int status = SALE_NO_ANSWER;
    *keep = false;
    if (bodylen)
        body[0] = 0;
    for (;;) {
        ssize_t r;
        if (hlen && clen >= 0 && got >= hlen + (size_t)clen)
            break;
        if (got >= sizeof(buf) - 1)
            return SALE_NO_ANSWER; /* larger than any answer of ours */
        r = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            /* without a length the end of the stream ends the body */
            if (hlen && clen < 0)
                break;
            return SALE_NO_ANSWER;
        }
        got += (size_t)r;
        buf[got] = 0;
        if (!hlen) {
            char *end = strstr(buf, "\r\n\r\n");
            if (!end)
                continue;
            hlen = (size_t)(end - buf) + 4;
            if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                return SALE_NO_ANSWER;
            *keep = strncmp(buf, "HTTP/1.1", 8) == 0;
            for (char *line = strstr(buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
                const char *h = line + 2;
                if (strncasecmp(h, "Content-Length:", 15) == 0)
                    clen = strtol(h + 15, NULL, 10);
                else if (strncasecmp(h, "Connection:", 11) == 0 && strstr(h, "close") &&
                         strstr(h, "close") < strstr(h, "\r\n"))
                    *keep = false;
            }
            if (clen < 0)
                *keep = false;
        }
    }
    buf[got] = 0;
    if (bodylen)
        snprintf(body, bodylen, "%s", buf + hlen);
    return status;
}

static int post_order(struct sale *s, struct conn *cn, int64_t user, const char *token, int64_t *order_id)
{
    char req[2048], body[128], resp[256];
    bool keep;
    int blen = token ? snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", s->p.item_id)
                     : snprintf(body, sizeof(body), "{\"user_id\":%" PRId64 ",\"item_id\":%" PRId64 "}", user,
                                s->p.item_id);
    int n = snprintf(req, sizeof(req),
                     "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "%s%s%sContent-Length: %d\r\n\r\n%s",
                     token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "", blen, body);
    if (n < 0 || (size_t)n >= sizeof(req))
        return SALE_NOT_SENT;
    *order_id = 0;
    /* A kept-alive connection the server closed meanwhile refuses the
     * write: nothing was delivered, so one fresh attempt is safe. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (conn_ensure(s, cn) != 0)
            return SALE_NOT_SENT;
        if (send(cn->fd, req, (size_t)n, MSG_NOSIGNAL) == n)
            break;
        conn_close(cn);
        if (attempt == 1)
            return SALE_NOT_SENT;
    }
    int status = read_response(cn->fd, resp, sizeof(resp), &keep);
    if (status == SALE_NO_ANSWER || !keep)
        conn_close(cn);
    if (status == 202) {
        const char *id = strstr(resp, "\"order_id\":\"");
        *order_id = id ? strtoll(id + 12, NULL, 10) : 0;
        if (*order_id <= 0)
            status = SALE_NO_ANSWER; /* a 202 without its id proves nothing */
    }
    return status;
}

/* --- threads --------------------------------------------------------------- */

static void record(struct sale *s, size_t i, int64_t user, int status, int64_t order_id)
{
    s->recs[i] = (struct sale_rec){ user, status, order_id };
    if (status == 202)
        atomic_fetch_add(&s->accepted, 1);
    atomic_fetch_add(&s->answered, 1);
}

static void sleep_until(const struct timespec *t0, long i, int rate)
{
    struct timespec at = *t0;
    int64_t ns = (int64_t)i * 1000000000 / rate;
    at.tv_sec += ns / 1000000000;
    at.tv_nsec += ns % 1000000000;
    if (at.tv_nsec >= 1000000000) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
        ;
}

static void *run_conn(void *arg)
{
    struct worker *w = arg;
    struct sale *s = w->s;
    struct conn cn = { -1, w->slot % s->p.nports };
    for (;;) {
        long i = atomic_fetch_add(&s->next, 1);
        int64_t oid;
        if (i >= s->p.requests || atomic_load(&s->stop))
            break;
        if (s->p.rate > 0)
            sleep_until(&s->t0, i, s->p.rate);
        if (atomic_load(&s->stop))
            break;
        int64_t user = s->p.user_base + i % s->p.users;
        int st = post_order(s, &cn, user, s->tokens ? s->tokens[i % s->p.users] : NULL, &oid);
        record(s, (size_t)i, user, st, oid);
    }
    conn_close(&cn);
    free(w);
    return NULL;
}

static void *run_hammer(void *arg)
{
    struct worker *w = arg;
    struct sale *s = w->s;
    struct conn cn = { -1, w->slot % s->p.nports };
    int64_t oid;
    int st = SALE_NOT_SENT;
    bool go;
    /* Connected first, then released together: the requests race for real. */
    conn_ensure(s, &cn);
    pthread_mutex_lock(&s->gate_mu);
    if (++s->gate_ready == s->p.hammer) {
        s->gate_open = true;
        pthread_cond_broadcast(&s->gate_cv);
    }
    while (!s->gate_open && !atomic_load(&s->stop))
        pthread_cond_wait(&s->gate_cv, &s->gate_mu);
    go = s->gate_open;
    pthread_mutex_unlock(&s->gate_mu);
    if (go)
        st = post_order(s, &cn, s->p.hammer_user, s->tokens ? s->tokens[s->p.users] : NULL, &oid);
    else
        oid = 0;
    record(s, (size_t)s->p.requests + (size_t)w->slot, s->p.hammer_user, st, oid);
    atomic_fetch_sub(&s->hammer_left, 1);
    conn_close(&cn);
    free(w);
    return NULL;
}

/* One token per user (and the hammer's), valid long after any sale ends:
 * signing is the slow part, so none is made while the sale runs. */
static int make_tokens(struct sale *s, int hammer)
{
    char err[256];
    int64_t now = util_wall_ms() / 1000;
    size_t n = (size_t)s->p.users + (hammer ? 1 : 0);
    if (!(s->tokens = calloc(n, sizeof(*s->tokens))))
        return -1;
    for (size_t i = 0; i < n; i++) {
        int64_t user = i < (size_t)s->p.users ? s->p.user_base + (int64_t)i : s->p.hammer_user;
        if (jwt_sign(s->p.keys, NULL, user, now, now + 6 * 3600, &s->tokens[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "# sale: signing a token for user %" PRId64 ": %s\n", user, err);
            return -1;
        }
        s->ntokens = i + 1;
    }
    return 0;
}

int sale_start(const struct sale_params *p, struct sale **out)
{
    struct sale *s = calloc(1, sizeof(*s));
    int hammer = p->hammer_user > 0 ? p->hammer : 0;
    if (!s)
        return -1;
    pthread_mutex_init(&s->gate_mu, NULL);
    pthread_cond_init(&s->gate_cv, NULL);
    s->p = *p;
    if (s->p.timeout_ms <= 0)
        s->p.timeout_ms = 20000;
    if (s->p.users <= 0 || s->p.nports <= 0 || s->p.conns <= 0)
        goto fail;
    s->ports = malloc(sizeof(int) * (size_t)p->nports);
    s->nrecs = (size_t)p->requests + (size_t)hammer;
    s->recs = calloc(s->nrecs ? s->nrecs : 1, sizeof(*s->recs));
    s->threads = calloc((size_t)p->conns + (size_t)hammer, sizeof(pthread_t));
    if (!s->ports || !s->recs || !s->threads)
        goto fail;
    memcpy(s->ports, p->ports, sizeof(int) * (size_t)p->nports);
    s->p.ports = s->ports;
    for (size_t i = 0; i < s->nrecs; i++)
        s->recs[i].status = SALE_NOT_SENT;
    if (p->keys && make_tokens(s, hammer) != 0)
        goto fail;
    atomic_store(&s->hammer_left, hammer);
    s->p.hammer = hammer;
    clock_gettime(CLOCK_MONOTONIC, &s->t0);
    for (int i = 0; i < hammer + p->conns; i++) {
        struct worker *w = malloc(sizeof(*w));
        if (!w)
            goto stop;
        w->s = s;
        w->slot = i < hammer ? i : i - hammer;
        if (pthread_create(&s->threads[s->nthreads], NULL, i < hammer ? run_hammer : run_conn, w) != 0) {
            free(w);
            goto stop;
        }
        s->nthreads++;
    }
    *out = s;
    return 0;
stop:
    /* The hammer's threads short of company would wait at the gate forever. */
    pthread_mutex_lock(&s->gate_mu);
    atomic_store(&s->stop, 1);
    pthread_cond_broadcast(&s->gate_cv);
    pthread_mutex_unlock(&s->gate_mu);
    sale_wait(s);
fail:
    sale_free(s);
    return -1;
}

void sale_stop(struct sale *s)
{
    pthread_mutex_lock(&s->gate_mu);
    atomic_store(&s->stop, 1);
    pthread_cond_broadcast(&s->gate_cv);
    pthread_mutex_unlock(&s->gate_mu);
}

void sale_wait(struct sale *s)
{
    if (!s || s->joined)
        return;
    for (size_t i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->joined = true;
}

void sale_free(struct sale *s)
{
    if (!s)
        return;
    sale_wait(s);
    pthread_mutex_destroy(&s->gate_mu);
    pthread_cond_destroy(&s->gate_cv);
    for (size_t i = 0; i < s->ntokens; i++)
        free(s->tokens[i]);
    free(s->tokens);
    free(s->threads);
    free(s->recs);
    free(s->ports);
    free(s);
}

long sale_answered(struct sale *s) { return atomic_load(&s->answered); }
long sale_accepted(struct sale *s) { return atomic_load(&s->accepted); }
bool sale_hammer_done(struct sale *s) { return atomic_load(&s->hammer_left) == 0; }

const struct sale_rec *sale_recs(const struct sale *s, size_t *n)
{
    *n = s->nrecs;
    return s->recs;
}

void sale_count(const struct sale *s, struct sale_counts *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < s->nrecs; i++) {
        const struct sale_rec *r = &s->recs[i];
        switch (r->status) {
        case 202: c->accepted++; break;
        case 409: c->duplicate++; break;
        case 410: c->sold_out++; break;
        case 404: c->unknown_item++; break;
        case 503: c->unavailable++; break;
        case 429: c->overloaded++; break;
        case SALE_NO_ANSWER: c->no_answer++; break;
        case SALE_NOT_SENT: c->not_sent++; break;
        default: c->other++; break;
        }
        if (r->status == 202 && i >= (size_t)s->p.requests)
            c->hammer_accepted++;
    }
}

/* --- PostgreSQL, Redis, Kafka ------------------------------------------------ */

static PGresult *pg_query(PGconn *pg, const char *sql, int n, const char *const *params)
{
    PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        return r;
    PQclear(r);
    return NULL;
}

static long pg_long(PGconn *pg, const char *sql, int n, const char *const *params, bool *ok)
{
    PGresult *r = pg_query(pg, sql, n, params);
    long v = -1;
    if (!r) {
        *ok = false;
        return -1;
    }
    if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* "{id,id,...}" of the waves' accepted order ids (caller frees). */
static char *accepted_array(struct sale *const *waves, int nwaves, long *count)
{
    size_t cap = 64, len = 0;
    char *a = malloc(cap);
    *count = 0;
    if (!a)
        return NULL;
    a[len++] = '{';
    for (int w = 0; w < nwaves; w++)
        for (size_t i = 0; i < waves[w]->nrecs; i++) {
            if (waves[w]->recs[i].status != 202)
                continue;
            if (cap - len < 32) {
                char *b = realloc(a, cap *= 2);
                if (!b) {
                    free(a);
                    return NULL;
                }
                a = b;
            }
            len += (size_t)snprintf(a + len, cap - len, "%s%" PRId64, *count ? "," : "",
                                    waves[w]->recs[i].order_id);
            (*count)++;
        }
    a[len++] = '}';
    a[len] = 0;
    return a;
}

static long redis_long(struct rp *rc, const char *cmd, const char *key, bool *ok)
{
    enum rp_status st;
    char err[256];
    redisReply *r = rp_callf(rc, key, &st, err, sizeof(err), "%s %s", cmd, key);
    long v = -1;
    if (!r || r->type == REDIS_REPLY_ERROR)
        *ok = false;
    else if (r->type == REDIS_REPLY_INTEGER)
        v = (long)r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtol(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

static rd_kafka_t *kafka_reader(const struct cfg *c, const char *group)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(c, "admin");
    if (rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk)
        rd_kafka_conf_destroy(conf);
    return rk;
}

bool sale_group_caught_up(const struct cfg *c, const char *group, const char *topic)
{
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_topic_partition_list_t *l = NULL;
    rd_kafka_topic_t *t = NULL;
    bool caught = false;
    int parts;
    rd_kafka_t *rk = kafka_reader(c, group);
    if (!rk)
        return false;
    t = rd_kafka_topic_new(rk, topic, NULL);
    if (!t || rd_kafka_metadata(rk, 0, t, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 ||
        md->topics[0].err)
        goto out;
    parts = md->topics[0].partition_cnt;
    if (parts <= 0 || parts > SALE_PARTS_MAX)
        goto out;
    l = rd_kafka_topic_partition_list_new(parts);
    for (int i = 0; i < parts; i++)
        rd_kafka_topic_partition_list_add(l, topic, i);
    if (rd_kafka_committed(rk, l, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        goto out;
    caught = true;
    for (int i = 0; i < parts && caught; i++) {
        int64_t lo, hi;
        if (rd_kafka_query_watermark_offsets(rk, topic, i, &lo, &hi, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            caught = false;
        else if (hi > lo && l->elems[i].offset != hi)
            caught = false;
    }
out:
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    if (md)
        rd_kafka_metadata_destroy(md);
    if (t)
        rd_kafka_topic_destroy(t);
    rd_kafka_destroy(rk);
    return caught;
}

static void item_key(const struct cfg *c, int64_t item, enum keys_item_part part, char *key)
{
    keys_item(key, KEYS_MAX, c->redis.key_prefix, item, part);
}

/* Reservations in the item's pending hash whose order PostgreSQL does not
 * hold yet: the ones still on their way. -1 on error. */
static long pending_unpersisted(PGconn *pg, struct rp *rc, const char *kpend)
{
    enum rp_status st;
    char err[256];
    redisReply *r = rp_callf(rc, kpend, &st, err, sizeof(err), "HKEYS %s", kpend);
    size_t cap = 64, len = 0;
    long n = -1;
    char *a = NULL;
    bool ok = true;
    if (!r || r->type != REDIS_REPLY_ARRAY)
        goto out;
    if (r->elements == 0) {
        n = 0;
        goto out;
    }
    if (!(a = malloc(cap)))
        goto out;
    a[len++] = '{';
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        /* order ids are decimal; anything else would not be ours */
        if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 20 || strspn(e->str, "0123456789") != e->len)
            continue;
        while (cap - len < e->len + 3) {
            char *b = realloc(a, cap *= 2);
            if (!b)
                goto out;
            a = b;
        }
        len += (size_t)snprintf(a + len, cap - len, "%s%s", len > 1 ? "," : "", e->str);
    }
    a[len++] = '}';
    a[len] = 0;
    const char *params[] = { a };
    n = pg_long(pg, "SELECT count(*) FROM unnest($1::bigint[]) AS p(id) WHERE NOT EXISTS "
                    "(SELECT 1 FROM orders o WHERE o.order_id = p.id)",
                1, params, &ok);
    if (!ok)
        n = -1;
out:
    free(a);
    freeReplyObject(r);
    return n;
}

int sale_settle(const struct cfg *c, int64_t item, struct sale *const *waves, int nwaves, int timeout_ms,
                char *why, size_t whylen)
{
    char err[512], sitem[24], kpend[KEYS_MAX], kunpub[KEYS_MAX];
    PGconn *pg = NULL;
    struct rp *rc = NULL;
    long want = 0, found = -1, pending = -1, unpub = -1;
    bool caught = false;
    int ret = -1;
    int64_t end = util_mono_ms() + timeout_ms;
    char *ids = accepted_array(waves, nwaves, &want);
    if (!ids) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    snprintf(sitem, sizeof(sitem), "%" PRId64, item);
    item_key(c, item, KEYS_ITEM_PENDING, kpend);
    item_key(c, item, KEYS_ITEM_UNPUB, kunpub);
    for (;;) {
        bool ok = true;
        /* Reconnect each round: the services are the ones being faulted. */
        if (!pg && pgconn_open_as(c, CFG_ROLE_ADMIN, "seckill-tests", &pg, err, sizeof(err)) != 0)
            pg = NULL;
        if (!rc && harness_rp_open(c, &rc, err, sizeof(err)) != 0)
            rc = NULL;
        if (pg && rc) {
            const char *params[] = { sitem, ids };
            found = pg_long(pg, "SELECT count(*) FROM orders WHERE item_id = $1 AND order_id = ANY($2::bigint[])",
                            2, params, &ok);
            pending = pending_unpersisted(pg, rc, kpend);
            ok = ok && pending >= 0;
            unpub = redis_long(rc, "ZCARD", kunpub, &ok);
            if (ok && found == want && pending == 0 && unpub == 0) {
                caught = sale_group_caught_up(c, c->consumer.group_id, c->kafka.topic);
                if (caught) {
                    ret = 0;
                    break;
                }
            }
            if (!ok) {
                PQfinish(pg);
                rp_close(rc);
                pg = NULL;
                rc = NULL;
            }
        }
        if (util_mono_ms() >= end)
            break;
        util_sleep_ms(100);
    }
    if (ret != 0) {
        caught = sale_group_caught_up(c, c->consumer.group_id, c->kafka.topic);
        snprintf(why, whylen,
                 "not drained after %d ms: %ld of %ld accepted orders in PostgreSQL, %ld reservations "
                 "not persisted and %ld unpublished in Redis, group %s %s",
                 timeout_ms, found, want, pending, unpub, c->consumer.group_id,
                 caught ? "caught up with the topic" : "not caught up with the topic");
    }
    if (pg)
        PQfinish(pg);
    rp_close(rc);
    free(ids);
    return ret;
}

struct acc {
    int64_t order_id, user_id;
};

static int cmp_acc(const void *a, const void *b)
{
    const struct acc *x = a, *y = b;
    return (x->order_id > y->order_id) - (x->order_id < y->order_id);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static bool has_i64(const int64_t *v, size_t n, int64_t x)
{
    return n && bsearch(&x, v, n, sizeof(*v), cmp_i64) != NULL;
}

int sale_verify(const struct cfg *c, int64_t item, struct sale *const *waves, int nwaves, int64_t hammer_user,
                struct sale_report *r, char *why, size_t whylen)
{
    char err[512], sitem[24], key[KEYS_MAX];
    PGconn *pg = NULL;
    PGresult *rows = NULL;
    struct rp *rc = NULL;
    struct acc *acc = NULL;
    int64_t *amb = NULL;
    size_t nacc = 0, namb = 0, total = 0;
    bool ok = true;
    int ret = -1;

    memset(r, 0, sizeof(*r));
    for (int w = 0; w < nwaves; w++)
        total += waves[w]->nrecs;
    acc = calloc(total + 1, sizeof(*acc));
    amb = calloc(total + 1, sizeof(*amb));
    if (!acc || !amb) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    for (int w = 0; w < nwaves; w++)
        for (size_t i = 0; i < waves[w]->nrecs; i++) {
            const struct sale_rec *q = &waves[w]->recs[i];
            if (q->status == 202)
                acc[nacc++] = (struct acc){ q->order_id, q->user_id };
            else if (sale_ambiguous(q->status))
                amb[namb++] = q->user_id;
            else if (q->status == 404)
                r->unknown_item++;
            else if (q->status != 409 && q->status != 410 && q->status != 429 && q->status != SALE_NOT_SENT)
                r->other_status++;
            if (q->user_id == hammer_user && q->status == 202)
                r->hammer_accepted++;
        }
    r->accepted = (long)nacc;
    r->ambiguous = (long)namb;
    qsort(acc, nacc, sizeof(*acc), cmp_acc);
    qsort(amb, namb, sizeof(*amb), cmp_i64);
    for (size_t i = 1; i < nacc; i++)
        if (acc[i].order_id == acc[i - 1].order_id)
            r->duplicates++; /* one order id told to two buyers */

    snprintf(sitem, sizeof(sitem), "%" PRId64, item);
    if (pgconn_open_as(c, CFG_ROLE_ADMIN, "seckill-tests", &pg, err, sizeof(err)) != 0) {
        snprintf(why, whylen, "postgres: %s", err);
        pg = NULL;
        goto out;
    }
    const char *p1[] = { sitem };
    rows = pg_query(pg, "SELECT order_id, user_id FROM orders WHERE item_id = $1", 1, p1);
    if (!rows) {
        snprintf(why, whylen, "postgres: orders: %s", PQerrorMessage(pg));
        goto out;
    }
    r->orders = PQntuples(rows);
    {
        /* every 202's row, with its buyer */
        size_t found = 0;
        for (int i = 0; i < PQntuples(rows); i++) {
            struct acc key_row = { strtoll(PQgetvalue(rows, i, 0), NULL, 10), strtoll(PQgetvalue(rows, i, 1), NULL, 10) };
            const struct acc *a = nacc ? bsearch(&key_row, acc, nacc, sizeof(*acc), cmp_acc) : NULL;
            if (a && a->user_id == key_row.user_id)
                found++;
            else if (has_i64(amb, namb, key_row.user_id))
                r->from_ambiguous++;
            else
                r->unexplained++;
            if (key_row.user_id == hammer_user)
                r->hammer_orders++;
        }
        /* 202s whose row is missing: rows are unique by order id, so the
         * ones found account for that many distinct 202s */
        size_t distinct = 0;
        for (size_t i = 0; i < nacc; i++)
            distinct += i == 0 || acc[i].order_id != acc[i - 1].order_id;
        r->lost = (long)(distinct - found);
    }
    r->duplicates += pg_long(pg,
                             "SELECT count(*) FROM (SELECT user_id FROM orders WHERE item_id = $1 "
                             "GROUP BY user_id HAVING count(*) > 1) d",
                             1, p1, &ok);
    r->stock_total = pg_long(pg, "SELECT stock_total FROM items WHERE item_id = $1", 1, p1, &ok);
    r->stock_left = pg_long(pg, "SELECT stock_left FROM items WHERE item_id = $1", 1, p1, &ok);
    r->rejections = pg_long(pg, "SELECT count(*) FROM order_rejections WHERE item_id = $1", 1, p1, &ok);
    if (!ok) {
        snprintf(why, whylen, "postgres: %s", PQerrorMessage(pg));
        goto out;
    }
    r->oversold = r->orders > r->stock_total ? r->orders - r->stock_total : 0;

    if (harness_rp_open(c, &rc, err, sizeof(err)) != 0) {
        snprintf(why, whylen, "redis: %s", err);
        rc = NULL;
        goto out;
    }
    item_key(c, item, KEYS_ITEM_STOCK, key);
    r->redis_stock = redis_long(rc, "GET", key, &ok);
    item_key(c, item, KEYS_ITEM_PENDING, key);
    r->redis_pending = redis_long(rc, "HLEN", key, &ok);
    r->redis_pending_unpersisted = pending_unpersisted(pg, rc, key);
    ok = ok && r->redis_pending_unpersisted >= 0;
    item_key(c, item, KEYS_ITEM_UNPUB, key);
    r->redis_unpub = redis_long(rc, "ZCARD", key, &ok);
    item_key(c, item, KEYS_ITEM_BUYERS, key);
    r->redis_buyers = redis_long(rc, "SCARD", key, &ok);
    if (!ok) {
        snprintf(why, whylen, "redis: a read of the item's keys failed");
        goto out;
    }
    ret = 0;
out:
    if (rows)
        PQclear(rows);
    if (pg)
        PQfinish(pg);
    rp_close(rc);
    free(acc);
    free(amb);
    return ret;
}

void sale_report_print(FILE *f, const char *prefix, const struct sale_report *r)
{
    fprintf(f,
            "%saccepted %ld, ambiguous %ld, orders %ld (%ld from ambiguous requests), lost %ld, unexplained %ld, "
            "duplicates %ld, oversold %ld\n",
            prefix, r->accepted, r->ambiguous, r->orders, r->from_ambiguous, r->lost, r->unexplained, r->duplicates,
            r->oversold);
    fprintf(f,
            "%sstock %ld, left %ld (PostgreSQL), %ld (Redis); Redis pending %ld (%ld not persisted), unpublished %ld, "
            "buyers %ld; rejections %ld; 404s %ld, unexpected answers %ld; hammer: %ld accepted, %ld orders\n",
            prefix, r->stock_total, r->stock_left, r->redis_stock, r->redis_pending, r->redis_pending_unpersisted,
            r->redis_unpub, r->redis_buyers,
            r->rejections, r->unknown_item, r->other_status, r->hammer_accepted, r->hammer_orders);
}

/* --- metrics ---------------------------------------------------------------- */

char *sale_http_get(int port, const char *path, int *status)
{
    char req[256], *buf = NULL;
    size_t len = 0, cap = 0;
    int fd = connect_port(port, 5000);
    *status = -1;
    if (fd < 0)
        return NULL;
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto fail;
    for (;;) {
        if (cap - len < 4096) {
            char *b = realloc(buf, cap = cap ? cap * 2 : 16384);
            if (!b)
                goto fail;
            buf = b;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            goto fail;
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!buf)
        return NULL;
    buf[len] = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", status) != 1)
        *status = -1;
    char *body = strstr(buf, "\r\n\r\n");
    if (body)
        memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
fail:
    close(fd);
    free(buf);
    return NULL;
}

int64_t sale_metric(int port, const char *name)
{
    int status;
    char needle[256], *body = sale_http_get(port, "/metrics", &status);
    int64_t v = -1;
    if (!body)
        return -1;
    snprintf(needle, sizeof(needle), "\n%s ", name);
    /* the first line has no newline before it */
    if (strncmp(body, needle + 1, strlen(needle + 1)) == 0)
        v = strtoll(body + strlen(needle + 1), NULL, 10);
    else {
        char *at = strstr(body, needle);
        if (at)
            v = strtoll(at + strlen(needle), NULL, 10);
    }
    free(body);
    return status == 200 ? v : -1;
}

/* --- an ACL user with the consumer's rules ---------------------------------- */

/* The rules of role's user (producer, consumer) for c's key prefix, as the
 * stack writes them; they must name must_have. */
static void role_rules(const char *role, const struct cfg *c, const char *must_have, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "bash -c 'STATE=/nonexistent; . \"$0/scripts/stack.d/redis.sh\" && redis_acl_rules \"$1\" \"$2\"' "
             "'%s' '%s' '%s'",
             harness_root(), role, c->redis.key_prefix);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    assert_int_equal(pclose(f), 0);
    assert_non_null(strstr(out, must_have));
}

void sale_acl_user(const char *role, const char *must_have, const char *tag, char *user, size_t ulen,
                   char *password, size_t plen)
{
    char rules[16384], pw[80], rnd[17], *save = NULL;
    const char *argv[1024];
    int n = 0;
    role_rules(role, &harness_conf, must_have, rules, sizeof(rules));
    assert_int_equal(util_random_hex(rnd, 8), 0);
    snprintf(user, ulen, "sktest-%s-%d", tag, (int)getpid());
    snprintf(password, plen, "%c-%s", role[0], rnd);
    snprintf(pw, sizeof(pw), ">%s", password);
    argv[n++] = "ACL", argv[n++] = "SETUSER", argv[n++] = user, argv[n++] = "reset", argv[n++] = "on";
    argv[n++] = pw;
    /* ACL SETUSER puts the selectors that come apart at their spaces back
     * together (Redis 7.0). */
    for (char *t = strtok_r(rules, " \n", &save); t && n < 1020; t = strtok_r(NULL, " \n", &save))
        argv[n++] = t;
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = redisCommandArgv(rc, n, argv, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("ACL SETUSER %s: %s", user, r->str);
    freeReplyObject(r);
    redisFree(rc);
}

void sale_consumer_acl_user(const char *tag, char *user, size_t ulen, char *password, size_t plen)
{
    sale_acl_user("consumer", ":returned", tag, user, ulen, password, plen);
}

void sale_acl_user_switch(const char *user, bool on)
{
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "ACL SETUSER %s %s", user, on ? "on" : "off"));
    if (!on)
        freeReplyObject(harness_cmd(rc, "CLIENT KILL USER %s", user));
    redisFree(rc);
}
