/* The producer's buyer authentication: the Authorization header, the cache
 * of verified tokens as the metrics count it, and key reloads (rotation, a
 * broken key file, a secret file replaced in place). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "auth.h"
#include "jwt.h"
#include "pmetrics.h"

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/seckill-auth-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    /* The private key signs the tests' tokens; the producer gets the
     * public one (it refuses a private key). */
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    char p[128];
    snprintf(p, sizeof(p), "%s/ec.pem", dir);
    FILE *f = fopen(p, "w");
    if (!ec || !f || PEM_write_PrivateKey(f, ec, NULL, NULL, 0, NULL, NULL) != 1)
        return -1;
    fclose(f);
    snprintf(p, sizeof(p), "%s/ec.pub.pem", dir);
    if (!(f = fopen(p, "w")) || PEM_write_PUBKEY(f, ec) != 1)
        return -1;
    fclose(f);
    EVP_PKEY_free(ec);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (dir[0])
        harness_sh("rm -rf '%s'", dir);
    return 0;
}

static void write_secret(const char *name, const char *content)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_true(fputs(content, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(p, 0600), 0); /* as a password file */
}

/* Run hook's commit with stderr (where the log goes) captured into out. */
static void commit_logged(const struct daemon_reload_hook *hk, char *out, size_t len)
{
    char path[] = "/tmp/seckill-auth-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    hk->commit(hk->arg);
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    ssize_t n = pread(fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

/* A configuration with producer.auth = jwt and keys (NULL-terminated). */
static void mkcfg(struct cfg *c, int cache_entries, const char *const *keys)
{
    size_t n = 0;
    memset(c, 0, sizeof(*c));
    c->producer.auth = CFG_AUTH_JWT;
    harness_set_str(&c->jwt.key_dir, dir);
    harness_set_str(&c->jwt.issuer, "");
    harness_set_str(&c->jwt.audience, "");
    harness_set_str(&c->jwt.signing_key, "");
    while (keys[n])
        n++;
    c->jwt.keys.v = calloc(n + 1, sizeof(char *));
    assert_non_null(c->jwt.keys.v);
    for (c->jwt.keys.n = 0; c->jwt.keys.n < n; c->jwt.keys.n++)
        assert_non_null(c->jwt.keys.v[c->jwt.keys.n] = strdup(keys[c->jwt.keys.n]));
    /* As config/seckill.cfg: every algorithm, whatever the keys are. */
    static const char *const algs[] = { "HS256", "RS256", "ES256" };
    c->jwt.algorithms.v = calloc(ARRAY_SIZE(algs) + 1, sizeof(char *));
    assert_non_null(c->jwt.algorithms.v);
    for (c->jwt.algorithms.n = 0; c->jwt.algorithms.n < ARRAY_SIZE(algs); c->jwt.algorithms.n++)
        assert_non_null(c->jwt.algorithms.v[c->jwt.algorithms.n] = strdup(algs[c->jwt.algorithms.n]));
    c->jwt.leeway_s = 30;
    c->jwt.max_token_bytes = 4096;
    c->jwt.cache_entries = cache_entries;
}

/* "Bearer <token>" signed by kid of c's keys, valid for an hour (or
 * expired when ttl < 0). The signer, as seckillctl, holds the private key
 * where c names the public one ("ec.pub.pem": "ec.pem"). */
static char *bearer(const struct cfg *c, const char *kid, int64_t user, int ttl)
{
    struct jwt_keyset *ks = NULL;
    struct cfg sc;
    const char *keys[8] = { NULL };
    char err[256], *t = NULL, *h = NULL;
    assert_true(c->jwt.keys.n < ARRAY_SIZE(keys));
    for (size_t i = 0; i < c->jwt.keys.n; i++)
        keys[i] = strstr(c->jwt.keys.v[i], "ec.pub.pem") ? "k2:ES256:ec.pem" : c->jwt.keys.v[i];
    mkcfg(&sc, 0, keys);
    if (jwt_keyset_load(&sc, JWT_USE_SIGN, &ks, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    cfg_free(&sc);
    int64_t now = util_wall_ms() / 1000;
    if (jwt_sign(ks, kid, user, now - (ttl < 0 ? 7200 : 0), now + ttl, &t, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    jwt_keyset_free(ks);
    assert_true(asprintf(&h, "Bearer %s", t) > 0);
    free(t);
    return h;
}

struct counts {
    int64_t verified, cached, denied;
};

static struct counts counts(void)
{
    return (struct counts){ atomic_load(&pm.auth_verified), atomic_load(&pm.auth_cached),
                            atomic_load(&pm.auth_denied) };
}

/* auth_buyer's result, and which counter moved by exactly one. */
static enum jwt_err buyer(struct auth *a, const char *hdr, int64_t *user, char *counted)
{
    struct counts b = counts();
    int64_t u = -1;
    enum jwt_err e = auth_buyer(a, hdr, &u);
    struct counts n = counts();
    int64_t dv = n.verified - b.verified, dc = n.cached - b.cached, dd = n.denied - b.denied;
    assert_true(dv + dc + dd == 1);
    *counted = dv ? 'v' : dc ? 'c' : 'd';
    assert_true((e == JWT_OK) == (*counted != 'd'));
    if (user)
        *user = e == JWT_OK ? u : -1;
    return e;
}

#define EXPECT(a, hdr, want_err, want_count)                                                                 \
    do {                                                                                                     \
        char got_c_;                                                                                         \
        enum jwt_err got_ = buyer((a), (hdr), NULL, &got_c_);                                                \
        if (got_ != (want_err) || got_c_ != (want_count))                                                    \
            fail_msg("line %d: got '%s' counted %c, want '%s' counted %c", __LINE__, jwt_err_str(got_), got_c_, \
                     jwt_err_str(want_err), (want_count));                                                   \
    } while (0)

static void test_header(void **state)
{
    (void)state;
    write_secret("h.secret", "header-test-secret-0123456789abcdef\n");
    struct cfg c;
    mkcfg(&c, 1024, (const char *const[]){ "h:HS256:h.secret", NULL });
    struct auth *a = NULL;
    char err[256];
    assert_int_equal(auth_open(&c, &a, err, sizeof(err)), 0);
    assert_int_equal(auth_enabled(a), 1);
    char *good = bearer(&c, "h", 1234, 3600);
    const char *tok = good + 7;
    int64_t user;
    char counted;

    assert_int_equal(buyer(a, good, &user, &counted), JWT_OK);
    assert_true(user == 1234);
    assert_int_equal(counted, 'v');
    assert_int_equal(buyer(a, good, &user, &counted), JWT_OK);
    assert_true(user == 1234);
    assert_int_equal(counted, 'c'); /* the second time from the cache */

    char h[1024];
    static const char *const ok_forms[] = { "bearer %s", "BEARER %s", "Bearer  %s", "BeArEr    %s" };
    for (size_t i = 0; i < ARRAY_SIZE(ok_forms); i++) {
        snprintf(h, sizeof(h), ok_forms[i], tok);
        EXPECT(a, h, JWT_OK, 'c');
    }
    static const struct {
        const char *fmt;
        enum jwt_err want;
    } bad[] = {
        { "Basic %s", JWT_MISSING },      { "Bearerx%s", JWT_MISSING },     { "%s", JWT_MISSING },
        { "Bearer %s ", JWT_MALFORMED },  { "Bearer %s x", JWT_MALFORMED }, { " Bearer %s", JWT_MISSING },
        { "Bearer\t%s", JWT_MISSING },    { "Bearer %s\t", JWT_MALFORMED }, { "Bearer %s\r\n", JWT_MALFORMED },
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        snprintf(h, sizeof(h), bad[i].fmt, tok);
        char cc;
        enum jwt_err e = buyer(a, h, NULL, &cc);
        if (e != bad[i].want || cc != 'd')
            fail_msg("'%s': got '%s', want '%s'", bad[i].fmt, jwt_err_str(e), jwt_err_str(bad[i].want));
    }
    EXPECT(a, NULL, JWT_MISSING, 'd');
    EXPECT(a, "", JWT_MISSING, 'd');
    EXPECT(a, "Bearer", JWT_MALFORMED, 'd');
    EXPECT(a, "Bearer ", JWT_MALFORMED, 'd');
    EXPECT(a, "Bearer    ", JWT_MALFORMED, 'd');
    /* Refused tokens are never cached: denied every time. */
    char *expired = bearer(&c, "h", 1234, -60);
    EXPECT(a, expired, JWT_EXPIRED, 'd');
    EXPECT(a, expired, JWT_EXPIRED, 'd');
    /* Larger than jwt.max_token_bytes. */
    char *big = malloc(5000);
    assert_non_null(big);
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'A', 4992);
    big[4999] = '\0';
    EXPECT(a, big, JWT_TOO_LARGE, 'd');
    free(big);
    free(expired);

    /* jwt_bearer itself points into the value. */
    const char *t = NULL;
    size_t len = 0;
    assert_int_equal(jwt_bearer("bearer   abc", &t, &len), JWT_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(t, "abc", 3);
    free(good);
    auth_close(a);
    cfg_free(&c);
}

static void test_no_cache_and_disabled(void **state)
{
    (void)state;
    write_secret("n.secret", "no-cache-secret-0123456789abcdef-xyz");
    struct cfg c;
    mkcfg(&c, 0, (const char *const[]){ "n:HS256:n.secret", NULL });
    struct auth *a = NULL;
    char err[256];
    assert_int_equal(auth_open(&c, &a, err, sizeof(err)), 0);
    char *h = bearer(&c, "n", 5, 3600);
    EXPECT(a, h, JWT_OK, 'v');
    EXPECT(a, h, JWT_OK, 'v'); /* jwt.cache_entries = 0: verified each time */
    auth_close(a);

    /* producer.auth = none: nothing is loaded (not even broken keys), no
     * token is trusted, and reloads have nothing to do. */
    c.producer.auth = CFG_AUTH_NONE;
    harness_set_str(&c.jwt.keys.v[0], "n:HS256:no-such-file");
    assert_int_equal(auth_open(&c, &a, err, sizeof(err)), 0);
    assert_int_equal(auth_enabled(a), 0);
    struct counts b = counts();
    int64_t user = -1;
    assert_int_equal(auth_buyer(a, h, &user), JWT_MISSING);
    assert_true(user == -1);
    struct daemon_reload_hook hk = auth_reload_hook(a);
    assert_int_equal(hk.prepare(hk.arg, &c, err, sizeof(err)), 0);
    hk.commit(hk.arg);
    struct counts n = counts();
    assert_true(memcmp(&b, &n, sizeof(b)) == 0);
    auth_close(a);

    /* With jwt on, a broken key file stops auth_open. */
    c.producer.auth = CFG_AUTH_JWT;
    a = NULL;
    assert_int_equal(auth_open(&c, &a, err, sizeof(err)), -1);
    assert_null(a);
    assert_non_null(strstr(err, "no-such-file"));
    free(h);
    cfg_free(&c);
}

static void test_reload_rotation(void **state)
{
    (void)state;
    write_secret("k1.secret", "rotation-secret-one-0123456789abcdef\n");
    struct cfg c1, c2, c3, c4;
    mkcfg(&c1, 1024, (const char *const[]){ "k1:HS256:k1.secret", NULL });
    mkcfg(&c2, 1024, (const char *const[]){ "k1:HS256:k1.secret", "k2:ES256:ec.pub.pem", NULL });
    mkcfg(&c3, 1024, (const char *const[]){ "k2:ES256:ec.pub.pem", NULL });
    mkcfg(&c4, 1024, (const char *const[]){ "k2:ES256:missing-ec.pem", NULL });
    struct auth *a = NULL;
    char err[512];
    assert_int_equal(auth_open(&c1, &a, err, sizeof(err)), 0);
    struct daemon_reload_hook hk = auth_reload_hook(a);
    char *t1 = bearer(&c1, "k1", 11, 3600), *t2 = bearer(&c2, "k2", 22, 3600);
    int64_t user;
    char counted;

    EXPECT(a, t1, JWT_OK, 'v');
    EXPECT(a, t1, JWT_OK, 'c');
    EXPECT(a, t2, JWT_UNKNOWN_KID, 'd');

    /* A second kid: prepared, but not in force before the commit. */
    assert_int_equal(hk.prepare(hk.arg, &c2, err, sizeof(err)), 0);
    EXPECT(a, t2, JWT_UNKNOWN_KID, 'd');
    char logged[512];
    commit_logged(&hk, logged, sizeof(logged));
    /* The commit says how many keys are in force, and nothing of them. */
    if (!strstr(logged, "2 keys loaded") || strstr(logged, "rotation-secret") || strstr(logged, "BEGIN"))
        fail_msg("commit logged '%s'", logged);
    assert_int_equal(buyer(a, t2, &user, &counted), JWT_OK);
    assert_true(user == 22);
    /* New generation: the cached k1 token is verified once more. */
    EXPECT(a, t1, JWT_OK, 'v');
    EXPECT(a, t1, JWT_OK, 'c');

    /* The old kid goes: its token is refused although it was cached. */
    assert_int_equal(hk.prepare(hk.arg, &c3, err, sizeof(err)), 0);
    hk.commit(hk.arg);
    EXPECT(a, t1, JWT_UNKNOWN_KID, 'd');
    EXPECT(a, t2, JWT_OK, 'v');
    EXPECT(a, t2, JWT_OK, 'c');

    /* A broken key file refuses the reload; the keys in force stay. */
    assert_int_equal(hk.prepare(hk.arg, &c4, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "missing-ec.pem"));
    EXPECT(a, t2, JWT_OK, 'c');
    char *t2b = bearer(&c3, "k2", 23, 1800);
    assert_int_equal(buyer(a, t2b, &user, &counted), JWT_OK);
    assert_true(user == 23 && counted == 'v');
    /* A prepare that is never committed is simply replaced by the next. */
    assert_int_equal(hk.prepare(hk.arg, &c2, err, sizeof(err)), 0);
    assert_int_equal(hk.prepare(hk.arg, &c3, err, sizeof(err)), 0);
    hk.commit(hk.arg);
    EXPECT(a, t1, JWT_UNKNOWN_KID, 'd');
    EXPECT(a, t2, JWT_OK, 'v');

    free(t1);
    free(t2);
    free(t2b);
    auth_close(a);
    cfg_free(&c1);
    cfg_free(&c2);
    cfg_free(&c3);
    cfg_free(&c4);
}

/* The producer takes public keys only: a private key (which would let it
 * mint tokens) is refused at start, at -t and on reload, naming the entry,
 * its key id and the file after the configuration's place; an HS256 secret
 * others may read is refused the same way. */
static void test_private_key_and_open_secret_refused(void **state)
{
    (void)state;
    write_secret("p.secret", "private-test-secret-0123456789abcdef\n");
    struct cfg good, priv, shared;
    mkcfg(&good, 1024, (const char *const[]){ "p:HS256:p.secret", "k2:ES256:ec.pub.pem", NULL });
    mkcfg(&priv, 1024, (const char *const[]){ "p:HS256:p.secret", "k2:ES256:ec.pem", NULL });
    mkcfg(&shared, 1024, (const char *const[]){ "p:HS256:p.secret", NULL });
    struct auth *a = NULL;
    char err[1024], file[128];
    snprintf(file, sizeof(file), "%s/ec.pem", dir);
    assert_int_equal(auth_open(&priv, &a, err, sizeof(err)), -1);
    assert_null(a);
    if (!strstr(err, "'k2:ES256:ec.pem'") || !strstr(err, "key id 'k2'") || !strstr(err, file) ||
        !strstr(err, "private key") || !strstr(err, "signing stays with seckillctl"))
        fail_msg("auth_open: '%s'", err);
    assert_int_equal(auth_check(&priv, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "key id 'k2'"));

    /* Running with the public key, a reload to the private one is refused
     * and the keys in force stay. */
    assert_int_equal(auth_open(&good, &a, err, sizeof(err)), 0);
    struct daemon_reload_hook hk = auth_reload_hook(a);
    char *t = bearer(&good, "k2", 31, 3600);
    EXPECT(a, t, JWT_OK, 'v');
    assert_int_equal(hk.prepare(hk.arg, &priv, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "private key"));
    hk.commit(hk.arg);
    EXPECT(a, t, JWT_OK, 'c');

    /* The HS256 secret readable by others: refused, the mode named. */
    char sp[128];
    snprintf(sp, sizeof(sp), "%s/p.secret", dir);
    assert_int_equal(chmod(sp, 0640), 0);
    assert_int_equal(auth_check(&shared, err, sizeof(err)), -1);
    if (!strstr(err, "key id 'p'") || !strstr(err, "mode 0640") || strstr(err, "private-test-secret"))
        fail_msg("auth_check: '%s'", err);
    assert_int_equal(hk.prepare(hk.arg, &shared, err, sizeof(err)), -1);
    assert_int_equal(chmod(sp, 0400), 0);
    assert_int_equal(auth_check(&shared, err, sizeof(err)), 0);
    free(t);
    auth_close(a);
    cfg_free(&good);
    cfg_free(&priv);
    cfg_free(&shared);
}

static void test_reload_rereads_secret(void **state)
{
    (void)state;
    write_secret("rot.secret", "the-first-secret-0123456789abcdef-0123\n");
    struct cfg c;
    mkcfg(&c, 1024, (const char *const[]){ "rot:HS256:rot.secret", NULL });
    struct auth *a = NULL;
    char err[512];
    assert_int_equal(auth_open(&c, &a, err, sizeof(err)), 0);
    struct daemon_reload_hook hk = auth_reload_hook(a);
    char *old = bearer(&c, "rot", 7, 3600);
    EXPECT(a, old, JWT_OK, 'v');
    EXPECT(a, old, JWT_OK, 'c');

    /* The file changes, the configuration does not; nothing happens until
     * the reload. */
    write_secret("rot.secret", "the-second-secret-0123456789abcdef-456\n");
    char *new = bearer(&c, "rot", 8, 3600);
    EXPECT(a, old, JWT_OK, 'c');
    EXPECT(a, new, JWT_BAD_SIGNATURE, 'd');
    assert_int_equal(hk.prepare(hk.arg, &c, err, sizeof(err)), 0);
    hk.commit(hk.arg);
    EXPECT(a, old, JWT_BAD_SIGNATURE, 'd');
    EXPECT(a, new, JWT_OK, 'v');
    EXPECT(a, new, JWT_OK, 'c');

    /* Replaced by something too short: refused, the second secret stays. */
    write_secret("rot.secret", "too-short\n");
    assert_int_equal(hk.prepare(hk.arg, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rot.secret"));
    assert_null(strstr(err, "too-short"));
    EXPECT(a, new, JWT_OK, 'c');
    free(old);
    free(new);
    auth_close(a);
    cfg_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_no_cache_and_disabled),
        cmocka_unit_test(test_reload_rotation),
        cmocka_unit_test(test_private_key_and_open_secret_refused),
        cmocka_unit_test(test_reload_rereads_secret),
    };
    return cmocka_run_group_tests_name("auth", tests, group_setup, group_teardown);
}
