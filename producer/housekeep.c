#include "housekeep.h"

#include <stdio.h>
#include <stdlib.h>

#include "bgthread.h"
#include "daemon.h"
#include "log.h"
#include "pmetrics.h"
#include "rpipe.h"
#include "sweep.h"
#include "sweepage.h"
#include "util.h"

#define HK_TICK_MS 1000

struct hk {
    const struct cfg *cfg;
    struct pub *pub;
    struct oid_gen *gen;
    struct ing_health *health;
    struct rp *rp; /* NULL while Redis could not be reached */
    struct bgthread t;
    int ids_failing, kafka_down_logged;
    /* The sweeper's failures that repeat every pass while they last: said
     * once, counted, said over with the count. */
    struct log_repeat sweep_failing, republish_failing, undecodable;
};

/* Redis answers: on a Cluster, some primary. A shard that does not answer
 * refuses only its items' orders (logged once, in
 * seckill_producer_redis_errors_total), and every producer shares that
 * fate: a readiness probe that failed them all would refuse every item.
 * The rpipe reconnects on its own, with its backoff. */
static int redis_ping(struct hk *k)
{
    char err[256];
    struct rp_batch b;
    int ok = 0;
    if (!k->rp && rp_open(k->cfg, cfg_role_self(), &k->rp, err, sizeof(err)) != 0) {
        k->rp = NULL;
        return 0;
    }
    rp_batch_init(&b);
    for (int i = 0; i < rp_nodes(k->rp) && !ok; i++) {
        rp_batch_reset(&b);
        ok = rp_addf(&b, NULL, "PING") >= 0 && rp_run_on(k->rp, i, &b, err, sizeof(err)) == 0 &&
             rp_reply(&b, 0)->type == REDIS_REPLY_STATUS;
    }
    rp_batch_free(&b);
    return ok;
}

static void check_health(struct hk *k)
{
    int r = redis_ping(k), q = pub_ping(k->pub, 500);
    if (r != atomic_load(&k->health->redis_ok) || q != atomic_load(&k->health->kafka_ok))
        daemon_notify("STATUS=taking orders; redis %s, kafka %s", r ? "up" : "DOWN", q ? "up" : "DOWN");
    if (!q && !k->kafka_down_logged)
        log_error("kafka: brokers unreachable (metadata request failed)");
    else if (q && k->kafka_down_logged)
        log_notice("kafka: brokers reachable again");
    k->kafka_down_logged = !q;
    atomic_store(&k->health->redis_ok, r);
    atomic_store(&k->health->kafka_ok, q);
    PM_SET(kafka_up, q);
}

static void refill_ids(struct hk *k)
{
    char err[512];
    int failed = oid_refill(k->gen, k->cfg, err, sizeof(err)) != 0;
    if (failed && !k->ids_failing)
        log_error("order ids: cannot take the next block: %s", err);
    else if (!failed && k->ids_failing)
        log_notice("order ids: next block taken");
    k->ids_failing = failed;
}

/* What a pass claimed and re-published. Kafka down, every pass claims
 * the same reservations again and fails them: one line while it lasts. */
static void report_sweep(struct hk *k, const struct sweep_stats *st)
{
    if (st->undecodable)
        log_repeat(&k->undecodable, LOG_LVL_ERROR, "sweep: undecodable reservations",
                   "sweep: %lld undecodable reservations left in place for an operator (said once while "
                   "there are some)", (long long)st->undecodable);
    else if (st->claimed) /* claimed, and every one an order */
        log_repeat_end(&k->undecodable, "none claimed");
    if (st->failed > st->undecodable)
        log_repeat(&k->republish_failing, LOG_LVL_WARNING, "sweep: re-publishing fails",
                   "sweep: %lld stale reservations claimed, %lld re-published, %lld failed; retried every "
                   "producer.sweep_age_ms (said once while it lasts)",
                   (long long)st->claimed, (long long)st->republished, (long long)st->failed);
    else if (st->claimed)
        log_repeat_end(&k->republish_failing, "re-published");
    if (st->claimed && st->failed <= st->undecodable && st->republished)
        log_notice("sweep: %lld stale reservations claimed, %lld re-published", (long long)st->claimed,
                   (long long)st->republished);
}

static void sweep(struct hk *k)
{
    struct sweep_stats st;
    char err[512];
    int failed;
    if (!k->rp)
        return;
    failed = sweep_once(k->cfg, k->rp, k->pub, sweep_age_ms(k->cfg), &st, err, sizeof(err)) != 0;
    if (failed) {
        char key[LOG_REPEAT_KEY_MAX];
        PM_INC(sweep_errors);
        snprintf(key, sizeof(key), "sweep: %.140s", err);
        log_repeat(&k->sweep_failing, LOG_LVL_ERROR, key, "%s (said once while it lasts)", key);
    } else {
        log_repeat_end(&k->sweep_failing, "a sweep passed");
        PM_SET(pending, st.pending);
        PM_SET(unpublished, st.unpublished);
        PM_SET(buckets_crowded, st.crowded);
    }
    PM_ADD(swept, st.republished);
    PM_ADD(sweep_errors, st.failed);
    PM_ADD(xfer_swept, st.xfer_finished);
    if (st.xfer_finished > 0)
        log_notice("sweep: %lld transfers between an item's slots found half done and finished: their units "
                   "are on sale again", (long long)st.xfer_finished);
    report_sweep(k, &st);
}

static void *hk_main(void *arg)
{
    struct hk *k = arg;
    int64_t next_sweep = util_mono_ms();
    daemon_signals_block_thread();
    while (!bgt_stopping(&k->t)) {
        check_health(k);
        refill_ids(k);
        if (util_mono_ms() >= next_sweep) {
            sweep(k);
            next_sweep = util_mono_ms() + CFG_GET(k->cfg->producer.sweep_interval_ms);
        }
        PM_SET(id_block, oid_block(k->gen));
        bgt_sleep_ms(&k->t, HK_TICK_MS);
    }
    return NULL;
}

int hk_start(const struct cfg *c, struct pub *p, struct oid_gen *gen, struct ing_health *h,
             struct hk **out, char *err, size_t errlen)
{
    struct hk *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    k->cfg = c;
    k->pub = p;
    k->gen = gen;
    k->health = h;
    check_health(k);
    if (bgt_start(&k->t, hk_main, k) != 0) {
        snprintf(err, errlen, "cannot start the housekeeping thread");
        rp_close(k->rp);
        free(k);
        return -1;
    }
    *out = k;
    return 0;
}

void hk_stop(struct hk *k)
{
    if (!k)
        return;
    bgt_stop(&k->t);
    rp_close(k->rp);
    free(k);
}
