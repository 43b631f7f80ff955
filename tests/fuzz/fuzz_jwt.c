/* libFuzzer harness for bearer tokens: the Authorization header value
 * (jwt_bearer) and the token (jwt_verify) come straight off the network.
 *
 * The first byte picks what the rest is:
 *   '0' (and every byte = 0 mod 3): a header value / token as sent;
 *   '1' (= 1 mod 3): "HEADER\nPAYLOAD", two JSON texts this harness encodes
 *       and signs with the HS256 secret, so the fuzzer reaches the claims
 *       checks that a forged signature never gets to;
 *   '2' (= 2 mod 3): a buyer id to sign with jwt_sign and verify again.
 *
 * Besides memory errors it checks properties: an accepted token names a
 * positive buyer; a token this harness signed with the only key of a keyset
 * is never "bad signature" (the signing input and the base64url framing
 * agree); a signed buyer verifies as the same buyer. Keys are made
 * once per process in a temporary folder, removed right after loading. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "jwt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW INT64_C(1800000000)
static const char secret[] = "fuzz-only-hs256-secret-0123456789abcdef";

/* multi: an HS256 and an ES256 key (kid required), iss and aud checked;
 * single: the HS256 key alone (kid optional), nothing else checked. */
static struct jwt_keyset *multi, *single;
static struct jwt_cache *cache;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_jwt: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void setup(void)
{
    char dir[] = "/tmp/seckill-fuzz-jwt-XXXXXX", p[96], err[512];
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    snprintf(p, sizeof(p), "%s/hs.secret", dir);
    FILE *f = fopen(p, "w");
    if (!f || fputs(secret, f) < 0 || fclose(f) != 0 || chmod(p, 0600) != 0) /* as a password file */
        die("writing the secret", p);
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    snprintf(p, sizeof(p), "%s/ec.pem", dir);
    if (!ec || !(f = fopen(p, "w")) || PEM_write_PrivateKey(f, ec, NULL, NULL, 0, NULL, NULL) != 1 || fclose(f) != 0)
        die("writing the EC key", p);
    EVP_PKEY_free(ec);

