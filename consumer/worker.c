#include "worker.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "daemon.h"
#include "i64map.h"
#include "log.h"
#include "settle.h"
#include "sink.h"
#include "ulocks.h"
#include "util.h"

struct worker {
    int id;
    pthread_t th;
    bool started;
    struct wk_pool *pool;
    struct queue inbox;
    struct ul_batch ul; /* the batch's users' locks */
    struct sink *sink;
    struct settle *settle; /* clears the reservations of settled orders */
    bool pg_down, redis_down;
    int pg_attempt, redis_attempt;
    struct log_repeat say_aborted; /* batches rolled back one after the other */
    int64_t pg_probe_at; /* idle and PostgreSQL down: when to try it again */
    /* per batch, sized for the largest batch */
    size_t cap;
    struct cmsg **batch, **carry;
    size_t ncarry;
    size_t nu;        /* distinct users of the batch being written */
    int64_t *users;   /* sorted: user i's lock is the ul's i */
    struct sink_order *so;
    struct cmsg **so_msg;
    /* A batch with cancels (pick_locked): the users whose later messages
     * wait for the next batch, and the items a cancel of the batch names. */
    struct i64map held_users, cancel_items;
};

struct wk_pool {
    const struct cfg *cfg;
    struct queue *done;
    struct dlq *dlq;
    int n;
    struct worker *w;
    _Atomic int finishing, abandon;
};

/* --- state changes, logged once ------------------------------------------ */

static void set_pg_down(struct worker *w, bool down, const char *why)
{
    if (down == w->pg_down)
        return;
    w->pg_down = down;
    CM_ADD(pg_down, down ? 1 : -1);
    if (down)
        log_error("worker %d: PostgreSQL unavailable, retrying with backoff: %s", w->id, why);
    else
        log_notice("worker %d: PostgreSQL available again", w->id);
}

static void set_redis_down(struct worker *w, bool down)
{
    if (down == w->redis_down)
        return;
    w->redis_down = down;
    CM_ADD(redis_down, down ? 1 : -1);
    if (down)
        log_error("worker %d: Redis unavailable: no lock, no write; retrying with backoff", w->id);
    else
        log_notice("worker %d: Redis available again", w->id);
}

/* Sleep, but wake for an abandon. */
static void nap(struct worker *w, int64_t ms)
{
    int64_t end = util_mono_ms() + ms;
    while (!atomic_load(&w->pool->abandon)) {
        int64_t left = end - util_mono_ms();
        if (left <= 0)
            break;
        util_sleep_ms(left < 50 ? left : 50);
    }
}

/* A worker whose Redis or PostgreSQL is down retries on lock.backoff_base_ms,
 * but never faster than every WK_RETRY_FLOOR_MS (a zero jitter draw or a
 * tiny base would spin on a dead service) nor slower than WK_RETRY_CAP_MS
 * (the service is back within two seconds of a restart); the attempt count
 * stops growing once the cap is reached, so it cannot overflow. */
#define WK_RETRY_FLOOR_MS 10
#define WK_RETRY_CAP_MS 2000
#define WK_RETRY_MAX_ATTEMPT 30

static int64_t backoff(struct worker *w, int *attempt)
{
    int64_t base = CFG_GET(w->pool->cfg->lock.backoff_base_ms);
    int64_t d = util_backoff_ms((*attempt)++, util_max_i64(base, WK_RETRY_FLOOR_MS), WK_RETRY_CAP_MS);
    if (*attempt > WK_RETRY_MAX_ATTEMPT)
        *attempt = WK_RETRY_MAX_ATTEMPT;
    return util_max_i64(d, WK_RETRY_FLOOR_MS);
}

/* Idle with PostgreSQL down (fetching is paused meanwhile, so no batch
 * would find out it is back): try a connection now and then. */
static void probe_pg(struct worker *w)
{
    char err[512];
    int64_t now = util_mono_ms();
    if (now < w->pg_probe_at)
        return;
    if (sink_ready(w->sink, err, sizeof(err)) == 0) {
        set_pg_down(w, false, NULL);
        w->pg_attempt = 0;
        return;
    }
    w->pg_probe_at = now + backoff(w, &w->pg_attempt);
}

/* --- one batch ------------------------------------------------------------ */

