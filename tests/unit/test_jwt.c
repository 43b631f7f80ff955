/* Bearer tokens: keyset loading, verification (and every way it refuses),
 * signing, the verified-token cache. Keys are generated at test time with
 * OpenSSL into a folder of their own under /tmp; tokens with unusual
 * headers or claims are signed here with OpenSSL directly, so the test does
 * not trust jwt.c to build what it checks. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#if defined(__SANITIZE_ADDRESS__)
/* ASan's allocator statistics (sanitizer/allocator_interface.h, which not
 * every compiler installs). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "jwt.h"

#define NOW INT64_C(1800000000)
#define HS_SECRET "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char dir[64];
static EVP_PKEY *rsa, *ec;

/* Tokens and strings a test made, freed by its teardown. */
static char *gc[256];
static size_t ngc;

static char *keep(char *s)
{
    assert_non_null(s);
    assert_true(ngc < ARRAY_SIZE(gc));
    return gc[ngc++] = s;
}

static int gc_free(void **state)
{
    (void)state;
    while (ngc)
        free(gc[--ngc]);
    return 0;
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void write_file(const char *name, const void *data, size_t n)
{
    char p[128];
    path_of(p, sizeof(p), name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    /* An HS256 secret must be 0600 or 0400, as a password file. */
    assert_int_equal(chmod(p, 0600), 0);
}

static void write_key(const char *name, EVP_PKEY *pk, int private, int traditional)
{
    char p[128];
    path_of(p, sizeof(p), name);
    BIO *b = BIO_new_file(p, "w");
    assert_non_null(b);
    if (!private)
        assert_int_equal(PEM_write_bio_PUBKEY(b, pk), 1);
    else if (traditional)
        assert_int_equal(PEM_write_bio_PrivateKey_traditional(b, pk, NULL, NULL, 0, NULL, NULL), 1);
    else
        assert_int_equal(PEM_write_bio_PrivateKey(b, pk, NULL, NULL, 0, NULL, NULL), 1);
    BIO_free(b);
    assert_int_equal(chmod(p, 0600), 0); /* the HS256 loads of a PEM file get past the mode check */
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/seckill-jwt-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    rsa = EVP_RSA_gen(2048);
    ec = EVP_EC_gen("P-256");
    EVP_PKEY *rsa1024 = EVP_RSA_gen(1024), *ec384 = EVP_EC_gen("P-384");
    if (!rsa || !ec || !rsa1024 || !ec384)
        return -1;
    write_key("rsa.pem", rsa, 1, 0);
    write_key("rsa.pub.pem", rsa, 0, 0);
    write_key("rsa-trad.pem", rsa, 1, 1);
    write_key("ec.pem", ec, 1, 0);
    write_key("ec.pub.pem", ec, 0, 0);
    write_key("rsa1024.pem", rsa1024, 0, 0);
    write_key("ec384.pem", ec384, 1, 0);
    /* What `openssl ecparam -genkey` writes: the curve, then the key. */
    {
        char p[128];
        path_of(p, sizeof(p), "ec-ecparam.pem");
        BIO *b = BIO_new_file(p, "w");
        assert_non_null(b);
        assert_int_equal(PEM_write_bio_Parameters(b, ec), 1);
        assert_int_equal(PEM_write_bio_PrivateKey_traditional(b, ec, NULL, NULL, 0, NULL, NULL), 1);
        BIO_free(b);
    }
    EVP_PKEY_free(rsa1024);
    EVP_PKEY_free(ec384);
    write_file("hs.secret", HS_SECRET "\n", strlen(HS_SECRET) + 1);
    write_file("hs-crlf.secret", HS_SECRET "\r\n", strlen(HS_SECRET) + 2);
    static const char *const files[][2] = {
        { "other.secret", "ffffffffffffffffffffffffffffffffffffffff" },
        { "short.secret", "short-secret-16b" },
        { "31nl.secret", "0123456789012345678901234567890\n" },
        { "32nl.secret", "01234567890123456789012345678901\n" },
        { "garbage.pem", "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(files); i++)
        write_file(files[i][0], files[i][1], strlen(files[i][1]));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);
    if (dir[0])
        harness_sh("rm -rf '%s'", dir);
    return 0;
}

/* --- building configurations and tokens --------------------------------- */

struct conf {
    const char *keys[6];
    const char *algs[4];
    const char *iss, *aud, *signing;
    int leeway, max;
};

static void list_set(struct cfg_list *l, const char *const *v, size_t cap)
{
    l->n = 0;
    l->v = calloc(cap + 1, sizeof(char *));
    assert_non_null(l->v);
    for (size_t i = 0; i < cap && v[i]; i++)
        assert_non_null(l->v[l->n++] = strdup(v[i]));
}

static void conf_cfg(const struct conf *o, struct cfg *c)
{
    memset(c, 0, sizeof(*c));
    c->producer.auth = CFG_AUTH_JWT;
    assert_non_null(c->jwt.key_dir = strdup(dir));
    list_set(&c->jwt.keys, o->keys, ARRAY_SIZE(o->keys));
    list_set(&c->jwt.algorithms, o->algs, ARRAY_SIZE(o->algs));
    assert_non_null(c->jwt.issuer = strdup(o->iss ? o->iss : ""));
    assert_non_null(c->jwt.audience = strdup(o->aud ? o->aud : ""));
    assert_non_null(c->jwt.signing_key = strdup(o->signing ? o->signing : ""));
    c->jwt.leeway_s = o->leeway;
    c->jwt.max_token_bytes = o->max ? o->max : 4096;
    c->jwt.cache_entries = 1024;
}

static int ks_try(const struct conf *o, struct jwt_keyset **ks, char *err, size_t errlen)
{
    struct cfg c;
    conf_cfg(o, &c);
    err[0] = '\0';
    int rc = jwt_keyset_load(&c, JWT_USE_SIGN, ks, err, errlen);
    cfg_free(&c);
    return rc;
}

static struct jwt_keyset *ks_of(const struct conf *o)
{
    struct jwt_keyset *ks = NULL;
    char err[512];
    if (ks_try(o, &ks, err, sizeof(err)) != 0)
        fail_msg("keyset load: %s", err);
    return ks;
}

static char *b64u(const void *in, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    assert_non_null(out);
    int m = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    assert_true(m >= 0);
    size_t k = 0;
    for (int i = 0; i < m; i++) {
        if (out[i] == '=')
            break;
        out[k++] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    }
    out[k] = '\0';
    return out;
}

/* Decode n base64url characters of s into out (room for n bytes). */
static size_t b64u_dec(const char *s, size_t n, unsigned char *out)
{
    char *std = malloc(n + 4);
    assert_non_null(std);
    for (size_t i = 0; i < n; i++)
        std[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    size_t pad = (4 - n % 4) % 4;
    memcpy(std + n, "===", pad);
    int m = EVP_DecodeBlock(out, (const unsigned char *)std, (int)(n + pad));
    free(std);
    assert_true(m >= 0);
    return (size_t)m - pad; /* EVP_DecodeBlock counts the padding as zero bytes */
}

/* The raw signature of in made by how: 'H' HMAC-SHA256 with key (keylen
 * bytes), 'R' RSA PKCS#1 v1.5, 'E' ECDSA as r||s, 'D' ECDSA as DER (key is
 * an EVP_PKEY). */
static size_t raw_sign(char how, const void *key, size_t keylen, const char *in, unsigned char *sig)
{
    unsigned int ml = 0;
    size_t sl = 512;
    if (how == 'H') {
        assert_non_null(HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)in, strlen(in), sig, &ml));
        return ml;
    }
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestSignInit(m, NULL, EVP_sha256(), NULL, (EVP_PKEY *)key), 1);
    assert_int_equal(EVP_DigestSign(m, sig, &sl, (const unsigned char *)in, strlen(in)), 1);
    EVP_MD_CTX_free(m);
    if (how == 'R' || how == 'D')
        return sl;
    const unsigned char *p = sig;
    ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)sl);
    assert_non_null(es);
    const BIGNUM *r, *s;
    ECDSA_SIG_get0(es, &r, &s);
    assert_int_equal(BN_bn2binpad(r, sig, 32), 32);
    assert_int_equal(BN_bn2binpad(s, sig + 32, 32), 32);
    ECDSA_SIG_free(es);
    return 64;
}

