/* The waiting room's admission tokens (common/sale/admtoken.h): the wire
 * format and the MAC (a known answer), and each refusal the producer makes
 * before Redis with its reason: malformed, unknown key, forged or altered,
 * another item's, another buyer's, minted before the opening, expired; and
 * a key rotation. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admtoken.h"

static char dir[64];

static struct keyring *load(const char *const *entries, size_t n)
{
    struct cfg c;
    struct keyring *ks = NULL;
    char err[1024];
    memset(&c, 0, sizeof(c));
    c.producer.admission_key_dir = dir;
    c.producer.admission_keys.v = (char **)entries;
    c.producer.admission_keys.n = n;
    if (adm_keys_load(&c, &ks, err, sizeof(err)) != 0)
        fail_msg("loading keys: %s", err);
    return ks;
}

static int setup(void **state)
{
    char path[128];
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sktest-adm-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/one", dir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-one");
    snprintf(path, sizeof(path), "%s/two", dir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-two");
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Item 42, buyer 7, the sale opening at 1000, minted at 1500, admitted until
 * 61000, nonce 99. */
static struct adm_token sample(void)
{
    return (struct adm_token){ .item_id = 42, .user_id = 7, .starts_ms = 1000, .minted_ms = 1500,
                               .expires_ms = 61000, .nonce = 99 };
}

static void test_mint_known_answer(void **state)
{
    (void)state;
    static const char *const one[] = { "a1:one" };
    struct keyring *ks = load(one, 1);
    struct adm_token t = sample(), back;
    char wire[ADM_TOKEN_MAX];
    assert_int_equal(adm_keys_mint(ks, &t, wire, sizeof(wire)), 0);
    /* From Python's hmac over the same text and key: the text and the wire
     * are the format (docs/api.md). */
    assert_string_equal(wire, "42.7.1000.1500.61000.99.a1:"
                              "f094938dc45085edeb6503f811bc9e1e47c889e73c4874cea5eca0945db72753");
    assert_int_equal(adm_keys_check(ks, wire, 42, 7, 60999, &back), ADM_OK);
    assert_true(back.item_id == 42 && back.user_id == 7 && back.starts_ms == 1000 && back.minted_ms == 1500 &&
                back.expires_ms == 61000 && back.nonce == 99);
    assert_string_equal(back.sig, t.sig);
    keyring_free(ks);
}

