#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t bucket_us[METRICS_HIST_BUCKETS] = {
    100,    250,    500,     1000,    2500,    5000,    10000,   25000,
    50000,  100000, 250000,  500000,  1000000, 2500000, 5000000, 10000000,
};

void mbuf_printf(struct mbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
}

void mbuf_free(struct mbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void metrics_hist_observe_us(struct metrics_hist *h, int64_t us)
{
    int i = 0;
    if (us < 0)
        us = 0;
    while (i < METRICS_HIST_BUCKETS && us > bucket_us[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
}

void metrics_hist_snapshot(const struct metrics_hist *h, struct metrics_hist_snap *out)
{
    for (int i = 0; i <= METRICS_HIST_BUCKETS; i++)
        out->bucket[i] = atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
}

uint64_t metrics_hist_count(const struct metrics_hist_snap *before, const struct metrics_hist_snap *after)
{
    uint64_t total = 0;
    for (int i = 0; i <= METRICS_HIST_BUCKETS; i++)
        total += after->bucket[i] - before->bucket[i];
    return total;
}

int64_t metrics_hist_quantile_us(const struct metrics_hist_snap *before,
                                 const struct metrics_hist_snap *after, double q, uint64_t min_count)
{
    uint64_t total = metrics_hist_count(before, after), seen = 0;
    if (total == 0 || total < min_count)
        return -1;
    double want = q * (double)total;
    for (int i = 0; i < METRICS_HIST_BUCKETS; i++) {
        uint64_t n = after->bucket[i] - before->bucket[i];
        if ((double)(seen + n) >= want) {
            double lo = i ? (double)bucket_us[i - 1] : 0, hi = (double)bucket_us[i];
            return (int64_t)(lo + (hi - lo) * (want - (double)seen) / (double)n);
        }
        seen += n;
    }
    return bucket_us[METRICS_HIST_BUCKETS - 1];
}

void metrics_family(struct mbuf *b, const char *name, const char *type, const char *help)
{
    mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_sample(struct mbuf *b, const char *name, const char *labels, int64_t value)
{
    if (labels && *labels)
        mbuf_printf(b, "%s{%s} %lld\n", name, labels, (long long)value);
    else
        mbuf_printf(b, "%s %lld\n", name, (long long)value);
}

void metrics_list_sample(struct mbuf *b, const char **prev, const char *name, const char *type,
                         const char *help, const char *labels, int64_t value)
{
    if (strcmp(*prev, name) != 0)
        metrics_family(b, name, type, help);
    metrics_sample(b, name, labels, value);
    *prev = name;
}

void metrics_hist_write(struct mbuf *b, const char *name, const char *labels,
                        const struct metrics_hist *h)
{
    const char *sep = labels && *labels ? "," : "";
    const char *lab = labels ? labels : "";
    uint64_t cum = 0;
    /* Buckets are cumulative in the exposition format. */
    for (int i = 0; i <= METRICS_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < METRICS_HIST_BUCKETS)
            mbuf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep,
                        (double)bucket_us[i] / 1e6, (unsigned long long)cum);
        else
            mbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep,
                        (unsigned long long)cum);
    }
    mbuf_printf(b, "%s_sum%s%s%s %.6f\n", name, *lab ? "{" : "", lab, *lab ? "}" : "",
                (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    mbuf_printf(b, "%s_count%s%s%s %llu\n", name, *lab ? "{" : "", lab, *lab ? "}" : "",
                (unsigned long long)cum);
}