/* header.payload signed by how ('H', 'R', 'E', 'D' as above; 'N': empty
 * signature segment). */
static char *tok_with(char how, const void *key, size_t keylen, const char *hdr, const char *pl)
{
    char *h = b64u(hdr, strlen(hdr)), *p = b64u(pl, strlen(pl)), *in, *out;
    unsigned char sig[512];
    assert_true(asprintf(&in, "%s.%s", h, p) > 0);
    char *s = how == 'N' ? strdup("") : b64u(sig, raw_sign(how, key, keylen, in, sig));
    assert_true(asprintf(&out, "%s.%s", in, s) > 0);
    free(h);
    free(p);
    free(in);
    free(s);
    return keep(out);
}

static char *hs_tok(const char *hdr, const char *pl)
{
    return tok_with('H', HS_SECRET, strlen(HS_SECRET), hdr, pl);
}

static char *payload(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *payload(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    assert_true(vasprintf(&s, fmt, ap) > 0);
    va_end(ap);
    return keep(s);
}

static enum jwt_err verify_at(const struct jwt_keyset *ks, const char *tok, int64_t now, int64_t *user)
{
    int64_t u = -1, e = -1;
    enum jwt_err r = jwt_verify(ks, tok, strlen(tok), now, &u, &e);
    if (user)
        *user = r == JWT_OK ? u : -1;
    return r;
}

static enum jwt_err verify(const struct jwt_keyset *ks, const char *tok)
{
    return verify_at(ks, tok, NOW, NULL);
}

#define EXPECT(ks, tok, want)                                                                             \
    do {                                                                                                  \
        enum jwt_err got_ = verify((ks), (tok));                                                          \
        if (got_ != (want))                                                                               \
            fail_msg("line %d: got '%s', want '%s'", __LINE__, jwt_err_str(got_), jwt_err_str(want));    \
    } while (0)

static const struct conf three = {
    .keys = { "hs:HS256:hs.secret", "rs:RS256:rsa.pem", "es:ES256:ec.pem" },
    .algs = { "HS256", "RS256", "ES256" },
};

/* --- tests ------------------------------------------------------------------ */

static void test_valid_each_algorithm(void **state)
{
    (void)state;
    struct jwt_keyset *ks = ks_of(&three);
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld,\"iat\":%lld}", (long long)NOW + 60, (long long)NOW);
    int64_t user, exp;
    char *t = hs_tok("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"hs\"}", pl);
    assert_int_equal(jwt_verify(ks, t, strlen(t), NOW, &user, &exp), JWT_OK);
    assert_true(user == 42 && exp == NOW + 60);
    t = tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"rs\"}", pl);
    assert_int_equal(verify_at(ks, t, NOW, &user), JWT_OK);
    assert_true(user == 42);
    t = tok_with('E', ec, 0, "{\"alg\":\"ES256\",\"kid\":\"es\"}", pl);
    assert_int_equal(verify_at(ks, t, NOW, &user), JWT_OK);
    assert_true(user == 42);
    /* The token need not be NUL-terminated: a length is all it takes. */
    char *copy = keep(malloc(strlen(t) + 8));
    memcpy(copy, t, strlen(t));
    memcpy(copy + strlen(t), ".x=\0\0", 5);
    assert_int_equal(jwt_verify(ks, copy, strlen(t), NOW, &user, &exp), JWT_OK);
    jwt_keyset_free(ks);

    /* Public keys verify what the private ones signed; an empty
     * jwt.algorithms means the keys' own; traditional PEM and the
     * `openssl ecparam -genkey` layout load too. */
    ks = ks_of(&(struct conf){ .keys = { "rs:RS256:rsa.pub.pem", "es:ES256:ec.pub.pem" } });
    EXPECT(ks, tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"rs\"}", pl), JWT_OK);
    EXPECT(ks, t, JWT_OK);
    assert_int_equal(jwt_keyset_size(ks), 2);
    jwt_keyset_free(ks);
    char abs[160];
    path_of(abs, sizeof(abs), "rsa-trad.pem");
    ks = ks_of(&(struct conf){ .keys = { payload("rs:RS256:%s", abs), "es:ES256:ec-ecparam.pem" } });
    EXPECT(ks, tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"rs\"}", pl), JWT_OK);
    EXPECT(ks, t, JWT_OK);
    jwt_keyset_free(ks);

    /* One key: the kid may be left out. A CRLF after the secret is not part
     * of it. */
    ks = ks_of(&(struct conf){ .keys = { "only:HS256:hs-crlf.secret" } });
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\"}", pl), JWT_OK);
    jwt_keyset_free(ks);
}

