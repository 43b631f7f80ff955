#include "ingress.h"

#include <inttypes.h>
#include <microhttpd.h>
#include <stddef.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "auth.h"
#include "bgthread.h"
#include "cancel.h"
#include "chunkcheck.h"
#include "clrefuse.h"
#include "headcheck.h"
#include "httpd.h"
#include "log.h"
#include "pmetrics.h"
#include "ratelimit.h"
#include "request.h"
#include "reqwatch.h"
#include "soldout.h"
#include "status.h"
#include "util.h"
#include "winners.h"
#include "wroom.h"

#define ORDER_PATH "/api/v1/seckill"
#define ITEM_STATUS_PREFIX "/api/v1/seckill/"
#define ORDER_STATUS_PREFIX "/api/v1/orders/"
#define CANCEL_SUFFIX "/cancel" /* after ORDER_STATUS_PREFIX and the order id */
#define QUEUE_PREFIX "/api/v1/queue/"
/* A connection's memory in the library: its head and its read buffer. */
#define ING_CONN_MEMORY 16384

enum { REQ_READING, REQ_QUEUED, REQ_DONE };
enum { KIND_BUY, KIND_STATUS, KIND_CANCEL, KIND_QUEUE };

/* One buy, status or cancel request. Pooled: allocated and freed only on
 * the HTTP thread. */
struct ing_req {
    struct rsv_req rr; /* first: the reserving thread hands it back as this */
    struct st_req sr;  /* the status thread hands it back as this */
    struct cx_req xr;  /* the canceller hands it back as this */
    struct wr_req wq;  /* the waiting room hands it back as this */
    struct ingress *g;
    struct MHD_Connection *conn;
    int64_t t0_us;
    _Atomic int state;
    int kind;
    int too_large; /* a cancel's body at all */
    int chunked;   /* its body comes in chunks, their lines checked as they come */
    int cut;       /* its chunked body was refused while read: answered, the rest dropped */
    struct ck_body ck;
    int64_t buyer; /* the verified token's buyer; 0 with producer.auth = "none" */
    int has_admission; /* a buy came with ADM_HEADER, copied into admission */
    char admission[ADM_TOKEN_MAX];
    size_t len;
    struct ing_req *free_next;
    char body[]; /* body_limit bytes */
};

/* libmicrohttpd's messages, each kind (its format string) a state of
 * log_repeat: said when it begins, counted while it repeats, said again
 * with the count once MHD_SAY_QUIET_US pass without it. A client can make
 * the library say something per request; the log must not grow with it. */
#define MHD_SAY_KINDS 16
#define MHD_SAY_QUIET_US (5 * 1000000LL)
struct mhd_say {
    const char *fmt; /* NULL: free */
    struct log_repeat r;
    int64_t last_us;
};

/* One connection (libmicrohttpd's socket context), from its start to its
 * close. */
struct ing_conn {
    struct rw_slot slot; /* armed while a whole request is awaited */
    struct clr_slot clr; /* from its request line to the access handler */
    struct na_addr peer;
    int counted;        /* in the per-address connection count */
    size_t raw_uri_len; /* of the request being read, for hc_check() */
    int target_ok;
    int close_after; /* its request is chunked: no request is read after it */
};

struct ingress {
    const struct cfg *cfg;
    struct rsv *rsv;
    struct st *st;
    struct cx *cx;
    struct so *so;
    struct auth *auth;
    struct win *win;
    struct wr *wr;
    struct rl *rl; /* HTTP thread only */
    struct ing_health *health;
    struct MHD_Daemon *mhd;
    _Atomic int stopping;
    _Atomic long inflight;
    struct ing_req *pool; /* HTTP thread only */
    size_t body_limit;
    struct rw rw; /* the connections awaiting a whole request */
    struct clr_list clr; /* HTTP thread only: the heads being read */
    int cut_closing; /* HTTP thread only: a cut body's connection is being closed (on_request) */
    struct bgthread timer; /* shuts the late ones, ends quiet log states */
    pthread_mutex_t say_mu; /* say's: the library logs on its thread, the timer ends quiet kinds */
    struct mhd_say say[MHD_SAY_KINDS];
};

static struct ing_conn *conn_of(struct MHD_Connection *conn);

/* No request is read after this answer: the daemon stops, or the request
 * was chunked (chunkcheck.h: the library may have taken chunk lines out of
 * sight, so its body's end is not certainly the one a proxy saw). */
static int closing(struct ingress *g, struct MHD_Connection *conn)
{
    struct ing_conn *cx;
    return atomic_load(&g->stopping) || ((cx = conn_of(conn)) != NULL && cx->close_after);
}

/* hdrs: more response headers, name and value pairs ending with a NULL
 * name, or NULL. */
static enum MHD_Result respond_hdrs(struct ingress *g, struct MHD_Connection *conn, unsigned status,
                                    const char *body, int64_t t0_us, const char *const *hdrs)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    for (; hdrs && hdrs[0]; hdrs += 2)
        MHD_add_response_header(resp, hdrs[0], hdrs[1]);
    if (closing(g, conn))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    if (t0_us)
        metrics_hist_observe_us(&pm.latency, util_mono_us() - t0_us);
    return ret;
}

/* hdr/value: one more response header, or NULL. */
static enum MHD_Result respond_hdr(struct ingress *g, struct MHD_Connection *conn, unsigned status,
                                   const char *body, int64_t t0_us, const char *hdr, const char *value)
{
    const char *hdrs[] = { hdr, value, NULL };
    return respond_hdrs(g, conn, status, body, t0_us, hdrs);
}

static enum MHD_Result respond(struct ingress *g, struct MHD_Connection *conn, unsigned status,
                               const char *body, int64_t t0_us)
{
    return respond_hdrs(g, conn, status, body, t0_us, NULL);
}

/* Retry-After of an unknown outcome, in seconds: by then the order is
 * usually queued or confirmed (the broker answered late, or the sweeper
 * publishes it within producer.sweep_age_ms). */
#define UNKNOWN_RETRY_AFTER_S "1"
/* Retry-After of 503 paused: an operator paused the sale (seckillctl item
 * pause) and resumes it when they choose; a buyer asking every few seconds
 * learns of the resume soon without a crowd's worth of requests a second. */
#define PAUSED_RETRY_AFTER_S "5"
/* Retry-After of 429 overloaded: the requests in flight are answered within
 * a Redis round trip or a broker's acknowledgement, well under a second; a
 * second spreads the retries of a crowd shed at once. */
#define OVERLOADED_RETRY_AFTER_S "1"

/* 503 unknown: the order id, and where to learn what became of it (the
 * buyer's order of the item, which answers whether or not the order id
 * reached the index). */
static enum MHD_Result answer_unknown(struct ingress *g, struct ing_req *q)
{
    char body[160], where[64];
    snprintf(body, sizeof(body),
             "{\"status\":\"unknown\",\"order_id\":\"%" PRId64 "\",\"item_id\":%" PRId64 "}", q->rr.order_id,
             q->rr.item_id);
    snprintf(where, sizeof(where), ITEM_STATUS_PREFIX "%" PRId64, q->rr.item_id);
    const char *hdrs[] = { MHD_HTTP_HEADER_RETRY_AFTER, UNKNOWN_RETRY_AFTER_S, MHD_HTTP_HEADER_LOCATION,
                           where, NULL };
    return respond_hdrs(g, q->conn, rsv_http_status(RSV_UNKNOWN), body, q->t0_us, hdrs);
}

