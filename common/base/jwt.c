#include "jwt.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pthread.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "secret.h"
#include "util.h"

enum jwt_alg { ALG_HS256, ALG_RS256, ALG_ES256, ALG_COUNT };

static const char *const alg_names[ALG_COUNT] = { "HS256", "RS256", "ES256" };

#define HS256_MIN_SECRET 32
#define RSA_MIN_BITS 2048
#define ES256_SIG_LEN 64
#define SHA256_LEN 32

struct jwt_key {
    char *kid;
    enum jwt_alg alg;
    /* HS256: in a page of its own, out of core dumps (common/base/secret.h).
     * Never replaced while the keyset lives, so threads read it unlocked. */
    struct secret *secret;
    EVP_PKEY *pkey;        /* RS256, ES256 */
    bool can_sign;
};

struct jwt_keyset {
    struct jwt_key *keys;
    size_t n;
    unsigned allowed;  /* bit per enum jwt_alg */
    char *issuer;      /* NULL: not checked */
    char *audience;    /* NULL: not checked */
    int64_t leeway;
    size_t max_token;
    char *signing_key;
};

const char *jwt_err_str(enum jwt_err e)
{
    switch (e) {
    case JWT_OK: return "ok";
    case JWT_MISSING: return "missing token";
    case JWT_MALFORMED: return "malformed token";
    case JWT_TOO_LARGE: return "token too large";
    case JWT_ALG_REFUSED: return "algorithm not allowed";
    case JWT_UNKNOWN_KID: return "unknown key id";
    case JWT_BAD_SIGNATURE: return "bad signature";
    case JWT_NO_EXP: return "no exp claim";
    case JWT_EXPIRED: return "token expired";
    case JWT_NOT_YET_VALID: return "token not yet valid";
    case JWT_BAD_ISSUER: return "wrong issuer";
    case JWT_BAD_AUDIENCE: return "wrong audience";
    case JWT_BAD_SUBJECT: return "subject is not a buyer id";
    }
    return "invalid token";
}

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int alg_parse(const char *s, size_t n)
{
    for (int i = 0; i < ALG_COUNT; i++)
        if (strlen(alg_names[i]) == n && memcmp(alg_names[i], s, n) == 0)
            return i;
    return -1;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* --- base64url (RFC 4648 section 5, no padding) ---------------------------- */

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

static size_t b64_decoded_len(size_t n)
{
    return n / 4 * 3 + (n % 4 == 3 ? 2 : n % 4 == 2 ? 1 : 0);
}

/* Strict: only the url alphabet, no '=', no impossible length, and the
 * unused low bits of the last character zero. Each byte string then has
 * exactly one encoding, so a valid token cannot be re-spelt into another
 * valid token (nor into another cache entry). Returns the decoded length or
 * -1. */
static long b64url_decode(const char *s, size_t n, unsigned char *out)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    if (n % 4 == 1)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0)
        return -1;
    return (long)o;
}

/* out has room for 4 * ceil(n / 3) + 1 bytes. Returns the length written. */
static size_t b64url_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_chars[v >> 18];
        out[o++] = b64_chars[(v >> 12) & 63];
        out[o++] = b64_chars[(v >> 6) & 63];
        out[o++] = b64_chars[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64_chars[v >> 18];
        out[o++] = b64_chars[(v >> 12) & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64_chars[v >> 18];
        out[o++] = b64_chars[(v >> 12) & 63];
        out[o++] = b64_chars[(v >> 6) & 63];
    }
    out[o] = '\0';
    return o;
}

/* --- algorithms ---------------------------------------------------------------- */

/* OpenSSL 3 looks an algorithm up in its provider store on every one-shot
 * call (HMAC(), EVP_sha256() in EVP_Digest): that lookup, not the hashing,
 * was most of a token's cost on the HTTP thread. Fetch each once. */
static pthread_once_t algs_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md;
static EVP_MAC *hmac_mac;

static void algs_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA2-256", NULL);
    hmac_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

static const EVP_MD *sha256(void)
{
    pthread_once(&algs_once, algs_fetch);
    return sha256_md;
}