static void test_sign_roundtrip(void **state)
{
    (void)state;
    struct conf o = three;
    o.iss = "https://login.example";
    o.aud = "seckill";
    o.signing = "es";
    struct jwt_keyset *ks = ks_of(&o);
    char err[256];
    int64_t user, exp;
    static const char *const kids[] = { "hs", "rs", "es", NULL, "" };
    for (size_t i = 0; i < ARRAY_SIZE(kids); i++) {
        char *t = NULL;
        assert_int_equal(jwt_sign(ks, kids[i], INT64_MAX - (int64_t)i, NOW, NOW + 3600, &t, err, sizeof(err)), 0);
        keep(t);
        assert_int_equal(jwt_verify(ks, t, strlen(t), NOW, &user, &exp), JWT_OK);
        assert_true(user == INT64_MAX - (int64_t)i && exp == NOW + 3600);
        /* The header names the key that signed: NULL is jwt.signing_key,
         * "" the first key able to sign. */
        const char *want = kids[i] == NULL ? "es" : kids[i][0] == '\0' ? "hs" : kids[i];
        unsigned char hdr[256];
        size_t n = b64u_dec(t, (size_t)(strchr(t, '.') - t), hdr);
        hdr[n] = '\0';
        assert_non_null(strstr((char *)hdr, payload("\"kid\":\"%s\"", want)));
        assert_non_null(strstr((char *)hdr, "\"typ\":\"JWT\""));
    }
    /* Signed with iss and aud: a keyset without them accepts the token
     * too, one expecting another issuer does not. */
    char *t = NULL;
    assert_int_equal(jwt_sign(ks, "rs", 7, NOW, NOW + 60, &t, err, sizeof(err)), 0);
    keep(t);
    struct jwt_keyset *plain = ks_of(&three);
    EXPECT(plain, t, JWT_OK);
    jwt_keyset_free(plain);
    o.iss = "https://other.example";
    plain = ks_of(&o);
    EXPECT(plain, t, JWT_BAD_ISSUER);
    jwt_keyset_free(plain);
    /* Zero and negative buyers are never signed. */
    assert_int_equal(jwt_sign(ks, "hs", 0, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    jwt_keyset_free(ks);
}

static void test_exp_nbf_leeway(void **state)
{
    (void)state;
    struct conf o = three;
    o.leeway = 30;
    struct jwt_keyset *ks = ks_of(&o), *strict = ks_of(&three);
    const char *h = "{\"alg\":\"HS256\",\"kid\":\"hs\"}";
#define EXP_TOK(e) hs_tok(h, payload("{\"sub\":\"1\",\"exp\":%s}", (e)))
    EXPECT(ks, EXP_TOK(payload("%lld", (long long)NOW - 10)), JWT_OK);   /* within leeway */
    EXPECT(ks, EXP_TOK(payload("%lld", (long long)NOW - 30)), JWT_OK);   /* the last second */
    EXPECT(ks, EXP_TOK(payload("%lld", (long long)NOW - 31)), JWT_EXPIRED);
    EXPECT(strict, EXP_TOK(payload("%lld", (long long)NOW)), JWT_OK);
    EXPECT(strict, EXP_TOK(payload("%lld", (long long)NOW - 1)), JWT_EXPIRED);
    /* Reals: a fraction never buys time. */
    EXPECT(strict, EXP_TOK(payload("%lld.5", (long long)NOW)), JWT_OK);
    EXPECT(strict, EXP_TOK(payload("%lld.5", (long long)NOW - 1)), JWT_EXPIRED);
    EXPECT(strict, EXP_TOK("1e300"), JWT_OK);
    EXPECT(strict, EXP_TOK("9223372036854775807"), JWT_OK);
    EXPECT(ks, EXP_TOK("-9223372036854775808"), JWT_EXPIRED);
    EXPECT(strict, EXP_TOK("-1e300"), JWT_EXPIRED);
    EXPECT(strict, EXP_TOK("\"1900000000\""), JWT_MALFORMED);
    EXPECT(strict, EXP_TOK("null"), JWT_MALFORMED);
    EXPECT(strict, hs_tok(h, "{\"sub\":\"1\"}"), JWT_NO_EXP);
    EXPECT(strict, hs_tok(h, "{\"sub\":\"1\",\"Exp\":1900000000}"), JWT_NO_EXP);
    /* An expired token from a key we do not have is a key problem first. */
    EXPECT(strict, hs_tok("{\"alg\":\"HS256\",\"kid\":\"zz\"}", "{\"sub\":\"1\",\"exp\":1}"), JWT_UNKNOWN_KID);

#define NBF_TOK(n) hs_tok(h, payload("{\"sub\":\"1\",\"exp\":%lld,\"nbf\":%s}", (long long)NOW + 600, (n)))
    EXPECT(ks, NBF_TOK(payload("%lld", (long long)NOW + 10)), JWT_OK);
    EXPECT(ks, NBF_TOK(payload("%lld", (long long)NOW + 30)), JWT_OK);
    EXPECT(ks, NBF_TOK(payload("%lld", (long long)NOW + 31)), JWT_NOT_YET_VALID);
    EXPECT(strict, NBF_TOK(payload("%lld", (long long)NOW)), JWT_OK);
    EXPECT(strict, NBF_TOK(payload("%lld", (long long)NOW + 1)), JWT_NOT_YET_VALID);
    EXPECT(strict, NBF_TOK(payload("%lld.5", (long long)NOW - 1)), JWT_OK);
    EXPECT(strict, NBF_TOK(payload("%lld.5", (long long)NOW)), JWT_NOT_YET_VALID);
    EXPECT(strict, NBF_TOK("9223372036854775807"), JWT_NOT_YET_VALID);
    EXPECT(strict, NBF_TOK("\"0\""), JWT_MALFORMED);
    /* Both: exp is looked at first. */
    EXPECT(strict, hs_tok(h, payload("{\"sub\":\"1\",\"exp\":1,\"nbf\":%lld}", (long long)NOW + 100)), JWT_EXPIRED);
#undef EXP_TOK
#undef NBF_TOK
    jwt_keyset_free(ks);
    jwt_keyset_free(strict);
}

static void test_issuer_audience(void **state)
{
    (void)state;
    struct conf o = three;
    o.iss = "https://login.example";
    o.aud = "seckill";
    struct jwt_keyset *ks = ks_of(&o), *open = ks_of(&three);
    const char *h = "{\"alg\":\"HS256\",\"kid\":\"hs\"}";
    long long e = NOW + 60;
#define T(claims) hs_tok(h, payload("{\"sub\":\"5\",\"exp\":%lld%s}", e, (claims)))
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":\"seckill\""), JWT_OK);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":[\"shop\",\"seckill\"]"), JWT_OK);
    EXPECT(ks, T(",\"aud\":\"seckill\""), JWT_BAD_ISSUER);
    EXPECT(ks, T(",\"iss\":\"https://evil.example\",\"aud\":\"seckill\""), JWT_BAD_ISSUER);
    EXPECT(ks, T(",\"iss\":\"https://login.example/\",\"aud\":\"seckill\""), JWT_BAD_ISSUER);
    EXPECT(ks, T(",\"iss\":[\"https://login.example\"],\"aud\":\"seckill\""), JWT_BAD_ISSUER);
    EXPECT(ks, T(",\"iss\":\"https://login.example\""), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":\"shop\""), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":\"seckill2\""), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":[\"shop\",\"admin\"]"), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":[]"), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":[[\"seckill\"]]"), JWT_BAD_AUDIENCE);
    EXPECT(ks, T(",\"iss\":\"https://login.example\",\"aud\":{\"seckill\":1}"), JWT_BAD_AUDIENCE);
    /* Not configured: not checked. */
    EXPECT(open, T(",\"iss\":\"https://evil.example\",\"aud\":42"), JWT_OK);