/* {"status":word,"error":why} with why made safe for a JSON string. */
static void error_body(char *body, size_t len, const char *word, const char *why)
{
    /* why never contains a quote or a backslash: our own messages and
     * jansson's, which quote nothing from the input. Be sure anyway. */
    char safe[160];
    size_t j = 0;
    for (size_t i = 0; why[i] && j < sizeof(safe) - 1; i++)
        safe[j++] = (why[i] == '"' || why[i] == '\\' || (unsigned char)why[i] < 0x20) ? '\'' : why[i];
    safe[j] = 0;
    snprintf(body, len, "{\"status\":\"%s\",\"error\":\"%s\"}", word, safe);
}

static enum MHD_Result refuse(struct ingress *g, struct MHD_Connection *conn, unsigned status,
                              const char *word, const char *why, int64_t t0_us, const char *hdr,
                              const char *value)
{
    char body[256];
    error_body(body, sizeof(body), word, why);
    return respond_hdr(g, conn, status, body, t0_us, hdr, value);
}

static enum MHD_Result bad_request(struct ingress *g, struct MHD_Connection *conn, const char *why,
                                   int64_t t0_us)
{
    PM_INC(req_bad_request);
    return refuse(g, conn, MHD_HTTP_BAD_REQUEST, "bad_request", why, t0_us, NULL, NULL);
}

/* RFC 6750: the client learns which check failed, never the token back. */
static enum MHD_Result unauthorized(struct ingress *g, struct MHD_Connection *conn, enum jwt_err e,
                                    int64_t t0_us)
{
    PM_INC(req_unauthorized);
    return refuse(g, conn, MHD_HTTP_UNAUTHORIZED, "unauthorized", jwt_err_str(e), t0_us,
                  MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"");
}

static enum MHD_Result unavailable(struct ingress *g, struct MHD_Connection *conn, int64_t t0_us)
{
    PM_INC(req_unavailable);
    return respond(g, conn, MHD_HTTP_SERVICE_UNAVAILABLE, "{\"status\":\"unavailable\"}", t0_us);
}

static void request_done(struct ing_req *q);

/* Reserving thread: the outcome is final. It is counted here, not when the
 * answer is sent: a client that hung up meanwhile is never asked again by
 * MHD, and its request must still leave the in-flight count. */
static void on_complete(struct rsv_req *rr)
{
    struct ing_req *q = (struct ing_req *)rr;
    rsv_count(rr->outcome);
    /* (Both views check every slot of an item with buckets: soldout.h.) */
    if (rr->outcome == RSV_SOLD_OUT)
        so_mark(q->g->so, rr->item_id);
    /* Redis said the buyer holds a unit; a definite refusal may have given
     * one back (a NOT_PERSISTED order). */
    if (rr->outcome == RSV_ACCEPTED || rr->outcome == RSV_DUPLICATE)
        win_record(q->g->win, rr->item_id, rr->user_id, q->t0_us);
    else if (rr->outcome == RSV_UNAVAILABLE)
        win_forget(q->g->win, rr->item_id, rr->user_id);
    request_done(q);
}

/* Status thread: the same hand-back. */
static void on_status_complete(struct st_req *sr)
{
    struct ing_req *q = (struct ing_req *)((char *)sr - offsetof(struct ing_req, sr));
    PM_INC(req_status);
    request_done(q);
}

/* The canceller (status or poll thread): the same hand-back. */
static void on_cancel_complete(struct cx_req *xr)
{
    struct ing_req *q = (struct ing_req *)((char *)xr - offsetof(struct ing_req, xr));
    PM_INC(req_cancel);
    request_done(q);
}

/* The waiting room's thread: the same hand-back. */
static void on_queue_complete(struct wr_req *wq)
{
    struct ing_req *q = (struct ing_req *)((char *)wq - offsetof(struct ing_req, wq));
    PM_INC(req_queue);
    request_done(q);
}

static void request_done(struct ing_req *q)
{
    struct ingress *g = q->g;
    atomic_store(&q->state, REQ_DONE);
    atomic_fetch_sub(&g->inflight, 1);
    PM_ADD(inflight, -1);
    /* The last touch of q: once resumed, the HTTP thread may free it. */
    MHD_resume_connection(q->conn);
}

/* seckill_producer_admission_refused_total{reason}. */
static void count_adm_refused(enum adm_reason r)
{
    switch (r) {
#define ADM_COUNT(name, word) \
    case ADM_##name: PM_INC(adm_refused_##name); break;
        ADM_REASONS_REFUSED(ADM_COUNT)
#undef ADM_COUNT
    default: break;
    }
}

static enum MHD_Result answer_buy(struct ingress *g, struct ing_req *q)
{
    char body[128], when[40];
    enum rsv_outcome o = q->rr.outcome;
    switch (o) {
    case RSV_ACCEPTED:
        snprintf(body, sizeof(body), "{\"status\":\"accepted\",\"order_id\":\"%" PRId64 "\"}",
                 q->rr.order_id);
        break;
    case RSV_UNKNOWN:
        return answer_unknown(g, q);
    case RSV_PAUSED:
        snprintf(body, sizeof(body), "{\"status\":\"paused\",\"retry_after_s\":" PAUSED_RETRY_AFTER_S "}");
        return respond_hdr(g, q->conn, rsv_http_status(o), body, q->t0_us, MHD_HTTP_HEADER_RETRY_AFTER,
                           PAUSED_RETRY_AFTER_S);
    case RSV_NOT_STARTED:
        util_format_time_ms(q->rr.starts_at_ms, when, sizeof(when));
        snprintf(body, sizeof(body), "{\"status\":\"not_started\",\"starts_at\":\"%s\"}", when);
        break;
    case RSV_ADMISSION_REQUIRED:
    case RSV_ADMISSION_USED:
    case RSV_ADMISSION_LAPSED:
    case RSV_ADMISSION_OTHER_SALE:
    case RSV_ADMISSION_INVALID: {
        enum adm_reason why = rsv_admission_reason(o, q->rr.adm_refused);
        count_adm_refused(why);
        snprintf(body, sizeof(body), "{\"status\":\"%s\",\"reason\":\"%s\"}", rsv_json_status(o),
                 adm_reason_word(why));
        break;
    }
    default:
        snprintf(body, sizeof(body), "{\"status\":\"%s\"}", rsv_json_status(o));
        break;
    }
    enum MHD_Result ret = respond(g, q->conn, rsv_http_status(o), body, q->t0_us);
    /* The 202s alone too: while stock lasts the answers are mostly 202s,
     * after the sell-out fast 410s, and one histogram of both cannot say
     * how long the buyers who got a unit waited. */
    if (o == RSV_ACCEPTED)
        metrics_hist_observe_us(&pm.latency_accepted, util_mono_us() - q->t0_us);
    return ret;
}

/* ms since the epoch as a JSON string, or null for 0. */
static void json_time(char *buf, size_t len, int64_t ms)
{
    char t[40];
    if (!ms) {
        snprintf(buf, len, "null");
        return;
    }
    util_format_time_ms(ms, t, sizeof(t));
    snprintf(buf, len, "\"%s\"", t);
}

