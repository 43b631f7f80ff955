#include "queuecmd.h"

#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctlrp.h"
#include "keys.h"
#include "qview.h"
#include "rpipe.h"
#include "util.h"

/* Members read per ZRANGE of the audit: the line of a large sale is read
 * in pages, never in one reply. */
#define AUDIT_PAGE 5000

static void usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] queue status --item ID\n"
          "       seckillctl [-c FILE] queue rate --item ID --per-s N   (0: producer.queue_rate_per_s)\n"
          "       seckillctl [-c FILE] queue pause --item ID\n"
          "       seckillctl [-c FILE] queue resume --item ID\n"
          "       seckillctl [-c FILE] queue audit --item ID [--quiet]\n",
          f);
}

int64_t queue_shuffled_score(const char *seed, const char *user)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char text[512], hex[2 * EVP_MAX_MD_SIZE + 1];
    int len = snprintf(text, sizeof(text), "%s:%s", seed, user);
    int64_t v = 0;
    if (len < 0 || (size_t)len >= sizeof(text) || !EVP_Digest(text, (size_t)len, md, &n, EVP_sha1(), NULL))
        return -1;
    util_hex(hex, md, n);
    hex[13] = 0;
    for (const char *p = hex; *p; p++)
        v = v * 16 + (*p <= '9' ? *p - '0' : *p - 'a' + 10);
    return v;
}

/* One round trip of b on p; 0, or -1 after printing which command failed. */
static int run(struct rp *p, struct rp_batch *b)
{
    char err[512] = "", why[512];
    (void)rp_run(p, b, err, sizeof(err));
    for (int i = 0; i < b->n; i++) {
        const redisReply *r = rp_reply(b, i);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "seckillctl: redis: %s\n", ctlrp_why(b, i, err, why, sizeof(why)));
            return -1;
        }
    }
    return 0;
}

/* The item's waiting room's opening (its window hash): 0 and *opens (0: the
 * item has none), or -1 after printing why. */
static int room_of(struct rp *p, const struct cfg *c, int64_t item, int64_t *opens)
{
    char win[KEYS_MAX];
    struct rp_batch b;
    int ret = -1;
    rp_batch_init(&b);
    keys_item(win, sizeof(win), c->redis.key_prefix, item, KEYS_ITEM_WINDOW);
    if (rp_addf(&b, win, "HGET %s %s", win, KEYS_WINDOW_QUEUE) >= 0 && run(p, &b) == 0) {
        const redisReply *r = rp_reply(&b, 0);
        *opens = 0;
        if (r->type == REDIS_REPLY_STRING)
            (void)util_parse_i64(r->str, 0, INT64_MAX, opens);
        ret = 0;
    }
    rp_batch_free(&b);
    if (ret == 0 && *opens == 0)
        fprintf(stderr, "seckillctl: item %" PRId64 " has no waiting room (item create --queue-opens-at)\n",
                item);
    return ret;
}

static void when(int64_t ms, char *buf, size_t len)
{
    if (ms > 0)
        util_format_time_ms(ms, buf, len);
    else
        snprintf(buf, len, "-");
}

/* The room's numbers, as the admission step left them (qview.h). */
static void print_status(const struct cfg *c, int64_t item, const struct qview *v)
{
    char opens[40], starts[40], opened[40], stock[24];
    when(v->opens_ms, opens, sizeof(opens));
    when(v->starts_ms, starts, sizeof(starts));
    when(v->opened_ms, opened, sizeof(opened));
    snprintf(stock, sizeof(stock), v->stock >= 0 ? "%" PRId64 : "(none)", v->stock);
    printf("item %" PRId64 " waiting room: opens %s, shuffled at %s (drawn %s)\n", item, opens, starts,
           opened);
    printf("  seed         %s\n", v->seed[0] ? v->seed : "(not drawn yet)");
    printf("  joined       %" PRId64 " (pre-queue now %" PRId64 ", placed at the opening %" PRId64
           ", later %" PRId64 ")\n",
           v->joined_total, v->pre_now, v->pre_total, v->late_seq);
    printf("  line         %" PRId64 " places, serving %" PRId64 " (admitted %" PRId64
           ", passed over %" PRId64 "), waiting %" PRId64 "\n",
           v->line, v->serving, v->admitted_total, v->passed_total, v->waiting);
    printf("  admissions   outstanding %" PRId64 ", spent %" PRId64 "\n", v->outstanding, v->spent);
    printf("  stock        %s, pending %" PRId64 "\n", stock, v->pending);
    printf("  rate         %.1f/s measured; ceiling %s%" PRId64 "/s%s; %s\n", (double)v->rate_milli / 1000.0,
           v->ceiling_per_s > 0 ? "" : "producer.queue_rate_per_s = ",
           v->ceiling_per_s > 0 ? v->ceiling_per_s : (int64_t)c->producer.queue_rate_per_s,
           v->ceiling_per_s > 0 ? " (this item's)" : "", v->paused ? "PAUSED" : "admitting");
    printf("  admitter     %s\n", v->lease[0] ? v->lease : "(none yet)");
}