#undef T
    jwt_keyset_free(ks);
    jwt_keyset_free(open);
}

/* A copy of t with the character at i replaced by one that keeps it base64url. */
static char *flip(const char *t, size_t i)
{
    char *c = keep(strdup(t));
    c[i] = c[i] == 'A' ? 'B' : 'A';
    return c;
}

static void test_bad_signature(void **state)
{
    (void)state;
    struct jwt_keyset *ks = ks_of(&three);
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld}", (long long)NOW + 60);
    char *toks[] = {
        hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\"}", pl),
        tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"rs\"}", pl),
        tok_with('E', ec, 0, "{\"alg\":\"ES256\",\"kid\":\"es\"}", pl),
    };
    for (size_t i = 0; i < ARRAY_SIZE(toks); i++) {
        const char *t = toks[i], *sig = strrchr(t, '.') + 1, *p = strchr(t, '.') + 1;
        EXPECT(ks, t, JWT_OK);
        EXPECT(ks, flip(t, (size_t)(sig - t)), JWT_BAD_SIGNATURE);          /* first signature byte */
        EXPECT(ks, flip(t, (size_t)(sig - t) + 10), JWT_BAD_SIGNATURE);
        EXPECT(ks, flip(t, (size_t)(p - t) + 1), JWT_BAD_SIGNATURE);        /* the payload */
        /* A signature cut short by a byte. */
        unsigned char raw[512];
        size_t rl = b64u_dec(sig, strlen(sig), raw);
        EXPECT(ks, payload("%.*s%s", (int)(sig - t), t, keep(b64u(raw, rl - 1))), JWT_BAD_SIGNATURE);
        EXPECT(ks, payload("%.*s%s", (int)(sig - t), t, keep(b64u(raw, rl))), JWT_OK);
        /* No signature at all. */
        EXPECT(ks, keep(strndup(t, (size_t)(sig - t))), JWT_BAD_SIGNATURE);
    }
    /* Another secret, and the right token but signed by another EC key. */
    EXPECT(ks, tok_with('H', "ffffffffffffffffffffffffffffffffffffffff", 40, "{\"alg\":\"HS256\",\"kid\":\"hs\"}", pl),
           JWT_BAD_SIGNATURE);
    EVP_PKEY *other = EVP_EC_gen("P-256");
    assert_non_null(other);
    EXPECT(ks, tok_with('E', other, 0, "{\"alg\":\"ES256\",\"kid\":\"es\"}", pl), JWT_BAD_SIGNATURE);
    EVP_PKEY_free(other);
    /* ES256 is exactly r||s: DER, or r and s of zero, are refused. */
    EXPECT(ks, tok_with('D', ec, 0, "{\"alg\":\"ES256\",\"kid\":\"es\"}", pl), JWT_BAD_SIGNATURE);
    char *zero = keep(calloc(1, 90)), *z64 = b64u(zero, 64);
    keep(z64);
    const char *es = toks[2];
    EXPECT(ks, payload("%.*s.%s", (int)(strrchr(es, '.') - es), es, z64), JWT_BAD_SIGNATURE);
    jwt_keyset_free(ks);
}

static void test_alg_none_and_refused(void **state)
{
    (void)state;
    struct jwt_keyset *ks = ks_of(&three), *hsonly = ks_of(&(struct conf){ .keys = { "hs:HS256:hs.secret" } });
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld}", (long long)NOW + 60);
    static const char *const nones[] = {
        "{\"alg\":\"none\"}", "{\"alg\":\"none\",\"kid\":\"hs\"}", "{\"alg\":\"None\",\"kid\":\"hs\"}",
        "{\"alg\":\"NONE\"}", "{\"alg\":\"\"}", "{\"alg\":\"HS512\",\"kid\":\"hs\"}",
        "{\"alg\":\"hs256\",\"kid\":\"hs\"}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(nones); i++) {
        EXPECT(ks, tok_with('N', NULL, 0, nones[i], pl), JWT_ALG_REFUSED);
        EXPECT(hsonly, tok_with('N', NULL, 0, nones[i], pl), JWT_ALG_REFUSED);
        /* With a signature, even one made with the right secret. */
        EXPECT(ks, hs_tok(nones[i], pl), JWT_ALG_REFUSED);
    }
    /* A valid ES256 token, but the keyset's algorithms (those of its only
     * key) do not include ES256: refused before its kid is even looked up. */
    EXPECT(hsonly, tok_with('E', ec, 0, "{\"alg\":\"ES256\",\"kid\":\"es\"}", pl), JWT_ALG_REFUSED);
    /* Same with jwt.algorithms narrower than what exists. */
    struct jwt_keyset *narrow = ks_of(&(struct conf){ .keys = { "hs:HS256:hs.secret" }, .algs = { "HS256" } });
    EXPECT(narrow, tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"hs\"}", pl), JWT_ALG_REFUSED);
    EXPECT(narrow, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\"}", pl), JWT_OK);
    jwt_keyset_free(narrow);
    /* alg missing or not a string. */
    EXPECT(ks, hs_tok("{\"kid\":\"hs\"}", pl), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":256,\"kid\":\"hs\"}", pl), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":[\"HS256\"],\"kid\":\"hs\"}", pl), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\\u0000\",\"kid\":\"hs\"}", pl), JWT_MALFORMED); /* jansson refuses NUL */
    jwt_keyset_free(ks);
    jwt_keyset_free(hsonly);
}

