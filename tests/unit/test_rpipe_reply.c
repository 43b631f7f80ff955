/* rp_classify, the transport's own reading of a reply (rpipe.h), without a
 * Redis: replies are parsed from RESP text by hiredis's reader, as they come
 * off a connection. The texts are Redis 7's: "ERR Function not found" is
 * what an FCALL of a name it does not hold answers, READONLY what a demoted
 * primary answers a write, LOADING what one answers while it reads its data
 * back after a restart. Then what rfunc, above it, says of such a reply.
 * The same words from a live Redis are in tests/it/test_rpipe.c
 * (test_single_functions). */
#include "funclibs.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>

#include "rfunc.h"
#include "rpipe.h"

static void expect(const char *text, enum rp_reply_kind kind)
{
    redisReply *r = harness_resp(text);
    if (rp_classify(r) != kind)
        fail_msg("%s: kind %d, want %d", text, (int)rp_classify(r), (int)kind);
    freeReplyObject(r);
}

static void test_no_function(void **state)
{
    (void)state;
    expect("-ERR Function not found\r\n", RP_REPLY_NO_FUNCTION);
    /* only those words: another error, or the words as data, is not it */
    expect("-ERR Function not found in library x\r\n", RP_REPLY_ERROR);
    expect("-ERR function not found\r\n", RP_REPLY_ERROR);
    expect("-ERR Library not found\r\n", RP_REPLY_ERROR);
    expect("$22\r\nERR Function not found\r\n", RP_REPLY_ANSWER);
    expect("+ERR Function not found\r\n", RP_REPLY_ANSWER);
}

static void test_readonly_and_others(void **state)
{
    (void)state;
    expect("-READONLY You can't write against a read only replica.\r\n", RP_REPLY_READONLY);
    expect("-LOADING Redis is loading the dataset in memory\r\n", RP_REPLY_LOADING);
    expect("-ERR LOADING\r\n", RP_REPLY_ERROR);
    expect("-ERR unknown command 'FCALLX'\r\n", RP_REPLY_ERROR);
    expect("-NOPERM User seckill_producer has no permissions to run the 'fcall' command\r\n", RP_REPLY_ERROR);
    expect(":3\r\n", RP_REPLY_ANSWER);
    expect("+OK\r\n", RP_REPLY_ANSWER);
    expect("*2\r\n:1\r\n-ERR Function not found\r\n", RP_REPLY_ANSWER); /* an array is an answer */
    expect("$-1\r\n", RP_REPLY_ANSWER);
    assert_int_equal(rp_classify(NULL), RP_REPLY_NONE);
}

/* rfunc, above the transport: a missing function's reply said as which
 * function, which library at which version, and how to load it. */
static void test_rfunc_says_missing(void **state)
{
    (void)state;
    const struct rfunc f = RFUNC_INIT("seckill_reserve", &funclib_producer);
    char buf[512], want[128];
    redisReply *r = harness_resp("-ERR Function not found\r\n");
    rfunc_error_text(&f, NULL, r, buf, sizeof(buf));
    freeReplyObject(r);
    snprintf(want, sizeof(want),
             "the function seckill_reserve is not loaded (library seckill_producer, version %d",
             rfunc_lib_version(&funclib_producer));
    assert_true(rfunc_lib_version(&funclib_producer) > 0);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, "seckillctl functions load"));
    /* any other error reply is said as it came */
    r = harness_resp("-ERR unknown command\r\n");
    assert_string_equal(rfunc_error_text(&f, NULL, r, buf, sizeof(buf)),
                        "seckill_reserve: ERR unknown command");
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_function),
        cmocka_unit_test(test_readonly_and_others),
        cmocka_unit_test(test_rfunc_says_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
