#include "kparts.h"

#include <inttypes.h>

#include "kconf.h"
#include "log.h"

void kp_store(rd_kafka_t *rk, struct off_table *t, const char *topic, const char *who)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int32_t i = 0; i < off_partitions(t); i++) {
        int64_t next;
        if (!off_advance(t, i, &next))
            continue;
        if (!l && !(l = rd_kafka_topic_partition_list_new(8)))
            return;
        rd_kafka_topic_partition_list_add(l, topic, i)->offset = next;
    }
    if (!l)
        return;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(rk, l);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_debug("%soffsets_store: %s", who, rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

rd_kafka_resp_err_t kp_commit(rd_kafka_t *rk, struct off_table *t, const char *topic, const char *who)
{
    kp_store(rk, t, topic, who);
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, NULL, 0);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        log_warn("%skafka: offset commit: %s", who, rd_kafka_err2str(e));
    return e;
}

static void rebalance_error(rd_kafka_resp_err_t e, const char *who)
{
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_error("%skafka: rebalance: %s", who, rd_kafka_err2str(e));
}

void kp_assign(rd_kafka_t *rk, struct off_table *t, rd_kafka_topic_partition_list_t *parts, const char *who)
{
    for (int i = 0; i < parts->cnt; i++) {
        uint32_t epoch;
        if (off_assign(t, parts->elems[i].partition, &epoch) != 0)
            log_error("%sout of memory tracking partition %" PRId32, who, parts->elems[i].partition);
    }
    rebalance_error(rd_kafka_assign(rk, parts), who);
}

void kp_unassign(rd_kafka_t *rk, struct off_table *t, rd_kafka_topic_partition_list_t *parts, const char *who)
{
    for (int i = 0; i < parts->cnt; i++)
        off_revoke(t, parts->elems[i].partition);
    rebalance_error(rd_kafka_assign(rk, NULL), who);
}

rd_kafka_resp_err_t kp_pause(rd_kafka_t *rk, bool pause)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    rd_kafka_resp_err_t e = rd_kafka_assignment(rk, &a);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return e;
    e = pause ? rd_kafka_pause_partitions(rk, a) : rd_kafka_resume_partitions(rk, a);
    rd_kafka_topic_partition_list_destroy(a);
    return e;
}

void kp_close(rd_kafka_t *rk, const char *who)
{
    if (!rk)
        return;
    rd_kafka_resp_err_t e = rd_kafka_consumer_close(rk);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_warn("%skafka: consumer close: %s", who, rd_kafka_err2str(e));
    kconf_untrack(rk);
    rd_kafka_destroy(rk);
}