    char *keys2[] = { "hs:HS256:hs.secret", "es:ES256:ec.pem" }, *keys1[] = { "hs:HS256:hs.secret" };
    char *algs[] = { "HS256", "RS256", "ES256" };
    struct cfg c;
    memset(&c, 0, sizeof(c));
    c.jwt.key_dir = dir;
    c.jwt.keys = (struct cfg_list){ keys2, 2 };
    c.jwt.algorithms = (struct cfg_list){ algs, 3 };
    c.jwt.issuer = "iss";
    c.jwt.audience = "aud";
    c.jwt.signing_key = "";
    c.jwt.leeway_s = 30;
    c.jwt.max_token_bytes = 4096;
    if (jwt_keyset_load(&c, JWT_USE_SIGN, &multi, err, sizeof(err)) != 0)
        die("keyset", err);
    c.jwt.keys = (struct cfg_list){ keys1, 1 };
    c.jwt.algorithms = (struct cfg_list){ NULL, 0 };
    c.jwt.issuer = "";
    c.jwt.audience = "";
    if (jwt_keyset_load(&c, JWT_USE_SIGN, &single, err, sizeof(err)) != 0)
        die("keyset", err);
    if (!(cache = jwt_cache_new(64)))
        die("cache", NULL);
    snprintf(p, sizeof(p), "%s/hs.secret", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/ec.pem", dir);
    unlink(p);
    rmdir(dir);
}

/* jwt_verify, and the properties any answer must have. */
static enum jwt_err check(const struct jwt_keyset *ks, const char *tok, size_t len)
{
    int64_t user = 0, exp = 0;
    enum jwt_err e = jwt_verify(ks, tok, len, NOW, &user, &exp);
    if (e == JWT_OK) {
        if (user <= 0)
            die("accepted a token without a positive buyer", NULL);
        if (exp < NOW - 30)
            die("accepted an expired token", NULL);
        /* Only verified tokens go into the cache; they come back intact. */
        int64_t back = 0;
        jwt_cache_put(cache, tok, len, 1, user, exp > INT64_MAX - 30 ? INT64_MAX : exp + 30);
        if (!jwt_cache_get(cache, tok, len, NOW, 1, &back) || back != user)
            die("the cache lost the token just put", NULL);
    }
    const char *s = jwt_err_str(e);
    if (!s || !*s)
        die("no reason for a refusal", NULL);
    return e;
}

static size_t b64url(const unsigned char *in, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = a[v >> 18];
        out[o++] = a[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = a[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = a[v & 63];
    }
    return o;
}

static void raw_token(const uint8_t *data, size_t size)
{
    /* A header value arrives NUL-terminated from libmicrohttpd. */
    char *hdr = malloc(size + 1);
    if (!hdr)
        return;
    memcpy(hdr, data, size);
    hdr[size] = '\0';
    const char *tok = NULL;
    size_t len = 0;
    enum jwt_err e = jwt_bearer(hdr, &tok, &len);
    if (e == JWT_OK) {
        if (len == 0 || tok < hdr || tok + len != hdr + strlen(hdr) || memchr(tok, ' ', len))
            die("jwt_bearer returned a token that is not the value's tail", hdr);
        check(single, tok, len);
        check(multi, tok, len);
    } else if (e != JWT_MISSING && e != JWT_MALFORMED) {
        die("jwt_bearer: unexpected result", jwt_err_str(e));
    }
    free(hdr);
    /* The bytes as a token of their own, exactly size bytes long (ASan sees
     * any read past them). */
    check(single, (const char *)data, size);
    check(multi, (const char *)data, size);
}

static void signed_json(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl)
        return;
    size_t hl = (size_t)(nl - data), pl = size - hl - 1;
    char *tok = malloc((hl + pl) / 3 * 4 + 8 + 64);
    if (!tok)
        return;
    size_t n = b64url(data, hl, tok);
    tok[n++] = '.';
    n += b64url(nl + 1, pl, tok + n);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int ml = 0;
    if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)tok, n, mac, &ml))
        die("HMAC", NULL);
    tok[n++] = '.';
    n += b64url(mac, ml, tok + n);
    /* single allows nothing but its HMAC key, which made the MAC: whatever
     * else is wrong, the signature is not. (multi rightly finds an HMAC bad
     * when the header names its ES256 key.) */
    if (check(single, tok, n) == JWT_BAD_SIGNATURE)
        die("a correctly signed token refused as bad signature", NULL);
    check(multi, tok, n);
    free(tok);
}

static void sign_roundtrip(const uint8_t *data, size_t size)
{
    uint64_t v = 0;
    memcpy(&v, data, size < sizeof(v) ? size : sizeof(v));
    int64_t user = (int64_t)(v >> 1), back = 0, exp = 0;
    char *tok = NULL, err[256];
    static const char *const kids[] = { "hs", "es" };
    for (size_t i = 0; i < 2; i++) {
        int rc = jwt_sign(multi, kids[i], user, NOW, NOW + 60, &tok, err, sizeof(err));
        if (user <= 0) {
            if (rc == 0)
                die("signed a token for a buyer <= 0", NULL);
            continue;
        }
        if (rc != 0)
            die("jwt_sign", err);
        enum jwt_err e = jwt_verify(multi, tok, strlen(tok), NOW, &back, &exp);
        if (e != JWT_OK || back != user || exp != NOW + 60)
            die("a signed token does not verify as its buyer", tok);
        free(tok);
        tok = NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!multi)
        setup();
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0: raw_token(data + 1, size - 1); break;
    case 1: signed_json(data + 1, size - 1); break;
    default: sign_roundtrip(data + 1, size - 1); break;
    }
    return 0;
}
