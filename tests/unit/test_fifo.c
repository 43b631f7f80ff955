/* fifo (common/base/fifo.h): first in, first out, through the caller's own
 * link member; chains, take-all and the push-and-signal hand-over. */
#include "harness.h"

#include "fifo.h"

struct job {
    int id;
    struct job *next; /* not the first member: the link is found by its offset */
    char pad[3];
};

static void test_order(void **state)
{
    (void)state;
    struct fifo f;
    struct job j[5];
    fifo_init(&f, FIFO_LINK(struct job, next));
    assert_true(fifo_empty(&f));
    assert_null(fifo_pop(&f));
    for (int i = 0; i < 5; i++) {
        j[i].id = i;
        j[i].next = &j[4 - i]; /* junk the push must overwrite */
        fifo_push(&f, &j[i]);
    }
    assert_false(fifo_empty(&f));
    assert_int_equal(f.len, 5);
    for (int i = 0; i < 3; i++) {
        struct job *x = fifo_pop(&f);
        assert_non_null(x);
        assert_int_equal(x->id, i);
        assert_null(x->next); /* out of the list: unlinked */
    }
    assert_int_equal(f.len, 2);
    fifo_push(&f, &j[0]); /* after the two left */
    assert_int_equal(((struct job *)fifo_pop(&f))->id, 3);
    assert_int_equal(((struct job *)fifo_pop(&f))->id, 4);
    assert_int_equal(((struct job *)fifo_pop(&f))->id, 0);
    assert_true(fifo_empty(&f));
    assert_int_equal(f.len, 0);
    assert_null(f.tail);
}

static void test_chain_and_take_all(void **state)
{
    (void)state;
    struct fifo f;
    struct job j[4] = { { .id = 0 }, { .id = 1 }, { .id = 2 }, { .id = 3 } };
    size_t n = 99;
    fifo_init(&f, FIFO_LINK(struct job, next));
    assert_null(fifo_take_all(&f, &n));
    assert_int_equal(n, 0);
    fifo_push(&f, &j[0]);
    /* a chain of three, its last link junk: the list ends it */
    j[1].next = &j[2];
    j[2].next = &j[3];
    j[3].next = &j[0];
    fifo_push_chain(&f, &j[1], &j[3], 3);
    fifo_push_chain(&f, NULL, NULL, 0); /* nothing */
    assert_int_equal(f.len, 4);
    struct job *h = fifo_take_all(&f, &n);
    assert_int_equal(n, 4);
    assert_true(fifo_empty(&f));
    int want = 0;
    for (struct job *x = h; x; x = x->next)
        assert_int_equal(x->id, want++);
    assert_int_equal(want, 4);
    /* usable again after a take-all */
    fifo_push(&f, &j[2]);
    assert_ptr_equal(fifo_take_all(&f, NULL), &j[2]);
    assert_null(j[2].next);
}

struct box {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fifo f;
    int got;
};

/* Takes 100 jobs handed over by the test, in order. */
static void *consume(void *arg)
{
    struct box *b = arg;
    pthread_mutex_lock(&b->mu);
    while (b->got < 100) {
        struct job *x;
        while ((x = fifo_pop(&b->f)) != NULL) {
            if (x->id != b->got)
                break;
            b->got++;
        }
        if (x)
            break; /* out of order: got stops short */
        if (b->got < 100)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void test_hand_over(void **state)
{
    (void)state;
    struct box b = { .got = 0 };
    static struct job j[100];
    pthread_t th;
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    fifo_init(&b.f, FIFO_LINK(struct job, next));
    assert_int_equal(pthread_create(&th, NULL, consume, &b), 0);
    for (int i = 0; i < 100; i++) {
        j[i].id = i;
        fifo_hand_over(&b.f, &b.mu, &b.cv, &j[i], &j[i], 1);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(b.got, 100);
    assert_true(fifo_empty(&b.f));
    fifo_hand_over(&b.f, &b.mu, &b.cv, NULL, NULL, 0); /* nothing */
    assert_true(fifo_empty(&b.f));
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_chain_and_take_all),
        cmocka_unit_test(test_hand_over),
    };
    return cmocka_run_group_tests_name("fifo", tests, NULL, NULL);
}
