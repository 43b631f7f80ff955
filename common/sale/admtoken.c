#include "admtoken.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const struct keyring_spec spec = {
    .setting = "producer.admission_keys",
    .list_off = offsetof(struct cfg, producer.admission_keys),
    .dir_off = offsetof(struct cfg, producer.admission_key_dir),
    .signer = "an admission key",
    .empty_why = "the producer signs the waiting room's admissions with its first key and checks them with "
                 "every one (docs/api.md)",
    .name = "admission keys",
    .signs = "admissions are signed",
};

static struct keyring_live live = KEYRING_LIVE_INIT(&spec);

static const char *const words[] = {
#define ADM_WORD(name, word) word,
    ADM_REASONS(ADM_WORD)
#undef ADM_WORD
};

const char *adm_reason_word(enum adm_reason r)
{
    return (unsigned)r < ADM_NREASONS ? words[r] : "unknown";
}

int adm_text(const struct adm_token *t, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "seckill-admission-v1\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n%" PRId64
                     "\n%" PRId64 "\n",
                     t->item_id, t->user_id, t->starts_ms, t->minted_ms, t->expires_ms, t->nonce);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int adm_encode(const struct adm_token *t, char *out, size_t len)
{
    int n = snprintf(out, len, "%" PRId64 ".%" PRId64 ".%" PRId64 ".%" PRId64 ".%" PRId64 ".%" PRId64 ".%s",
                     t->item_id, t->user_id, t->starts_ms, t->minted_ms, t->expires_ms, t->nonce, t->sig);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* A positive decimal from s up to the next '.': its value into *v and the
 * byte after the '.' into *next. 0, or -1 (empty, a sign, a leading zero,
 * junk, beyond int64, no '.'). */
static int field(const char *s, int64_t *v, const char **next)
{
    char num[24];
    const char *dot = strchr(s, '.');
    size_t n = dot ? (size_t)(dot - s) : 0;
    if (n == 0 || n >= sizeof(num) || s[0] == '0')
        return -1;
    memcpy(num, s, n);
    num[n] = 0;
    if (util_parse_i64(num, 1, INT64_MAX, v) != 0)
        return -1;
    *next = dot + 1;
    return 0;
}

int adm_decode(const char *s, struct adm_token *t)
{
    int64_t *f[] = { &t->item_id, &t->user_id, &t->starts_ms, &t->minted_ms, &t->expires_ms, &t->nonce };
    if (!s || strlen(s) >= ADM_TOKEN_MAX)
        return -1;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (field(s, f[i], &s) != 0)
            return -1;
    /* KID:HEX; keyring_verify checks its shape */
    if (!strchr(s, ':') || strlen(s) >= sizeof(t->sig) || strchr(s, '.'))
        return -1;
    snprintf(t->sig, sizeof(t->sig), "%s", s);
    return 0;
}

enum adm_reason adm_judge(const struct adm_token *t, int64_t item_id, int64_t buyer, int64_t now_ms)
{
    if (t->item_id != item_id)
        return ADM_OTHER_ITEM;
    if (t->user_id != buyer)
        return ADM_OTHER_BUYER;
    /* Only the room mints, and only for the admitted, who are admitted
     * after the opening: one minted before it was not minted by the room
     * for this sale. */
    if (t->minted_ms < t->starts_ms || t->expires_ms <= t->minted_ms)
        return ADM_BEFORE_OPENING;
    if (t->expires_ms <= now_ms)
        return ADM_EXPIRED;
    return ADM_OK;
}

static enum adm_reason of_verdict(enum keyring_verdict v)
{
    switch (v) {
    case KEYRING_OK: return ADM_OK;
    case KEYRING_UNKNOWN_KID: return ADM_UNKNOWN_KEY;
    case KEYRING_NONE: return ADM_MALFORMED;
    case KEYRING_BAD: break;
    }
    return ADM_BAD_SIGNATURE;
}

int adm_keys_mint(const struct keyring *ks, struct adm_token *t, char *out, size_t len)
{
    char text[256];
    int n = adm_text(t, text, sizeof(text));
    if (n < 0 || keyring_sign(ks, text, (size_t)n, t->sig) != 0)
        return -1;
    return adm_encode(t, out, len);
}

/* The shape, then the MAC by verify (one set or the live one), then the
 * rest. The MAC before anything it covers: a forged token learns nothing
 * about the item, the buyer or the clock. */
static enum adm_reason check(const struct keyring *ks, int live_set, const char *wire, int64_t item_id,
                             int64_t buyer, int64_t now_ms, struct adm_token *out)
{
    struct adm_token t;
    char text[256], err[160];
    int n;
    enum keyring_verdict v;
    if (!wire || !wire[0])
        return ADM_MISSING;
    if (adm_decode(wire, &t) != 0 || (n = adm_text(&t, text, sizeof(text))) < 0)
        return ADM_MALFORMED;
    v = live_set ? keyring_live_verify(&live, text, (size_t)n, t.sig, err, sizeof(err))
                 : keyring_verify(ks, text, (size_t)n, t.sig, err, sizeof(err));
    if (v != KEYRING_OK)
        return of_verdict(v);
    enum adm_reason r = adm_judge(&t, item_id, buyer, now_ms);
    if (r == ADM_OK && out)
        *out = t;
    return r;
}

enum adm_reason adm_keys_check(const struct keyring *ks, const char *wire, int64_t item_id, int64_t buyer,
                               int64_t now_ms, struct adm_token *out)
{
    return check(ks, 0, wire, item_id, buyer, now_ms, out);
}

int adm_load(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_live_load(&live, c, err, errlen);
}

void adm_unload(void)
{
    keyring_live_unload(&live);
}

int adm_mint(struct adm_token *t, char *out, size_t len)
{
    char text[256];
    int n = adm_text(t, text, sizeof(text));
    if (n < 0 || keyring_live_sign(&live, text, (size_t)n, t->sig) != 0)
        return -1;
    return adm_encode(t, out, len);
}

enum adm_reason adm_check(const char *wire, int64_t item_id, int64_t buyer, int64_t now_ms,
                          struct adm_token *out)
{
    return check(NULL, 1, wire, item_id, buyer, now_ms, out);
}

struct keyring_live *adm_live(void)
{
    return &live;
}

int adm_check_cfg(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_check(&spec, c, err, errlen);
}

int adm_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen)
{
    return keyring_load(&spec, c, out, err, errlen);
}