static size_t user_index(const struct worker *w, int64_t user)
{
    const int64_t *p = bsearch(&user, w->users, w->nu, sizeof(*w->users), util_cmp_i64);
    return (size_t)(p - w->users);
}

static int precommit(void *arg)
{
    struct worker *w = arg;
    return ul_any_lost(&w->ul) ? -1 : 0;
}

static void carry(struct worker *w, struct cmsg *m)
{
    w->carry[w->ncarry++] = m;
}

/* A message the database refuses on its own: dead-letter it. */
static int dead_letter(struct worker *w, struct cmsg *m, const char *why)
{
    char buf[ORDER_MSG_MAX], key[ORDER_ID_STR_MAX];
    int len = order_encode(&m->o, buf, sizeof(buf));
    if (len < 0)
        return -1;
    snprintf(key, sizeof(key), "%" PRId64, m->o.user_id);
    free(m->payload);
    free(m->key);
    free(m->error);
    m->payload = malloc((size_t)len);
    m->key = strdup(key);
    m->error = strdup(why);
    if (!m->payload || !m->key || !m->error)
        return -1;
    memcpy(m->payload, buf, (size_t)len);
    m->payload_len = (size_t)len;
    m->key_len = strlen(key);
    log_error("worker %d: order %" PRId64 " refused by PostgreSQL, dead-lettered: %s", w->id, m->o.order_id,
              why);
    return dlq_send(w->pool->dlq, m);
}

/* Lock every distinct user of v[0..n) in one round trip (w->users, w->ul).
 * Returns how many were acquired; with none, the whole batch is carried to
 * the next one, after a backoff when Redis failed. */
static size_t lock_users(struct worker *w, struct cmsg **v, size_t n)
{
    struct ul_tally t;
    int64_t t0;

    for (size_t i = 0; i < n; i++)
        w->users[i] = v[i]->o.user_id;
    w->nu = util_sort_unique_i64(w->users, n);
    t0 = util_mono_ms();
    ul_lock(&w->ul, w->users, w->nu, &t);
    metrics_hist_observe_us(&cm.lock_wait, (util_mono_ms() - t0) * 1000);
    set_redis_down(w, t.got == 0 && t.errors > 0);
    if (t.got > 0) {
        w->redis_attempt = 0;
        return t.got;
    }
    for (size_t i = 0; i < n; i++)
        carry(w, v[i]);
    if (t.errors > 0) {
        CM_ADD(redis_errors, 1);
        nap(w, backoff(w, &w->redis_attempt));
    } else {
        CM_ADD(lock_busy, (int64_t)w->nu);
    }
    return 0;
}

/* Whether v[i] must wait for the next batch because of a cancel before it
 * in this one (wk_must_wait, worker.h). held_users and cancel_items are
 * this batch's; without room in them, everything after the first cancel
 * waits. */
static bool after_cancel(struct worker *w, const struct cmsg *m, bool *any_cancel, bool *no_room)
{
    const struct order *o = &m->o;
    bool wait;
    if (!*any_cancel && o->kind != ORDER_CANCEL)
        return false;
    if (*no_room)
        return true;
    if (!*any_cancel) {
        *any_cancel = true;
        if (i64map_reset(&w->held_users, 16) != 0 || i64map_reset(&w->cancel_items, 16) != 0) {
            *no_room = true;
            return false; /* the first cancel itself goes */
        }
    }
    wait = wk_must_wait(o->kind == ORDER_CANCEL, i64map_has(&w->held_users, &o->user_id),
                        i64map_has(&w->cancel_items, &o->item_id));
    /* A user whose message waits, or who cancels, has every later message
     * of the batch wait: one user's messages keep their order. */
    if ((wait || o->kind == ORDER_CANCEL) && !i64map_put(&w->held_users, &o->user_id))
        *no_room = true;
    if (!wait && o->kind == ORDER_CANCEL && !i64map_put(&w->cancel_items, &o->item_id))
        *no_room = true;
    return wait;
}

/* The messages of the locked users into w->so, in arrival order, each with
 * its user's fence; the others are carried, and so is what must wait for a
 * cancel before it to commit first (after_cancel). Returns how many. */
