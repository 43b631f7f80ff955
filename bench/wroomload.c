/* bench/wroomload: the buyers of a waiting-room sale (issue #58), as one
 * process on one thread: an epoll loop over CONNS keep-alive HTTP/1.1
 * connections to a producer (producer.auth = "jwt": each buyer sends its
 * bearer token, line U of TOKENS for user U, as bench/sale.lua does).
 *
 *   build/bench/wroomload sale --port P --item I --tokens FILE --buyers N
 *       [--late L] [--join-s S] [--late-s S] --starts-ms MS [--conns C]
 *       [--deadline-s S] [--opening-spread-ms MS] --out DIR
 *   build/bench/wroomload rate --port P --item I --tokens FILE --first U
 *       --count M --per-s R --kind join|poll|buy [--conns C] [--prefix NAME]
 *
 * sale: the scenario of issue #58. Users 1..N join (POST /api/v1/queue/I)
 * on an even schedule over the S seconds before the opening (starts_ms),
 * the last one due 200 ms (a tenth of S, if less) before it,
 * users N+1..N+L over the S seconds after it. Each buyer then does what the
 * room tells it: asks again (GET) at the answer's poll_after_s; once
 * admitted, buys at once (POST /api/v1/seckill with its Seckill-Admission
 * header); a buyer passed over ("none") joins again; one told sold_out, or
 * who bought, is done. With --opening-spread-ms MS a buyer told to wait
 * before the opening asks again at the opening (starts_at plus a random
 * delay under MS) when that comes before its poll_after_s: a client that
 * also reads starts_at (off by default: the buyers follow poll_after_s).
 * Writes DIR/buyers.tsv (one row per buyer: its join, what the room said,
 * its admission's nonce, its buy, when it was told sold out) and
 * DIR/buys.tsv (one row per buy call), and prints "key value" lines.
 *
 * rate: M requests of one kind, users U..U+M-1, one each, at R a second on
 * a fixed schedule (the bench's calibration of a join, a position poll and
 * a sold-out buy's cost). Prints "key value" lines, each named PREFIX_...
 *
 * Open loop: every request has a time it is due (its place in the
 * schedule, or the moment the answer before it said to come back), whatever
 * else is outstanding. A request that finds every connection busy waits for
 * one; how late each left (sent - due) is measured and printed per kind,
 * with the join rate achieved against the one offered, so a run in which
 * the generator did not keep its schedule says so (it shares two cores with
 * the producer, Redis, Kafka, PostgreSQL and the consumer). Times are the
 * wall clock in microseconds (the producer's and Redis's clock: starts_ms
 * is one). The generator's own CPU (getrusage) is printed too. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define CONNS_MAX 1024
#define OUT_MAX 2048
#define IN_MAX 8192
#define WORD_MAX 40
/* A request that failed for a reason that may pass (503, 429, a lost
 * connection) is sent again after this, at most RETRIES_MAX times. */
#define RETRY_US 1000000
#define RETRIES_MAX 30

enum kind { K_JOIN, K_POLL, K_BUY, K_N };
static const char *const kind_name[K_N] = { "join", "poll", "buy" };
enum done { D_NOT, D_BOUGHT, D_SOLD_OUT, D_ENDED, D_GAVE_UP };
static const char *const done_name[] = { "unfinished", "bought", "sold_out", "ended", "gave_up" };

struct buyer {
    int64_t user;
    int64_t due, sent; /* the request pending or in flight */
    int64_t join_due, join_sent, join_ans; /* the first join */
    int64_t adm_ans, nonce;                /* the first admission */
    int64_t soldout_ans;   /* when first told sold out (an ask, or a buy's 410) */
    int64_t last_live_ans; /* the last answer that said waiting or admitted */
    char *adm;             /* the admission token */
    int32_t polls, joins, tries, join_pos; /* join_pos: -1 null (before the opening), -2 no answer */
    uint8_t kind, done;
};

struct conn {
    int fd, idle;  /* idle: in G.idle */
    int32_t buyer; /* in flight, or -1 */
    size_t olen, ooff, ilen;
    char out[OUT_MAX], in[IN_MAX];
};

/* Answers counted by kind and word. */
struct tally {
    int kind, http;
    char word[WORD_MAX];
    int64_t n;
};

/* A growing array of int64_t. */
struct vec {
    int64_t *v;
    size_t n, cap;
};

