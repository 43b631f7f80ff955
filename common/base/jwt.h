/* jwt: bearer tokens (JWS compact form, RFC 7515/7519) for the buyers.
 *
 * The JOSE framing (base64url, the two JSON objects, the claims) is ours;
 * every cryptographic operation is OpenSSL's: HMAC-SHA256 compared with
 * CRYPTO_memcmp, RSASSA-PKCS1-v1_5 SHA-256, ECDSA P-256 SHA-256, SHA-256.
 *
 *  - A token is accepted only with a signature by a configured key, made by
 *    that key's own algorithm: "alg":"none", an algorithm outside
 *    jwt.algorithms, and a header alg that differs from the key's (an HS256
 *    token whose HMAC key would be an RSA public key's PEM bytes) are refused
 *    before any signature is computed. This is what makes the classic
 *    algorithm confusion attacks fail.
 *  - A keyset is immutable once loaded and owns copies of every setting it
 *    checks (algorithms, issuer, audience, leeway, size bound), so a reload
 *    builds a new one and swaps it in; nothing reads the configuration later.
 *  - Key material is never printed: errors name the jwt.keys entry and its
 *    file. Verification errors are short words safe for a 401 body; they
 *    never echo the token.
 *  - exp is required (an unbounded token cannot be revoked by waiting), nbf
 *    is honoured, iss and aud are checked when configured, and sub must be a
 *    positive 64-bit buyer id in a JSON string (ids beyond 2^53 do not
 *    survive JSON numbers in other languages).
 *
 * A keyset may be read by several threads at once. A jwt_cache is not
 * thread-safe: its owner serialises access. */
#ifndef SECKILL_JWT_H
#define SECKILL_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

struct jwt_keyset;
struct jwt_cache;

enum jwt_err {
    JWT_OK = 0,
    JWT_MISSING,       /* no Authorization header, or another scheme than Bearer */
    JWT_MALFORMED,     /* not three base64url segments of JSON objects, a "crit" header, ... */
    JWT_TOO_LARGE,     /* longer than jwt.max_token_bytes */
    JWT_ALG_REFUSED,   /* "none", not in jwt.algorithms, or not the key's algorithm */
    JWT_UNKNOWN_KID,   /* no such key (or no kid while several keys are configured) */
    JWT_BAD_SIGNATURE,
    JWT_NO_EXP,
    JWT_EXPIRED,
    JWT_NOT_YET_VALID,
    JWT_BAD_ISSUER,
    JWT_BAD_AUDIENCE,
    JWT_BAD_SUBJECT,   /* sub is not a string holding a positive 64-bit integer */
};

/* A few lowercase words for the 401 body ("token expired"). */
const char *jwt_err_str(enum jwt_err e);

/* What a keyset is for. JWT_USE_VERIFY (the producer): RS256 and ES256 keys
 * must be public ones; a private key is refused, since whoever holds the
 * verifier could then mint tokens. JWT_USE_SIGN (seckillctl token issue,
 * the tests' and benches' token makers): private keys too. An HS256 secret
 * verifies and signs alike, so both take it. */
enum jwt_use { JWT_USE_VERIFY, JWT_USE_SIGN };

/* Load every jwt.keys entry ("KID:ALG:FILE", FILE under jwt.key_dir unless
 * absolute) for use and copy the jwt checks of c. HS256 takes the whole file
 * (one trailing newline dropped) of 32 to SECRET_MAX bytes, under the rules
 * of a password file (common/base/secret.h: mode 0600 or 0400, kept out of core
 * dumps); RS256 a PEM RSA key of at least 2048 bits, ES256 a PEM EC key on
 * P-256: public ("BEGIN PUBLIC KEY"), or private (JWT_USE_SIGN only), which
 * can also sign. OpenSSL's PEM reader tells a private key from a public one.
 * Every key file is read again on every call, so a reload picks up a rotated
 * file. 0, or -1 with err naming the entry, its key id and the file; nothing
 * is kept on failure. */
int jwt_keyset_load(const struct cfg *c, enum jwt_use use, struct jwt_keyset **out, char *err, size_t errlen);
void jwt_keyset_free(struct jwt_keyset *ks);
/* How many keys, for a log line. */
size_t jwt_keyset_size(const struct jwt_keyset *ks);
/* jwt.leeway_s as loaded: a verified token stays good until exp + leeway. */
int64_t jwt_keyset_leeway(const struct jwt_keyset *ks);
/* jwt.max_token_bytes as loaded, so a caller can refuse a huge token before
 * hashing it for the cache. */
size_t jwt_keyset_max_token(const struct jwt_keyset *ks);

/* Verify tok (len bytes, need not be NUL-terminated) at now_s (seconds since
 * the epoch). JWT_OK with the buyer in *user and exp (whole seconds) in
 * *exp_s; otherwise the first reason found, in this order: size, framing,
 * header, algorithm, key, signature, exp, nbf, iss, aud, sub. Allocates only
 * one buffer and jansson's objects. */
enum jwt_err jwt_verify(const struct jwt_keyset *ks, const char *tok, size_t len, int64_t now_s,
                        int64_t *user, int64_t *exp_s);

/* The token of an Authorization header value: "Bearer" in any case, one or
 * more spaces, then the token up to the end of the value (no trailing
 * spaces). JWT_OK with *tok and *len pointing into authorization; JWT_MISSING for
 * NULL or another scheme; JWT_MALFORMED for a Bearer value without a token
 * or with more after it. */
enum jwt_err jwt_bearer(const char *authorization, const char **tok, size_t *len);

/* Sign a token for user with claims sub (a string), iat, exp and the
 * configured iss and aud. kid NULL: jwt.signing_key; "" (or an empty
 * jwt.signing_key): the first key that can sign. Public-only keys cannot.
 * 0 and a heap string in *out (free it), or -1 with err. */
int jwt_sign(const struct jwt_keyset *ks, const char *kid, int64_t user, int64_t iat_s, int64_t exp_s,
             char **out, char *err, size_t errlen);

/* A fixed-size cache of verified tokens, so a buyer who sends the same token
 * again costs one SHA-256 instead of a signature check. Entries are keyed by
 * the token's SHA-256 (memory does not depend on token size), 4-way set
 * associative with first-in-first-out replacement; all memory is allocated by
 * jwt_cache_new. Only verified tokens are put, so garbage cannot evict much.
 * An entry is a miss once valid_until_s has passed or when gen differs (the
 * keys were reloaded: every token is checked again). Not thread-safe. */
struct jwt_cache *jwt_cache_new(size_t entries); /* rounded up to a power of two >= 4; NULL if 0 */
void jwt_cache_free(struct jwt_cache *jc);
/* 1 and *user on a hit, 0 on a miss. jc may be NULL (always a miss). */
int jwt_cache_get(struct jwt_cache *jc, const char *tok, size_t len, int64_t now_s, uint64_t gen,
                  int64_t *user);
/* valid_until_s: exp + leeway. jc may be NULL. */
void jwt_cache_put(struct jwt_cache *jc, const char *tok, size_t len, uint64_t gen, int64_t user,
                   int64_t valid_until_s);
/* The number of entries actually allocated (a power of two). */
size_t jwt_cache_capacity(const struct jwt_cache *jc);

#endif
