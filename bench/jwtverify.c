/* bench/jwtverify: what a bearer token costs the producer's HTTP thread, on
 * one core: a full HS256 verification (framing, both JSON objects, the MAC,
 * the claims) and a hit in the cache of verified tokens (the SHA-256 of the
 * token and a lookup), each averaged over N calls with the configured key.
 * Prints "key value" lines.
 *   build/bench/jwtverify CONFIG [N]   (make bench runs it) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "jwt.h"
#include "util.h"

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    struct jwt_keyset *ks = NULL;
    struct jwt_cache *jc = NULL;
    char err[512], *tok = NULL;
    int64_t n = 200000, user, exp, t0, t1, t2;
    int ret = 1;

    if (argc < 2 || (argc > 2 && util_parse_i64(argv[2], 1, 100000000, &n) != 0)) {
        fprintf(stderr, "usage: jwtverify CONFIG [N]\n");
        return 2;
    }
    if (cfg_load(argv[1], &c, err, sizeof(err)) != 0 || jwt_keyset_load(&c, JWT_USE_SIGN, &ks, err, sizeof(err)) != 0) {
        fprintf(stderr, "jwtverify: %s\n", err);
        goto fail;
    }
    int64_t now = util_wall_ms() / 1000;
    if (jwt_sign(ks, NULL, 42, now, now + 3600, &tok, err, sizeof(err)) != 0 || !(jc = jwt_cache_new(65536))) {
        fprintf(stderr, "jwtverify: %s\n", err);
        goto fail;
    }
    size_t len = strlen(tok);
    t0 = util_mono_ms();
    for (int64_t i = 0; i < n; i++)
        if (jwt_verify(ks, tok, len, now, &user, &exp) != JWT_OK)
            goto fail;
    t1 = util_mono_ms();
    jwt_cache_put(jc, tok, len, 1, user, exp);
    for (int64_t i = 0; i < n; i++)
        if (!jwt_cache_get(jc, tok, len, now, 1, &user))
            goto fail;
    t2 = util_mono_ms();
    printf("jwt_verify_us %.2f\njwt_cache_hit_us %.2f\njwt_token_bytes %zu\n", (double)(t1 - t0) * 1000 / (double)n,
           (double)(t2 - t1) * 1000 / (double)n, len);
    ret = 0;
fail:
    free(tok);
    jwt_cache_free(jc);
    jwt_keyset_free(ks);
    cfg_free(&c);
    return ret;
}