static struct {
    int rate_mode;
    int port, nconns;
    int64_t item, starts_us, opening_spread_us, deadline_us;
    char **tokens;
    size_t ntokens;
    struct buyer *b;
    int32_t nb, ndone;
    /* due requests: a min-heap by time, then a FIFO waiting for a connection */
    int64_t *hdue;
    int32_t *hidx, hn;
    int32_t *ring, rhead, rtail, rcap;
    struct conn conns[CONNS_MAX];
    int32_t idle[CONNS_MAX], nidle;
    int ep;
    struct tally tally[256];
    int ntally;
    struct vec late[K_N], lat[K_N];
    int64_t sent[K_N], conn_errors, first_join_sent, last_join_sent;
    FILE *buys;
} G;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *msg)
{
    fprintf(stderr, "wroomload: %s\n", msg);
    exit(1);
}

static void vec_add(struct vec *v, int64_t x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 4096;
        if (!(v->v = realloc(v->v, v->cap * sizeof(*v->v))))
            die("out of memory");
    }
    v->v[v->n++] = x;
}

/* The q-quantile of v (sorted in place; nearest rank), or 0 when empty. */
static int64_t vec_q(struct vec *v, double q)
{
    if (!v->n)
        return 0;
    qsort(v->v, v->n, sizeof(*v->v), util_cmp_i64);
    size_t i = (size_t)(q * (double)v->n + 0.999999);
    i = i < 1 ? 1 : i > v->n ? v->n : i;
    return v->v[i - 1];
}

/* --- the schedule: a heap by due time, then the FIFO of the due --------- */

static void heap_push(int32_t b, int64_t due)
{
    int32_t i = G.hn++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (G.hdue[p] <= due)
            break;
        G.hdue[i] = G.hdue[p];
        G.hidx[i] = G.hidx[p];
        i = p;
    }
    G.hdue[i] = due;
    G.hidx[i] = b;
}

static int32_t heap_pop(void)
{
    int32_t top = G.hidx[0], i = 0;
    int64_t due = G.hdue[--G.hn];
    int32_t idx = G.hidx[G.hn];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= G.hn)
            break;
        if (c + 1 < G.hn && G.hdue[c + 1] < G.hdue[c])
            c++;
        if (G.hdue[c] >= due)
            break;
        G.hdue[i] = G.hdue[c];
        G.hidx[i] = G.hidx[c];
        i = c;
    }
    G.hdue[i] = due;
    G.hidx[i] = idx;
    return top;
}

static void ring_push(int32_t b)
{
    G.ring[G.rtail] = b;
    G.rtail = (G.rtail + 1) % G.rcap;
}

/* Buyer b's next request: kind k, due at due (now or later). */
static void schedule(int32_t b, enum kind k, int64_t due)
{
    G.b[b].kind = (uint8_t)k;
    G.b[b].due = due;
    heap_push(b, due);
}

static void finish(int32_t b, enum done d)
{
    if (G.b[b].done)
        return;
    G.b[b].done = (uint8_t)d;
    G.ndone++;
}

/* --- connections ---------------------------------------------------------- */

