/* metrics: Prometheus text exposition (format 0.0.4).
 *
 * Counters and gauges are plain _Atomic integers owned by whoever updates
 * them; a daemon declares its metrics once as an X-macro list and renders the
 * list with these helpers. Histograms have fixed latency buckets, so
 * observing is a handful of atomic adds and never allocates. */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A growable text buffer; a failed allocation sets oom and drops the rest. */
struct mbuf {
    char *data;
    size_t len, cap;
    int oom;
};

void mbuf_printf(struct mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mbuf_free(struct mbuf *b);

/* Bucket upper bounds in microseconds: 100 µs .. 10 s. */
#define METRICS_HIST_BUCKETS 16
struct metrics_hist {
    _Atomic uint64_t bucket[METRICS_HIST_BUCKETS + 1]; /* the last one is +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
};

void metrics_hist_observe_us(struct metrics_hist *h, int64_t us);

/* A histogram's counts per bucket (not cumulative), read now. */
struct metrics_hist_snap {
    uint64_t bucket[METRICS_HIST_BUCKETS + 1];
};
void metrics_hist_snapshot(const struct metrics_hist *h, struct metrics_hist_snap *out);
/* The q-quantile (0 < q < 1) of what was observed between two snapshots,
 * in microseconds, interpolated within its bucket as Prometheus's
 * histogram_quantile() does (the +Inf bucket answers the last bound); -1
 * when fewer than min_count were observed (too few to say). */
int64_t metrics_hist_quantile_us(const struct metrics_hist_snap *before,
                                 const struct metrics_hist_snap *after, double q, uint64_t min_count);
/* How many were observed between two snapshots. */
uint64_t metrics_hist_count(const struct metrics_hist_snap *before, const struct metrics_hist_snap *after);

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram). */
void metrics_family(struct mbuf *b, const char *name, const char *type, const char *help);
/* One entry of a daemon's X-macro metric list, where the entries of a family
 * are adjacent: HELP and TYPE when name starts a new family (*prev holds the
 * last family written, "" at first), then the sample. */
void metrics_list_sample(struct mbuf *b, const char **prev, const char *name, const char *type,
                         const char *help, const char *labels, int64_t value);
/* "name{labels} value"; labels may be NULL or "" for none. */
void metrics_sample(struct mbuf *b, const char *name, const char *labels, int64_t value);
/* The _bucket, _sum (in seconds) and _count lines of a histogram family. */
void metrics_hist_write(struct mbuf *b, const char *name, const char *labels,
                        const struct metrics_hist *h);

#endif