static void test_algorithm_confusion(void **state)
{
    (void)state;
    /* The RSA key is public: its PEM bytes are known to everyone. */
    char p[128], *pem = NULL;
    size_t pemlen = 0;
    path_of(p, sizeof(p), "rsa.pub.pem");
    assert_int_equal(util_read_file(p, &pem, &pemlen), 0);
    keep(pem);
    struct jwt_keyset *ks = ks_of(&(struct conf){
        .keys = { "hs:HS256:hs.secret", "rs:RS256:rsa.pub.pem", "es:ES256:ec.pub.pem" },
        .algs = { "HS256", "RS256", "ES256" },
    });
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld}", (long long)NOW + 60);
    EXPECT(ks, tok_with('H', pem, pemlen, "{\"alg\":\"HS256\",\"kid\":\"rs\"}", pl), JWT_ALG_REFUSED);
    EXPECT(ks, tok_with('H', pem, pemlen - 1, "{\"alg\":\"HS256\",\"kid\":\"rs\"}", pl), JWT_ALG_REFUSED);
    EXPECT(ks, tok_with('H', pem, pemlen, "{\"alg\":\"HS256\",\"kid\":\"es\"}", pl), JWT_ALG_REFUSED);
    /* The other way round: an RS256 or ES256 header on the HMAC key. */
    EXPECT(ks, tok_with('R', rsa, 0, "{\"alg\":\"RS256\",\"kid\":\"hs\"}", pl), JWT_ALG_REFUSED);
    EXPECT(ks, tok_with('E', ec, 0, "{\"alg\":\"ES256\",\"kid\":\"rs\"}", pl), JWT_ALG_REFUSED);
    jwt_keyset_free(ks);
    /* One RSA key, no kid: the single key still decides the algorithm. */
    ks = ks_of(&(struct conf){ .keys = { "rs:RS256:rsa.pub.pem" }, .algs = { "HS256", "RS256" } });
    EXPECT(ks, tok_with('H', pem, pemlen, "{\"alg\":\"HS256\"}", pl), JWT_ALG_REFUSED);
    EXPECT(ks, tok_with('R', rsa, 0, "{\"alg\":\"RS256\"}", pl), JWT_OK);
    jwt_keyset_free(ks);
    /* And a PEM file is never taken as an HS256 secret. */
    char err[512];
    struct jwt_keyset *bad = NULL;
    assert_int_equal(ks_try(&(struct conf){ .keys = { "rs:HS256:rsa.pub.pem" } }, &bad, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rsa.pub.pem"));
    assert_non_null(strstr(err, "PEM"));
}

static void test_kid(void **state)
{
    (void)state;
    struct jwt_keyset *ks = ks_of(&three);
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld}", (long long)NOW + 60);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"nope\"}", pl), JWT_UNKNOWN_KID);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"\"}", pl), JWT_UNKNOWN_KID);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"HS\"}", pl), JWT_UNKNOWN_KID);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\\u0000x\"}", pl), JWT_MALFORMED); /* jansson refuses NUL */
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hsx\"}", pl), JWT_UNKNOWN_KID);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":1}", pl), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":null}", pl), JWT_MALFORMED);
    /* Three keys and no kid: which one would it be? */
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\"}", pl), JWT_UNKNOWN_KID);
    jwt_keyset_free(ks);
    ks = ks_of(&(struct conf){ .keys = { "hs:HS256:hs.secret", "hs2:HS256:other.secret" } });
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\"}", pl), JWT_UNKNOWN_KID);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\"}", pl), JWT_OK);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs2\"}", pl), JWT_BAD_SIGNATURE);
    jwt_keyset_free(ks);
}

static void test_size_and_garbage(void **state)
{
    (void)state;
    const char *h = "{\"alg\":\"HS256\",\"kid\":\"hs\"}";
    const char *pl = payload("{\"sub\":\"42\",\"exp\":%lld}", (long long)NOW + 60);
    char *good = hs_tok(h, pl);
    size_t n = strlen(good);
    struct conf o = three;
    o.max = (int)n;
    struct jwt_keyset *ks = ks_of(&o);
    EXPECT(ks, good, JWT_OK);
    jwt_keyset_free(ks);
    o.max = (int)n - 1;
    ks = ks_of(&o);
    EXPECT(ks, good, JWT_TOO_LARGE);
    /* Size comes first, before the token is even split. */
    char *huge = keep(malloc(20000));
    memset(huge, '.', 19999);
    huge[19999] = '\0';
    EXPECT(ks, huge, JWT_TOO_LARGE);
    assert_int_equal(jwt_keyset_max_token(ks), n - 1);
    jwt_keyset_free(ks);

    ks = ks_of(&three);
    const char *hb = strchr(good, '.'); /* the header segment ends here */
    const char *sb = strrchr(good, '.');
    static const char *const bad[] = { "", "abc", "a.b", "a.b.c.d", "..", "...", "a..c", ".b.c", "a.b.c." };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        EXPECT(ks, bad[i], JWT_MALFORMED);
    EXPECT(ks, payload("%s.", good), JWT_MALFORMED);                                  /* four segments */
    EXPECT(ks, payload("%s.%s", good, strrchr(good, '.') + 1), JWT_MALFORMED);
    char *c = keep(strdup(good));
    c[2] = '+';
    EXPECT(ks, c, JWT_MALFORMED);
    c = keep(strdup(good));
    c[(size_t)(sb - good) + 3] = '/';
    EXPECT(ks, c, JWT_MALFORMED);
    c = keep(strdup(good));
    c[(size_t)(hb - good) + 2] = ' ';
    EXPECT(ks, c, JWT_MALFORMED);
    c = keep(strdup(good));
    c[(size_t)(hb - good) + 2] = '\x80';
    EXPECT(ks, c, JWT_MALFORMED);
    /* '=' padding, on each segment. */
    EXPECT(ks, payload("%.*s=%s", (int)(hb - good), good, hb), JWT_MALFORMED);
    EXPECT(ks, payload("%.*s=%s", (int)(sb - good), good, sb), JWT_MALFORMED);
    EXPECT(ks, payload("%s=", good), JWT_MALFORMED);
    /* 1 left over character is never valid; neither are unused bits set
     * (a second spelling of the same bytes). */
    assert_true((hb - good) % 4 == 3);
    EXPECT(ks, payload("%.*sAA%s", (int)(hb - good), good, hb), JWT_MALFORMED);
    char *hseg = b64u(h, strlen(h)), *pseg = b64u(pl, strlen(pl));
    keep(hseg);
    keep(pseg);
    size_t hl = strlen(hseg);
    assert_true(hl % 4 != 0); /* 26 bytes: 35 characters, 2 unused bits */
    char *spelt = keep(strdup(good));
    spelt[hl - 1] = (char)(spelt[hl - 1] + 1);
    EXPECT(ks, spelt, JWT_MALFORMED);

    /* Decoded, but not a JSON object. */
    const char *p64 = strchr(good, '.') + 1;
    const char *dupj = "{\"alg\":\"HS256\",\"alg\":\"none\"}", *arrj = "[\"HS256\"]";
    char *nj = b64u("nope", 4), *arr = b64u(arrj, strlen(arrj)), *dup = b64u(dupj, strlen(dupj));
    keep(nj);
    keep(arr);
    keep(dup);
    EXPECT(ks, payload("%s.%s", nj, p64), JWT_MALFORMED);
    EXPECT(ks, payload("%s.%s", arr, p64), JWT_MALFORMED);
    EXPECT(ks, payload("%s.%s", dup, p64), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\"} x", pl), JWT_MALFORMED);
    EXPECT(ks, hs_tok("{\"alg\":\"HS256\",\"kid\":\"hs\",\"crit\":[\"exp\"]}", pl), JWT_MALFORMED);
    /* Signed payloads that are not objects. */
    EXPECT(ks, hs_tok(h, "[1]"), JWT_MALFORMED);
    EXPECT(ks, hs_tok(h, "\"42\""), JWT_MALFORMED);
    EXPECT(ks, hs_tok(h, "not json"), JWT_MALFORMED);
    EXPECT(ks, hs_tok(h, payload("{\"sub\":\"42\",\"sub\":\"43\",\"exp\":%lld}", (long long)NOW + 60)), JWT_MALFORMED);
    EXPECT(ks, hs_tok(h, payload("{\"sub\":\"42\",\"exp\":%lld}garbage", (long long)NOW + 60)), JWT_MALFORMED);
    /* A NULL token is a missing one. */
    int64_t u, e;
    assert_int_equal(jwt_verify(ks, NULL, 0, NOW, &u, &e), JWT_MISSING);
    jwt_keyset_free(ks);
}