static void conn_open(struct conn *c)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)G.port) };
    int one = 1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        die("socket");
    /* Loopback: the connect is done when it returns. */
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("wroomload: connect");
        exit(1);
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)(c - G.conns) };
    if (epoll_ctl(G.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl");
    c->buyer = -1;
    c->ilen = c->olen = c->ooff = 0;
}

static void request_again(int32_t b, int64_t when);

/* The server closed c, or it broke: open it again; a request in flight on
 * it is sent again (a join or an ask is the same place twice; a buy with
 * the same admission is refused as used if the first one got through, and
 * counted so). */
static void conn_idle(struct conn *c)
{
    c->buyer = -1;
    if (!c->idle) {
        c->idle = 1;
        G.idle[G.nidle++] = (int32_t)(c - G.conns);
    }
}

static void conn_reset(struct conn *c, int64_t now)
{
    int32_t b = c->buyer;
    epoll_ctl(G.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conn_open(c);
    G.conn_errors++;
    if (b >= 0)
        request_again(b, now);
    conn_idle(c);
}

/* The request of buyer b into c's buffer. */
static void build(struct conn *c, const struct buyer *b)
{
    const char *tok = G.tokens[b->user - 1];
    int n;
    if (b->kind == K_BUY) {
        char body[64];
        int blen = snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", G.item);
        n = snprintf(c->out, OUT_MAX,
                     "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\n%s%s%sContent-Length: %d\r\n\r\n%s",
                     tok, b->adm ? "Seckill-Admission: " : "", b->adm ? b->adm : "", b->adm ? "\r\n" : "", blen,
                     body);
    } else {
        n = snprintf(c->out, OUT_MAX,
                     "%s /api/v1/queue/%" PRId64 " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n%s\r\n",
                     b->kind == K_JOIN ? "POST" : "GET", G.item, tok, b->kind == K_JOIN ? "Content-Length: 0\r\n" : "");
    }
    if (n < 0 || n >= OUT_MAX)
        die("a request does not fit the buffer (token too long?)");
    c->olen = (size_t)n;
    c->ooff = 0;
}

static void conn_flush(struct conn *c, int64_t now)
{
    while (c->ooff < c->olen) {
        ssize_t w = write(c->fd, c->out + c->ooff, c->olen - c->ooff);
        if (w > 0) {
            c->ooff += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)(c - G.conns) };
            epoll_ctl(G.ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (w < 0 && errno == EINTR)
            continue;
        conn_reset(c, now);
        return;
    }
}

static void send_on(struct conn *c, int32_t bi, int64_t now)
{
    struct buyer *b = &G.b[bi];
    b->sent = now;
    vec_add(&G.late[b->kind], now - b->due);
    G.sent[b->kind]++;
    if (b->kind == K_JOIN) {
        if (!G.first_join_sent)
            G.first_join_sent = now;
        G.last_join_sent = now;
        if (!b->join_sent) {
            b->join_sent = now;
            b->join_due = b->due;
        }
    }
    c->buyer = bi;
    build(c, b);
    conn_flush(c, now);
}

/* Every request due by now to the FIFO, then the FIFO to idle connections. */
static void dispatch(int64_t now)
{
    while (G.hn > 0 && G.hdue[0] <= now)
        ring_push(heap_pop());
    while (G.nidle > 0 && G.rhead != G.rtail) {
        int32_t b = G.ring[G.rhead];
        G.rhead = (G.rhead + 1) % G.rcap;
        struct conn *c = &G.conns[G.idle[--G.nidle]];
        c->idle = 0;
        send_on(c, b, now);
    }
}

/* --- answers ---------------------------------------------------------------- */

/* The string value of "key" in a flat JSON object into out; 0 or -1. */
static int json_str(const char *body, const char *key, char *out, size_t len)
{
    char pat[48];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *p = strstr(body, pat), *e;
    if (!p)
        return -1;
    p += strlen(pat);
    if (!(e = strchr(p, '"')) || (size_t)(e - p) >= len)
        return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 0;
}

/* The integer value of "key"; dflt when absent or null. */
static int64_t json_int(const char *body, const char *key, int64_t dflt)
{
    char pat[48];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(body, pat);
    if (!p)
        return dflt;
    p += strlen(pat);
    if (*p < '0' || *p > '9')
        return dflt;
    return strtoll(p, NULL, 10);
}

/* The value of "key", a number of seconds (the room says poll_after_s to
 * the tenth), in µs; dflt_us when absent, null or out of [0, 3600]. */
static int64_t json_secs_us(const char *body, const char *key, int64_t dflt_us)
{
    char pat[48], *end;
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(body, pat);
    if (!p)
        return dflt_us;
    p += strlen(pat);
    if (*p < '0' || *p > '9')
        return dflt_us;
    double v = strtod(p, &end);
    if (end == p || !(v >= 0 && v <= 3600))
        return dflt_us;
    return (int64_t)(v * 1e6);
}

static void count(int kind, int http, const char *word)
{
    for (int i = 0; i < G.ntally; i++)
        if (G.tally[i].kind == kind && G.tally[i].http == http && strcmp(G.tally[i].word, word) == 0) {
            G.tally[i].n++;
            return;
        }
    if (G.ntally < (int)(sizeof(G.tally) / sizeof(G.tally[0]))) {
        struct tally *t = &G.tally[G.ntally++];
        t->kind = kind;
        t->http = http;
        snprintf(t->word, sizeof(t->word), "%s", word);
        t->n = 1;
    }
}

/* Send b's request again later, or give up after RETRIES_MAX. */
static void request_again(int32_t b, int64_t when)
{
    if (++G.b[b].tries > RETRIES_MAX) {
        finish(b, D_GAVE_UP);
        return;
    }
    schedule(b, (enum kind)G.b[b].kind, when);
}

/* When a waiter asks again: poll_after_s from now; with --opening-spread-ms,
 * at the opening (and a random delay) when that is sooner. */
static int64_t next_ask(const char *body, int64_t now, int before_opening)
{
    int64_t at = now + json_secs_us(body, "poll_after_s", 1000000);
    if (before_opening && G.opening_spread_us > 0 && G.starts_us > now) {
        int64_t open = G.starts_us + (int64_t)util_rand_below((uint64_t)G.opening_spread_us);
        if (open < at)
            at = open;
    }
    return at;
}

static void admitted(int32_t bi, const char *body, int64_t now)
{
    struct buyer *b = &G.b[bi];
    char tok[512];
    b->last_live_ans = now;
    if (json_str(body, "admission", tok, sizeof(tok)) != 0) {
        request_again(bi, now + RETRY_US);
        return;
    }
    if (!b->adm) {
        b->adm_ans = now;
        /* item.user.starts.minted.expires.NONCE.kid:mac: the place in the line */
        const char *p = tok;
        for (int i = 0; i < 5 && p; i++)
            if ((p = strchr(p, '.')))
                p++;
        b->nonce = p ? strtoll(p, NULL, 10) : -1;
    }
    free(b->adm);
    if (!(b->adm = strdup(tok)))
        die("out of memory");
    b->tries = 0;
    schedule(bi, K_BUY, now);
}

/* A join's or an ask's answer (wroom.h's states, or a refusal). */
static void room_answer(int32_t bi, int http, const char *body, int64_t now)
{
    struct buyer *b = &G.b[bi];
    char word[WORD_MAX] = "?";
    if (json_str(body, "state", word, sizeof(word)) != 0)
        json_str(body, "status", word, sizeof(word));
    count(b->kind, http, word);
    if (b->kind == K_JOIN) {
        b->joins++;
        if (!b->join_ans)
            b->join_ans = now;
    } else {
        b->polls++;
    }
    if (G.rate_mode) {
        finish(bi, D_ENDED);
        return;
    }
    if (http != 200) {
        request_again(bi, now + RETRY_US); /* not_open, 429, 503 ... */
        return;
    }
    if (strcmp(word, "waiting") == 0) {
        int64_t pos = json_int(body, "position", -1);
        if (b->kind == K_JOIN && b->join_pos == -2)
            b->join_pos = (int32_t)pos;
        b->last_live_ans = now;
        b->tries = 0;
        schedule(bi, K_POLL, next_ask(body, now, pos < 0));
    } else if (strcmp(word, "admitted") == 0) {
        admitted(bi, body, now);
    } else if (strcmp(word, "sold_out") == 0) {
        if (b->kind == K_JOIN && b->join_pos == -2)
            b->join_pos = -3; /* told sold out at the door */
        b->soldout_ans = b->soldout_ans ? b->soldout_ans : now;
        finish(bi, D_SOLD_OUT);
    } else if (strcmp(word, "bought") == 0) {
        finish(bi, D_BOUGHT);
    } else if (strcmp(word, "ended") == 0) {
        finish(bi, D_ENDED);
    } else if (strcmp(word, "none") == 0) {
        schedule(bi, K_JOIN, now); /* passed over: back in line */
    } else {
        request_again(bi, now + RETRY_US);
    }
}

/* A buy's answer. */
static void buy_answer(int32_t bi, int http, const char *body, int64_t now)
{
    struct buyer *b = &G.b[bi];
    char word[WORD_MAX] = "?", reason[24];
    json_str(body, "status", word, sizeof(word));
    if (json_str(body, "reason", reason, sizeof(reason)) == 0) {
        size_t l = strlen(word);
        snprintf(word + l, sizeof(word) - l, ":%s", reason);
    }
    count(K_BUY, http, word);
    if (G.buys)
        fprintf(G.buys, "%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%d\t%s\n", b->user, b->due, b->sent,
                now, http, word);
    if (G.rate_mode) {
        finish(bi, D_ENDED);
        return;
    }
    if (http == 202 || http == 409) {
        finish(bi, D_BOUGHT);
    } else if (http == 410) {
        if (strcmp(word, "sold_out") == 0 && !b->soldout_ans)
            b->soldout_ans = now;
        finish(bi, strcmp(word, "sold_out") == 0 ? D_SOLD_OUT : D_ENDED);
    } else if (http == 403 && strncmp(word, "admission_refused", 17) == 0) {
        /* lapsed, expired: ask the room again, which says where the buyer stands */
        free(b->adm);
        b->adm = NULL;
        request_again(bi, now + RETRY_US);
        if (!b->done)
            b->kind = K_POLL;
    } else if (http == 403 || (http == 503 && strcmp(word, "unavailable") == 0) || http == 429) {
        request_again(bi, now + RETRY_US / 10); /* not_started; nothing kept: the same admission again */
    } else {
        finish(bi, D_GAVE_UP); /* 503 unknown (reserved, maybe an order), 4xx: counted, not retried */
    }
}

/* A whole response at the start of c->in: its length, 0 when incomplete. */
static size_t response_len(struct conn *c, int *http, size_t *body_at, int *close_after)
{
    c->in[c->ilen] = '\0';
    char *end = strstr(c->in, "\r\n\r\n");
    if (!end)
        return 0;
    size_t head = (size_t)(end - c->in) + 4;
    long clen = 0;
    *close_after = 0;
    for (char *p = strstr(c->in, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, "Content-Length:", 15) == 0)
            clen = strtol(p + 17, NULL, 10);
        else if (strncasecmp(p + 2, "Connection: close", 17) == 0)
            *close_after = 1;
    }
    if (clen < 0 || head + (size_t)clen >= IN_MAX)
        die("an answer too large for the buffer");
    if (c->ilen < head + (size_t)clen)
        return 0;
    *http = atoi(c->in + 9);
    *body_at = head;
    return head + (size_t)clen;
}

static void conn_read(struct conn *c, int64_t now)
{
    int http = 0, close_after = 0;
    size_t body_at = 0, len = 0;
    /* Until a whole answer is in, or nothing more is: not on to EAGAIN each
     * time, a read syscall saved per answer (epoll says when more comes). */
    while (!len) {
        ssize_t r = read(c->fd, c->in + c->ilen, IN_MAX - 1 - c->ilen);
        if (r > 0) {
            c->ilen += (size_t)r;
            len = response_len(c, &http, &body_at, &close_after);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        /* closed (idle: the server's connection timeout) or broken */
        conn_reset(c, now);
        return;
    }
    if (c->buyer < 0)
        return;
    int32_t bi = c->buyer;
    char body[IN_MAX];
    vec_add(&G.lat[G.b[bi].kind], now - G.b[bi].sent);
    memcpy(body, c->in + body_at, len - body_at);
    body[len - body_at] = '\0';
    memmove(c->in, c->in + len, c->ilen - len);
    c->ilen -= len;
    c->buyer = -1;
    if (G.b[bi].kind == K_BUY)
        buy_answer(bi, http, body, now);
    else
        room_answer(bi, http, body, now);
    if (close_after) {
        conn_reset(c, now);
        G.conn_errors--; /* asked for, not an error */
    } else {
        conn_idle(c);
    }
}

static void run(void)
{
    struct epoll_event evs[256];
    while (G.ndone < G.nb) {
        int64_t now = now_us();
        if (G.deadline_us && now >= G.deadline_us)
            break;
        dispatch(now);
        int timeout = 1000;
        if (G.hn > 0) {
            int64_t d = G.hdue[0] - now_us();
            timeout = d <= 0 ? 0 : (int)((d + 999) / 1000);
            if (timeout > 1000)
                timeout = 1000;
        }
        int n = epoll_wait(G.ep, evs, 256, timeout);
        now = now_us();
        for (int i = 0; i < n; i++) {
            struct conn *c = &G.conns[evs[i].data.u32];
            if (evs[i].events & EPOLLOUT) {
                struct epoll_event ev = { .events = EPOLLIN, .data.u32 = evs[i].data.u32 };
                epoll_ctl(G.ep, EPOLL_CTL_MOD, c->fd, &ev);
                conn_flush(c, now);
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_read(c, now);
        }
    }
}

/* --- setup and figures ---------------------------------------------------- */

static void load_tokens(const char *path, size_t need)
{
    char *text;
    size_t len;
    if (util_read_file(path, &text, &len) != 0) {
        perror("wroomload: tokens");
        exit(1);
    }
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    if (!(G.tokens = calloc(lines + 1, sizeof(char *))))
        die("out of memory");
    for (char *p = text, *nl; *p; p = nl + 1) {
        if (!(nl = strchr(p, '\n')))
            nl = p + strlen(p) - 1;
        else
            *nl = '\0';
        G.tokens[G.ntokens++] = p;
        if (!nl[1])
            break;
    }
    if (G.ntokens < need) {
        fprintf(stderr, "wroomload: %s has %zu tokens, %zu needed (line U for user U)\n", path, G.ntokens, need);
        exit(1);
    }
}

static void setup(int32_t nbuyers)
{
    G.nb = nbuyers;
    G.b = calloc((size_t)nbuyers, sizeof(*G.b));
    G.hdue = calloc((size_t)nbuyers, sizeof(*G.hdue));
    G.hidx = calloc((size_t)nbuyers, sizeof(*G.hidx));
    G.rcap = nbuyers + 1;
    G.ring = calloc((size_t)G.rcap, sizeof(*G.ring));
    if (!G.b || !G.hdue || !G.hidx || !G.ring)
        die("out of memory");
    if ((G.ep = epoll_create1(0)) < 0)
        die("epoll_create1");
    for (int i = 0; i < G.nconns; i++) {
        conn_open(&G.conns[i]);
        conn_idle(&G.conns[i]);
    }
}

static int64_t cpu_self_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
           ru.ru_stime.tv_usec;
}

static double ms(int64_t us)
{
    return (double)us / 1000.0;
}

/* Per kind: requests sent, how late they left (p99, max) and their answers'
 * latency from when they left (p50, p99), in ms. */
static void print_kinds(const char *pfx)
{
    for (int k = 0; k < K_N; k++) {
        if (!G.sent[k])
            continue;
        printf("%s_%s_sent %" PRId64 "\n", pfx, kind_name[k], G.sent[k]);
        printf("%s_%s_late_p99_ms %.2f\n", pfx, kind_name[k], ms(vec_q(&G.late[k], 0.99)));
        printf("%s_%s_late_max_ms %.2f\n", pfx, kind_name[k], ms(vec_q(&G.late[k], 1.0)));
        printf("%s_%s_p50_ms %.2f\n", pfx, kind_name[k], ms(vec_q(&G.lat[k], 0.50)));
        printf("%s_%s_p99_ms %.2f\n", pfx, kind_name[k], ms(vec_q(&G.lat[k], 0.99)));
    }
    for (int i = 0; i < G.ntally; i++)
        printf("%s_answer %s %d %s %" PRId64 "\n", pfx, kind_name[G.tally[i].kind], G.tally[i].http,
               G.tally[i].word, G.tally[i].n);
    printf("%s_connection_resets %" PRId64 "\n", pfx, G.conn_errors);
}

/* The joins of users from..to (indexes) as scheduled: the rate offered and
 * the rate they left at, first to last. */
static void print_join_rate(const char *pfx, int32_t from, int32_t to, double offered)
{
    int64_t first = 0, last = 0;
    for (int32_t i = from; i < to; i++) {
        int64_t s = G.b[i].join_sent;
        if (s && (!first || s < first))
            first = s;
        if (s > last)
            last = s;
    }
    double achieved = last > first ? (double)(to - from - 1) * 1e6 / (double)(last - first) : 0;
    printf("%s_offered_per_s %.0f\n%s_achieved_per_s %.0f\n", pfx, offered, pfx, achieved);
}

static void write_buyers(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/buyers.tsv", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write buyers.tsv");
    fprintf(f, "user\tjoin_pos\tjoin_due\tjoin_sent\tjoin_ans\tjoins\tpolls\tadm_ans\tnonce\tsoldout_ans\t"
               "last_live_ans\tdone\n");
    for (int32_t i = 0; i < G.nb; i++) {
        const struct buyer *b = &G.b[i];
        fprintf(f,
                "%" PRId64 "\t%d\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%d\t%d\t%" PRId64 "\t%" PRId64 "\t%" PRId64
                "\t%" PRId64 "\t%s\n",
                b->user, b->join_pos, b->join_due, b->join_sent, b->join_ans, b->joins, b->polls, b->adm_ans,
                b->adm ? b->nonce : -1, b->soldout_ans, b->last_live_ans, done_name[b->done]);
    }
    if (fclose(f) != 0)
        die("cannot write buyers.tsv");
}

struct opts {
    const char *mode, *tokens, *out, *kind, *prefix;
    int64_t buyers, late, join_s, late_s, starts_ms, deadline_s, spread_ms, first, count, per_s;
};

static int64_t num(const char *opt, const char *v, int64_t min, int64_t max)
{
    int64_t x;
    if (util_parse_i64(v, min, max, &x) != 0) {
        fprintf(stderr, "wroomload: --%s wants an integer in [%" PRId64 ", %" PRId64 "], not '%s'\n", opt, min,
                max, v);
        exit(2);
    }
    return x;
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        { "port", 1, 0, 'p' },      { "item", 1, 0, 'i' },   { "tokens", 1, 0, 't' },
        { "buyers", 1, 0, 'n' },    { "late", 1, 0, 'l' },   { "join-s", 1, 0, 'j' },
        { "late-s", 1, 0, 'L' },    { "starts-ms", 1, 0, 's' }, { "conns", 1, 0, 'c' },
        { "deadline-s", 1, 0, 'd' }, { "opening-spread-ms", 1, 0, 'o' }, { "out", 1, 0, 'O' },
        { "first", 1, 0, 'f' },     { "count", 1, 0, 'm' },  { "per-s", 1, 0, 'r' },
        { "kind", 1, 0, 'k' },      { "prefix", 1, 0, 'P' }, { 0, 0, 0, 0 },
    };
    int ch;
    if (argc < 2 || (strcmp(argv[1], "sale") != 0 && strcmp(argv[1], "rate") != 0)) {
        fprintf(stderr, "usage: wroomload sale|rate OPTIONS (see bench/wroomload.c)\n");
        exit(2);
    }
    o->mode = argv[1];
    optind = 2;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': G.port = (int)num("port", optarg, 1, 65535); break;
        case 'i': G.item = num("item", optarg, 1, INT64_MAX); break;
        case 't': o->tokens = optarg; break;
        case 'n': o->buyers = num("buyers", optarg, 1, 10000000); break;
        case 'l': o->late = num("late", optarg, 0, 10000000); break;
        case 'j': o->join_s = num("join-s", optarg, 1, 3600); break;
        case 'L': o->late_s = num("late-s", optarg, 1, 3600); break;
        case 's': o->starts_ms = num("starts-ms", optarg, 1, INT64_MAX / 1000); break;
        case 'c': G.nconns = (int)num("conns", optarg, 1, CONNS_MAX); break;
        case 'd': o->deadline_s = num("deadline-s", optarg, 1, 86400); break;
        case 'o': o->spread_ms = num("opening-spread-ms", optarg, 0, 3600000); break;
        case 'O': o->out = optarg; break;
        case 'f': o->first = num("first", optarg, 1, INT64_MAX / 2); break;
        case 'm': o->count = num("count", optarg, 1, 10000000); break;
        case 'r': o->per_s = num("per-s", optarg, 1, 10000000); break;
        case 'k': o->kind = optarg; break;
        case 'P': o->prefix = optarg; break;
        default: exit(2);
        }
    }
    if (!G.port || !G.item || !o->tokens)
        die("--port, --item and --tokens are needed");
}