/* What a status answer says beyond the order's ids and times: a refusal's
 * reason and time, the end of the payment window, when it was paid,
 * expired or cancelled (docs/api.md). */
static void after_fields(const struct st_req *r, char *buf, size_t len)
{
    char t[48];
    buf[0] = 0;
    switch (r->state) {
    case ST_REFUSED:
        json_time(t, sizeof(t), r->settled_at_ms);
        snprintf(buf, len, ",\"reason\":\"%s\",\"refused_at\":%s", r->reason, t);
        break;
    case ST_PENDING_PAYMENT:
        json_time(t, sizeof(t), r->pay_by_ms);
        snprintf(buf, len, ",\"pay_by\":%s", t);
        break;
    case ST_PAID:
    case ST_EXPIRED:
    case ST_CANCELLED:
        json_time(t, sizeof(t), r->changed_at_ms);
        snprintf(buf, len, ",\"%s_at\":%s", st_state_name(r->state), t);
        break;
    default:
        break;
    }
}

/* An order as the status calls describe it, its status word word: its
 * ids, times, and what after_fields() adds. */
static void status_body(const struct st_req *r, const char *word, char *body, size_t len)
{
    char reserved[48], persisted[48], reason[112];
    json_time(reserved, sizeof(reserved), r->reserved_at_ms);
    json_time(persisted, sizeof(persisted), r->state == ST_REFUSED ? 0 : r->settled_at_ms);
    after_fields(r, reason, sizeof(reason));
    snprintf(body, len,
             "{\"status\":\"%s\",\"order_id\":\"%" PRId64 "\",\"item_id\":%" PRId64
             ",\"reserved_at\":%s,\"persisted_at\":%s%s}",
             word, r->order_id, r->item_id, reserved, persisted, reason);
}

static enum MHD_Result answer_status(struct ingress *g, struct ing_req *q)
{
    const struct st_req *r = &q->sr;
    char body[400];
    switch (r->state) {
    case ST_NOT_FOUND:
        return respond(g, q->conn, MHD_HTTP_NOT_FOUND, "{\"status\":\"not_found\"}", 0);
    case ST_UNAVAILABLE:
        return respond(g, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "{\"status\":\"unavailable\"}", 0);
    case ST_NONE:
        snprintf(body, sizeof(body), "{\"status\":\"none\",\"item_id\":%" PRId64 "}", r->id);
        return respond(g, q->conn, MHD_HTTP_OK, body, 0);
    default:
        break;
    }
    status_body(r, st_state_name(r->state), body, sizeof(body));
    return respond(g, q->conn, MHD_HTTP_OK, body, 0);
}

/* A cancel's answer (cancel.h). A missing order, or another buyer's, is
 * the status call's 404 to the byte; an order that cannot be cancelled is
 * described as the status call would, under the word that says why. */
static enum MHD_Result answer_cancel(struct ingress *g, struct ing_req *q)
{
    const struct cx_req *x = &q->xr;
    enum cx_outcome o = x->outcome;
    char body[400], where[64];
    switch (o) {
    case CX_CANCELLING:
        snprintf(body, sizeof(body), "{\"status\":\"cancelling\",\"order_id\":\"%" PRId64 "\"}", x->order_id);
        break;
    case CX_NOT_FOUND:
        return respond(g, q->conn, MHD_HTTP_NOT_FOUND, "{\"status\":\"not_found\"}", 0);
    case CX_UNAVAILABLE:
        return respond(g, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "{\"status\":\"unavailable\"}", 0);
    case CX_UNKNOWN: {
        /* Kafka may hold the cancel: the order's status says once it is
         * applied, and a second cancel is harmless. */
        snprintf(body, sizeof(body), "{\"status\":\"unknown\",\"order_id\":\"%" PRId64 "\"}", x->order_id);
        snprintf(where, sizeof(where), ORDER_STATUS_PREFIX "%" PRId64, x->order_id);
        const char *hdrs[] = { MHD_HTTP_HEADER_RETRY_AFTER, UNKNOWN_RETRY_AFTER_S, MHD_HTTP_HEADER_LOCATION,
                               where, NULL };
        return respond_hdrs(g, q->conn, cx_http_status(o), body, 0, hdrs);
    }
    default:
        status_body(&x->sr, cx_json_status(o), body, sizeof(body));
        break;
    }
    return respond(g, q->conn, cx_http_status(o), body, 0);
}

/* ms as seconds to the tenth, rounded up ("poll_after_s"). */
static void tenths(int64_t ms, char *out, size_t len)
{
    int64_t t = (ms + 99) / 100;
    snprintf(out, len, "%" PRId64 ".%" PRId64, t / 10, t % 10);
}

/* The waiting room's answer (wroom.h): the buyer's state, or a refusal. */
static enum MHD_Result answer_queue(struct ingress *g, struct ing_req *q)
{
    const struct wr_req *w = &q->wq;
    char body[ADM_TOKEN_MAX + 160], t[48], pos[24], eta[24], after[24];
    int64_t abandon_s = CFG_GET(g->cfg->producer.queue_abandon_s);
    switch (w->state) {
    case WR_WAITING:
        snprintf(pos, sizeof(pos), w->position > 0 ? "%" PRId64 : "null", w->position);
        /* Whole seconds, rounded up: "about N s"; approximate (docs/api.md). */
        snprintf(eta, sizeof(eta), w->position > 0 && w->eta_ms >= 0 ? "%" PRId64 : "null",
                 (w->eta_ms + 999) / 1000);
        util_format_time_ms(w->starts_ms, t, sizeof(t));
        tenths(wr_poll_after_ms(w->position, w->eta_ms, w->starts_ms - util_wall_ms(), abandon_s,
                                (int64_t)util_rand_below(WR_OPENING_SPREAD_MS), w->callable),
               after, sizeof(after));
        snprintf(body, sizeof(body),
                 "{\"state\":\"waiting\",\"position\":%s,\"eta_s\":%s,\"starts_at\":\"%s\","
                 "\"poll_after_s\":%s}",
                 pos, eta, t, after);
        break;
    case WR_ADMITTED:
        util_format_time_ms(w->expires_ms, t, sizeof(t));
        snprintf(body, sizeof(body), "{\"state\":\"admitted\",\"admission\":\"%s\",\"expires_at\":\"%s\"}",
                 w->admission, t);
        break;
    case WR_NOT_OPEN:
        util_format_time_ms(w->opens_ms, t, sizeof(t));
        snprintf(body, sizeof(body), "{\"status\":\"not_open\",\"opens_at\":\"%s\"}", t);
        break;
    case WR_SOLD_OUT:
        /* The place is kept for a unit that comes back: said how often to
         * ask to keep it. */
        tenths(wr_keep_place_ms(abandon_s), t, sizeof(t));
        snprintf(body, sizeof(body), "{\"state\":\"sold_out\",\"poll_after_s\":%s}", t);
        break;
    default:
        snprintf(body, sizeof(body), "{\"%s\":\"%s\"}",
                 wr_http_status(w->state) == MHD_HTTP_OK ? "state" : "status", wr_word(w->state));
        break;
    }
    return respond(g, q->conn, wr_http_status(w->state), body, 0);
}