static int status(struct rp *p, const struct cfg *c, int64_t item)
{
    struct qview v;
    struct rp_batch b;
    int ret = 1;
    rp_batch_init(&b);
    if (qview_add(&b, c->redis.key_prefix, item) == 0 && run(p, &b) == 0 && qview_take(&b, 0, &v) == 0) {
        print_status(c, item, &v);
        ret = 0;
    }
    rp_batch_free(&b);
    return ret;
}

/* HSET the queue hash's field to v: the rate and the pause. Durable: set on
 * the primary but held by too few replicas, a failover could lose it, and
 * the exit says it did not hold. */
static int set_field(struct rp *p, const struct cfg *c, int64_t item, const char *field, const char *v)
{
    char meta[KEYS_MAX], what[64];
    struct rp_batch b;
    int ret = 1;
    keys_queue(meta, sizeof(meta), c->redis.key_prefix, item, KEYS_QUEUE_META);
    snprintf(what, sizeof(what), "setting the room's %s", field);
    rp_batch_init(&b);
    if (rp_addf(&b, meta, "HSET %s %s %s", meta, field, v) < 0)
        fprintf(stderr, "seckillctl: redis: %s: out of memory\n", what);
    else
        ret = ctlrp_run_durable(p, &b, what) == 0 ? 0 : 1;
    rp_batch_free(&b);
    return ret;
}

/* An audit's walk of the line: each place checked against the seed (one
 * placed at the opening) and against the one before (the order). */
struct audit {
    const char *seed;
    bool quiet;
    int64_t rank, shuffled, later, bad;
    int64_t last_score;
    char last_member[64];
};

static void audit_one(struct audit *a, const char *user, const char *score_text)
{
    int64_t score = 0, want;
    a->rank++;
    if (util_parse_i64(score_text, 0, INT64_MAX, &score) != 0) {
        printf("MISMATCH rank %" PRId64 " user %s: place '%s' is no place the room gives\n", a->rank, user,
               score_text);
        a->bad++;
        return;
    }
    if (score < KEYS_QUEUE_LATE) {
        a->shuffled++;
        if ((want = queue_shuffled_score(a->seed, user)) != score) {
            printf("MISMATCH rank %" PRId64 " user %s: place %" PRId64 ", the seed says %" PRId64 "\n",
                   a->rank, user, score, want);
            a->bad++;
        }
    } else {
        a->later++;
    }
    /* Redis's order: by place, then by the member's bytes (a tie of 52 bits). */
    bool before = score < a->last_score || (score == a->last_score && strcmp(user, a->last_member) < 0);
    if (a->rank > 1 && before) {
        printf("MISMATCH rank %" PRId64 " user %s: out of order\n", a->rank, user);
        a->bad++;
    }
    a->last_score = score;
    snprintf(a->last_member, sizeof(a->last_member), "%s", user);
    if (!a->quiet)
        printf("%" PRId64 " %s\n", a->rank, user);
}