static void test_subject(void **state)
{
    (void)state;
    struct jwt_keyset *ks = ks_of(&three);
    const char *h = "{\"alg\":\"HS256\",\"kid\":\"hs\"}";
    long long e = NOW + 60;
    static const char *const bad[] = { "\"0\"",  "\"-5\"", "\"abc\"", "\"9223372036854775808\"", "42",
                                       "\"\"",   "\" 5\"", "\"5 \"",  "\"+5\"", "\"5x\"", "null", "[\"5\"]",
                                       "4.2e1", "\"1e3\"",
                                       /* not the canonical decimal: the same buyer
                                        * would have many names */
                                       "\"04242\"", "\"00\"", "\"-0\"" };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        EXPECT(ks, hs_tok(h, payload("{\"sub\":%s,\"exp\":%lld}", bad[i], e)), JWT_BAD_SUBJECT);
    EXPECT(ks, hs_tok(h, payload("{\"exp\":%lld}", e)), JWT_BAD_SUBJECT);
    int64_t user;
    assert_int_equal(verify_at(ks, hs_tok(h, payload("{\"sub\":\"9223372036854775807\",\"exp\":%lld}", e)), NOW, &user),
                     JWT_OK);
    assert_true(user == INT64_MAX);
    assert_int_equal(verify_at(ks, hs_tok(h, payload("{\"sub\":\"1\",\"exp\":%lld}", e)), NOW, &user), JWT_OK);
    assert_true(user == 1);
    jwt_keyset_free(ks);
}

static void expect_load_error(const struct conf *o, const char *want1, const char *want2)
{
    struct jwt_keyset *ks = NULL;
    char err[512];
    if (ks_try(o, &ks, err, sizeof(err)) != -1)
        fail_msg("loaded, want an error with '%s'", want1);
    assert_null(ks);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("error '%s' lacks '%s' / '%s'", err, want1, want2 ? want2 : "");
    /* Key material never appears. */
    assert_null(strstr(err, "short-secret"));
    assert_null(strstr(err, "-----BEGIN"));
    assert_null(strstr(err, "0123456789abcdef"));
}

static void test_keyset_errors(void **state)
{
    (void)state;
#define K(...) (&(struct conf){ .keys = { __VA_ARGS__ } })
    expect_load_error(K("a:HS256:missing.secret"), "'a:HS256:missing.secret'", "missing.secret: cannot read");
    expect_load_error(K("a:HS256:short.secret"), "short.secret", "at least 32 bytes");
    expect_load_error(K("a:HS256:31nl.secret"), "31nl.secret", "at least 32 bytes");
    expect_load_error(K("a:RS256:ec.pem"), "'a:RS256:ec.pem'", "not an RSA key");
    expect_load_error(K("a:RS256:rsa1024.pem"), "rsa1024.pem", "1024 bits");
    expect_load_error(K("a:RS256:garbage.pem"), "garbage.pem", "no PEM public or private key");
    expect_load_error(K("a:RS256:hs.secret"), "hs.secret", "no PEM public or private key");
    expect_load_error(K("a:ES256:ec384.pem"), "ec384.pem", "P-256");
    expect_load_error(K("a:ES256:rsa.pub.pem"), "rsa.pub.pem", "P-256");
    expect_load_error(K("a:HS256:ec.pem"), "ec.pem", "PEM key, not an HS256 secret");
    expect_load_error(K("a:HS256:hs.secret", "b:ES256:ec.pem", "a:RS256:rsa.pem"), "'a:RS256:rsa.pem'",
                      "key id 'a' is already used");
    expect_load_error(K("a:HS512:hs.secret"), "'a:HS512:hs.secret'", "unknown algorithm 'HS512'");
    expect_load_error(K("a:none:hs.secret"), "unknown algorithm 'none'", NULL);
    expect_load_error(K("a:HS256"), "'a:HS256'", "KID:ALG:FILE");
    expect_load_error(K(":HS256:hs.secret"), "KID:ALG:FILE", NULL);
    expect_load_error(K("a:HS256:"), "KID:ALG:FILE", NULL);
    expect_load_error(K("a\tb:HS256:hs.secret"), "control character", NULL);
    expect_load_error(K(NULL), "jwt.keys is empty", NULL);
    expect_load_error(&(struct conf){ .keys = { "a:HS256:hs.secret", "b:ES256:ec.pem" }, .algs = { "HS256" } },
                      "'b:ES256:ec.pem'", "ES256 is not in jwt.algorithms");
    expect_load_error(&(struct conf){ .keys = { "a:HS256:hs.secret" }, .algs = { "HS256", "none" } },
                      "jwt.algorithms: unknown algorithm 'none'", "never accepted");
    expect_load_error(&(struct conf){ .keys = { "a:HS256:hs.secret" }, .algs = { "PS256" } },
                      "unknown algorithm 'PS256'", NULL);
    /* Secrets of exactly 32 bytes before the newline load. */
    struct jwt_keyset *ks = ks_of(K("a:HS256:32nl.secret"));
    jwt_keyset_free(ks);
#undef K
}

