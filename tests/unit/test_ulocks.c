/* The batch of users' locks (consumer/ulocks.h), without a Redis: the lock
 * names it builds (keys_user_lock), its tally of the statuses, which locks
 * it gives back, and a batch whose lock client never connected (every user
 * an error, none held, nothing released). Locks taken from a live Redis are
 * in tests/it/test_consumer.c and test_payments.c. */
#include "harness.h"

#include <stdint.h>
#include <string.h>

#include "keys.h"
#include "lock.h"
#include "ulocks.h"

static void test_user_lock_names(void **state)
{
    (void)state;
    char name[KEYS_USER_LOCK_MAX], small[8];
    assert_int_equal(keys_user_lock(name, sizeof(name), 42), 7);
    assert_string_equal(name, "user:42");
    /* any id fits the room the header promises */
    assert_int_equal(keys_user_lock(name, sizeof(name), INT64_MAX), 24);
    assert_string_equal(name, "user:9223372036854775807");
    assert_int_equal(keys_user_lock(name, sizeof(name), INT64_MIN), 25);
    assert_string_equal(name, "user:-9223372036854775808");
    /* too small a buffer is refused, not cut */
    assert_int_equal(keys_user_lock(small, sizeof(small), 123), -1);
    assert_int_equal(keys_user_lock(small, sizeof(small), 12), 7);
    assert_string_equal(small, "user:12");
    /* the name the workers' and the payments' locks have always had: the
     * key of its group is the same as before */
    char k1[KEYS_MAX], k2[KEYS_MAX];
    keys_user_lock(name, sizeof(name), 9);
    keys_lock(k1, sizeof(k1), "seckill", name);
    keys_lock(k2, sizeof(k2), "seckill", "user:9");
    assert_string_equal(k1, k2);
}

static void test_tally(void **state)
{
    (void)state;
    const int st[] = { LOCK_OK, LOCK_BUSY, LOCK_ERROR, LOCK_OK, LOCK_BUSY, LOCK_BUSY };
    struct ul_tally t = { 9, 9, 9 };
    ul_count(st, 6, &t);
    assert_int_equal(t.got, 2);
    assert_int_equal(t.busy, 3);
    assert_int_equal(t.errors, 1);
    ul_count(st, 0, &t);
    assert_int_equal(t.got + t.busy + t.errors, 0);
}

/* Only the locks held are given back, in their order; the others' slots
 * (never set by lock_acquire_many) are never passed on. The pointers are
 * never followed: any distinct addresses do. */
static void test_held_first(void **state)
{
    (void)state;
    int a, b, c, d;
    struct lock *locks[] = { (struct lock *)&a, (struct lock *)&b, (struct lock *)&c, (struct lock *)&d };
    const int st[] = { LOCK_BUSY, LOCK_OK, LOCK_ERROR, LOCK_OK };
    assert_int_equal(ul_held_first(locks, st, 4), 2);
    assert_ptr_equal(locks[0], &b);
    assert_ptr_equal(locks[1], &d);
    const int none[] = { LOCK_BUSY, LOCK_ERROR };
    assert_int_equal(ul_held_first(locks, none, 2), 0);
}

/* No lock client (Redis could not be reached when ul_connect was called):
 * every user of the batch is an error, none is held, the names are built,
 * and giving back holds nothing to give back (no client is called). */
static void test_unconnected(void **state)
{
    (void)state;
    struct cfg c;
    struct ul_batch b;
    struct ul_tally t;
    const int64_t users[] = { 5, 7, 11 };
    memset(&c, 0, sizeof(c));
    assert_int_equal(ul_init(&b, &c, 4, 0), 0);
    assert_int_equal(ul_lock(&b, users, 3, &t), 0);
    assert_int_equal(t.got, 0);
    assert_int_equal(t.busy, 0);
    assert_int_equal(t.errors, 3);
    for (size_t i = 0; i < 3; i++)
        assert_false(ul_held(&b, i));
    assert_false(ul_held(&b, 3)); /* beyond the batch */
    assert_string_equal(b.names[0], "user:5");
    assert_string_equal(b.names[2], "user:11");
    assert_false(ul_any_lost(&b));
    ul_release(&b);
    assert_int_equal(b.n, 0);
    ul_publish(&b); /* no client: nothing to publish, and no crash */
    ul_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_lock_names),
        cmocka_unit_test(test_tally),
        cmocka_unit_test(test_held_first),
        cmocka_unit_test(test_unconnected),
    };
    return cmocka_run_group_tests_name("ulocks", tests, NULL, NULL);
}