static int audit(struct rp *p, const struct cfg *c, int64_t item, bool quiet)
{
    char q[KEYS_QUEUE_PARTS][KEYS_MAX], seed[160], from[24], to[24];
    struct rp_batch b;
    struct audit a = { .seed = seed, .quiet = quiet };
    int ret = 1;
    keys_queue_all(q, c->redis.key_prefix, item);
    rp_batch_init(&b);
    if (rp_addf(&b, q[0], "HMGET %s seed pre_total", q[KEYS_QUEUE_META]) < 0 || run(p, &b) != 0)
        goto out;
    const redisReply *m = rp_reply(&b, 0);
    if (m->elements != 2 || m->element[0]->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "seckillctl: item %" PRId64 ": no seed drawn yet (the room shuffles at the sale's "
                        "opening)\n", item);
        goto out;
    }
    snprintf(seed, sizeof(seed), "%s", m->element[0]->str);
    printf("item %" PRId64 " seed %s; the line, first to last (RANK USER):\n", item, seed);
    for (int64_t at = 0;; at += AUDIT_PAGE) {
        snprintf(from, sizeof(from), "%" PRId64, at);
        snprintf(to, sizeof(to), "%" PRId64, at + AUDIT_PAGE - 1);
        rp_batch_reset(&b);
        if (rp_addf(&b, q[0], "ZRANGE %s %s %s WITHSCORES", q[KEYS_QUEUE_LINE], from, to) < 0 ||
            run(p, &b) != 0)
            goto out;
        const redisReply *r = rp_reply(&b, 0);
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            audit_one(&a, r->element[i]->str, r->element[i + 1]->str);
        if (r->elements < 2 * AUDIT_PAGE)
            break;
    }
    printf("audit: %" PRId64 " places: %" PRId64 " shuffled at the opening, each where SHA-1(seed ':' user) "
           "puts it%s, then %" PRId64 " later joiners by arrival; %s\n",
           a.rank, a.shuffled, a.bad ? " (but see the mismatches)" : "", a.later,
           a.bad ? "MISMATCHES" : "the order holds");
    ret = a.bad ? 1 : 0;
out:
    rp_batch_free(&b);
    return ret;
}

struct qargs {
    int64_t item, per_s;
    bool quiet, has_rate;
};

static int parse(int argc, char **argv, struct qargs *q)
{
    static const struct option opts[] = {
        { "item", required_argument, NULL, 'i' },
        { "per-s", required_argument, NULL, 'r' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (o == 'i' && util_parse_i64(optarg, 1, INT64_MAX, &q->item) == 0)
            continue;
        if (o == 'r' && util_parse_i64(optarg, 0, 1000000, &q->per_s) == 0) {
            q->has_rate = true;
            continue;
        }
        if (o == 'q') {
            q->quiet = true;
            continue;
        }
        if (o == 'h') {
            usage(stdout);
            return 0;
        }
        if (o == 'i')
            fprintf(stderr, "seckillctl: --item must be a positive 64-bit integer, got '%s'\n", optarg);
        else if (o == 'r')
            fprintf(stderr, "seckillctl: --per-s must be an integer in [0, 1000000], got '%s'\n", optarg);
        usage(stderr);
        return 2;
    }
    if (optind != argc || q->item == 0) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int queuecmd(const struct cfg *c, int argc, char **argv)
{
    struct qargs q = { 0 };
    const char *sub = argc >= 2 ? argv[1] : "";
    bool rate = strcmp(sub, "rate") == 0, pause = strcmp(sub, "pause") == 0;
    bool resume = strcmp(sub, "resume") == 0;
    int ret;
    int64_t opens = 0;
    if (!rate && !pause && !resume && strcmp(sub, "status") != 0 && strcmp(sub, "audit") != 0) {
        usage(stderr);
        return 2;
    }
    if ((ret = parse(argc - 1, argv + 1, &q)) >= 0)
        return ret;
    if (rate != q.has_rate || (q.quiet && strcmp(sub, "audit") != 0)) {
        usage(stderr);
        return 2;
    }
    struct rp *p = ctlrp_open(c);
    if (!p)
        return 1;
    if (room_of(p, c, q.item, &opens) != 0 || opens == 0) {
        ret = 1;
    } else if (strcmp(sub, "status") == 0) {
        ret = status(p, c, q.item);
    } else if (strcmp(sub, "audit") == 0) {
        ret = audit(p, c, q.item, q.quiet);
    } else {
        char v[24];
        snprintf(v, sizeof(v), "%" PRId64, rate ? q.per_s : pause ? 1 : 0);
        ret = set_field(p, c, q.item, rate ? "ceiling_per_s" : "paused", v);
        if (ret == 0 && rate)
            printf("item %" PRId64 ": admission ceiling %s\n", q.item,
                   q.per_s ? v : "back to producer.queue_rate_per_s");
        else if (ret == 0)
            printf("item %" PRId64 ": admission %s\n", q.item, pause ? "paused" : "resumed");
    }
    rp_close(p);
    return ret;
}
