#include "kmeta.h"

#include <inttypes.h>
#include <stdio.h>

#include "kconf.h"

rd_kafka_t *kmeta_open(const struct cfg *c, const char *group, char *err, size_t errlen)
{
    static const char *const defaults[] = { NULL };
    char kerr[256];
    rd_kafka_t *rk = NULL;
    rd_kafka_conf_t *conf = kconf_new(
        c, group ? &c->kafka.consumer_properties : &c->kafka.producer_properties, defaults, err, errlen);
    if (!conf)
        return NULL;
    if (group && (kconf_set(conf, "group.id", group, err, errlen) != 0 ||
                  kconf_set(conf, "enable.auto.commit", "false", err, errlen) != 0))
        goto fail;
    if (!(rk = rd_kafka_new(group ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)))) {
        snprintf(err, errlen, "kafka %s: %s", group ? "consumer" : "client", kerr);
        goto fail;
    }
    return rk; /* conf is owned by rk now */
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

int kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int32_t *n, char *err, size_t errlen)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    int ret = -1;
    if (!t) {
        snprintf(err, errlen, "kafka: topic handle: %s", rd_kafka_err2str(rd_kafka_last_error()));
        return -1;
    }
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka: metadata of %s: %s", topic, rd_kafka_err2str(e));
    } else if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0) {
        snprintf(err, errlen, "kafka: topic %s: %s", topic,
                 md->topic_cnt == 1 && md->topics[0].err ? rd_kafka_err2str(md->topics[0].err)
                                                         : "no partitions");
    } else {
        *n = md->topics[0].partition_cnt;
        ret = 0;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    return ret;
}

/* A list of partitions 0..n-1 of topic, each at offset; NULL with err. */
static rd_kafka_topic_partition_list_t *all_partitions(const char *topic, int32_t n, int64_t offset,
                                                       char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, topic, i)->offset = offset;
    return l;
}

/* ListOffsets at `when` (-2 earliest, -1 latest, else a timestamp) for
 * every partition. Earliest and latest always exist; a timestamp past the
 * last message answers -1 (the end), which is an answer, not an error. */
static int list_offsets(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t when,
                        int64_t *out, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = all_partitions(topic, n, when, err, errlen);
    int ret = -1;
    if (!l)
        return -1;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, l, timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (when >= 0)
            snprintf(err, errlen, "kafka: offsets of %s for time %" PRId64 ": %s", topic, when,
                     rd_kafka_err2str(e));
        else
            snprintf(err, errlen, "kafka: offsets of %s: %s", topic, rd_kafka_err2str(e));
        goto fail;
    }
    for (int i = 0; i < l->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &l->elems[i];
        if (tp->err || (when < 0 && tp->offset < 0)) {
            snprintf(err, errlen, "kafka: offsets of %s[%" PRId32 "]: %s", topic, tp->partition,
                     tp->err ? rd_kafka_err2str(tp->err) : "none returned");
            goto fail;
        }
        out[tp->partition] = tp->offset;
    }
    ret = 0;
fail:
    rd_kafka_topic_partition_list_destroy(l);
    return ret;
}

int kmeta_range(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t *lo, int64_t *hi,
                char *err, size_t errlen)
{
    if (lo && list_offsets(rk, topic, n, timeout_ms, RD_KAFKA_OFFSET_BEGINNING, lo, err, errlen) != 0)
        return -1;
    if (hi && list_offsets(rk, topic, n, timeout_ms, RD_KAFKA_OFFSET_END, hi, err, errlen) != 0)
        return -1;
    return 0;
}

int kmeta_offsets_at(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t ts, int64_t *at,
                     char *err, size_t errlen)
{
    return list_offsets(rk, topic, n, timeout_ms, ts, at, err, errlen);
}

int kmeta_committed(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t *at, char *err,
                    size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = all_partitions(topic, n, RD_KAFKA_OFFSET_INVALID, err, errlen);
    int ret = -1;
    if (!l)
        return -1;
    rd_kafka_resp_err_t e = rd_kafka_committed(rk, l, timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka: committed offsets of %s: %s", topic, rd_kafka_err2str(e));
        goto fail;
    }
    for (int32_t i = 0; i < n; i++)
        at[i] = -1;
    for (int i = 0; i < l->cnt; i++) {
        int32_t p = l->elems[i].partition;
        if (l->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            snprintf(err, errlen, "kafka: committed offset of %s [%" PRId32 "]: %s", topic, p,
                     rd_kafka_err2str(l->elems[i].err));
            goto fail;
        }
        if (p >= 0 && p < n)
            at[p] = l->elems[i].offset < 0 ? -1 : l->elems[i].offset;
    }
    ret = 0;
fail:
    rd_kafka_topic_partition_list_destroy(l);
    return ret;
}