static void sale(struct opts *o)
{
    char path[4096];
    if (!o->buyers || !o->starts_ms || !o->out)
        die("sale needs --buyers, --starts-ms and --out");
    int32_t n = (int32_t)o->buyers, l = (int32_t)o->late;
    load_tokens(o->tokens, (size_t)(n + l));
    snprintf(path, sizeof(path), "%s/buys.tsv", o->out);
    if (!(G.buys = fopen(path, "w")))
        die("cannot write buys.tsv");
    fprintf(G.buys, "user\tdue\tsent\tans\thttp\tword\n");
    G.starts_us = o->starts_ms * 1000;
    G.opening_spread_us = o->spread_ms * 1000;
    G.deadline_us = G.starts_us + o->deadline_s * 1000000;
    setup(n + l);
    int64_t join_us = o->join_s * 1000000, late_us = o->late_s * 1000000;
    int64_t pre_us = join_us - (join_us / 10 < 200000 ? join_us / 10 : 200000);
    for (int32_t i = 0; i < n + l; i++) {
        G.b[i].user = i + 1;
        G.b[i].join_pos = -2;
        /* Before the opening, evenly over the window less its last tenth
         * (at most 200 ms): a join due a millisecond before the opening
         * would land after it on a busy machine and count as a late joiner.
         * After it (20 ms after, so that Redis's clock has passed
         * starts_ms too), evenly over --late-s. */
        int64_t due = i < n ? G.starts_us - join_us + (int64_t)i * pre_us / n
                            : G.starts_us + 20000 + (int64_t)(i - n) * late_us / (l ? l : 1);
        schedule(i, K_JOIN, due);
    }
    if (G.starts_us - join_us < now_us())
        fprintf(stderr, "wroomload: the join window began %.1f s ago: the first joins leave late\n",
                (double)(now_us() - G.starts_us + join_us) / 1e6);
    int64_t t0 = now_us(), cpu0 = cpu_self_us();
    run();
    int64_t wall = now_us() - t0, cpu = cpu_self_us() - cpu0;
    fclose(G.buys);
    write_buyers(o->out);
    int64_t done[5] = { 0 }, reqs = G.sent[K_JOIN] + G.sent[K_POLL] + G.sent[K_BUY];
    for (int32_t i = 0; i < G.nb; i++)
        done[G.b[i].done]++;
    printf("wroomload_buyers %d\nwroomload_late_buyers %d\n", n, l);
    for (int d = 0; d < 5; d++)
        printf("wroomload_done_%s %" PRId64 "\n", done_name[d], done[d]);
    print_join_rate("wroomload_join", 0, n, (double)n * 1e6 / (double)pre_us);
    print_kinds("wroomload");
    printf("wroomload_requests %" PRId64 "\nwroomload_wall_s %.2f\nwroomload_cpu_us %" PRId64 "\n", reqs,
           (double)wall / 1e6, cpu);
    printf("wroomload_cpu_us_per_request %.1f\nwroomload_core_share %.3f\n", reqs ? (double)cpu / (double)reqs : 0,
           wall ? (double)cpu / (double)wall : 0);
}