/* An HMAC-SHA256 context keyed with the secret, or NULL. */
static EVP_MAC_CTX *hmac_keyed(const unsigned char *secret, size_t len)
{
    char digest[] = "SHA2-256";
    OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                            OSSL_PARAM_construct_end() };
    EVP_MAC_CTX *ctx;
    pthread_once(&algs_once, algs_fetch);
    if (!hmac_mac || !(ctx = EVP_MAC_CTX_new(hmac_mac)))
        return NULL;
    if (EVP_MAC_init(ctx, secret, len, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* HMAC-SHA256 of in with k's secret. The context is this call's own and is
 * freed (OpenSSL wipes its copy of the key) before returning: a context kept
 * keyed between calls would hold the key, and the pads derived from it, in
 * the heap a core dump shows (what keying per call costs: docs/security.md,
 * Token keys). 0 or -1. */
static int hs256_mac(const struct jwt_key *k, const char *in, size_t inlen, unsigned char mac[SHA256_LEN])
{
    EVP_MAC_CTX *ctx = hmac_keyed((const unsigned char *)secret_str(k->secret), secret_len(k->secret));
    size_t n = 0;
    int ok = ctx && EVP_MAC_update(ctx, (const unsigned char *)in, inlen) == 1 &&
             EVP_MAC_final(ctx, mac, &n, SHA256_LEN) == 1 && n == SHA256_LEN;
    EVP_MAC_CTX_free(ctx);
    if (!ok)
        ERR_clear_error();
    return ok ? 0 : -1;
}

/* --- keys -------------------------------------------------------------------- */

static void key_clear(struct jwt_key *k)
{
    free(k->kid);
    secret_free(k->secret);
    EVP_PKEY_free(k->pkey);
    memset(k, 0, sizeof(*k));
}

void jwt_keyset_free(struct jwt_keyset *ks)
{
    if (!ks)
        return;
    for (size_t i = 0; i < ks->n; i++)
        key_clear(&ks->keys[i]);
    free(ks->keys);
    free(ks->issuer);
    free(ks->audience);
    free(ks->signing_key);
    free(ks);
}

size_t jwt_keyset_size(const struct jwt_keyset *ks) { return ks->n; }
int64_t jwt_keyset_leeway(const struct jwt_keyset *ks) { return ks->leeway; }
size_t jwt_keyset_max_token(const struct jwt_keyset *ks) { return ks->max_token; }

/* Never prompt on a terminal for the passphrase of an encrypted key: a
 * daemon has nobody to ask, and a tool must not hang. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

/* The PEM key in buf: a private key (can sign) or a SubjectPublicKeyInfo.
 * The OpenSSL error queue is left empty either way. */
static EVP_PKEY *pem_key(const char *buf, size_t n, bool *is_private)
{
    EVP_PKEY *pk = NULL;
    BIO *b;
    if (n > INT32_MAX)
        return NULL;
    if ((b = BIO_new_mem_buf(buf, (int)n)) != NULL) {
        pk = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
        BIO_free(b);
    }
    *is_private = pk != NULL;
    if (!pk && (b = BIO_new_mem_buf(buf, (int)n)) != NULL) {
        pk = PEM_read_bio_PUBKEY(b, NULL, no_passphrase, NULL);
        BIO_free(b);
    }
    ERR_clear_error();
    return pk;
}

static bool ec_is_p256(EVP_PKEY *pk)
{
    char name[64];
    size_t nlen = 0;
    if (EVP_PKEY_get_base_id(pk) != EVP_PKEY_EC ||
        EVP_PKEY_get_group_name(pk, name, sizeof(name), &nlen) != 1)
        return false;
    int nid = OBJ_sn2nid(name);
    if (nid == NID_undef)
        nid = EC_curve_nist2nid(name);
    return nid == NID_X9_62_prime256v1;
}

/* k's HS256 secret from the file at path, which is treated as a password
 * file is (common/base/secret.h): mode 0600 or 0400, read into a page of its own
 * that core dumps leave out. 0, or -1 with "PATH: reason" in why. */
static int hs256_load(struct jwt_key *k, const char *path, char *why, size_t whylen)
{
    EVP_MAC_CTX *probe;
    if (secret_read_key(path, &k->secret, why, whylen) != 0)
        return -1;
    const char *b = secret_str(k->secret);
    size_t n = secret_len(k->secret);
    if (n < HS256_MIN_SECRET) {
        seterr(why, whylen, "%s: an HS256 secret needs at least %d bytes, the file has %zu", path,
               HS256_MIN_SECRET, n);
        return -1;
    }
    /* A PEM key as an HMAC secret is what algorithm confusion abuses:
     * it is public, so anyone could sign with it. */
    if (memmem(b, n, "-----BEGIN", 10) != NULL) {
        seterr(why, whylen, "%s: holds a PEM key, not an HS256 secret", path);
        return -1;
    }
    if (!(probe = hmac_keyed((const unsigned char *)b, n))) {
        seterr(why, whylen, "%s: OpenSSL cannot make an HMAC-SHA256 with it", path);
        return -1;
    }
    EVP_MAC_CTX_free(probe);
    k->can_sign = true;
    return 0;
}

/* Fill k from a PEM file's content (RS256, ES256). A private key is taken
 * only for signing (seckillctl): a verifier that held one could mint tokens.
 * -1 with the reason in why. */
static int pem_material(struct jwt_key *k, char *buf, size_t n, enum jwt_use use, char *why, size_t whylen)
{
    bool priv = false;
    EVP_PKEY *pk = pem_key(buf, n, &priv);
    if (!pk) {
        if (strstr(buf, "ENCRYPTED") != NULL)
            seterr(why, whylen, "an encrypted private key (remove its passphrase, or give the public key)");
        else
            seterr(why, whylen, "no PEM public or private key in it");
        return -1;
    }
    if (k->alg == ALG_RS256) {
        if (EVP_PKEY_get_base_id(pk) != EVP_PKEY_RSA) {
            seterr(why, whylen, "not an RSA key, which RS256 needs");
            goto fail;
        }
        if (EVP_PKEY_get_bits(pk) < RSA_MIN_BITS) {
            seterr(why, whylen, "an RSA key of %d bits; RS256 needs at least %d", EVP_PKEY_get_bits(pk),
                   RSA_MIN_BITS);
            goto fail;
        }
    } else if (!ec_is_p256(pk)) {
        seterr(why, whylen, "not an EC key on P-256, which ES256 needs");
        goto fail;
    }
    /* OpenSSL's PEM reader told the two apart (pem_key): a private key. */
    if (priv && use == JWT_USE_VERIFY) {
        seterr(why, whylen, "a private key, and the producer takes public keys only (one that can sign lets "
               "whoever holds the producer mint tokens): give it the public key (openssl pkey -in FILE "
               "-pubout); signing stays with seckillctl");
        goto fail;
    }
    k->pkey = pk;
    k->can_sign = priv;
    return 0;
fail:
    EVP_PKEY_free(pk);
    return -1;
}

/* One "KID:ALG:FILE" entry into k. */
static int key_load(const struct cfg *c, enum jwt_use use, const char *entry, unsigned allowed_cfg,
                    struct jwt_key *k, char *err, size_t errlen)
{
    char *buf = NULL, *path = NULL, why[512];
    size_t n = 0;
    const char *c1 = strchr(entry, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    int alg;

    if (!c1 || !c2 || c1 == entry || c2[1] == '\0') {
        seterr(err, errlen, "jwt.keys entry '%s': must be KID:ALG:FILE", entry);
        return -1;
    }
    for (const char *p = entry; p < c1; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            seterr(err, errlen, "jwt.keys entry '%s': the key id has a control character", entry);
            return -1;
        }
    }
    if ((alg = alg_parse(c1 + 1, (size_t)(c2 - c1 - 1))) < 0) {
        seterr(err, errlen, "jwt.keys entry '%s': unknown algorithm '%.*s' (HS256, RS256 or ES256)", entry,
               (int)(c2 - c1 - 1), c1 + 1);
        return -1;
    }
    if (allowed_cfg && !(allowed_cfg & (1u << alg))) {
        seterr(err, errlen, "jwt.keys entry '%s': algorithm %s is not in jwt.algorithms", entry,
               alg_names[alg]);
        return -1;
    }
    const char *file = c2 + 1;
    if (file[0] == '/')
        path = strdup(file);
    else if (asprintf(&path, "%s/%s", c->jwt.key_dir ? c->jwt.key_dir : ".", file) < 0)
        path = NULL;
    if (!path || !(k->kid = strndup(entry, (size_t)(c1 - entry)))) {
        seterr(err, errlen, "jwt.keys entry '%s': out of memory", entry);
        goto fail;
    }
    k->alg = (enum jwt_alg)alg;
    if (k->alg == ALG_HS256) {
        if (hs256_load(k, path, why, sizeof(why)) != 0) {
            seterr(err, errlen, "jwt.keys entry '%s' (key id '%s'): %s", entry, k->kid, why);
            goto fail;
        }
    } else if (util_read_file(path, &buf, &n) != 0) {
        seterr(err, errlen, "jwt.keys entry '%s' (key id '%s'): %s: cannot read: %s", entry, k->kid, path,
               strerror(errno));
        goto fail;
    } else if (pem_material(k, buf, n, use, why, sizeof(why)) != 0) {
        seterr(err, errlen, "jwt.keys entry '%s' (key id '%s'): %s: %s", entry, k->kid, path, why);
        goto fail;
    }
    if (buf) {
        OPENSSL_cleanse(buf, n);
        free(buf);
    }
    free(path);
    return 0;
fail:
    if (buf) {
        OPENSSL_cleanse(buf, n);
        free(buf);
    }
    free(path);
    key_clear(k);
    return -1;
}

int jwt_keyset_load(const struct cfg *c, enum jwt_use use, struct jwt_keyset **out, char *err, size_t errlen)
{
    struct jwt_keyset *ks = calloc(1, sizeof(*ks));
    unsigned allowed_cfg = 0;
    if (!ks) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < c->jwt.algorithms.n; i++) {
        const char *a = c->jwt.algorithms.v[i];
        int alg = alg_parse(a, strlen(a));
        if (alg < 0) {
            seterr(err, errlen, "jwt.algorithms: unknown algorithm '%s' (HS256, RS256 or ES256%s)", a,
                   strcasecmp(a, "none") == 0 ? "; unsigned tokens are never accepted" : "");
            goto fail;
        }
        allowed_cfg |= 1u << alg;
    }
    if (c->jwt.keys.n == 0) {
        seterr(err, errlen, "jwt.keys is empty: tokens cannot be verified without a key");
        goto fail;
    }
    if (!(ks->keys = calloc(c->jwt.keys.n, sizeof(*ks->keys)))) {
        seterr(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < c->jwt.keys.n; i++) {
        struct jwt_key *k = &ks->keys[i];
        if (key_load(c, use, c->jwt.keys.v[i], allowed_cfg, k, err, errlen) != 0)
            goto fail;
        ks->n = i + 1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(ks->keys[j].kid, k->kid) == 0) {
                seterr(err, errlen, "jwt.keys entry '%s': key id '%s' is already used by '%s'",
                       c->jwt.keys.v[i], k->kid, c->jwt.keys.v[j]);
                goto fail;
            }
        }
        ks->allowed |= 1u << k->alg;
    }
    /* An empty jwt.algorithms means exactly the configured keys' ones. */
    if (allowed_cfg)
        ks->allowed = allowed_cfg;
    ks->leeway = c->jwt.leeway_s;
    ks->max_token = c->jwt.max_token_bytes > 0 ? (size_t)c->jwt.max_token_bytes : 0;
    if ((c->jwt.issuer && c->jwt.issuer[0] && !(ks->issuer = strdup(c->jwt.issuer))) ||
        (c->jwt.audience && c->jwt.audience[0] && !(ks->audience = strdup(c->jwt.audience))) ||
        !(ks->signing_key = strdup(c->jwt.signing_key ? c->jwt.signing_key : ""))) {
        seterr(err, errlen, "out of memory");
        goto fail;
    }
    *out = ks;
    return 0;
fail:
    jwt_keyset_free(ks);
    return -1;
}