static void test_refusals(void **state)
{
    (void)state;
    static const char *const one[] = { "a1:one" }, *const two[] = { "a2:two" };
    struct keyring *ks = load(one, 1), *other = load(two, 1);
    struct adm_token t = sample();
    char wire[ADM_TOKEN_MAX], bad[ADM_TOKEN_MAX + 8];
    assert_int_equal(adm_keys_mint(ks, &t, wire, sizeof(wire)), 0);
    assert_int_equal(adm_keys_check(ks, NULL, 42, 7, 2000, NULL), ADM_MISSING);
    assert_int_equal(adm_keys_check(ks, "", 42, 7, 2000, NULL), ADM_MISSING);
    /* Shapes that are no token: each number positive decimal, no sign, no
     * leading zero, six of them, then KID:HEX. */
    static const char *const malformed[] = {
        "garbage", "42.7.1000.1500.61000.99", "42.7.1000.1500.61000.a1:00",
        "042.7.1000.1500.61000.99.a1:00", "-42.7.1000.1500.61000.99.a1:00", "42.7.1000.1500.61000.99.a1",
        "42..1000.1500.61000.99.a1:00", "42.7.1000.1500.61000.99.a1:zz.x",
        "99999999999999999999.7.1000.1500.61000.99.a1:00",
    };
    for (size_t i = 0; i < ARRAY_SIZE(malformed); i++)
        if (adm_keys_check(ks, malformed[i], 42, 7, 2000, NULL) != ADM_MALFORMED)
            fail_msg("'%s' not refused as malformed", malformed[i]);
    /* A MAC with the wrong shape (not 64 hex digits) is a bad signature. */
    assert_int_equal(adm_keys_check(ks, "42.7.1000.1500.61000.99.a1:00", 42, 7, 2000, NULL),
                     ADM_BAD_SIGNATURE);
    /* Signed by a key this producer does not hold. */
    assert_int_equal(adm_keys_check(other, wire, 42, 7, 2000, NULL), ADM_UNKNOWN_KEY);
    /* Forged: any field altered, or the MAC itself. */
    static const char *const altered[] = { "43.7.1000.1500.61000.99", "42.8.1000.1500.61000.99",
                                           "42.7.999.1500.61000.99",  "42.7.1000.1501.61000.99",
                                           "42.7.1000.1500.99000.99", "42.7.1000.1500.61000.98" };
    for (size_t i = 0; i < ARRAY_SIZE(altered); i++) {
        snprintf(bad, sizeof(bad), "%s.%s", altered[i], strrchr(wire, '.') + 1);
        assert_int_equal(adm_keys_check(ks, bad, 42, 7, 2000, NULL), ADM_BAD_SIGNATURE);
    }
    snprintf(bad, sizeof(bad), "%s", wire);
    bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
    assert_int_equal(adm_keys_check(ks, bad, 42, 7, 2000, NULL), ADM_BAD_SIGNATURE);
    /* Genuine, but not for this buy. */
    assert_int_equal(adm_keys_check(ks, wire, 43, 7, 2000, NULL), ADM_OTHER_ITEM);
    assert_int_equal(adm_keys_check(ks, wire, 42, 8, 2000, NULL), ADM_OTHER_BUYER);
    assert_int_equal(adm_keys_check(ks, wire, 42, 7, 61000, NULL), ADM_EXPIRED);
    /* Minted before the opening (or ending before it was minted): no room
     * mints that, so no key holder but a forger did. */
    t = sample();
    t.minted_ms = 999;
    assert_int_equal(adm_keys_mint(ks, &t, wire, sizeof(wire)), 0);
    assert_int_equal(adm_keys_check(ks, wire, 42, 7, 2000, NULL), ADM_BEFORE_OPENING);
    t = sample();
    t.expires_ms = t.minted_ms;
    assert_int_equal(adm_keys_mint(ks, &t, wire, sizeof(wire)), 0);
    assert_int_equal(adm_keys_check(ks, wire, 42, 7, 1000, NULL), ADM_BEFORE_OPENING);
    keyring_free(ks);
    keyring_free(other);
}

/* Two keys: the first signs, both verify, so a key rotates without
 * refusing the tokens of the one before. */
static void test_rotation(void **state)
{
    (void)state;
    static const char *const old[] = { "a1:one" }, *const both[] = { "a2:two", "a1:one" };
    struct keyring *a = load(old, 1), *b = load(both, 2);
    struct adm_token t = sample();
    char wire[ADM_TOKEN_MAX];
    assert_int_equal(adm_keys_mint(a, &t, wire, sizeof(wire)), 0);
    assert_int_equal(adm_keys_check(b, wire, 42, 7, 2000, NULL), ADM_OK);
    assert_int_equal(adm_keys_mint(b, &t, wire, sizeof(wire)), 0);
    assert_non_null(strstr(wire, ".a2:"));
    assert_int_equal(adm_keys_check(a, wire, 42, 7, 2000, NULL), ADM_UNKNOWN_KEY);
    keyring_free(a);
    keyring_free(b);
}

/* Every reason has its word, the ones docs/api.md lists. */
static void test_words(void **state)
{
    (void)state;
    static const char *const want[] = { "ok",      "missing", "malformed", "unknown_key", "bad_signature",
                                        "other_item", "other_buyer", "before_opening", "expired", "used",
                                        "lapsed",  "other_sale" };
    assert_int_equal(ADM_NREASONS, ARRAY_SIZE(want));
    for (int r = 0; r < ADM_NREASONS; r++)
        assert_string_equal(adm_reason_word((enum adm_reason)r), want[r]);
    assert_string_equal(adm_reason_word(ADM_NREASONS), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mint_known_answer),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_words),
    };
    harness_filter();
    return cmocka_run_group_tests_name("admtoken", tests, setup, teardown);
}