static struct ing_req *req_get(struct ingress *g, struct MHD_Connection *conn)
{
    struct ing_req *q = g->pool;
    if (q)
        g->pool = q->free_next;
    else if (!(q = malloc(sizeof(*q) + g->body_limit)))
        return NULL;
    memset(q, 0, sizeof(*q));
    q->g = g;
    q->conn = conn;
    q->t0_us = util_mono_us();
    return q;
}

static struct ing_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct ingress *g = cls;
    struct ing_req *q = *con_cls;
    struct ing_conn *cx;
    /* Kept alive, the connection awaits its next request from this answer on
     * (one closing is disarmed again by its close). */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && (cx = conn_of(conn)) != NULL && cx->slot.fd >= 0)
        rw_arm(&g->rw, &cx->slot, cx->slot.fd, util_mono_us());
    if (!q)
        return;
    /* A request is queued only while its connection is suspended, and MHD
     * does not end a suspended connection: q is ours again here. */
    q->free_next = g->pool;
    g->pool = q;
    *con_cls = NULL;
}

int ing_health_render(struct ingress *g, struct mbuf *b)
{
    int r = atomic_load(&g->health->redis_ok), k = atomic_load(&g->health->kafka_ok);
    int ok = r && k && !atomic_load(&g->stopping);
    mbuf_printf(b, "{\"status\":\"%s\",\"redis\":\"%s\",\"kafka\":\"%s\"}", ok ? "ok" : "unavailable",
                r ? "up" : "down", k ? "up" : "down");
    return ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
}

/* /healthz; /metrics is the operators' (ops.h). */
static enum MHD_Result get_health(struct ingress *g, struct MHD_Connection *conn)
{
    struct mbuf b = { 0 };
    struct MHD_Response *resp;
    enum MHD_Result ret;
    unsigned status = (unsigned)ing_health_render(g, &b);
    if (b.oom) {
        mbuf_free(&b);
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(b.len, b.data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        mbuf_free(&b);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Admit a request past the shared limits and suspend nothing yet: a pooled
 * request, or NULL after answering (503/429). */
static struct ing_req *admit(struct ingress *g, struct MHD_Connection *conn, int kind, int64_t t0,
                             enum MHD_Result *ret)
{
    struct ing_req *q;
    if (atomic_load(&g->stopping)) {
        *ret = unavailable(g, conn, t0);
        return NULL;
    }
    /* Load shedding: beyond the limit an immediate 429 costs the server
     * almost nothing, where queueing would make every answer late. */
    if (atomic_load(&g->inflight) >= CFG_GET(g->cfg->producer.max_inflight)) {
        PM_INC(req_overloaded);
        *ret = respond_hdr(g, conn, MHD_HTTP_TOO_MANY_REQUESTS, "{\"status\":\"overloaded\"}", t0,
                           MHD_HTTP_HEADER_RETRY_AFTER, OVERLOADED_RETRY_AFTER_S);
        return NULL;
    }
    if (!(q = req_get(g, conn))) {
        *ret = unavailable(g, conn, t0);
        return NULL;
    }
    q->t0_us = t0;
    q->kind = kind;
    return q;
}

/* Hand a request to its thread: it counts as in flight until answered. */
static void queue_request(struct ingress *g, struct ing_req *q)
{
    atomic_store(&q->state, REQ_QUEUED);
    atomic_fetch_add(&g->inflight, 1);
    PM_INC(inflight);
    MHD_suspend_connection(q->conn);
    if (q->kind == KIND_BUY)
        rsv_submit(g->rsv, &q->rr);
    else if (q->kind == KIND_CANCEL)
        cx_submit(g->cx, &q->xr);
    else if (q->kind == KIND_QUEUE)
        wr_submit(g->wr, &q->wq);
    else
        st_submit(g->st, &q->sr);
}

/* producer.auth = "none" (development): the caller names itself with
 * ?user_id=U. 0, or -1 when it does not. */
static int named_caller(struct MHD_Connection *conn, int64_t *buyer)
{
    const char *u = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "user_id");
    return u && util_parse_i64(u, 1, INT64_MAX, buyer) == 0 ? 0 : -1;
}

/* GET /api/v1/orders/ID or /api/v1/seckill/ID, with the buyer known. */
static enum MHD_Result status_call(struct ingress *g, struct MHD_Connection *conn, enum st_kind kind,
                                   int64_t id, int64_t buyer, int64_t t0, void **con_cls)
{
    enum MHD_Result ret = MHD_NO;
    struct ing_req *q;
    if (kind == ST_BY_ITEM && !buyer && named_caller(conn, &buyer) != 0)
        return bad_request(g, conn, "user_id query parameter must be a positive integer", t0);
    if (!(q = admit(g, conn, KIND_STATUS, t0, &ret)))
        return ret;
    q->sr.kind = kind;
    q->sr.id = id;
    q->sr.user_id = buyer;
    q->sr.complete = on_status_complete;
    /* MHD calls again once the (empty) body is read: the request goes to its
     * thread then. */
    *con_cls = q;
    return MHD_YES;
}

/* POST /api/v1/orders/ID/cancel, with the buyer known. Only an order's
 * owner may cancel it, so a caller is always named: with producer.auth =
 * "none" by ?user_id=U as for the status by item (never "anyone", which the
 * status by order allows for reading: a cancel changes the order). */
static enum MHD_Result cancel_call(struct ingress *g, struct MHD_Connection *conn, int64_t id, int64_t buyer,
                                   const char *clen, int64_t t0, void **con_cls)
{
    enum MHD_Result ret = MHD_NO;
    struct ing_req *q;
    int64_t n = 0;
    if (!buyer && named_caller(conn, &buyer) != 0)
        return bad_request(g, conn, "user_id query parameter must be a positive integer", t0);
    /* The order is the path's; a body would be a second, unread say. */
    if (clen && (util_parse_i64(clen, 0, INT64_MAX, &n) != 0 || n != 0))
        return bad_request(g, conn, "a cancel takes no body", t0);
    if (!(q = admit(g, conn, KIND_CANCEL, t0, &ret)))
        return ret;
    q->xr.order_id = id;
    q->xr.user_id = buyer;
    q->xr.complete = on_cancel_complete;
    /* Queued once the (empty) body is read, as a status call. */
    *con_cls = q;
    return MHD_YES;
}

/* POST (join) or GET (ask) /api/v1/queue/ID, with the buyer known: with
 * producer.auth = "none" named by ?user_id=U, as for a cancel (a join takes
 * a place in the buyer's name). A join takes no body. */
static enum MHD_Result queue_call(struct ingress *g, struct MHD_Connection *conn, int64_t id, int64_t buyer,
                                  int join, const char *clen, int64_t t0, void **con_cls)
{
    enum MHD_Result ret = MHD_NO;
    struct ing_req *q;
    int64_t n = 0;
    if (!buyer && named_caller(conn, &buyer) != 0)
        return bad_request(g, conn, "user_id query parameter must be a positive integer", t0);
    if (join && clen && (util_parse_i64(clen, 0, INT64_MAX, &n) != 0 || n != 0))
        return bad_request(g, conn, "a join takes no body", t0);
    if (!(q = admit(g, conn, KIND_QUEUE, t0, &ret)))
        return ret;
    q->wq.item_id = id;
    q->wq.user_id = buyer;
    q->wq.join = join;
    q->wq.complete = on_queue_complete;
    /* Queued once the (empty) body is read, as a status call. */
    *con_cls = q;
    return MHD_YES;
}

/* --- the front door (ratelimit.h): limits per client and per buyer ----- */

/* The values of the client address header, in order. */
struct hdr_vals {
    const char *name;
    const char *v[8];
    size_t n;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct hdr_vals *h = cls;
    (void)kind;
    if (strcasecmp(key, h->name) != 0)
        return MHD_YES;
    /* More fields than this are a list no proxy chain writes: the last
     * ones, where the trusted hops are, are what counts. */
    if (h->n == sizeof(h->v) / sizeof(h->v[0]))
        memmove(h->v, h->v + 1, --h->n * sizeof(h->v[0]));
    h->v[h->n++] = value;
    return MHD_YES;
}

static int peer_of(struct MHD_Connection *conn, struct na_addr *out)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci ? na_from_sockaddr(ci->client_addr, out) : -1;
}

/* 429 rate_limited: which limit, and when to ask again. */
static enum MHD_Result rate_limited(struct ingress *g, struct MHD_Connection *conn, const char *limit,
                                    int64_t wait_us, int64_t t0)
{
    char body[96], after[24];
    int64_t s = rl_retry_after_s(wait_us);
    snprintf(after, sizeof(after), "%" PRId64, s);
    snprintf(body, sizeof(body),
             "{\"status\":\"rate_limited\",\"limit\":\"%s\",\"retry_after_s\":%" PRId64 "}", limit, s);
    return respond_hdr(g, conn, MHD_HTTP_TOO_MANY_REQUESTS, body, t0, MHD_HTTP_HEADER_RETRY_AFTER, after);
}

/* The client's request rate, before anything costs Redis: 1 admitted, 0
 * answered (*ret). */
static int front_door_address(struct ingress *g, struct MHD_Connection *conn, int64_t t0,
                              enum MHD_Result *ret)
{
    struct hdr_vals h = { .name = rl_client_header(g->rl) };
    struct na_addr peer, client;
    if (peer_of(conn, &peer) != 0)
        return 1; /* not TCP: nothing to key it by */
    if (h.name)
        MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &h);
    rl_client(g->rl, &peer, h.v, h.n, &client);
    int64_t wait_us = rl_address(g->rl, &client, t0);
    if (!wait_us)
        return 1;
    PM_INC(limited_address);
    *ret = rate_limited(g, conn, "address", wait_us, t0);
    return 0;
}