static void test_public_key_cannot_sign(void **state)
{
    (void)state;
    struct jwt_keyset *ks =
        ks_of(&(struct conf){ .keys = { "rpub:RS256:rsa.pub.pem", "epub:ES256:ec.pub.pem" }, .signing = "rpub" });
    char err[256], *t = NULL;
    assert_int_equal(jwt_sign(ks, "rpub", 1, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    assert_string_equal(err, "key rpub holds only a public key: cannot sign");
    assert_int_equal(jwt_sign(ks, NULL, 1, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    assert_string_equal(err, "key rpub holds only a public key: cannot sign");
    assert_int_equal(jwt_sign(ks, "epub", 1, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "epub holds only a public key"));
    assert_int_equal(jwt_sign(ks, "", 1, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no key in jwt.keys can sign"));
    assert_int_equal(jwt_sign(ks, "zz", 1, NOW, NOW + 60, &t, err, sizeof(err)), -1);
    assert_string_equal(err, "no key 'zz' in jwt.keys");
    assert_null(t);
    jwt_keyset_free(ks);
    /* The first key that can sign is taken when none is named. */
    ks = ks_of(&(struct conf){ .keys = { "rpub:RS256:rsa.pub.pem", "e:ES256:ec.pem" } });
    assert_int_equal(jwt_sign(ks, NULL, 9, NOW, NOW + 60, &t, err, sizeof(err)), 0);
    keep(t);
    EXPECT(ks, t, JWT_OK);
    jwt_keyset_free(ks);
}

/* The producer's use: public keys and HS256 secrets; every form of private
 * key OpenSSL reads (PKCS#8, traditional, with EC parameters before it) is
 * refused with the entry, its key id and the file named. Signing (seckillctl)
 * takes them all. */
static void test_verify_takes_public_keys_only(void **state)
{
    (void)state;
    static const char *const priv[] = { "r:RS256:rsa.pem", "r:RS256:rsa-trad.pem", "e:ES256:ec.pem",
                                        "e:ES256:ec-ecparam.pem" };
    for (size_t i = 0; i < ARRAY_SIZE(priv); i++) {
        struct cfg c;
        struct jwt_keyset *ks = NULL;
        char err[768];
        conf_cfg(&(struct conf){ .keys = { "h:HS256:hs.secret", priv[i] } }, &c);
        assert_int_equal(jwt_keyset_load(&c, JWT_USE_VERIFY, &ks, err, sizeof(err)), -1);
        assert_null(ks);
        char kid[32], file[160];
        snprintf(kid, sizeof(kid), "key id '%c'", priv[i][0]);
        snprintf(file, sizeof(file), "%s/%s", dir, priv[i] + 8);
        if (!strstr(err, priv[i]) || !strstr(err, kid) || !strstr(err, file) ||
            !strstr(err, "a private key, and the producer takes public keys only") || strstr(err, "-----BEGIN"))
            fail_msg("%s: error '%s'", priv[i], err);
        assert_int_equal(jwt_keyset_load(&c, JWT_USE_SIGN, &ks, err, sizeof(err)), 0);
        jwt_keyset_free(ks);
        cfg_free(&c);
    }
    /* The public halves verify what the private ones signed. */
    struct jwt_keyset *signer = ks_of(&(struct conf){ .keys = { "r:RS256:rsa.pem", "e:ES256:ec.pem" } });
    struct cfg c;
    struct jwt_keyset *ks = NULL;
    char err[512], *t = NULL;
    conf_cfg(&(struct conf){ .keys = { "h:HS256:hs.secret", "r:RS256:rsa.pub.pem", "e:ES256:ec.pub.pem" } }, &c);
    assert_int_equal(jwt_keyset_load(&c, JWT_USE_VERIFY, &ks, err, sizeof(err)), 0);
    for (const char *kid = "r"; kid; kid = strcmp(kid, "r") == 0 ? "e" : NULL) {
        assert_int_equal(jwt_sign(signer, kid, 5, NOW, NOW + 60, &t, err, sizeof(err)), 0);
        keep(t);
        EXPECT(ks, t, JWT_OK);
    }
    jwt_keyset_free(ks);
    jwt_keyset_free(signer);
    cfg_free(&c);
}

/* The mappings of this process that hold needle (n bytes): whether one
 * left out of core dumps (VmFlags "dd") does, and whether the heap does.
 * Under ASan the heap is ASan's own mappings, not [heap]: only the first
 * answer means something there. */
static void scan_mappings(const void *needle, size_t n, bool *in_dd, bool *in_heap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512], name[256] = "";
    unsigned long lo = 0, hi = 0;
    bool rw = false;
    assert_non_null(f);
    *in_dd = *in_heap = false;
    while (fgets(line, sizeof(line), f)) {
        char perms[8];
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255[^\n]", &a, &b, perms, name) >= 3 && strchr(line, '-') &&
            line[0] != 'V') {
            lo = a, hi = b, rw = perms[0] == 'r' && perms[1] == 'w';
            if (!strchr(line, '/') && !strchr(line, '['))
                name[0] = '\0';
            continue;
        }
        if (strncmp(line, "VmFlags:", 8) != 0 || !rw)
            continue;
        /* Small anonymous mappings only: [vvar] is "dd" too, and not all of
         * it reads; so are ASan's shadow regions, huge and partly a gap. A
         * secret's page (common/base/secret.c) is a page or two. */
        bool dd = strstr(line, " dd") != NULL && name[0] == '\0' && hi - lo <= (1ul << 20),
             heap = strcmp(name, "[heap]") == 0;
        if ((dd || heap) && memmem((const void *)lo, hi - lo, needle, n)) {
            *in_dd |= dd;
            *in_heap |= heap;
        }
    }
    fclose(f);
}

/* An HS256 secret is a password file (common/base/secret.h): 0600 or 0400, any
 * bytes, and held in a page core dumps leave out, never in the heap. */
static void test_hs256_secret_is_a_password_file(void **state)
{
    (void)state;
    char p[128], hex[65], err[512];
    struct jwt_keyset *ks = NULL;
    /* A secret of this run only, written without stdio (whose buffer is
     * heap) so that the heap holds it only if jwt.c puts it there. */
    assert_int_equal(util_random_hex(hex, 32), 0);
    path_of(p, sizeof(p), "dump.secret");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, hex, 64), 64);
    close(fd);
    assert_int_equal(chmod(p, 0644), 0);
    expect_load_error(&(struct conf){ .keys = { "d:HS256:dump.secret" } }, "key id 'd'",
                      "group or others may access it (mode 0644); it must be 0600 or 0400");
    assert_int_equal(chmod(p, 0400), 0);
    ks = ks_of(&(struct conf){ .keys = { "d:HS256:dump.secret" } });
    bool in_dd, in_heap;
    scan_mappings(hex, 64, &in_dd, &in_heap);
    assert_true(in_dd);
    assert_false(in_heap);
    jwt_keyset_free(ks);
    scan_mappings(hex, 64, &in_dd, &in_heap);
    assert_false(in_dd); /* wiped when freed */
    explicit_bzero(hex, sizeof(hex));

    /* Random bytes, a NUL among them, are a secret like any other. */
    unsigned char bin[40];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (unsigned char)(i * 37 + 1);
    bin[7] = 0;
    write_file("bin.secret", bin, sizeof(bin));
    struct jwt_keyset *k2 = ks_of(&(struct conf){ .keys = { "b:HS256:bin.secret" } });
    char *t = NULL;
    assert_int_equal(jwt_sign(k2, "b", 3, NOW, NOW + 60, &t, err, sizeof(err)), 0);
    keep(t);
    EXPECT(k2, t, JWT_OK);
    jwt_keyset_free(k2);
}

static void test_err_str(void **state)
{
    (void)state;
    static const struct {
        enum jwt_err e;
        const char *s;
    } want[] = {
        { JWT_MISSING, "missing token" },         { JWT_MALFORMED, "malformed token" },
        { JWT_TOO_LARGE, "token too large" },     { JWT_ALG_REFUSED, "algorithm not allowed" },
        { JWT_UNKNOWN_KID, "unknown key id" },    { JWT_BAD_SIGNATURE, "bad signature" },
        { JWT_NO_EXP, "no exp claim" },           { JWT_EXPIRED, "token expired" },
        { JWT_NOT_YET_VALID, "token not yet valid" }, { JWT_BAD_ISSUER, "wrong issuer" },
        { JWT_BAD_AUDIENCE, "wrong audience" },   { JWT_BAD_SUBJECT, "subject is not a buyer id" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(want); i++)
        assert_string_equal(jwt_err_str(want[i].e), want[i].s);
}

static void test_cache(void **state)
{
    (void)state;
    assert_null(jwt_cache_new(0));
    int64_t u = 0;
    assert_int_equal(jwt_cache_get(NULL, "t", 1, NOW, 1, &u), 0);
    jwt_cache_put(NULL, "t", 1, 1, 5, NOW);

    struct jwt_cache *jc = jwt_cache_new(1000);
    assert_non_null(jc);
    assert_int_equal(jwt_cache_capacity(jc), 1024);
    const char *t = "header.payload.signature";
    size_t n = strlen(t);
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 1, &u), 0);
    jwt_cache_put(jc, t, n, 1, 77, NOW + 10);
    u = 0;
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 1, &u), 1);
    assert_true(u == 77);
    assert_int_equal(jwt_cache_get(jc, t, n, NOW + 10, 1, &u), 1); /* valid_until is inclusive */
    /* Another token, a prefix of it, another generation. */
    assert_int_equal(jwt_cache_get(jc, t, n - 1, NOW, 1, &u), 0);
    assert_int_equal(jwt_cache_get(jc, "header.payload.signaturX", n, NOW, 1, &u), 0);
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 2, &u), 0);
    /* The generation miss dropped it: back under gen 1 it is gone too. */
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 1, &u), 0);
    jwt_cache_put(jc, t, n, 2, 78, NOW + 10);
    assert_int_equal(jwt_cache_get(jc, t, n, NOW + 11, 2, &u), 0); /* past valid_until */
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 2, &u), 0);     /* and forgotten */
    /* Putting the same token again replaces its entry. */
    jwt_cache_put(jc, t, n, 3, 1, NOW + 10);
    jwt_cache_put(jc, t, n, 3, 2, NOW + 10);
    assert_int_equal(jwt_cache_get(jc, t, n, NOW, 3, &u), 1);
    assert_true(u == 2);
    jwt_cache_free(jc);

    /* Far more tokens than entries: memory stays what jwt_cache_new took,
     * the newest are found, none is ever wrong. */
    jc = jwt_cache_new(64);
    assert_int_equal(jwt_cache_capacity(jc), 64);
    char tok[64];
    jwt_cache_put(jc, "warm-up", 7, 1, 1, NOW + 100); /* OpenSSL's lazy initialisation */