static const struct jwt_key *key_find(const struct jwt_keyset *ks, const char *kid, size_t kidlen)
{
    for (size_t i = 0; i < ks->n; i++)
        if (strlen(ks->keys[i].kid) == kidlen && memcmp(ks->keys[i].kid, kid, kidlen) == 0)
            return &ks->keys[i];
    return NULL;
}

/* --- signatures ----------------------------------------------------------- */

static bool hs256_ok(const struct jwt_key *k, const char *in, size_t inlen, const unsigned char *sig,
                     size_t siglen)
{
    unsigned char mac[SHA256_LEN];
    if (siglen != SHA256_LEN || hs256_mac(k, in, inlen, mac) != 0)
        return false;
    /* Constant time: a byte-by-byte early exit would let a client find a
     * valid MAC one byte at a time. */
    return CRYPTO_memcmp(mac, sig, SHA256_LEN) == 0;
}

static bool pkey_verify(const struct jwt_key *k, const char *in, size_t inlen, const unsigned char *sig,
                        size_t siglen)
{
    unsigned char der[80];
    const unsigned char *vsig = sig;
    size_t vlen = siglen;
    bool ok = false;
    EVP_MD_CTX *mctx = NULL;
    EVP_PKEY_CTX *pctx = NULL;

    if (k->alg == ALG_ES256) {
        /* JWS carries r||s (RFC 7518 3.4); OpenSSL wants DER. */
        if (siglen != ES256_SIG_LEN)
            return false;
        ECDSA_SIG *es = ECDSA_SIG_new();
        BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
        int dlen = -1;
        if (es && r && s && ECDSA_SIG_set0(es, r, s) == 1) {
            r = s = NULL; /* es owns them */
            if (i2d_ECDSA_SIG(es, NULL) <= (int)sizeof(der)) {
                unsigned char *p = der;
                dlen = i2d_ECDSA_SIG(es, &p);
            }
        }
        BN_free(r);
        BN_free(s);
        ECDSA_SIG_free(es);
        if (dlen <= 0)
            goto out;
        vsig = der;
        vlen = (size_t)dlen;
    }
    if (!(mctx = EVP_MD_CTX_new()) || EVP_DigestVerifyInit(mctx, &pctx, sha256(), NULL, k->pkey) != 1)
        goto out;
    if (k->alg == ALG_RS256 && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1)
        goto out;
    ok = EVP_DigestVerify(mctx, vsig, vlen, (const unsigned char *)in, inlen) == 1;
out:
    EVP_MD_CTX_free(mctx);
    /* A refused signature leaves errors queued; they must not surface in
     * whatever OpenSSL user (libpq, librdkafka) runs next on this thread. */
    ERR_clear_error();
    return ok;
}