/* The buyer's request rate, known once the token is verified. */
static int front_door_buyer(struct ingress *g, struct MHD_Connection *conn, int64_t buyer, int64_t t0,
                            enum MHD_Result *ret)
{
    int64_t wait_us = rl_buyer(g->rl, buyer, t0);
    if (!wait_us)
        return 1;
    PM_INC(limited_buyer);
    *ret = rate_limited(g, conn, "buyer", wait_us, t0);
    return 0;
}

/* Accept policy: the connection cap per address (the TCP peer: a header is
 * not read yet, and a trusted proxy is not capped). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct ingress *g = cls;
    struct na_addr peer;
    (void)addrlen;
    if (na_from_sockaddr(addr, &peer) != 0 || rl_conn_allowed(g->rl, &peer))
        return MHD_YES;
    PM_INC(limited_connections);
    return MHD_NO;
}

/* Counted when started, so that a connection libmicrohttpd gave up on
 * between the policy and its start is never counted; the address counted
 * stays with the connection, so its close uncounts exactly that. Its
 * request is awaited from now on (reqwatch.h). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct ingress *g = cls;
    struct ing_conn *cx = *socket_context;
    const union MHD_ConnectionInfo *ci;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        /* Without it: not counted (the cap is looser) and no deadline; its
         * requests are answered 503 (on_headers). */
        if (!(cx = calloc(1, sizeof(*cx))))
            return;
        if (peer_of(conn, &cx->peer) == 0) {
            rl_conn_opened(g->rl, &cx->peer);
            cx->counted = 1;
        }
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        cx->slot.fd = ci ? ci->connect_fd : -1;
        if (cx->slot.fd >= 0)
            rw_arm(&g->rw, &cx->slot, cx->slot.fd, util_mono_us());
        *socket_context = cx;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && cx) {
        /* Before libmicrohttpd closes the descriptor: never shut once reused. */
        rw_disarm(&g->rw, &cx->slot);
        clr_leave(&cx->clr);
        if (cx->counted)
            rl_conn_closed(g->rl, &cx->peer);
        free(cx);
        *socket_context = NULL;
    }
}

/* The request target as sent, before libmicrohttpd cuts it at '?', '&' and
 * '=' and before any NUL in it ends it: its length, for hc_check(). And its
 * head is being read from now on (clrefuse.h). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct ingress *g = cls;
    struct ing_conn *cx = conn_of(conn);
    if (cx) {
        cx->raw_uri_len = strlen(uri);
        cx->target_ok = hc_target_ok(uri);
        clr_enter(&g->clr, &cx->clr, conn);
    }
    /* NULL: the access handler's first call still sees *con_cls NULL. */
    return NULL;
}

/* A head hc_check() refuses, or one read on a connection without its
 * context: answered (*ret), and the connection closed, whatever the path:
 * the bytes after such a head may be another request that a proxy took for
 * a body, and must never run. 0: the head is sound, nothing answered. */
static int refuse_head(struct ingress *g, struct MHD_Connection *conn, const char *url, const char *method,
                       const char *version, int64_t t0, enum MHD_Result *ret)
{
    struct ing_conn *cx = conn_of(conn);
    struct hc_head h = { method, url, version, cx ? cx->raw_uri_len : 0 };
    const char *why;
    unsigned status = MHD_HTTP_BAD_REQUEST;
    if (!cx) {
        PM_INC(req_unavailable);
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        why = "out of memory";
    } else if (!cx->target_ok) {
        why = "a request target with a space, a control or a non-ASCII byte";
    } else if (!(why = hc_check(conn, &h, &status))) {
        return 0;
    }
    if (cx) {
        PM_INC(head_refused);
        PM_INC(req_bad_request);
    }
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1);
    *ret = refuse(g, conn, status, cx ? "bad_request" : "unavailable", why, t0, MHD_HTTP_HEADER_CONNECTION,
                  "close");
    return 1;
}

/* What a request's path names. */
enum route {
    ROUTE_NONE,
    ROUTE_BAD_ID,
    ROUTE_BUY,
    ROUTE_HEALTH,
    ROUTE_ORDER,
    ROUTE_ITEM,
    ROUTE_CANCEL,
    ROUTE_QUEUE,
};

/* ORDER_STATUS_PREFIX ID CANCEL_SUFFIX: 1 with the id in *id; 0 when url
 * does not start with the prefix and end with the suffix; -1 when it does
 * but what is between is not an id as req_path_id() takes one (so
 * "/api/v1/orders/1/cancel/", "/api/v1/orders/%31/cancel" or
 * "/api/v1/orders/1/2/cancel" name no order: one order, one name). */