static size_t pick_locked(struct worker *w, struct cmsg **v, size_t n)
{
    size_t ns = 0;
    bool any_cancel = false, no_room = false;
    for (size_t i = 0; i < n; i++) {
        size_t u = user_index(w, v[i]->o.user_id);
        if (!ul_held(&w->ul, u)) {
            CM_ADD(lock_busy, 1);
            carry(w, v[i]);
            continue;
        }
        if (after_cancel(w, v[i], &any_cancel, &no_room)) {
            carry(w, v[i]);
            continue;
        }
        w->so[ns].o = &v[i]->o;
        w->so[ns].fence = ul_fence(&w->ul, u);
        w->so_msg[ns++] = v[i];
    }
    return ns;
}

/* sink_write, its path and redos counted. */
static int write_counted(struct worker *w, struct sink_order *v, size_t n, char *err, size_t errlen)
{
    struct sink_trace tr;
    int st = sink_write(w->sink, v, n, precommit, w, &tr, err, errlen);
    CM_ADD(redo_existing, tr.redo_existing);
    CM_ADD(redo_stock, tr.redo_stock);
    if (st == SINK_OK && tr.looked_up)
        CM_ADD(batch_lookup_first, 1);
    else if (st == SINK_OK)
        CM_ADD(batch_insert_first, 1);
    return st;
}

/* Order i of w->so was refused by PostgreSQL on its own: dead-letter it (the
 * dlq owns it then), or retry it when even that failed. */
static void refuse(struct worker *w, size_t i, const char *err)
{
    if (dead_letter(w, w->so_msg[i], err) == 0)
        w->so[i].outcome = CMSG_DEAD_LETTER;
    else
        w->so[i].outcome = CMSG_RETRY;
}

/* One order the server refuses must not hold up the batch: write the ns
 * orders one by one to find it. What was written is settled; after a
 * failure that is not the data's, the rest is retried. Always SINK_OK. */
static int write_one_by_one(struct worker *w, size_t ns, char *err, size_t errlen)
{
    int st = SINK_OK;
    for (size_t i = 0; i < ns && st == SINK_OK; i++) {
        int s1 = write_counted(w, &w->so[i], 1, err, errlen);
        if (s1 == SINK_DATA) {
            refuse(w, i, err);
        } else if (s1 != SINK_OK) {
            st = s1;
            for (size_t j = i; j < ns; j++)
                w->so[j].outcome = CMSG_PENDING;
        }
    }
    if (st != SINK_OK)
        for (size_t i = 0; i < ns; i++)
            if (w->so[i].outcome == CMSG_PENDING)
                w->so[i].outcome = CMSG_RETRY;
    return SINK_OK;
}

/* Write w->so[0..ns) in one transaction, falling back to one at a time when
 * the server refuses the data. A sink status: SINK_OK (every outcome set),
 * SINK_TRANSIENT or SINK_ABORTED (nothing written). */
static int write_batch(struct worker *w, size_t ns, char *err, size_t errlen)
{
    int64_t t0 = util_mono_ms();
    int st = write_counted(w, w->so, ns, err, errlen);
    if (st == SINK_DATA && ns > 1) {
        st = write_one_by_one(w, ns, err, errlen);
    } else if (st == SINK_DATA) {
        refuse(w, 0, err);
        st = SINK_OK;
    }
    metrics_hist_observe_us(&cm.txn, (util_mono_ms() - t0) * 1000);
    return st;
}

/* Act on the batch's outcome: carry what is to retry, count the rest and
 * gather the settled messages into v (ours: reused as the settled list).
 * Returns how many were settled. */
