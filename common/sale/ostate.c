#include "ostate.h"

#include <string.h>

#include "util.h"

/* The table's columns as an array indexed by state. */
static const struct {
    char letter;
    const char *pg, *json;
    bool unit;
    enum ost_final final;
    enum ost_writer writer;
    enum ost_detail detail;
} states[] = {
#define OST_ROW(name, letter, pg, json, unit, final, writer, detail) \
    [OST_##name] = { letter, pg, json, unit, final, writer, detail },
    OST_STATES(OST_ROW)
#undef OST_ROW
};

char ost_letter(enum ost_state s) { return states[s].letter; }
const char *ost_pg_word(enum ost_state s) { return states[s].pg; }
const char *ost_json_word(enum ost_state s) { return states[s].json; }
bool ost_holds_unit(enum ost_state s) { return states[s].unit; }
enum ost_writer ost_writer(enum ost_state s) { return states[s].writer; }
enum ost_detail ost_detail(enum ost_state s) { return states[s].detail; }

bool ost_final(enum ost_state s, bool item_pays)
{
    return states[s].final == OST_FINAL || (states[s].final == OST_FINAL_WITHOUT_WINDOW && !item_pays);
}

enum ost_state ost_of_letter(char letter)
{
    for (int s = 0; letter && s < OST_NSTATES; s++)
        if (states[s].letter == letter)
            return (enum ost_state)s;
    return OST_NONE;
}

enum ost_state ost_of_pg_word(const char *word)
{
    for (int s = 0; word && s < OST_NSTATES; s++)
        if (states[s].pg && strcmp(states[s].pg, word) == 0)
            return (enum ost_state)s;
    return OST_NONE;
}

/* --- the orders hash's value ------------------------------------------------ */

/* The next '|'-separated field of [*p, end) into out (NUL-terminated): 1
 * when a '|' follows it, 0 at the end, -1 when it does not fit. */
static int field(const char **p, const char *end, char *out, size_t outlen)
{
    const char *bar = memchr(*p, '|', (size_t)(end - *p));
    size_t n = (size_t)((bar ? bar : end) - *p);
    if (n >= outlen)
        return -1;
    memcpy(out, *p, n);
    out[n] = 0;
    *p = bar ? bar + 1 : end;
    return bar ? 1 : 0;
}

/* DETAIL as state s has it, into out. 0, or -1. */
static int take_detail(enum ost_state s, const char *detail, struct ost_value *out)
{
    switch (states[s].detail) {
    case OST_DETAIL_NONE: return detail[0] ? -1 : 0;
    case OST_DETAIL_REASON:
        /* A reason is one of cmsg_reason()'s words, nothing to escape. */
        if (!detail[0] || strspn(detail, "abcdefghijklmnopqrstuvwxyz_") != strlen(detail))
            return -1;
        memcpy(out->reason, detail, strlen(detail) + 1);
        return 0;
    case OST_DETAIL_MS: return util_parse_i64(detail, 1, INT64_MAX, &out->detail_ms);
    }
    return -1;
}

int ost_decode(const char *v, size_t len, struct ost_value *out)
{
    const char *p = v, *end = v + len;
    char f[5][OST_FIELD_MAX];
    struct ost_value d = { .state = OST_NONE };
    for (int i = 0; i < 5; i++) {
        int more = field(&p, end, f[i], sizeof(f[i]));
        if (more < 0 || (more == 0) != (i == 4))
            return -1;
    }
    if (f[1][1] != 0 || (d.state = ost_of_letter(f[1][0])) == OST_NONE)
        return -1;
    if (util_parse_i64(f[0], 1, INT64_MAX, &d.user_id) != 0 ||
        util_parse_i64(f[2], 0, INT64_MAX, &d.reserved_ms) != 0 ||
        (f[3][0] && util_parse_i64(f[3], 0, INT64_MAX, &d.settled_ms) != 0))
        return -1;
    /* The settlement writes SETTLED_MS; the reservation comes before it; a
     * mark may come before it too (a payment applied before the settlement
     * reached Redis) and keeps what it found. */
    if ((states[d.state].writer == OST_BY_RESERVE && f[3][0]) ||
        (states[d.state].writer == OST_BY_SETTLE && !f[3][0]))
        return -1;
    if (take_detail(d.state, f[4], &d) != 0)
        return -1;
    *out = d;
    return 0;
}