static void rate(struct opts *o)
{
    enum kind k = K_N;
    for (int i = 0; i < K_N; i++)
        if (o->kind && strcmp(o->kind, kind_name[i]) == 0)
            k = (enum kind)i;
    if (k == K_N || !o->first || !o->count || !o->per_s)
        die("rate needs --kind join|poll|buy, --first, --count and --per-s");
    const char *pfx = o->prefix ? o->prefix : "rate";
    G.rate_mode = 1;
    load_tokens(o->tokens, (size_t)(o->first + o->count - 1));
    setup((int32_t)o->count);
    int64_t t0 = now_us() + 200000;
    for (int32_t i = 0; i < G.nb; i++) {
        G.b[i].user = o->first + i;
        schedule(i, k, t0 + (int64_t)i * 1000000 / o->per_s);
        if (k == K_JOIN)
            G.b[i].join_pos = -2;
    }
    G.deadline_us = t0 + o->count * 1000000 / o->per_s + 30000000;
    int64_t cpu0 = cpu_self_us();
    run();
    int64_t cpu = cpu_self_us() - cpu0, first = 0, last = 0;
    for (int32_t i = 0; i < G.nb; i++) {
        int64_t s = G.b[i].sent;
        if (s && (!first || s < first))
            first = s;
        last = s > last ? s : last;
    }
    printf("%s_offered_per_s %" PRId64 "\n%s_achieved_per_s %.0f\n", pfx, o->per_s, pfx,
           last > first ? (double)(G.sent[k] - 1) * 1e6 / (double)(last - first) : 0);
    printf("%s_unanswered %d\n", pfx, G.nb - G.ndone);
    print_kinds(pfx);
    printf("%s_loadgen_cpu_us_per_request %.1f\n", pfx, G.sent[k] ? (double)cpu / (double)G.sent[k] : 0);
}

int main(int argc, char **argv)
{
    struct opts o = { .late_s = 5, .join_s = 10, .deadline_s = 180 };
    G.nconns = 100;
    setvbuf(stdout, NULL, _IOLBF, 0);
    parse(argc, argv, &o);
    if (strcmp(o.mode, "sale") == 0)
        sale(&o);
    else
        rate(&o);
    return 0;
}