/* --- verification ----------------------------------------------------------- */

/* A NumericDate: a JSON integer or real, rounded towards the stricter side
 * (down for exp, up for nbf) and saturated to int64. */
static int numeric_date(const json_t *v, bool round_up, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_real(v))
        return -1;
    double r = json_real_value(v);
    if (r >= 9.2e18) {
        *out = INT64_MAX;
    } else if (r <= -9.2e18) {
        *out = INT64_MIN;
    } else {
        int64_t t = (int64_t)r; /* towards zero */
        if (round_up && (double)t < r)
            t++;
        else if (!round_up && (double)t > r)
            t--;
        *out = t;
    }
    return 0;
}

static bool json_str_eq(const json_t *v, const char *want)
{
    return json_is_string(v) && json_string_length(v) == strlen(want) &&
           memcmp(json_string_value(v), want, json_string_length(v)) == 0;
}

/* A JSON object, or NULL. */
static json_t *json_object_loadb(const unsigned char *buf, size_t n)
{
    /* Duplicates refused: {"alg":"HS256","alg":"none"} or two subs must not
     * mean whatever the parser happened to keep. */
    json_t *j = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, NULL);
    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *json_segment(const char *seg, size_t n, unsigned char *buf)
{
    long dn = b64url_decode(seg, n, buf);
    return dn < 0 ? NULL : json_object_loadb(buf, (size_t)dn);
}

