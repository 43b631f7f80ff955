/* sweep_min_age_ms and sweep_age_ms: the floor every sweep keeps, read from
 * the configuration as pub_open() would build its producer. No broker is
 * needed: the one pub_open() below never sends anything. */
#include "harness.h"

#include <stdio.h>
#include <unistd.h>

#include "publish.h"
#include "sweepage.h"

/* The smallest valid file (as in test_cfg), so every other setting is the default. */
#define MINIMAL "kafka = { brokers = \"127.0.0.1:1\"; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n"

static void load(struct cfg *c)
{
    char path[64], err[256];
    snprintf(path, sizeof(path), "/tmp/sktest-sweepage-%d.cfg", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(MINIMAL, f);
    fclose(f);
    int rc = cfg_load(path, c, err, sizeof(err));
    unlink(path);
    if (rc != 0)
        fail_msg("cfg_load: %s", err);
}

static void test_default(void **state)
{
    (void)state;
    struct cfg c;
    load(&c);
    /* The producer's own default, not librdkafka's (300 s): pub_open sets it. */
    assert_int_equal(sweep_min_age_ms(&c), 2 * PUB_DEFAULT_TIMEOUT_MS + 2000);
    assert_int_equal(sweep_age_ms(&c), 30000); /* producer.sweep_age_ms, above the floor */
    cfg_free(&c);
}

static void test_properties(void **state)
{
    (void)state;
    struct cfg c;
    load(&c);
    harness_props_set(&c.kafka.properties, "message.timeout.ms", "1000");
    assert_int_equal(sweep_min_age_ms(&c), 4000);
    /* producer_properties override the common ones, as in pub_open */
    harness_props_set(&c.kafka.producer_properties, "message.timeout.ms", "20000");
    assert_int_equal(sweep_min_age_ms(&c), 42000);
    assert_int_equal(sweep_age_ms(&c), 42000); /* the floor wins over sweep_age_ms 30000 */
    /* librdkafka's alias counts too */
    harness_props_set(&c.kafka.producer_properties, "delivery.timeout.ms", "3000");
    assert_int_equal(sweep_min_age_ms(&c), 8000);
    /* consumer properties do not */
    harness_props_set(&c.kafka.consumer_properties, "message.timeout.ms", "100000");
    assert_int_equal(sweep_min_age_ms(&c), 8000);
    cfg_free(&c);
}

static void test_small_setting_raised(void **state)
{
    (void)state;
    struct cfg c;
    load(&c);
    c.producer.sweep_age_ms = 1000;
    harness_props_set(&c.kafka.producer_properties, "message.timeout.ms", "2000");
    assert_int_equal(sweep_age_ms(&c), 6000);
    c.producer.sweep_age_ms = 7000;
    assert_int_equal(sweep_age_ms(&c), 7000);
    cfg_free(&c);
}

static void test_refused_property(void **state)
{
    (void)state;
    struct cfg c;
    load(&c);
    harness_props_set(&c.kafka.producer_properties, "message.timeout.ms", "soon");
    assert_int_equal(sweep_min_age_ms(&c), 2 * PUB_DEFAULT_TIMEOUT_MS + 2000);
    cfg_free(&c);
}

/* The very value the producer's own conf ends up with. */
static void test_same_as_publisher(void **state)
{
    (void)state;
    const char *values[] = { NULL, "1000", "2500", "0" };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        struct cfg c;
        struct pub *p = NULL;
        char err[512];
        load(&c);
        if (values[i])
            harness_props_set(&c.kafka.producer_properties, "message.timeout.ms", values[i]);
        if (pub_open(&c, &p, err, sizeof(err)) != 0)
            fail_msg("pub_open: %s", err);
        assert_int_equal(sweep_min_age_ms(&c), 2 * (int64_t)pub_timeout_ms(p) + 2000);
        pub_close(p, 0);
        cfg_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_small_setting_raised),
        cmocka_unit_test(test_refused_property),
        cmocka_unit_test(test_same_as_publisher),
    };
    return cmocka_run_group_tests_name("sweepage", tests, NULL, NULL);
}