static int cancel_path_id(const char *url, int64_t *id)
{
    size_t n = strlen(url), pl = strlen(ORDER_STATUS_PREFIX), sl = strlen(CANCEL_SUFFIX);
    char path[sizeof(ORDER_STATUS_PREFIX) + 24];
    if (n <= pl + sl || strncmp(url, ORDER_STATUS_PREFIX, pl) != 0 ||
        strcmp(url + n - sl, CANCEL_SUFFIX) != 0)
        return 0;
    if (n - sl >= sizeof(path))
        return -1; /* longer than any int64 */
    memcpy(path, url, n - sl);
    path[n - sl] = 0;
    return req_path_id(path, ORDER_STATUS_PREFIX, id) == 1 ? 1 : -1;
}

/* The resource url names, matched as sent (never decoded), and its id. */
static enum route route_of(const char *url, int64_t *id)
{
    int r;
    if (strcmp(url, ORDER_PATH) == 0)
        return ROUTE_BUY;
    if (strcmp(url, "/healthz") == 0)
        return ROUTE_HEALTH;
    /* Before the status by order: its prefix is the cancel's too. */
    if ((r = cancel_path_id(url, id)) != 0)
        return r > 0 ? ROUTE_CANCEL : ROUTE_BAD_ID;
    if ((r = req_path_id(url, ORDER_STATUS_PREFIX, id)) != 0)
        return r > 0 ? ROUTE_ORDER : ROUTE_BAD_ID;
    if ((r = req_path_id(url, ITEM_STATUS_PREFIX, id)) != 0)
        return r > 0 ? ROUTE_ITEM : ROUTE_BAD_ID;
    if ((r = req_path_id(url, QUEUE_PREFIX, id)) != 0)
        return r > 0 ? ROUTE_QUEUE : ROUTE_BAD_ID;
    return ROUTE_NONE;
}

/* A known path asked with a method it does not take: 405 with Allow (RFC
 * 9110 says a 405 lists what the resource takes). 1 answered (*ret), 0 the
 * method is right. */
static int wrong_method(struct ingress *g, struct MHD_Connection *conn, enum route rt, const char *method,
                        int64_t t0, enum MHD_Result *ret)
{
    int post = strcmp(method, "POST") == 0;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int reads = rt == ROUTE_ORDER || rt == ROUTE_ITEM, queue = rt == ROUTE_QUEUE;
    if (((rt == ROUTE_BUY || rt == ROUTE_CANCEL) && post) || (reads && get) || (queue && (get || post)))
        return 0;
    PM_INC(req_bad_request);
    *ret = respond_hdr(g, conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                       queue   ? "{\"status\":\"bad_request\",\"error\":\"use POST to join, GET to ask\"}"
                       : reads ? "{\"status\":\"bad_request\",\"error\":\"use GET\"}"
                               : "{\"status\":\"bad_request\",\"error\":\"use POST\"}",
                       t0, MHD_HTTP_HEADER_ALLOW, queue ? "GET, HEAD, POST" : reads ? "GET, HEAD" : "POST");
    return 1;
}

/* First call for a request: only the headers are in. */
static enum MHD_Result on_headers(struct ingress *g, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, void **con_cls)
{
    const char *ctype, *clen;
    int64_t t0 = util_mono_us(), n, id = 0, buyer = 0;
    int is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    enum route rt;
    enum MHD_Result ret = MHD_NO;
    struct ing_req *q;
    struct ing_conn *cx = conn_of(conn);

    if (cx) {
        cx->close_after = 0;
        clr_leave(&cx->clr);
    }
    if (refuse_head(g, conn, url, method, version, t0, &ret))
        return ret;
    /* hc_check() let through no Transfer-Encoding but chunked. */
    if (cx && MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        cx->close_after = 1;
    clen = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    rt = route_of(url, &id);
    if (rt == ROUTE_HEALTH && is_get)
        return get_health(g, conn);
    if (rt == ROUTE_NONE || rt == ROUTE_HEALTH) {
        PM_INC(req_not_found);
        return respond(g, conn, MHD_HTTP_NOT_FOUND, "{\"status\":\"not_found\"}", 0);
    }
    if (rt == ROUTE_BAD_ID)
        return bad_request(g, conn, "the id in the path must be a positive integer", t0);
    if (wrong_method(g, conn, rt, method, t0, &ret))
        return ret;
    if (!front_door_address(g, conn, t0, &ret))
        return ret;
    if (auth_enabled(g->auth)) {
        const char *authz = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        enum jwt_err e = auth_buyer(g->auth, authz, &buyer);
        if (e != JWT_OK)
            return unauthorized(g, conn, e, t0);
        if (!front_door_buyer(g, conn, buyer, t0, &ret))
            return ret;
    }
    if (rt == ROUTE_ORDER || rt == ROUTE_ITEM)
        return status_call(g, conn, rt == ROUTE_ORDER ? ST_BY_ORDER : ST_BY_ITEM, id, buyer, t0, con_cls);
    if (rt == ROUTE_CANCEL)
        return cancel_call(g, conn, id, buyer, clen, t0, con_cls);
    if (rt == ROUTE_QUEUE)
        return queue_call(g, conn, id, buyer, !is_get, clen, t0, con_cls);

    ctype = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!req_content_type_ok(ctype))
        return bad_request(g, conn, "content type must be application/json", t0);
    if (clen && (util_parse_i64(clen, 0, INT64_MAX, &n) != 0 || n > (int64_t)g->body_limit))
        return bad_request(g, conn, "body too large", t0);
    if (!(q = admit(g, conn, KIND_BUY, t0, &ret)))
        return ret;
    q->buyer = buyer;
    /* Kept for the body's end: checked once the item is known (on_body). */
    const char *adm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, ADM_HEADER);
    if (adm) {
        q->has_admission = 1;
        snprintf(q->admission, sizeof(q->admission), "%s", adm);
        if (strlen(adm) >= sizeof(q->admission))
            q->admission[0] = '.'; /* too long: no token's shape, refused as malformed */
    }
    *con_cls = q;
    return MHD_YES;
}