static enum jwt_err check_claims(const struct jwt_keyset *ks, const json_t *pl, int64_t now, int64_t *user,
                                 int64_t *exp_s)
{
    int64_t exp, nbf, u;
    const json_t *v = json_object_get(pl, "exp");
    if (!v)
        return JWT_NO_EXP;
    if (numeric_date(v, false, &exp) != 0)
        return JWT_MALFORMED;
    if (now > sat_add(exp, ks->leeway))
        return JWT_EXPIRED;
    if ((v = json_object_get(pl, "nbf")) != NULL) {
        if (numeric_date(v, true, &nbf) != 0)
            return JWT_MALFORMED;
        if (sat_add(now, ks->leeway) < nbf)
            return JWT_NOT_YET_VALID;
    }
    if (ks->issuer && !json_str_eq(json_object_get(pl, "iss"), ks->issuer))
        return JWT_BAD_ISSUER;
    if (ks->audience) {
        /* RFC 7519 4.1.3: a string, or an array of which one must be ours. */
        const json_t *aud = json_object_get(pl, "aud");
        bool ok = json_str_eq(aud, ks->audience);
        if (json_is_array(aud)) {
            size_t i;
            const json_t *a;
            json_array_foreach (aud, i, a)
                ok = ok || json_str_eq(a, ks->audience);
        }
        if (!ok)
            return JWT_BAD_AUDIENCE;
    }
    v = json_object_get(pl, "sub");
    /* jansson refuses "\u0000" in strings, so the value is all of the string.
     * Only the canonical decimal: "04242" is not buyer 4242 (one buyer, one
     * name), as the ids in paths. */
    if (!json_is_string(v) || json_string_value(v)[0] == '0' ||
        util_parse_i64(json_string_value(v), 1, INT64_MAX, &u) != 0)
        return JWT_BAD_SUBJECT;
    *user = u;
    *exp_s = exp;
    return JWT_OK;
}

