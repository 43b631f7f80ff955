/* The payment service's MAC over payments (paysig, issue #55 §2): what is
 * signed verifies; a payment altered in any signed field, unsigned, signed
 * with another key or with a key id the consumer lacks does not; the
 * message carries its sig through encode and decode; the key list loads as
 * kafka.order_keys does, and a reload with a bad key file is refused with
 * every set kept (keyring_reload_hook). */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keyring.h"
#include "ordersig.h"
#include "paymsg.h"
#include "paysig.h"

static char dir[64];

/* A configuration naming the payment key files entries[] (under dir), and
 * an order key (for the reload of both lists). */
static void keys_cfg(struct cfg *c, const char *const *entries, size_t n)
{
    static const char *const order[] = { "k1:order" };
    memset(c, 0, sizeof(*c));
    c->kafka.payment_key_dir = dir;
    c->kafka.payment_keys.v = (char **)entries;
    c->kafka.payment_keys.n = n;
    c->kafka.order_key_dir = dir;
    c->kafka.order_keys.v = (char **)order;
    c->kafka.order_keys.n = 1;
}

static struct keyring *load(const char *const *entries, size_t n)
{
    struct cfg c;
    struct keyring *ks = NULL;
    char err[1024];
    keys_cfg(&c, entries, n);
    if (psig_keys_load(&c, &ks, err, sizeof(err)) != 0)
        fail_msg("loading keys: %s", err);
    return ks;
}

static int setup(void **state)
{
    static const struct {
        const char *name, *key;
    } files[] = {
        { "pay", "0123456789abcdef0123456789abcdef-pay" },
        { "two", "0123456789abcdef0123456789abcdef-two" },
        { "order", "0123456789abcdef0123456789abcdef-order" },
        { "short", "too short a key" },
    };
    char path[128];
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sktest-psig-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
        harness_write_secret(path, files[i].key);
    }
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const struct pay_msg PAY = { (INT64_C(1) << 40) + 1, 77, INT64_C(1795254835830), "tx-1.a:B_9", "" };

static void test_sign_verify(void **state)
{
    (void)state;
    static const char *const one[] = { "p1:pay" };
    struct keyring *ks = load(one, 1);
    struct pay_msg m = PAY;
    char err[256], text[PSIG_TEXT_MAX];
    int n = psig_text(&m, text, sizeof(text));
    assert_int_equal(n, (int)strlen(text));
    assert_string_equal(text, "seckill-payment-v1\n1099511627777\n77\n1795254835830\ntx-1.a:B_9\n");
    assert_int_equal(psig_keys_sign(ks, &m), 0);
    /* A known answer, from Python's hmac over the same text and key (what
     * docs/api.md's openssl dgst -hmac makes too: tests/cli/test_paysign.sh). */
    assert_string_equal(m.sig, "p1:c25fc16fa5ec4d93baafec520bb389e63f64a551b86bcd38fdf0abfd7e3f8df2");
    assert_int_equal(psig_keys_verify(ks, &m, err, sizeof(err)), KEYRING_OK);
    /* Any signed field altered: the MAC does not match. */
    for (int f = 0; f < 4; f++) {
        struct pay_msg t = m;
        switch (f) {
        case 0: t.order_id++; break;
        case 1: t.user_id++; break;
        case 2: t.paid_at_ms++; break;
        case 3: t.ref[0] = 'T'; break;
        }
        err[0] = '\0';
        assert_int_equal(psig_keys_verify(ks, &t, err, sizeof(err)), KEYRING_BAD);
        assert_string_equal(err, "not signed by a payment key: bad signature (key id p1)");
    }
    keyring_free(ks);
}

