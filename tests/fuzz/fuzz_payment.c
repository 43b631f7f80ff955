/* libFuzzer harness for the Kafka payment message (paymsg.h) and its MAC
 * (paysig.h): both come straight off the payments topic, from whoever holds
 * its password. Besides memory errors it checks properties:
 *  - whatever paymsg_decode accepts is a valid payment, and paymsg_encode
 *    writes a message that decodes to the very same payment, encoding that
 *    again giving the same bytes (a dead letter re-driven is the payment);
 *  - the fuzzer's own sig never verifies unless it is the real MAC, which
 *    it cannot guess: an accepted sig is the one psig_keys_sign makes;
 *  - the payment signed with the key verifies, and so does its round trip.
 * The key is made once per process in a temporary folder, removed right
 * after loading. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "paymsg.h"
#include "paysig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct keyring *keys;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_payment: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void setup(void)
{
    char dir[] = "/tmp/seckill-fuzz-pay-XXXXXX", p[96], err[512], entry[128];
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    snprintf(p, sizeof(p), "%s/payment-key", dir);
    FILE *f = fopen(p, "w");
    if (!f || fputs("fuzz-only-payment-key-0123456789abcdef\n", f) < 0 || fclose(f) != 0 || chmod(p, 0600) != 0)
        die("writing the key", p);
    snprintf(entry, sizeof(entry), "f1:%s", p);
    char *v[] = { entry };
    struct cfg c;
    memset(&c, 0, sizeof(c));
    c.kafka.payment_keys.v = v;
    c.kafka.payment_keys.n = 1;
    if (psig_keys_load(&c, &keys, err, sizeof(err)) != 0)
        die("loading the key", err);
    unlink(p);
    rmdir(dir);
}

/* m's message into buf, decoded again into back: its length. */
static int round_trip(const struct pay_msg *m, char *buf, size_t len, struct pay_msg *back)
{
    char err[128];
    int n = paymsg_encode(m, buf, len);
    if (n <= 0)
        die("PAY_MSG_MAX too small for a decoded payment", NULL);
    memset(back, 0x5a, sizeof(*back));
    if (paymsg_decode(buf, (size_t)n, back, err, sizeof(err)) != 0)
        die("re-encoded payment does not decode", err);
    if (back->order_id != m->order_id || back->user_id != m->user_id || back->paid_at_ms != m->paid_at_ms ||
        strcmp(back->ref, m->ref) != 0 || strcmp(back->sig, m->sig) != 0)
        die("round trip changed the payment", buf);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pay_msg m, back, back2, signed_m;
    char err[128], msg[PAY_MSG_MAX], msg2[PAY_MSG_MAX];
    if (!keys)
        setup();
    /* Garbage in the struct, so a field decode forgets to set shows up. */
    memset(&m, 0xa5, sizeof(m));
    memset(err, 'x', sizeof(err));
    if (paymsg_decode(data, size, &m, err, sizeof(err)) != 0) {
        if (memchr(err, '\0', sizeof(err)) == NULL)
            die("error message not terminated", NULL);
        return 0;
    }
    if (m.order_id <= 0 || m.user_id <= 0 || m.paid_at_ms <= 0 || m.paid_at_ms > PAY_AT_MAX_MS || !m.ref[0] ||
        strlen(m.ref) > PAY_REF_MAX)
        die("accepted an invalid payment", NULL);
    int n = round_trip(&m, msg, sizeof(msg), &back);
    int n2 = paymsg_encode(&back, msg2, sizeof(msg2));
    if (n2 != n || memcmp(msg, msg2, (size_t)n) != 0)
        die("encoding is not stable", msg2);
    (void)paymsg_check_key(&m, data, size, err, sizeof(err));

    signed_m = m;
    if (psig_keys_sign(keys, &signed_m) != 0)
        die("signing failed", NULL);
    enum keyring_verdict v = psig_keys_verify(keys, &m, err, sizeof(err));
    if (v == KEYRING_OK && strcmp(m.sig, signed_m.sig) != 0)
        die("a sig that is not the MAC verified", m.sig);
    if (v != KEYRING_OK && memchr(err, '\0', sizeof(err)) == NULL)
        die("verdict not terminated", NULL);
    if (psig_keys_verify(keys, &signed_m, err, sizeof(err)) != KEYRING_OK)
        die("the signed payment does not verify", err);
    round_trip(&signed_m, msg, sizeof(msg), &back2);
    if (psig_keys_verify(keys, &back2, err, sizeof(err)) != KEYRING_OK)
        die("the signed payment's round trip does not verify", err);
    return 0;
}