enum jwt_err jwt_verify(const struct jwt_keyset *ks, const char *tok, size_t len, int64_t now_s,
                        int64_t *user, int64_t *exp_s)
{
    unsigned char *buf = NULL;
    json_t *hdr = NULL, *pl = NULL;
    enum jwt_err ret = JWT_MALFORMED;

    if (!tok)
        return JWT_MISSING;
    if (len > ks->max_token)
        return JWT_TOO_LARGE;
    const char *end = tok + len;
    const char *d1 = memchr(tok, '.', len);
    const char *d2 = d1 ? memchr(d1 + 1, '.', (size_t)(end - d1 - 1)) : NULL;
    if (!d2 || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)) != NULL)
        return JWT_MALFORMED;
    size_t hlen = (size_t)(d1 - tok), plen = (size_t)(d2 - d1 - 1), slen = (size_t)(end - d2 - 1);
    if (hlen == 0 || plen == 0)
        return JWT_MALFORMED;
    /* One buffer for the three decoded segments, each followed by a spare
     * byte so none is empty-sized. */
    size_t hmax = b64_decoded_len(hlen), pmax = b64_decoded_len(plen), smax = b64_decoded_len(slen);
    if (!(buf = malloc(hmax + pmax + smax + 3)))
        return JWT_MALFORMED;
    unsigned char *pbuf = buf + hmax + 1, *sig = buf + hmax + pmax + 2;
    long pn = b64url_decode(d1 + 1, plen, pbuf), sn = b64url_decode(d2 + 1, slen, sig);
    if (pn < 0 || sn < 0 || !(hdr = json_segment(tok, hlen, buf)))
        goto out;

    const json_t *alg = json_object_get(hdr, "alg");
    if (!json_is_string(alg))
        goto out;
    int a = alg_parse(json_string_value(alg), json_string_length(alg));
    if (a < 0 || !(ks->allowed & (1u << a))) {
        ret = JWT_ALG_REFUSED;
        goto out;
    }
    /* RFC 7515 4.1.11: an extension we do not understand must not be ignored. */
    if (json_object_get(hdr, "crit"))
        goto out;
    const json_t *kid = json_object_get(hdr, "kid");
    const struct jwt_key *k;
    if (kid) {
        if (!json_is_string(kid))
            goto out;
        k = key_find(ks, json_string_value(kid), json_string_length(kid));
    } else {
        /* Without a kid, trying every key would let a token pick among them. */
        k = ks->n == 1 ? &ks->keys[0] : NULL;
    }
    if (!k) {
        ret = JWT_UNKNOWN_KID;
        goto out;
    }
    /* The key decides the algorithm, never the token. */
    if ((int)k->alg != a) {
        ret = JWT_ALG_REFUSED;
        goto out;
    }
    size_t inlen = (size_t)(d2 - tok);
    bool sig_ok = k->alg == ALG_HS256 ? hs256_ok(k, tok, inlen, sig, (size_t)sn)
                                      : pkey_verify(k, tok, inlen, sig, (size_t)sn);
    if (!sig_ok) {
        ret = JWT_BAD_SIGNATURE;
        goto out;
    }
    /* Only now is the payload worth parsing: it came from a key holder. */
    if (!(pl = json_object_loadb(pbuf, (size_t)pn)))
        goto out;
    ret = check_claims(ks, pl, now_s, user, exp_s);
out:
    json_decref(pl);
    json_decref(hdr);
    free(buf);
    return ret;
}