#if defined(__SANITIZE_ADDRESS__)
    size_t before = __sanitizer_get_current_allocated_bytes();
#endif
    const int total = 100000;
    int recent_hits = 0;
    for (int i = 1; i <= total; i++) {
        int len = snprintf(tok, sizeof(tok), "token-%d", i);
        jwt_cache_put(jc, tok, (size_t)len, 1, i, NOW + 100);
        assert_int_equal(jwt_cache_get(jc, tok, (size_t)len, NOW, 1, &u), 1); /* the newest always */
        assert_true(u == i);
    }
    for (int i = total - 15; i <= total; i++) {
        int len = snprintf(tok, sizeof(tok), "token-%d", i);
        u = 0;
        if (jwt_cache_get(jc, tok, (size_t)len, NOW, 1, &u)) {
            assert_true(u == i);
            recent_hits++;
        }
    }
    int old_hits = 0;
    for (int i = 1; i <= 1000; i++) {
        int len = snprintf(tok, sizeof(tok), "token-%d", i);
        old_hits += jwt_cache_get(jc, tok, (size_t)len, NOW, 1, &u);
    }
#if defined(__SANITIZE_ADDRESS__)
    assert_int_equal(__sanitizer_get_current_allocated_bytes(), before);
#endif
    assert_int_equal(jwt_cache_capacity(jc), 64);
    /* 16 sets of 4 ways: the last 16 tokens mostly survive, the first
     * thousand are long gone. */
    if (recent_hits < 12)
        fail_msg("only %d of the 16 newest tokens still cached", recent_hits);
    assert_int_equal(old_hits, 0);
    jwt_cache_free(jc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_valid_each_algorithm, gc_free),
        cmocka_unit_test_teardown(test_sign_roundtrip, gc_free),
        cmocka_unit_test_teardown(test_exp_nbf_leeway, gc_free),
        cmocka_unit_test_teardown(test_issuer_audience, gc_free),
        cmocka_unit_test_teardown(test_bad_signature, gc_free),
        cmocka_unit_test_teardown(test_alg_none_and_refused, gc_free),
        cmocka_unit_test_teardown(test_algorithm_confusion, gc_free),
        cmocka_unit_test_teardown(test_kid, gc_free),
        cmocka_unit_test_teardown(test_size_and_garbage, gc_free),
        cmocka_unit_test_teardown(test_subject, gc_free),
        cmocka_unit_test_teardown(test_keyset_errors, gc_free),
        cmocka_unit_test_teardown(test_public_key_cannot_sign, gc_free),
        cmocka_unit_test_teardown(test_verify_takes_public_keys_only, gc_free),
        cmocka_unit_test_teardown(test_hs256_secret_is_a_password_file, gc_free),
        cmocka_unit_test(test_err_str),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests_name("jwt", tests, group_setup, group_teardown);
}