static void test_refused(void **state)
{
    (void)state;
    static const char *const one[] = { "p1:pay" }, *const two_as_p1[] = { "p1:two" }, *const two[] = { "p2:two" };
    struct keyring *ks = load(one, 1), *other = load(two_as_p1, 1), *p2 = load(two, 1);
    struct pay_msg m = PAY;
    char err[256];
    assert_int_equal(psig_keys_verify(ks, &m, err, sizeof(err)), KEYRING_NONE);
    assert_string_equal(err, "not signed by a payment key: no signature");
    /* The same key id, another key: a forger's own "p1". */
    assert_int_equal(psig_keys_sign(other, &m), 0);
    assert_int_equal(psig_keys_verify(ks, &m, err, sizeof(err)), KEYRING_BAD);
    assert_int_equal(psig_keys_sign(p2, &m), 0);
    assert_int_equal(psig_keys_verify(ks, &m, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    assert_string_equal(err, "not signed by a payment key: unknown key id p2");
    snprintf(m.sig, sizeof(m.sig), "p1:%s", "00112233");
    assert_int_equal(psig_keys_verify(ks, &m, err, sizeof(err)), KEYRING_BAD);
    assert_string_equal(err, "not signed by a payment key: bad signature (not KID:64 hex digits)");
    /* Without a key set nothing signs, and nothing verifies. */
    assert_int_equal(psig_keys_sign(NULL, &m), -1);
    assert_int_equal(psig_keys_verify(NULL, &m, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    keyring_free(ks);
    keyring_free(other);
    keyring_free(p2);
}

static void test_rotation(void **state)
{
    (void)state;
    static const char *const old[] = { "p1:pay" }, *const both[] = { "p2:two", "p1:pay" };
    struct keyring *ks_old = load(old, 1), *ks_both = load(both, 2);
    struct pay_msg a = PAY, b = PAY;
    char err[256];
    assert_int_equal(keyring_count(ks_both), 2);
    assert_int_equal(psig_keys_sign(ks_old, &a), 0);
    assert_int_equal(psig_keys_verify(ks_both, &a, err, sizeof(err)), KEYRING_OK);
    assert_int_equal(psig_keys_sign(ks_both, &b), 0);
    assert_int_equal(strncmp(b.sig, "p2:", 3), 0);
    assert_int_equal(psig_keys_verify(ks_both, &b, err, sizeof(err)), KEYRING_OK);
    assert_int_equal(psig_keys_verify(ks_old, &b, err, sizeof(err)), KEYRING_UNKNOWN_KID);
    keyring_free(ks_old);
    keyring_free(ks_both);
}

static void refuses(const char *const *entries, size_t n, const char *why)
{
    struct cfg c;
    struct keyring *ks = NULL;
    char err[1024];
    keys_cfg(&c, entries, n);
    assert_int_equal(psig_keys_load(&c, &ks, err, sizeof(err)), -1);
    assert_null(ks);
    if (!strstr(err, why))
        fail_msg("'%s' lacks '%s'", err, why);
}

static void test_load_refuses(void **state)
{
    (void)state;
    static const char *const dup[] = { "p1:pay", "p1:two" }, *const short_key[] = { "p1:short" },
                             *const bad_kid[] = { "p 1:pay" }, *const missing[] = { "p1:absent" };
    refuses(NULL, 0, "kafka.payment_keys is empty");
    refuses(dup, 2, "kafka.payment_keys: key id 'p1' is there twice");
    refuses(short_key, 1, "at least 32 wanted");
    refuses(bad_kid, 1, "not \"KID:FILE\"");
    refuses(missing, 1, "absent");
}

/* The message carries its sig: the longest one, signed, fits PAY_MSG_MAX and
 * decodes to itself; a sig that could not be re-encoded is refused. */
static void test_message_carries_sig(void **state)
{
    (void)state;
    static const char *const one[] = { "p1:pay" };
    struct keyring *ks = load(one, 1);
    struct pay_msg in = { INT64_MAX, INT64_MAX, PAY_AT_MAX_MS, "", "" }, out;
    char buf[PAY_MSG_MAX], err[256];
    memset(in.ref, 'r', PAY_REF_MAX);
    in.ref[PAY_REF_MAX] = '\0';
    assert_int_equal(psig_keys_sign(ks, &in), 0);
    int n = paymsg_encode(&in, buf, sizeof(buf));
    assert_true(n > 0);
    assert_non_null(strstr(buf, ",\"sig\":\"p1:"));
    assert_int_equal(paymsg_decode(buf, (size_t)n, &out, err, sizeof(err)), 0);
    assert_true(out.order_id == in.order_id && out.user_id == in.user_id && out.paid_at_ms == in.paid_at_ms);
    assert_string_equal(out.ref, in.ref);
    assert_string_equal(out.sig, in.sig);
    assert_int_equal(psig_keys_verify(ks, &out, err, sizeof(err)), KEYRING_OK);
    static const char *const bad[] = {
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"paid_at_ms\":7,\"ref\":\"r\",\"sig\":1}",
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"paid_at_ms\":7,\"ref\":\"r\",\"sig\":\"\"}",
        "{\"v\":1,\"order_id\":\"5\",\"user_id\":6,\"paid_at_ms\":7,\"ref\":\"r\",\"sig\":\"a\\\"b\"}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        assert_int_equal(paymsg_decode(bad[i], strlen(bad[i]), &out, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "\"sig\" is not"));
    }
    keyring_free(ks);
}

/* SIGHUP's hook of both lists: a bad payment key file refuses the reload,
 * and both sets stay as they were; a good one installs both. */
static void test_reload_hook(void **state)
{
    (void)state;
    static const char *const one[] = { "p1:pay" }, *const bad[] = { "p2:absent" },
                             *const both[] = { "p2:two", "p1:pay" };
    struct keyring_live *lives[] = { osig_live(), psig_live(), NULL };
    struct daemon_reload_hook hook = keyring_reload_hook(lives);
    struct cfg c;
    struct pay_msg m = PAY;
    char err[1024];
    keys_cfg(&c, one, 1);
    assert_int_equal(osig_load(&c, err, sizeof(err)), 0);
    assert_int_equal(psig_load(&c, err, sizeof(err)), 0);
    assert_int_equal(psig_sign(&m), 0);
    assert_int_equal(strncmp(m.sig, "p1:", 3), 0);

    keys_cfg(&c, bad, 1);
    assert_int_equal(hook.prepare(hook.arg, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "kafka.payment_keys entry 'p2:absent'"));
    assert_int_equal(psig_verify(&m, err, sizeof(err)), KEYRING_OK); /* the set it had */

    keys_cfg(&c, both, 2);
    assert_int_equal(hook.prepare(hook.arg, &c, err, sizeof(err)), 0);
    assert_int_equal(psig_verify(&m, err, sizeof(err)), KEYRING_OK); /* prepared, not committed */
    hook.commit(hook.arg);
    struct pay_msg m2 = PAY;
    assert_int_equal(psig_sign(&m2), 0);
    assert_int_equal(strncmp(m2.sig, "p2:", 3), 0);
    assert_int_equal(psig_verify(&m, err, sizeof(err)), KEYRING_OK);
    assert_int_equal(psig_verify(&m2, err, sizeof(err)), KEYRING_OK);
    psig_unload();
    osig_unload();
    assert_int_equal(psig_verify(&m2, err, sizeof(err)), KEYRING_UNKNOWN_KID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign_verify),  cmocka_unit_test(test_refused),
        cmocka_unit_test(test_rotation),     cmocka_unit_test(test_load_refuses),
        cmocka_unit_test(test_message_carries_sig), cmocka_unit_test(test_reload_hook),
    };
    return cmocka_run_group_tests_name("paysig", tests, setup, teardown);
}