static size_t take_outcomes(struct worker *w, int st, size_t ns, struct cmsg **v, const char *err)
{
    size_t nsettled = 0;
    if (st == SINK_TRANSIENT) {
        CM_ADD(pg_errors, 1);
        set_pg_down(w, true, err);
        for (size_t i = 0; i < ns; i++)
            carry(w, w->so_msg[i]);
        return 0;
    }
    if (st == SINK_ABORTED) {
        char key[LOG_REPEAT_KEY_MAX];
        CM_ADD(lease_lost, 1);
        snprintf(key, sizeof(key), "worker %d: %.120s; rolled back", w->id, err);
        log_repeat(&w->say_aborted, LOG_LVL_WARNING, key,
                   "%s, retrying under fresh locks (said once while it "
                   "lasts)",
                   key);
        for (size_t i = 0; i < ns; i++)
            carry(w, w->so_msg[i]);
        return 0;
    }
    log_repeat_end(&w->say_aborted, "a batch committed");
    set_pg_down(w, false, NULL);
    w->pg_attempt = 0;
    cm_batch_observe((int64_t)ns);
    for (size_t i = 0; i < ns; i++) {
        struct cmsg *m = w->so_msg[i];
        m->outcome = w->so[i].outcome;
        m->pay_by_ms = w->so[i].pay_by_ms;
        m->refused_as = w->so[i].refused_as;
        if (m->outcome == CMSG_RETRY) {
            CM_ADD(stale_fence, 1);
            carry(w, m);
            continue;
        }
        if (m->outcome == CMSG_DEAD_LETTER)
            continue;
        if (m->outcome == CMSG_ID_CONFLICT)
            log_error("order id %" PRId64 " already exists for another user or item: recorded in "
                      "order_rejections", m->o.order_id);
        cm_count_outcome(m->outcome);
        v[nsettled++] = m;
    }
    return nsettled;
}

/* Hand the n messages of the list from head (settle's: those whose
 * reservation is cleared) to the done queue, in one push: only now may the
 * poll thread store their offsets. */
static void report(struct worker *w, struct cmsg *head, size_t n)
{
    struct cmsg *tail = head;
    if (n == 0)
        return;
    while (tail->next)
        tail = tail->next;
    q_push_list(w->pool->done, head, tail, n);
}

/* One batch: lock its users, write the orders of the locked ones, settle
 * what was written, release and clear the reservations, report. What could not
 * be settled is carried, in order, to the head of the next batch. */
static void process(struct worker *w, struct cmsg **v, size_t n)
{
    char err[512];
    size_t ns, nsettled, ncleared;
    struct cmsg *cleared;
    int st;

    w->ncarry = 0;
    if (lock_users(w, v, n) == 0)
        goto out;
    ns = pick_locked(w, v, n);
    st = write_batch(w, ns, err, sizeof(err));
    nsettled = take_outcomes(w, st, ns, v, err);
    /* The locks first: another worker may be waiting for one. Each is a
     * round trip (per primary on a Redis Cluster) on its own rpipe. */
    ul_release(&w->ul);
    w->nu = 0;
    cleared = settle_clear(w->settle, v, nsettled, &ncleared);
    report(w, cleared, ncleared);
    if (st == SINK_TRANSIENT)
        nap(w, backoff(w, &w->pg_attempt));
out:
    ul_publish(&w->ul);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    daemon_signals_block_thread();
    for (;;) {
        size_t n = w->ncarry, max;
        if (atomic_load(&w->pool->abandon))
            break;
        memcpy(w->batch, w->carry, n * sizeof(*w->batch));
        w->ncarry = 0;
        max = (size_t)CFG_GET(w->pool->cfg->consumer.batch_size);
        if (max > w->cap)
            max = w->cap;
        if (n < max)
            n += q_pop_batch(&w->inbox, w->batch + n, max - n, n ? 0 : 100,
                             n ? 0 : CFG_GET(w->pool->cfg->consumer.batch_linger_ms));
        if (n == 0) {
            size_t nc;
            /* Finishing waits for the backlog too: a message whose
             * reservation is not cleared is not done. */
            if (atomic_load(&w->pool->finishing) && settle_backlog(w->settle) == 0)
                break;
            struct cmsg *cleared = settle_idle(w->settle, &nc);
            report(w, cleared, nc);
            if (w->pg_down)
                probe_pg(w);
            continue;
        }
        process(w, w->batch, n);
    }
    /* Abandoned messages were never settled, or their reservations never
     * cleared: their offsets stay put, and Kafka delivers them again. */
    for (size_t i = 0; i < w->ncarry; i++)
        cmsg_free(w->carry[i]);
    w->ncarry = 0;
    size_t nheld;
    cmsg_free_list(settle_abandon(w->settle, &nheld));
    return NULL;
}

/* --- the pool ------------------------------------------------------------- */

bool wk_must_wait(bool is_cancel, bool user_held, bool item_cancelled)
{
    return user_held || (!is_cancel && item_cancelled);
}

