#include "auth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pmetrics.h"
#include "util.h"

struct auth {
    int enabled;
    pthread_mutex_t mu;
    /* Under mu: read by the HTTP thread, replaced by the main thread. */
    struct jwt_keyset *ks;
    struct jwt_cache *cache;
    uint64_t gen;
    /* Main thread only: prepared by a reload, not yet committed. */
    struct jwt_keyset *next;
};

/* c's keys, to verify with: public keys and HS256 secrets only. An error
 * points at the file and line of jwt.keys, like every configuration error
 * (the key file itself is named in it). */
static int keys_load(const struct cfg *c, struct jwt_keyset **out, char *err, size_t errlen)
{
    char why[768];
    if (jwt_keyset_load(c, JWT_USE_VERIFY, out, why, sizeof(why)) == 0)
        return 0;
    snprintf(err, errlen, "%s: %s", cfg_where(c, "jwt.keys"), why);
    return -1;
}

int auth_open(const struct cfg *c, struct auth **out, char *err, size_t errlen)
{
    struct auth *a = calloc(1, sizeof(*a));
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&a->mu, NULL);
    a->enabled = c->producer.auth == CFG_AUTH_JWT;
    if (a->enabled) {
        if (keys_load(c, &a->ks, err, errlen) != 0)
            goto fail;
        /* cache_entries is not reloadable: the cache is sized once. */
        if (c->jwt.cache_entries > 0 && !(a->cache = jwt_cache_new((size_t)c->jwt.cache_entries))) {
            snprintf(err, errlen, "jwt.cache_entries = %d: out of memory", c->jwt.cache_entries);
            goto fail;
        }
        a->gen = 1;
    }
    *out = a;
    return 0;
fail:
    auth_close(a);
    return -1;
}

void auth_close(struct auth *a)
{
    if (!a)
        return;
    jwt_keyset_free(a->ks);
    jwt_keyset_free(a->next);
    jwt_cache_free(a->cache);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

int auth_enabled(const struct auth *a)
{
    return a && a->enabled;
}

enum jwt_err auth_buyer(struct auth *a, const char *authorization, int64_t *user)
{
    const char *tok = NULL;
    size_t len = 0;
    int64_t u = 0, exp = 0;
    if (!auth_enabled(a))
        return JWT_MISSING;
    enum jwt_err e = jwt_bearer(authorization, &tok, &len);
    if (e != JWT_OK) {
        PM_INC(auth_denied);
        return e;
    }
    int64_t now = util_wall_ms() / 1000;
    /* Held across the verification too: the keyset must not be freed under
     * it, and only a reload's commit ever waits for it. */
    pthread_mutex_lock(&a->mu);
    if (len > jwt_keyset_max_token(a->ks)) {
        e = JWT_TOO_LARGE; /* before hashing it for the cache */
    } else if (jwt_cache_get(a->cache, tok, len, now, a->gen, &u)) {
        pthread_mutex_unlock(&a->mu);
        PM_INC(auth_cached);
        *user = u;
        return JWT_OK;
    } else if ((e = jwt_verify(a->ks, tok, len, now, &u, &exp)) == JWT_OK) {
        int64_t until;
        if (__builtin_add_overflow(exp, jwt_keyset_leeway(a->ks), &until))
            until = INT64_MAX;
        jwt_cache_put(a->cache, tok, len, a->gen, u, until);
    }
    pthread_mutex_unlock(&a->mu);
    if (e != JWT_OK) {
        PM_INC(auth_denied);
        return e;
    }
    PM_INC(auth_verified);
    *user = u;
    return JWT_OK;
}

static int reload_prepare(void *arg, const struct cfg *next, char *err, size_t errlen)
{
    struct auth *a = arg;
    if (!a->enabled)
        return 0;
    jwt_keyset_free(a->next);
    a->next = NULL;
    /* Read every key file again even when jwt.* did not change: the
     * operator may have replaced a file and sent SIGHUP for exactly that. */
    return keys_load(next, &a->next, err, errlen);
}

static void reload_commit(void *arg)
{
    struct auth *a = arg;
    struct jwt_keyset *old;
    if (!a->enabled || !a->next)
        return;
    pthread_mutex_lock(&a->mu);
    old = a->ks;
    a->ks = a->next;
    a->gen++;
    pthread_mutex_unlock(&a->mu);
    a->next = NULL;
    log_notice("jwt: %zu key%s loaded; cached tokens are verified again", jwt_keyset_size(a->ks),
               jwt_keyset_size(a->ks) == 1 ? "" : "s");
    jwt_keyset_free(old);
}

struct daemon_reload_hook auth_reload_hook(struct auth *a)
{
    return (struct daemon_reload_hook){ .prepare = reload_prepare, .commit = reload_commit, .arg = a };
}

int auth_check(const struct cfg *c, char *err, size_t errlen)
{
    struct jwt_keyset *ks = NULL;
    if (c->producer.auth != CFG_AUTH_JWT)
        return 0;
    if (keys_load(c, &ks, err, errlen) != 0)
        return -1;
    jwt_keyset_free(ks);
    return 0;
}
