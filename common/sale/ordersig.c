#include "ordersig.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "secret.h"
#include "util.h"

#define MAC_LEN 32 /* SHA-256 */

struct okey {
    char kid[OSIG_KID_MAX + 1];
    struct secret *key;
};

struct osig_keys {
    struct okey *v;
    size_t n;
};

static pthread_mutex_t cur_mu = PTHREAD_MUTEX_INITIALIZER;
static struct osig_keys *cur;  /* under cur_mu */
static struct osig_keys *next; /* main thread only: prepared, not committed */

static int kid_ok(const char *s, size_t n)
{
    if (n < 1 || n > OSIG_KID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", s[i]) || !s[i])
            return 0;
    return 1;
}

/* The file an entry names: absolute as given; a bare name is the systemd
 * credential when $CREDENTIALS_DIRECTORY is set (as for password files);
 * anything else is under kafka.order_key_dir. NULL out of memory. */
static char *key_path(const struct cfg *c, const char *file)
{
    char *p = NULL;
    if (file[0] == '/')
        return strdup(file);
    if (!strchr(file, '/') && (p = secret_credential_path(file)))
        return p;
    if (asprintf(&p, "%s/%s", c->kafka.order_key_dir ? c->kafka.order_key_dir : ".", file) < 0)
        return NULL;
    return p;
}

static int load_one(const struct cfg *c, const char *entry, struct okey *k, char *err, size_t errlen)
{
    const char *colon = strchr(entry, ':');
    char why[512], *path = NULL;
    if (!colon || !kid_ok(entry, (size_t)(colon - entry)) || !colon[1]) {
        snprintf(err, errlen, "entry '%s': not \"KID:FILE\" with KID of [A-Za-z0-9_-]{1,%d}", entry,
                 OSIG_KID_MAX);
        return -1;
    }
    memcpy(k->kid, entry, (size_t)(colon - entry));
    k->kid[colon - entry] = '\0';
    if (!(path = key_path(c, colon + 1))) {
        snprintf(err, errlen, "entry '%s': out of memory", entry);
        return -1;
    }
    if (secret_read_key(path, &k->key, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "entry '%s' (key id '%s'): %s", entry, k->kid, why);
        goto fail;
    }
    /* A short key makes the MAC as weak as the key: 32 bytes is SHA-256's
     * own strength (`head -c 32 /dev/urandom`). */
    if (secret_len(k->key) < OSIG_KEY_MIN) {
        snprintf(err, errlen, "entry '%s' (key id '%s'): %s: %zu bytes, at least %d wanted", entry, k->kid,
                 path, secret_len(k->key), OSIG_KEY_MIN);
        goto fail;
    }
    free(path);
    return 0;
fail:
    secret_free(k->key);
    k->key = NULL;
    free(path);
    return -1;
}

int osig_keys_load(const struct cfg *c, struct osig_keys **out, char *err, size_t errlen)
{
    const struct cfg_list *l = &c->kafka.order_keys;
    struct osig_keys *ks = calloc(1, sizeof(*ks));
    char why[768];
    if (!ks || (l->n && !(ks->v = calloc(l->n, sizeof(*ks->v))))) {
        snprintf(err, errlen, "kafka.order_keys: out of memory");
        goto fail;
    }
    if (l->n == 0) {
        snprintf(err, errlen,
                 "%s: kafka.order_keys is empty: the producer signs each order with its first key and "
                 "the consumer takes only orders one of them signed (docs/security.md)",
                 cfg_where(c, "kafka.order_keys"));
        goto fail;
    }
    for (; ks->n < l->n; ks->n++) {
        if (load_one(c, l->v[ks->n], &ks->v[ks->n], why, sizeof(why)) != 0) {
            snprintf(err, errlen, "%s: kafka.order_keys %s", cfg_where(c, "kafka.order_keys"), why);
            goto fail;
        }
        for (size_t i = 0; i < ks->n; i++)
            if (strcmp(ks->v[i].kid, ks->v[ks->n].kid) == 0) {
                snprintf(err, errlen, "%s: kafka.order_keys: key id '%s' is there twice",
                         cfg_where(c, "kafka.order_keys"), ks->v[i].kid);
                ks->n++; /* so it is freed */
                goto fail;
            }
    }
    *out = ks;
    return 0;
fail:
    osig_keys_free(ks);
    return -1;
}

void osig_keys_free(struct osig_keys *ks)
{
    if (!ks)
        return;
    for (size_t i = 0; i < ks->n; i++)
        secret_free(ks->v[i].key);
    free(ks->v);
    free(ks);
}

size_t osig_keys_count(const struct osig_keys *ks)
{
    return ks ? ks->n : 0;
}

/* HMAC-SHA256 of o's signed text under k into mac. 0 or -1. */
static int mac_of(const struct okey *k, const struct order *o, unsigned char mac[MAC_LEN])
{
    char text[128];
    unsigned int len = 0;
    /* A cancel's text differs from its order's in its first line: the
     * order's MAC never verifies a cancel of it. */
    int n = snprintf(text, sizeof(text), "%s\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n%" PRId64
                                         "\n",
                     o->kind == ORDER_CANCEL ? "seckill-cancel-v1" : "seckill-order-v1", o->order_id,
                     o->user_id, o->item_id, o->qty);
    if (n < 0 || (size_t)n >= sizeof(text))
        return -1;
    if (!HMAC(EVP_sha256(), secret_str(k->key), (int)secret_len(k->key), (const unsigned char *)text,
              (size_t)n, mac, &len) ||
        len != MAC_LEN)
        return -1;
    return 0;
}

int osig_keys_sign(const struct osig_keys *ks, struct order *o)
{
    unsigned char mac[MAC_LEN];
    if (!ks || ks->n == 0 || mac_of(&ks->v[0], o, mac) != 0)
        return -1;
    size_t kl = strlen(ks->v[0].kid);
    memcpy(o->sig, ks->v[0].kid, kl);
    o->sig[kl] = ':';
    util_hex(o->sig + kl + 1, mac, MAC_LEN);
    return 0;
}

static int unhex(const char *s, unsigned char out[MAC_LEN])
{
    for (size_t i = 0; i < 2 * MAC_LEN; i++) {
        int c = (unsigned char)s[i], v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else
            return -1;
        out[i / 2] = (unsigned char)(i % 2 ? (out[i / 2] | v) : v << 4);
    }
    return s[2 * MAC_LEN] ? -1 : 0;
}

enum osig_verdict osig_keys_verify(const struct osig_keys *ks, const struct order *o, char *err,
                                   size_t errlen)
{
    unsigned char want[MAC_LEN], got[MAC_LEN];
    const char *colon = strchr(o->sig, ':');
    if (!o->sig[0]) {
        snprintf(err, errlen, "not signed by a producer key: no signature");
        return OSIG_NONE;
    }
    if (!colon || !kid_ok(o->sig, (size_t)(colon - o->sig)) || unhex(colon + 1, got) != 0) {
        snprintf(err, errlen, "not signed by a producer key: bad signature (not KID:64 hex digits)");
        return OSIG_BAD;
    }
    for (size_t i = 0; ks && i < ks->n; i++) {
        const struct okey *k = &ks->v[i];
        if (strlen(k->kid) != (size_t)(colon - o->sig) || memcmp(k->kid, o->sig, strlen(k->kid)) != 0)
            continue;
        /* Constant time: a timing difference must not tell a forger how
         * many leading bytes of a guess were right. */
        if (mac_of(k, o, want) == 0 && CRYPTO_memcmp(want, got, MAC_LEN) == 0)
            return OSIG_OK;
        snprintf(err, errlen, "not signed by a producer key: bad signature (key id %s)", k->kid);
        return OSIG_BAD;
    }
    snprintf(err, errlen, "not signed by a producer key: unknown key id %.*s", (int)(colon - o->sig), o->sig);
    return OSIG_UNKNOWN_KID;
}

int osig_load(const struct cfg *c, char *err, size_t errlen)
{
    struct osig_keys *ks, *old;
    if (osig_keys_load(c, &ks, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&cur_mu);
    old = cur;
    cur = ks;
    pthread_mutex_unlock(&cur_mu);
    osig_keys_free(old);
    return 0;
}

void osig_unload(void)
{
    pthread_mutex_lock(&cur_mu);
    struct osig_keys *old = cur;
    cur = NULL;
    pthread_mutex_unlock(&cur_mu);
    osig_keys_free(old);
    osig_keys_free(next);
    next = NULL;
}

int osig_sign(struct order *o)
{
    pthread_mutex_lock(&cur_mu);
    int r = osig_keys_sign(cur, o);
    pthread_mutex_unlock(&cur_mu);
    return r;
}

enum osig_verdict osig_verify(const struct order *o, char *err, size_t errlen)
{
    pthread_mutex_lock(&cur_mu);
    enum osig_verdict v = osig_keys_verify(cur, o, err, errlen);
    pthread_mutex_unlock(&cur_mu);
    return v;
}

static int reload_prepare(void *arg, const struct cfg *c, char *err, size_t errlen)
{
    (void)arg;
    osig_keys_free(next);
    next = NULL;
    return osig_keys_load(c, &next, err, errlen);
}

static void reload_commit(void *arg)
{
    struct osig_keys *old;
    (void)arg;
    if (!next)
        return;
    pthread_mutex_lock(&cur_mu);
    old = cur;
    cur = next;
    pthread_mutex_unlock(&cur_mu);
    next = NULL;
    log_notice("order keys: %zu loaded; orders are signed with key id %s", cur->n, cur->v[0].kid);
    osig_keys_free(old);
}

struct daemon_reload_hook osig_reload_hook(void)
{
    return (struct daemon_reload_hook){ .prepare = reload_prepare, .commit = reload_commit, .arg = NULL };
}

int osig_check(const struct cfg *c, char *err, size_t errlen)
{
    struct osig_keys *ks = NULL;
    if (osig_keys_load(c, &ks, err, errlen) != 0)
        return -1;
    osig_keys_free(ks);
    return 0;
}