static int worker_init(struct wk_pool *p, struct worker *w, int id, char *err, size_t errlen)
{
    char app[64];
    w->id = id;
    w->pool = p;
    /* Sized for consumer.batch_size's maximum: a reload may raise it. */
    w->cap = (size_t)CFG_RANGE(consumer.batch_size).max;
    if (q_init(&w->inbox) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->batch = calloc(w->cap, sizeof(*w->batch));
    w->carry = calloc(w->cap, sizeof(*w->carry));
    w->users = calloc(w->cap, sizeof(*w->users));
    w->so = calloc(w->cap, sizeof(*w->so));
    w->so_msg = calloc(w->cap, sizeof(*w->so_msg));
    i64map_init(&w->held_users, 1, 0);
    i64map_init(&w->cancel_items, 1, 0);
    if (ul_init(&w->ul, p->cfg, w->cap, id) != 0 || !w->batch || !w->carry || !w->users || !w->so ||
        !w->so_msg) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ul_connect(&w->ul, err, errlen) != 0)
        return -1;
    snprintf(app, sizeof(app), "seckill-consumer/%d", id);
    if (sink_open(p->cfg, app, &w->sink, err, errlen) != 0)
        return -1;
    /* Not reached yet (down, or a wrong password): the worker starts all
     * the same and says so once; fetching stays paused until it connects. */
    if (sink_ready(w->sink, err, errlen) != 0)
        set_pg_down(w, true, err);
    if (settle_open(p->cfg, id, &w->settle, err, errlen) != 0)
        return -1;
    return 0;
}

static void worker_free(struct worker *w)
{
    if (w->pool == NULL)
        return;
    /* A pool that failed to open is opened again (daemon_retry): the gauge
     * must not keep this worker's count. */
    if (w->pg_down)
        CM_ADD(pg_down, -1);
    w->pg_down = false;
    q_destroy(&w->inbox);
    ul_free(&w->ul);
    sink_close(w->sink);
    settle_close(w->settle);
    free(w->batch);
    free(w->carry);
    free(w->users);
    free(w->so);
    free(w->so_msg);
    i64map_free(&w->held_users);
    i64map_free(&w->cancel_items);
}

int wk_pool_open(const struct cfg *c, struct queue *done, struct dlq *dlq, struct wk_pool **out, char *err,
                 size_t errlen)
{
    struct wk_pool *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = c;
    p->done = done;
    p->dlq = dlq;
    p->n = c->consumer.workers;
    if (p->n > CM_MAX_WORKERS)
        p->n = CM_MAX_WORKERS;
    if (!(p->w = calloc((size_t)p->n, sizeof(*p->w)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (int i = 0; i < p->n; i++)
        if (worker_init(p, &p->w[i], i, err, errlen) != 0)
            goto fail;
    /* Plain threads, not bgthreads (bgthread.h): a worker waits on its
     * inbox's condition variable, and the pool stops them in two ways
     * (finish what is queued, or abandon it), not with one stop flag. */
    for (int i = 0; i < p->n; i++) {
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]) != 0) {
            snprintf(err, errlen, "cannot start worker %d", i);
            goto fail;
        }
        p->w[i].started = true;
    }
    *out = p;
    return 0;
fail:
    wk_pool_abandon(p);
    wk_pool_close(p);
    return -1;
}

void wk_dispatch(struct wk_pool *p, struct cmsg *m)
{
    /* The mixer spreads sequential user ids evenly; one user always lands on
     * one worker, which keeps that user's orders in arrival order. */
    uint64_t h = i64map_hash(&m->o.user_id, 1);
    q_push(&p->w[h % (uint64_t)p->n].inbox, m);
}

void wk_pool_finish(struct wk_pool *p)
{
    atomic_store(&p->finishing, 1);
    for (int i = 0; i < p->n; i++)
        q_wake(&p->w[i].inbox);
}

void wk_pool_abandon(struct wk_pool *p)
{
    atomic_store(&p->abandon, 1);
    wk_pool_finish(p);
}

void wk_pool_close(struct wk_pool *p)
{
    if (!p)
        return;
    for (int i = 0; p->w && i < p->n; i++)
        if (p->w[i].started)
            pthread_join(p->w[i].th, NULL);
    for (int i = 0; p->w && i < p->n; i++)
        worker_free(&p->w[i]);
    free(p->w);
    free(p);
}