/* The whole body is in: who buys what. */
static enum MHD_Result on_body(struct ingress *g, struct MHD_Connection *conn, struct ing_req *q)
{
    struct req_body rb;
    char err[128];
    if (req_parse(q->body, q->len, &rb, err, sizeof(err)) != 0)
        return bad_request(g, conn, err, q->t0_us);
    if (q->buyer && rb.user_id && rb.user_id != q->buyer) {
        PM_INC(req_forbidden);
        return refuse(g, conn, MHD_HTTP_FORBIDDEN, "forbidden", "user_id is not the token's buyer", q->t0_us,
                      NULL, NULL);
    }
    if (!q->buyer && !rb.user_id)
        return bad_request(g, conn, "missing user_id", q->t0_us);
    q->rr.user_id = q->buyer ? q->buyer : rb.user_id;
    q->rr.item_id = rb.item_id;
    /* Most of a sale's requests come after the stock is gone: answered here,
     * they cost Redis nothing (soldout.h says how stale this can be). */
    enum so_answer sa = so_sold_out(g->so, q->rr.item_id, q->rr.user_id);
    if (sa != SO_ASK_REDIS) {
        q->rr.outcome = sa == SO_ENDED ? RSV_ENDED : RSV_SOLD_OUT;
        PM_INC(sold_out_local);
        rsv_count(q->rr.outcome);
        return answer_buy(g, q);
    }
    /* A winner pressing again: winners.h says how fresh this is. */
    if (win_holds(g->win, q->rr.item_id, q->rr.user_id, q->t0_us)) {
        q->rr.outcome = RSV_DUPLICATE;
        PM_INC(duplicate_local);
        rsv_count(q->rr.outcome);
        return answer_buy(g, q);
    }
    /* A waiting room's admission: its MAC, item, buyer and end here, before
     * Redis (admtoken.h); Redis spends it with the reservation. A buy without
     * one goes to seckill_reserve, which refuses a queued item's. */
    if (q->has_admission) {
        q->rr.adm_refused = adm_check(q->admission, q->rr.item_id, q->rr.user_id, util_wall_ms(), &q->rr.adm);
        if (q->rr.adm_refused != ADM_OK) {
            q->rr.outcome = RSV_ADMISSION_INVALID;
            rsv_count(q->rr.outcome);
            return answer_buy(g, q);
        }
        q->rr.admitted = 1;
    }
    q->rr.complete = on_complete;
    queue_request(g, q);
    return MHD_YES;
}

/* The request is whole (its body's end, or an answer from its head alone):
 * its deadline is over (reqwatch.h). */
static void request_whole(struct ingress *g, struct MHD_Connection *conn)
{
    struct ing_conn *cx = conn_of(conn);
    if (cx)
        rw_disarm(&g->rw, &cx->slot);
}

/* A chunked body refused while it is read (its framing, or past the
 * limit): the library takes no answer in the middle of a body, so it goes
 * on the socket, shut then (clrefuse.h); the library reads the socket's end
 * and closes the connection, and what follows is never read as a request. */
static void cut_body(struct MHD_Connection *conn, struct ing_req *q, unsigned status, const char *why)
{
    char body[256];
    struct ing_conn *cx = conn_of(conn);
    error_body(body, sizeof(body), "bad_request", why);
    clr_answer(conn, status, body);
    if (cx && cx->slot.fd >= 0)
        shutdown(cx->slot.fd, SHUT_RD);
    q->cut = 1;
    PM_INC(body_refused);
    PM_INC(req_bad_request);
    metrics_hist_observe_us(&pm.latency, util_mono_us() - q->t0_us);
}

/* A piece of the body as the library gives it: a chunked one's framing
 * checked first (chunkcheck.h); a buy's kept, one past the limit refused at
 * once (a chunked one: a Content-Length past it is refused at the head). A
 * cancel refuses a body at the end; a status call has none (a GET with a
 * body is refused at its head). */
static void take_piece(struct ingress *g, struct MHD_Connection *conn, struct ing_req *q, const char *data,
                       size_t n)
{
    const char *why;
    if (q->cut)
        return;
    if (q->chunked && (why = ck_piece(&q->ck, data, n)) != NULL)
        cut_body(conn, q, MHD_HTTP_BAD_REQUEST, why);
    else if (q->kind == KIND_CANCEL || q->kind == KIND_QUEUE)
        q->too_large = 1;
    else if (q->kind != KIND_BUY)
        ;
    else if (q->len + n > g->body_limit)
        cut_body(conn, q, MHD_HTTP_CONTENT_TOO_LARGE, "body too large");
    else {
        memcpy(q->body + q->len, data, n);
        q->len += n;
    }
}

/* The head is in and a request made for it: a chunked body is checked
 * from where the library reads it (chunkcheck.h). */
static void body_begins(struct ing_req *q, struct MHD_Connection *conn, const char *method)
{
    struct ing_conn *cx = conn_of(conn);
    const union MHD_ConnectionInfo *ci;
    if (!cx || !cx->close_after)
        return;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    q->chunked = 1;
    if (ci)
        ck_begin(&q->ck, method, ci->header_size, ING_CONN_MEMORY);
    else
        q->ck.lost = 1; /* nothing in view: checked nowhere, closed after */
}

/* The body's end: a chunked one's trailers are held to a head's rules. 1
 * refused (*ret), 0 sound. */
