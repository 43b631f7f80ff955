#include "keyring.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "secret.h"
#include "util.h"

#define MAC_LEN 32 /* SHA-256 */

struct kkey {
    char kid[KEYRING_KID_MAX + 1];
    struct secret *key;
};

struct keyring {
    const struct keyring_spec *spec;
    struct kkey *v;
    size_t n;
};

static const struct cfg_list *list_of(const struct keyring_spec *s, const struct cfg *c)
{
    return (const struct cfg_list *)(const void *)((const char *)c + s->list_off);
}

static const char *dir_of(const struct keyring_spec *s, const struct cfg *c)
{
    const char *d = *(char *const *)(const void *)((const char *)c + s->dir_off);
    return d ? d : ".";
}

static int kid_ok(const char *s, size_t n)
{
    if (n < 1 || n > KEYRING_KID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", s[i]) || !s[i])
            return 0;
    return 1;
}

/* The file an entry names: absolute as given; a bare name is the systemd
 * credential when $CREDENTIALS_DIRECTORY is set (as for password files);
 * anything else is under the list's folder. NULL out of memory. */
static char *key_path(const struct keyring_spec *s, const struct cfg *c, const char *file)
{
    char *p = NULL;
    if (file[0] == '/')
        return strdup(file);
    if (!strchr(file, '/') && (p = secret_credential_path(file)))
        return p;
    if (asprintf(&p, "%s/%s", dir_of(s, c), file) < 0)
        return NULL;
    return p;
}

static int load_one(const struct keyring_spec *s, const struct cfg *c, const char *entry, struct kkey *k,
                    char *err, size_t errlen)
{
    const char *colon = strchr(entry, ':');
    char why[512], *path = NULL;
    if (!colon || !kid_ok(entry, (size_t)(colon - entry)) || !colon[1]) {
        snprintf(err, errlen, "entry '%s': not \"KID:FILE\" with KID of [A-Za-z0-9_-]{1,%d}", entry,
                 KEYRING_KID_MAX);
        return -1;
    }
    memcpy(k->kid, entry, (size_t)(colon - entry));
    k->kid[colon - entry] = '\0';
    if (!(path = key_path(s, c, colon + 1))) {
        snprintf(err, errlen, "entry '%s': out of memory", entry);
        return -1;
    }
    if (secret_read_key(path, &k->key, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "entry '%s' (key id '%s'): %s", entry, k->kid, why);
        goto fail;
    }
    /* A short key makes the MAC as weak as the key: 32 bytes is SHA-256's
     * own strength (`openssl rand -hex 32`). */
    if (secret_len(k->key) < KEYRING_KEY_MIN) {
        snprintf(err, errlen, "entry '%s' (key id '%s'): %s: %zu bytes, at least %d wanted", entry, k->kid,
                 path, secret_len(k->key), KEYRING_KEY_MIN);
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

int keyring_load(const struct keyring_spec *s, const struct cfg *c, struct keyring **out, char *err,
                 size_t errlen)
{
    const struct cfg_list *l = list_of(s, c);
    struct keyring *k = calloc(1, sizeof(*k));
    char why[768];
    if (!k || (l->n && !(k->v = calloc(l->n, sizeof(*k->v))))) {
        snprintf(err, errlen, "%s: out of memory", s->setting);
        goto fail;
    }
    k->spec = s;
    if (l->n == 0) {
        snprintf(err, errlen, "%s: %s is empty: %s", cfg_where(c, s->setting), s->setting, s->empty_why);
        goto fail;
    }
    for (; k->n < l->n; k->n++) {
        if (load_one(s, c, l->v[k->n], &k->v[k->n], why, sizeof(why)) != 0) {
            snprintf(err, errlen, "%s: %s %s", cfg_where(c, s->setting), s->setting, why);
            goto fail;
        }
        for (size_t i = 0; i < k->n; i++)
            if (strcmp(k->v[i].kid, k->v[k->n].kid) == 0) {
                snprintf(err, errlen, "%s: %s: key id '%s' is there twice", cfg_where(c, s->setting),
                         s->setting, k->v[i].kid);
                k->n++; /* so it is freed */
                goto fail;
            }
    }
    *out = k;
    return 0;
fail:
    keyring_free(k);
    return -1;
}

void keyring_free(struct keyring *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->n; i++)
        secret_free(k->v[i].key);
    free(k->v);
    free(k);
}

size_t keyring_count(const struct keyring *k)
{
    return k ? k->n : 0;
}

/* HMAC-SHA256 of text under key into mac. 0 or -1. */
static int mac_of(const struct kkey *key, const void *text, size_t len, unsigned char mac[MAC_LEN])
{
    unsigned int n = 0;
    if (!HMAC(EVP_sha256(), secret_str(key->key), (int)secret_len(key->key), text, len, mac, &n) ||
        n != MAC_LEN)
        return -1;
    return 0;
}

int keyring_sign(const struct keyring *k, const void *text, size_t len, char sig[KEYRING_SIG_MAX])
{
    unsigned char mac[MAC_LEN];
    if (!k || k->n == 0 || mac_of(&k->v[0], text, len, mac) != 0)
        return -1;
    size_t kl = strlen(k->v[0].kid);
    memcpy(sig, k->v[0].kid, kl);
    sig[kl] = ':';
    util_hex(sig + kl + 1, mac, MAC_LEN);
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

enum keyring_verdict keyring_verify(const struct keyring *k, const void *text, size_t len, const char *sig,
                                    char *err, size_t errlen)
{
    unsigned char want[MAC_LEN], got[MAC_LEN];
    const char *colon = strchr(sig, ':'), *signer = k ? k->spec->signer : "a key";
    if (!sig[0]) {
        snprintf(err, errlen, "not signed by %s: no signature", signer);
        return KEYRING_NONE;
    }
    if (!colon || !kid_ok(sig, (size_t)(colon - sig)) || unhex(colon + 1, got) != 0) {
        snprintf(err, errlen, "not signed by %s: bad signature (not KID:64 hex digits)", signer);
        return KEYRING_BAD;
    }
    for (size_t i = 0; k && i < k->n; i++) {
        const struct kkey *key = &k->v[i];
        if (strlen(key->kid) != (size_t)(colon - sig) || memcmp(key->kid, sig, strlen(key->kid)) != 0)
            continue;
        /* Constant time: a timing difference must not tell a forger how
         * many leading bytes of a guess were right. */
        if (mac_of(key, text, len, want) == 0 && CRYPTO_memcmp(want, got, MAC_LEN) == 0)
            return KEYRING_OK;
        snprintf(err, errlen, "not signed by %s: bad signature (key id %s)", signer, key->kid);
        return KEYRING_BAD;
    }
    snprintf(err, errlen, "not signed by %s: unknown key id %.*s", signer, (int)(colon - sig), sig);
    return KEYRING_UNKNOWN_KID;
}

/* --- a process's current set -------------------------------------------------- */

/* Make ks the current set; the old one is freed once no HMAC uses it. */
static void install(struct keyring_live *l, struct keyring *ks)
{
    pthread_mutex_lock(&l->mu);
    struct keyring *old = l->cur;
    l->cur = ks;
    pthread_mutex_unlock(&l->mu);
    keyring_free(old);
}

int keyring_live_load(struct keyring_live *l, const struct cfg *c, char *err, size_t errlen)
{
    struct keyring *ks;
    if (keyring_load(l->spec, c, &ks, err, errlen) != 0)
        return -1;
    install(l, ks);
    return 0;
}

void keyring_live_unload(struct keyring_live *l)
{
    install(l, NULL);
    keyring_free(l->next);
    l->next = NULL;
}

int keyring_live_sign(struct keyring_live *l, const void *text, size_t len, char sig[KEYRING_SIG_MAX])
{
    pthread_mutex_lock(&l->mu);
    int r = keyring_sign(l->cur, text, len, sig);
    pthread_mutex_unlock(&l->mu);
    return r;
}

enum keyring_verdict keyring_live_verify(struct keyring_live *l, const void *text, size_t len,
                                         const char *sig, char *err, size_t errlen)
{
    pthread_mutex_lock(&l->mu);
    enum keyring_verdict v;
    if (l->cur) {
        v = keyring_verify(l->cur, text, len, sig, err, errlen);
    } else {
        snprintf(err, errlen, "not signed by %s: no key loaded", l->spec->signer);
        v = KEYRING_UNKNOWN_KID;
    }
    pthread_mutex_unlock(&l->mu);
    return v;
}

int keyring_check(const struct keyring_spec *spec, const struct cfg *c, char *err, size_t errlen)
{
    struct keyring *ks = NULL;
    if (keyring_load(spec, c, &ks, err, errlen) != 0)
        return -1;
    keyring_free(ks);
    return 0;
}

static void drop_next(struct keyring_live *const *v)
{
    for (; *v; v++) {
        keyring_free((*v)->next);
        (*v)->next = NULL;
    }
}

static int reload_prepare(void *arg, const struct cfg *c, char *err, size_t errlen)
{
    struct keyring_live *const *v = arg;
    drop_next(v);
    for (struct keyring_live *const *l = v; *l; l++)
        if (keyring_load((*l)->spec, c, &(*l)->next, err, errlen) != 0) {
            drop_next(v);
            return -1;
        }
    return 0;
}

static void reload_commit(void *arg)
{
    for (struct keyring_live *const *l = arg; *l; l++) {
        struct keyring *ks = (*l)->next;
        if (!ks)
            continue;
        (*l)->next = NULL;
        log_notice("%s: %zu loaded; %s with key id %s", (*l)->spec->name, ks->n, (*l)->spec->signs,
                   ks->v[0].kid);
        install(*l, ks);
    }
}

struct daemon_reload_hook keyring_reload_hook(struct keyring_live *const *v)
{
    return (struct daemon_reload_hook){ .prepare = reload_prepare,
                                        .commit = reload_commit,
                                        .arg = (void *)v };
}
