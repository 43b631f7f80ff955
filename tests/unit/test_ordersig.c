/* The producers' MAC over orders (ordersig): what signs verifies, what was
 * forged, altered or signed with a key the consumer lacks does not, and two
 * keys at once let the key rotate. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "order.h"
#include "ordersig.h"

static char dir[64];

/* A configuration naming the key files entries[] (under dir). */
static void keys_cfg(struct cfg *c, const char *const *entries, size_t n)
{
    memset(c, 0, sizeof(*c));
    c->kafka.order_key_dir = dir;
    c->kafka.order_keys.v = (char **)entries;
    c->kafka.order_keys.n = n;
}

static struct keyring *load(const char *const *entries, size_t n)
{
    struct cfg c;
    struct keyring *ks = NULL;
    char err[1024];
    keys_cfg(&c, entries, n);
    if (osig_keys_load(&c, &ks, err, sizeof(err)) != 0)
        fail_msg("loading keys: %s", err);
    return ks;
}

static int setup(void **state)
{
    char path[128];
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sktest-osig-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/one", dir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-one");
    snprintf(path, sizeof(path), "%s/two", dir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-two");
    snprintf(path, sizeof(path), "%s/short", dir);
    harness_write_secret(path, "too short a key");
    snprintf(path, sizeof(path), "%s/open", dir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-open");
    assert_int_equal(chmod(path, 0644), 0);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_sign_verify(void **state)
{
    (void)state;
    static const char *const one[] = { "k1:one" };
    struct keyring *ks = load(one, 1);
    struct order o = { 1LL << 40, 77, 1001, 1, 1795254835830LL };
    char err[256];
    assert_int_equal(osig_keys_sign(ks, &o), 0);
    /* A known answer, from Python's hmac over the same text and key (what
     * bench/drain signs with): the text and the hex are the format. */
    assert_string_equal(o.sig, "k1:8ed2f4b460f9bf7ef89424150cf805361a7b7ed087950eaa9ac698ad98b7da45");
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_OK);
    /* reserved_at_ms is not covered: seckill_reserve re-stamps it. */
    o.reserved_at_ms++;
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_OK);
    /* Every field that makes the reservation is. */
    int64_t *field[] = { &o.order_id, &o.user_id, &o.item_id, &o.qty };
    for (size_t i = 0; i < sizeof(field) / sizeof(field[0]); i++) {
        (*field[i])++;
        assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_BAD);
        assert_non_null(strstr(err, "bad signature"));
        (*field[i])--;
    }
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_OK);
    /* One hex digit of the MAC changed, or the MAC cut short. */
    o.sig[10] = o.sig[10] == '0' ? '1' : '0';
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_BAD);
    o.sig[20] = '\0';
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_BAD);
    keyring_free(ks);
}