static int refuse_trailers(struct ingress *g, struct MHD_Connection *conn, struct ing_req *q,
                           enum MHD_Result *ret)
{
    const char *why;
    char msg[160];
    if (!q->chunked || q->ck.room == 0 ||
        !(why = hc_check_trailers(conn, (const char *)q->ck.start, q->ck.room)))
        return 0;
    snprintf(msg, sizeof(msg), "in the trailers: %s", why);
    PM_INC(body_refused);
    *ret = bad_request(g, conn, msg, q->t0_us);
    return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct ingress *g = cls;
    struct ing_req *q = *con_cls;
    enum MHD_Result ret;
    if (!q) {
        ret = on_headers(g, conn, url, method, version, con_cls);
        if (!(q = *con_cls))
            request_whole(g, conn); /* answered from the head alone */
        else
            body_begins(q, conn, method);
        return ret;
    }
    switch (atomic_load(&q->state)) {
    case REQ_READING:
        if (*upload_data_size) {
            take_piece(g, conn, q, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        if (q->cut) {
            /* Answered on the socket: the library closes the connection,
             * and says why (on_mhd_log). */
            g->cut_closing = 1;
            return MHD_NO;
        }
        request_whole(g, conn);
        if (refuse_trailers(g, conn, q, &ret))
            return ret;
        if (q->kind == KIND_BUY)
            return on_body(g, conn, q);
        if (q->kind == KIND_CANCEL && q->too_large)
            return bad_request(g, conn, "a cancel takes no body", q->t0_us);
        if (q->kind == KIND_QUEUE && q->too_large)
            return bad_request(g, conn, "a join takes no body", q->t0_us);
        /* Most asks of a crowd waiting its turn: answered from the
         * producer's copy of the line, without Redis (qcopy.h). */
        if (q->kind == KIND_QUEUE && wr_answer_here(g->wr, &q->wq)) {
            PM_INC(req_queue);
            return answer_queue(g, q);
        }
        queue_request(g, q);
        return MHD_YES;
    case REQ_DONE:
        if (q->kind == KIND_CANCEL)
            return answer_cancel(g, q);
        if (q->kind == KIND_QUEUE)
            return answer_queue(g, q);
        return q->kind == KIND_BUY ? answer_buy(g, q) : answer_status(g, q);
    default:
        /* Resumed without an answer cannot happen; refuse rather than hang. */
        return MHD_NO;
    }
}

/* A kind's state is over: said once more with the count, unless it was
 * said once only (its first line is all there was). With say_mu held. */
static void say_end(struct mhd_say *s, const char *what)
{
    if (s->r.times > 1)
        log_repeat_end(&s->r, what);
    memset(&s->r, 0, sizeof(s->r));
    s->fmt = NULL;
}

/* The state of fmt's kind: its own, a free one, or (all taken) the one
 * quiet longest, ended first. With say_mu held. */
static struct mhd_say *say_kind(struct ingress *g, const char *fmt)
{
    struct mhd_say *s, *oldest = g->say;
    for (s = g->say; s < g->say + MHD_SAY_KINDS; s++)
        if (s->fmt && strcmp(s->fmt, fmt) == 0)
            return s;
    for (s = g->say; s < g->say + MHD_SAY_KINDS; s++)
        if (!s->fmt)
            goto take;
    for (s = g->say; s < g->say + MHD_SAY_KINDS; s++)
        if (s->last_us < oldest->last_us)
            oldest = s;
    s = oldest;
    say_end(s, "another message took its place");
take:
    s->fmt = fmt; /* the library's own string: it outlives the daemon's use */
    return s;
}

/* libmicrohttpd is about to refuse a Content-Length it cannot read, and to
 * write its answer's head twice (clrefuse.h): ours goes first, and the
 * connection is shut before theirs. */
static void refuse_length(struct ingress *g)
{
    const char *why;
    char body[256];
    struct ing_conn *cx;
    struct MHD_Connection *conn = clr_find(&g->clr, &why);
    if (!conn)
        return;
    if ((cx = conn_of(conn)) != NULL)
        rw_disarm(&g->rw, &cx->slot); /* the head is whole, and the socket about to be shut */
    error_body(body, sizeof(body), "bad_request", why);
    clr_answer(conn, MHD_HTTP_BAD_REQUEST, body);
    PM_INC(head_refused);
    PM_INC(req_bad_request);
}

/* What libmicrohttpd 0.9.75 says (as "%s\n") when the access handler
 * returns MHD_NO. */
#define CUT_CLOSING_SAYS "Application reported internal error, closing connection."

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct ingress *g = cls;
    struct mhd_say *s;
    char buf[512], key[LOG_REPEAT_KEY_MAX];
    /* Only the connection's thread says these: the list is its own. */
    if (clr_is_refusal(fmt))
        refuse_length(g);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    buf[strcspn(buf, "\n")] = 0;
    /* The library's word for our refusing a body we already answered: no
     * error of anyone's (the refusal is counted as body_refused). */
    if (g->cut_closing) {
        g->cut_closing = 0;
        if (strcmp(buf, CUT_CLOSING_SAYS) == 0)
            return;
    }
    PM_INC(http_library_messages);
    pthread_mutex_lock(&g->say_mu);
    s = say_kind(g, fmt);
    s->last_us = util_mono_us();
    /* Named after its first text: the same kind with another client's
     * details is the same state. */
    if (s->r.times)
        snprintf(key, sizeof(key), "%s", s->r.key);
    else
        snprintf(key, sizeof(key), "http: %.150s", buf);
    log_repeat(&s->r, LOG_LVL_WARNING, key, "http: %s (said once while it lasts)", buf);
    pthread_mutex_unlock(&g->say_mu);
}

/* End the kinds quiet for MHD_SAY_QUIET_US, or all of them with force. */
static void say_quiet(struct ingress *g, int64_t now_us, int force)
{
    pthread_mutex_lock(&g->say_mu);
    for (struct mhd_say *s = g->say; s < g->say + MHD_SAY_KINDS; s++)
        if (s->fmt && (force || now_us - s->last_us >= MHD_SAY_QUIET_US))
            say_end(s, force ? "stopping" : "5 s without it");
    pthread_mutex_unlock(&g->say_mu);
}

/* The ingress's timer: connections whose request is late are shut
 * (reqwatch.h), quiet message kinds ended. The tick bounds how late past
 * its deadline a connection goes. */
#define TIMER_TICK_MS 100
static void *timer_main(void *arg)
{
    struct ingress *g = arg;
    while (!bgt_stopping(&g->timer)) {
        bgt_sleep_ms(&g->timer, TIMER_TICK_MS);
        int64_t now = util_mono_us();
        int64_t limit_us = (int64_t)CFG_GET(g->cfg->producer.request_timeout_s) * 1000000;
        int n = rw_expire(&g->rw, now - limit_us);
        if (n)
            PM_ADD(request_timeouts, n);
        say_quiet(g, now, 0);
    }
    return NULL;
}

/* Connection and memory limits keep a slow or hostile client from holding
 * the daemon: idle connections close after the timeout, headers beyond the
 * per-connection memory are refused, connections beyond the cap are not
 * accepted; a whole request's deadline is the timer's.
 * MHD_OPTION_STRICT_FOR_CLIENT stays 0: at 1 it refuses a missing Host by
 * itself, its answer's status line written twice; hc_check() refuses that
 * and more, answering once. */
static struct MHD_Daemon *start_mhd(struct ingress *g, const struct cfg *c, struct sockaddr_in *sa)
{
    return MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO, 0,
        on_accept, g, on_request, g, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, g,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, g, MHD_OPTION_URI_LOG_CALLBACK, on_uri, g,
        MHD_OPTION_UNESCAPE_CALLBACK, hc_unescape_none, NULL,
        MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)c->producer.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)c->producer.connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)ING_CONN_MEMORY, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, g, MHD_OPTION_END);
}

int ing_start(const struct cfg *c, struct rsv *r, struct st *st, struct cx *x, struct so *so, struct win *w,
              struct wr *wr, struct auth *a, struct ing_health *h, struct ingress **out, char *err,
              size_t errlen)
{
    struct sockaddr_in sa;
    int rw_ok = 0, say_ok = 0;
    struct ingress *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    g->cfg = c;
    g->rsv = r;
    g->st = st;
    g->cx = x;
    g->so = so;
    g->auth = a;
    g->win = w;
    g->wr = wr;
    g->health = h;
    g->body_limit = (size_t)c->producer.body_limit;
    if (rl_new(c, &g->rl, err, errlen) != 0)
        goto fail;
    if (httpd_sockaddr(c->producer.listen, c->producer.port, &sa) != 0) {
        snprintf(err, errlen, "bad producer.listen address '%s'", c->producer.listen);
        goto fail;
    }
    clr_init(&g->clr);
    if (!(rw_ok = rw_init(&g->rw) == 0) || !(say_ok = pthread_mutex_init(&g->say_mu, NULL) == 0)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (!(g->mhd = start_mhd(g, c, &sa))) {
        snprintf(err, errlen, "cannot listen on %s:%d", c->producer.listen, c->producer.port);
        goto fail;
    }
    if (bgt_start(&g->timer, timer_main, g) != 0) {
        snprintf(err, errlen, "cannot start the ingress's timer thread");
        goto fail;
    }
    *out = g;
    return 0;
fail:
    if (g->mhd)
        MHD_stop_daemon(g->mhd);
    if (say_ok)
        pthread_mutex_destroy(&g->say_mu);
    if (rw_ok)
        rw_destroy(&g->rw);
    rl_free(g->rl);
    free(g);
    return -1;
}

void ing_stop_accepting(struct ingress *g) { atomic_store(&g->stopping, 1); }

long ing_inflight(const struct ingress *g) { return atomic_load(&g->inflight); }

void ing_stop(struct ingress *g)
{
    struct ing_req *q, *next;
    if (!g)
        return;
    /* The timer first: it shuts sockets of connections the daemon's stop
     * frees. */
    bgt_stop(&g->timer);
    MHD_stop_daemon(g->mhd);
    say_quiet(g, 0, 1);
    for (q = g->pool; q; q = next) {
        next = q->free_next;
        free(q);
    }
    pthread_mutex_destroy(&g->say_mu);
    rw_destroy(&g->rw);
    rl_free(g->rl);
    free(g);
}