enum jwt_err jwt_bearer(const char *authorization, const char **tok, size_t *len)
{
    const char *p = authorization, *q;
    if (!p || strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\0'))
        return JWT_MISSING;
    p += 6;
    while (*p == ' ')
        p++;
    for (q = p; *q && *q != ' '; q++)
        ;
    if (q == p || *q != '\0')
        return JWT_MALFORMED;
    *tok = p;
    *len = (size_t)(q - p);
    return JWT_OK;
}

/* --- signing -------------------------------------------------------------- */

/* Raw signature of in into sig (room for EVP_PKEY_get_size or 64 bytes). */
static int pkey_sign(const struct jwt_key *k, const char *in, size_t inlen, unsigned char *sig,
                     size_t *siglen)
{
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    unsigned char *der = NULL;
    ECDSA_SIG *es = NULL;
    size_t dlen = 0;
    int ret = -1;

    if (!mctx || EVP_DigestSignInit(mctx, &pctx, sha256(), NULL, k->pkey) != 1)
        goto out;
    if (k->alg == ALG_RS256 && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1)
        goto out;
    if (EVP_DigestSign(mctx, NULL, &dlen, (const unsigned char *)in, inlen) != 1 || !(der = malloc(dlen)) ||
        EVP_DigestSign(mctx, der, &dlen, (const unsigned char *)in, inlen) != 1)
        goto out;
    if (k->alg == ALG_RS256) {
        memcpy(sig, der, dlen);
        *siglen = dlen;
        ret = 0;
        goto out;
    }
    const unsigned char *p = der;
    const BIGNUM *r, *s;
    if (!(es = d2i_ECDSA_SIG(NULL, &p, (long)dlen)))
        goto out;
    ECDSA_SIG_get0(es, &r, &s);
    if (BN_bn2binpad(r, sig, 32) != 32 || BN_bn2binpad(s, sig + 32, 32) != 32)
        goto out;
    *siglen = ES256_SIG_LEN;
    ret = 0;
out:
    ECDSA_SIG_free(es);
    free(der);
    EVP_MD_CTX_free(mctx);
    ERR_clear_error();
    return ret;
}

static const struct jwt_key *signer(const struct jwt_keyset *ks, const char *kid, char *err, size_t errlen)
{
    if (!kid)
        kid = ks->signing_key;
    if (kid[0] == '\0') {
        for (size_t i = 0; i < ks->n; i++)
            if (ks->keys[i].can_sign)
                return &ks->keys[i];
        seterr(err, errlen, "no key in jwt.keys can sign (RS256 and ES256 keys need a private key)");
        return NULL;
    }
    const struct jwt_key *k = key_find(ks, kid, strlen(kid));
    if (!k)
        seterr(err, errlen, "no key '%s' in jwt.keys", kid);
    else if (!k->can_sign)
        seterr(err, errlen, "key %s holds only a public key: cannot sign", kid);
    return k && k->can_sign ? k : NULL;
}

/* JSON j, compact, base64url-encoded into a heap string. */
static char *json_b64(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL, *e = NULL;
    if (s) {
        size_t n = strlen(s);
        if ((e = malloc(n / 3 * 4 + 5)))
            b64url_encode((const unsigned char *)s, n, e);
        free(s);
    }
    return e;
}

int jwt_sign(const struct jwt_keyset *ks, const char *kid, int64_t user, int64_t iat_s, int64_t exp_s,
             char **out, char *err, size_t errlen)
{
    char sub[24], *h = NULL, *p = NULL, *tok = NULL;
    json_t *hj = NULL, *pj = NULL;
    unsigned char sig[1024];
    size_t siglen = 0;
    const struct jwt_key *k;

    if (user <= 0) {
        seterr(err, errlen, "the user id must be positive");
        return -1;
    }
    if (!(k = signer(ks, kid, err, errlen)))
        return -1;
    if (k->pkey && (size_t)EVP_PKEY_get_size(k->pkey) > sizeof(sig)) {
        seterr(err, errlen, "key %s: signatures of %d bytes are not supported", k->kid,
               EVP_PKEY_get_size(k->pkey));
        return -1;
    }
    snprintf(sub, sizeof(sub), "%" PRId64, user);
    hj = json_pack("{s:s, s:s, s:s}", "alg", alg_names[k->alg], "typ", "JWT", "kid", k->kid);
    pj = json_pack("{s:s, s:I, s:I}", "sub", sub, "iat", (json_int_t)iat_s, "exp", (json_int_t)exp_s);
    if (pj && ks->issuer && json_object_set_new(pj, "iss", json_string(ks->issuer)) != 0)
        goto oom;
    if (pj && ks->audience && json_object_set_new(pj, "aud", json_string(ks->audience)) != 0)
        goto oom;
    if (!(h = json_b64(hj)) || !(p = json_b64(pj)))
        goto oom;

    size_t hl = strlen(h), pl = strlen(p), inlen = hl + 1 + pl;
    /* header.payload.signature: the signature is at most sizeof(sig) bytes. */
    if (!(tok = malloc(inlen + 1 + sizeof(sig) / 3 * 4 + 5)))
        goto oom;
    memcpy(tok, h, hl);
    tok[hl] = '.';
    memcpy(tok + hl + 1, p, pl);
    if (k->alg == ALG_HS256) {
        if (hs256_mac(k, tok, inlen, sig) != 0) {
            seterr(err, errlen, "key %s: HMAC failed", k->kid);
            goto fail;
        }
        siglen = SHA256_LEN;
    } else if (pkey_sign(k, tok, inlen, sig, &siglen) != 0) {
        seterr(err, errlen, "key %s: signing failed", k->kid);
        goto fail;
    }
    tok[inlen] = '.';
    b64url_encode(sig, siglen, tok + inlen + 1);
    json_decref(hj);
    json_decref(pj);
    free(h);
    free(p);
    *out = tok;
    return 0;
oom:
    seterr(err, errlen, "out of memory");
fail:
    json_decref(hj);
    json_decref(pj);
    free(h);
    free(p);
    free(tok);
    return -1;
}

/* --- cache ------------------------------------------------------------------ */

#define CACHE_WAYS 4

struct jwt_cache_entry {
    unsigned char hash[SHA256_LEN];
    uint64_t gen;
    int64_t user;        /* 0: empty (buyers are >= 1) */
    int64_t valid_until;
};

struct jwt_cache {
    size_t sets;          /* a power of two */
    struct jwt_cache_entry *e; /* sets * CACHE_WAYS */
    uint8_t *next;        /* per set: the way to replace next (FIFO) */
};

struct jwt_cache *jwt_cache_new(size_t entries)
{
    struct jwt_cache *jc;
    size_t n = CACHE_WAYS;
    if (entries == 0 || entries > ((size_t)1 << 28))
        return NULL;
    while (n < entries)
        n <<= 1;
    if (!(jc = calloc(1, sizeof(*jc))))
        return NULL;
    jc->sets = n / CACHE_WAYS;
    jc->e = calloc(n, sizeof(*jc->e));
    jc->next = calloc(jc->sets, 1);
    if (!jc->e || !jc->next) {
        jwt_cache_free(jc);
        return NULL;
    }
    return jc;
}

void jwt_cache_free(struct jwt_cache *jc)
{
    if (!jc)
        return;
    free(jc->e);
    free(jc->next);
    free(jc);
}

size_t jwt_cache_capacity(const struct jwt_cache *jc)
{
    return jc ? jc->sets * CACHE_WAYS : 0;
}

/* The token's set; hash receives its SHA-256. NULL if hashing failed. */
static struct jwt_cache_entry *cache_set(struct jwt_cache *jc, const char *tok, size_t len,
                                         unsigned char hash[SHA256_LEN], size_t *set)
{
    unsigned int hl = 0;
    uint64_t idx;
    if (EVP_Digest(tok, len, hash, &hl, sha256(), NULL) != 1 || hl != SHA256_LEN) {
        ERR_clear_error();
        return NULL;
    }
    memcpy(&idx, hash, sizeof(idx));
    *set = (size_t)(idx & (jc->sets - 1));
    return &jc->e[*set * CACHE_WAYS];
}

int jwt_cache_get(struct jwt_cache *jc, const char *tok, size_t len, int64_t now_s, uint64_t gen,
                  int64_t *user)
{
    unsigned char h[SHA256_LEN];
    size_t set;
    struct jwt_cache_entry *s;
    if (!jc || !tok || !(s = cache_set(jc, tok, len, h, &set)))
        return 0;
    for (int w = 0; w < CACHE_WAYS; w++) {
        struct jwt_cache_entry *e = &s[w];
        if (e->user == 0 || memcmp(e->hash, h, SHA256_LEN) != 0)
            continue;
        if (e->gen == gen && now_s <= e->valid_until) {
            *user = e->user;
            return 1;
        }
        e->user = 0; /* expired or from older keys: free the way */
        return 0;
    }
    return 0;
}

void jwt_cache_put(struct jwt_cache *jc, const char *tok, size_t len, uint64_t gen, int64_t user,
                   int64_t valid_until_s)
{
    unsigned char h[SHA256_LEN];
    size_t set;
    struct jwt_cache_entry *s, *victim = NULL;
    if (!jc || !tok || user <= 0 || !(s = cache_set(jc, tok, len, h, &set)))
        return;
    /* The same token again, else a free way or one from older keys, else
     * the oldest in the set. */
    for (int w = 0; w < CACHE_WAYS && !victim; w++)
        if (s[w].user != 0 && memcmp(s[w].hash, h, SHA256_LEN) == 0)
            victim = &s[w];
    for (int w = 0; w < CACHE_WAYS && !victim; w++)
        if (s[w].user == 0 || s[w].gen != gen)
            victim = &s[w];
    if (!victim) {
        victim = &s[jc->next[set]];
        jc->next[set] = (uint8_t)((jc->next[set] + 1) % CACHE_WAYS);
    }
    memcpy(victim->hash, h, SHA256_LEN);
    victim->gen = gen;
    victim->user = user;
    victim->valid_until = valid_until_s;
}