static void test_refused(void **state)
{
    (void)state;
    static const char *const one[] = { "k1:one" }, *const two_as_k1[] = { "k1:two" },
                             *const two[] = { "k2:two" };
    struct keyring *ks = load(one, 1), *other = load(two_as_k1, 1), *k2 = load(two, 1);
    struct order o = { 5, 6, 7, 1, 8 };
    char err[256];
    /* No signature at all: what a forger without a key publishes. */
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_NONE);
    assert_string_equal(err, "not signed by a producer key: no signature");
    /* The same key id, another key. */
    assert_int_equal(osig_keys_sign(other, &o), 0);
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_BAD);
    /* A key id the consumer does not hold. */
    assert_int_equal(osig_keys_sign(k2, &o), 0);
    assert_int_equal(osig_keys_verify(ks, &o, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    assert_string_equal(err, "not signed by a producer key: unknown key id k2");
    /* Without a key set nothing signs and nothing verifies. */
    assert_int_equal(osig_keys_sign(NULL, &o), -1);
    assert_int_equal(osig_keys_verify(NULL, &o, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    keyring_free(ks);
    keyring_free(other);
    keyring_free(k2);
}

/* A cancel is signed over a text of its own: the MAC of an order (which a
 * thief of the topic can read off it) never verifies a cancel of it. */
static void test_cancel_needs_its_own_mac(void **state)
{
    (void)state;
    static const char *const one[] = { "k1:one" };
    struct keyring *ks = load(one, 1);
    struct order o = { 5, 6, 7, 1, 8 }, c;
    char err[256];
    assert_int_equal(osig_keys_sign(ks, &o), 0);
    c = o;
    c.kind = ORDER_CANCEL;
    assert_int_equal(osig_keys_verify(ks, &c, err, sizeof(err)), KEYRING_BAD);
    assert_int_equal(osig_keys_sign(ks, &c), 0);
    assert_int_equal(osig_keys_verify(ks, &c, err, sizeof(err)), KEYRING_OK);
    assert_string_not_equal(c.sig, o.sig);
    keyring_free(ks);
}

static void test_rotation(void **state)
{
    (void)state;
    static const char *const old[] = { "k1:one" }, *const both[] = { "k2:two", "k1:one" };
    struct keyring *ks_old = load(old, 1), *ks_both = load(both, 2);
    struct order a = { 11, 12, 13, 1, 14 }, b = a;
    char err[256];
    assert_int_equal(keyring_count(ks_both), 2);
    /* A message signed before the rotation still verifies... */
    assert_int_equal(osig_keys_sign(ks_old, &a), 0);
    assert_int_equal(osig_keys_verify(ks_both, &a, err, sizeof(err)), KEYRING_OK);
    /* ...and the first key signs what is new. */
    assert_int_equal(osig_keys_sign(ks_both, &b), 0);
    assert_int_equal(strncmp(b.sig, "k2:", 3), 0);
    assert_int_equal(osig_keys_verify(ks_both, &b, err, sizeof(err)), KEYRING_OK);
    assert_int_equal(osig_keys_verify(ks_old, &b, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    keyring_free(ks_old);
    keyring_free(ks_both);
}

static void refuses(const char *const *entries, size_t n, const char *why)
{
    struct cfg c;
    struct keyring *ks = NULL;
    char err[1024];
    keys_cfg(&c, entries, n);
    assert_int_equal(osig_keys_load(&c, &ks, err, sizeof(err)), -1);
    assert_null(ks);
    if (!strstr(err, why))
        fail_msg("'%s' lacks '%s'", err, why);
}

static void test_load_refuses(void **state)
{
    (void)state;
    static const char *const dup[] = { "k1:one", "k1:two" }, *const short_key[] = { "k1:short" },
                             *const open_key[] = { "k1:open" }, *const no_file[] = { "k1:" },
                             *const bad_kid[] = { "k 1:one" }, *const no_colon[] = { "one" },
                             *const missing[] = { "k1:absent" };
    refuses(NULL, 0, "kafka.order_keys is empty");
    refuses(dup, 2, "key id 'k1' is there twice");
    refuses(short_key, 1, "at least 32 wanted");
    refuses(open_key, 1, "group or others");
    refuses(no_file, 1, "not \"KID:FILE\"");
    refuses(bad_kid, 1, "not \"KID:FILE\"");
    refuses(no_colon, 1, "not \"KID:FILE\"");
    refuses(missing, 1, "absent");
}

static void test_message_carries_sig(void **state)
{
    (void)state;
    static const char *const one[] = { "k1:one" };
    struct keyring *ks = load(one, 1);
    struct order in = { INT64_MAX, INT64_MAX, INT64_MAX, 1, INT64_MAX }, out;
    char buf[ORDER_MSG_MAX], err[256];
    assert_int_equal(osig_keys_sign(ks, &in), 0);
    /* The longest message, signed, fits the advertised buffer. */
    int n = order_encode(&in, buf, sizeof(buf));
    assert_true(n > 0);
    assert_non_null(strstr(buf, ",\"sig\":\"k1:"));
    assert_int_equal(order_decode(buf, (size_t)n, &out, err, sizeof(err)), 0);
    assert_memory_equal(&in, &out, sizeof(in));
    assert_int_equal(osig_keys_verify(ks, &out, err, sizeof(err)), KEYRING_OK);
    /* A message without "sig" decodes (the check is the consumer's) and
     * fails it. */
    static const char unsigned_msg[] =
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"item_id\":7,\"qty\":1,\"reserved_at_ms\":8}";
    assert_int_equal(order_decode(unsigned_msg, strlen(unsigned_msg), &out, err, sizeof(err)), 0);
    assert_string_equal(out.sig, "");
    assert_int_equal(osig_keys_verify(ks, &out, err, sizeof(err)), KEYRING_NONE);
    /* A sig that could not be re-encoded as it came is refused at decode. */
    static const char *const bad[] = {
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"item_id\":7,\"qty\":1,\"reserved_at_ms\":8,\"sig\":1}",
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"item_id\":7,\"qty\":1,\"reserved_at_ms\":8,\"sig\":\"\"}",
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"item_id\":7,\"qty\":1,\"reserved_at_ms\":8,\"sig\":\"a\\\"b\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(order_decode(bad[i], strlen(bad[i]), &out, err, sizeof(err)), -1);
    keyring_free(ks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign_verify),     cmocka_unit_test(test_refused),
        cmocka_unit_test(test_rotation),        cmocka_unit_test(test_load_refuses),
        cmocka_unit_test(test_message_carries_sig),
        cmocka_unit_test(test_cancel_needs_its_own_mac),
    };
    return cmocka_run_group_tests_name("ordersig", tests, setup, teardown);
}
