#include "admctl.h"

double actl_floor(double ceiling_per_s)
{
    double f = ceiling_per_s * ACTL_FLOOR_SHARE;
    return f < 1 ? (ceiling_per_s < 1 ? ceiling_per_s : 1) : f;
}

int actl_at_floor(const struct actl *a, double ceiling_per_s)
{
    return a->rate_per_s > 0 && a->rate_per_s <= actl_floor(ceiling_per_s);
}

void actl_avg_add(struct actl_avg *v, double per_s, int64_t dt_ms, int64_t window_ms)
{
    double alpha = (double)dt_ms / (double)window_ms;
    alpha = alpha > 1 ? 1 : alpha;
    v->mean += alpha * (per_s - v->mean);
    v->weight += alpha * (1 - v->weight);
    v->ms += dt_ms;
}

double actl_avg_rate(const struct actl_avg *v, int64_t min_ms)
{
    return v->ms >= min_ms && v->weight > 0 ? v->mean / v->weight : -1;
}

enum actl_move actl_step(struct actl *a, const struct actl_in *in)
{
    double ceiling = in->ceiling_per_s, floor = actl_floor(ceiling), was;
    int slow = in->p99_us >= 0 && in->p99_us > in->target_us &&
               (double)in->buys >= ACTL_BUYS_SHARE * (double)in->admitted;
    int over = slow || in->backlog > in->backlog_max;
    if (a->rate_per_s <= 0)
        a->rate_per_s = ceiling;
    /* A ceiling lowered (a reload, seckillctl queue rate) binds at once. */
    if (a->rate_per_s > ceiling)
        a->rate_per_s = ceiling;
    was = a->rate_per_s;
    if (over) {
        a->rate_per_s = was * ACTL_DOWN_FACTOR;
        if (a->rate_per_s < floor)
            a->rate_per_s = floor;
    } else {
        a->rate_per_s = was + ceiling * ACTL_UP_SHARE;
        if (a->rate_per_s > ceiling)
            a->rate_per_s = ceiling;
    }
    return a->rate_per_s < was ? ACTL_DOWN : a->rate_per_s > was ? ACTL_UP : ACTL_HOLD;
}
