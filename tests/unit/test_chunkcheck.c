/* The chunk lines of a chunked body, as chunkcheck.h finds them in the
 * library's buffer: refused where they are certainly framing and not as
 * strict as a head, never refused where they are well formed, nor where
 * they went by out of sight. Each case lays the buffer out as libmicrohttpd
 * 0.9.75 leaves it: the head, then each read's bytes from the body's start
 * on, and the data pieces where it gives them. */
#include "harness.h"

#include <string.h>

#include "chunkcheck.h"

#define HEAD "POST /api/v1/seckill HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"

static char buf[4096];
static struct ck_body b;

/* A new body, its head in the buffer. */
static void begin(void)
{
    memset(buf, 0, sizeof(buf));
    memcpy(buf, HEAD, strlen(HEAD));
    ck_begin(&b, buf, strlen(HEAD), sizeof(buf) - strlen(HEAD));
}

/* A read: bytes laid from the body's start on (what was left before is
 * moved there by the library; here it is in bytes). */
static void lay(const char *bytes)
{
    memcpy(buf + strlen(HEAD), bytes, strlen(bytes));
}

/* The data piece at offset off of the body's start, len bytes. */
static const char *piece(size_t off, size_t len)
{
    return ck_piece(&b, buf + strlen(HEAD) + off, len);
}

static void test_well_formed(void **state)
{
    (void)state;
    begin();
    lay("5\r\nhello\r\n3;a=b;c\r\nabc\r\n0\r\n\r\n");
    assert_null(piece(3, 5));
    assert_null(piece(19, 3));
    /* Every piece in its own read: a chunk read on, then the next line. */
    begin();
    lay("5\r\nhe");
    assert_null(piece(3, 2));
    lay("llo");
    assert_null(piece(0, 3));
    lay("\r\n3\r\nabc");
    assert_null(piece(5, 3));
    /* The CR that ended a read left for the next (the library keeps it). */
    begin();
    lay("1\r\na\r");
    assert_null(piece(3, 1));
    lay("\r\n1\r\nb");
    assert_null(piece(5, 1));
    /* 16 digits are within 64 bits. */
    begin();
    lay("0000000000000001\r\nx");
    assert_null(piece(18, 1));
}

static void test_bare_lf(void **state)
{
    (void)state;
    begin();
    lay("5\nhello");
    assert_string_equal(piece(2, 5), "a chunk line ended by a bare LF");
    begin();
    lay("5;a=b\nhello");
    assert_string_equal(piece(6, 5), "a chunk line ended by a bare LF");
    begin();
    lay("1\r\na\n3\r\nabc");
    assert_null(piece(3, 1));
    assert_string_equal(piece(8, 3), "chunk data ended by a bare LF");
    /* The LF that ends the data first in its read. */
    begin();
    lay("1\r\na");
    assert_null(piece(3, 1));
    lay("\n3\r\nabc");
    assert_string_equal(piece(4, 3), "chunk data ended by a bare LF");
}

static void test_extension(void **state)
{
    (void)state;
    char line[300];
    begin();
    lay("5;a\rb\r\nhello");
    assert_string_equal(piece(7, 5), "a control character in a chunk extension (a bare CR?)");
    begin();
    snprintf(line, sizeof(line), "5;%0*d\r\nhello", CK_EXT_MAX, 0);
    lay(line);
    assert_null(piece(strlen(line) - 5, 5));
    begin();
    snprintf(line, sizeof(line), "5;%0*d\r\nhello", CK_EXT_MAX + 1, 0);
    lay(line);
    assert_string_equal(piece(strlen(line) - 5, 5), "an over-long chunk extension");
    begin();
    snprintf(line, sizeof(line), "5;%0*d\r\nhello", 250, 0);
    lay(line);
    assert_string_equal(piece(strlen(line) - 5, 5), "an over-long chunk extension");
}

/* What went by out of sight, or what the library would not have taken,
 * is refused nothing: whatever the bytes before the piece. */
static void test_out_of_sight(void **state)
{
    (void)state;
    begin();
    lay("5\r\nhello");
    assert_null(piece(3, 5));
    /* "\r\n" taken at the end of a read, then "3\r\n" at the end of
     * another: the data comes first in the next. */
    lay("abc\n\n\n");
    assert_null(piece(0, 3));
    assert_true(b.lost);
    /* Read on while its size is unknown, then a line in sight again. */
    lay("de");
    assert_null(piece(0, 2));
    lay("\r\n2\r\nfg");
    assert_null(piece(5, 2));
    assert_false(b.lost);
    /* A line the library would have refused (17 digits, a space). */
    begin();
    lay("00000000000000001\r\nx");
    assert_null(piece(19, 1));
    begin();
    lay("1 \r\nx");
    assert_null(piece(4, 1));
    /* A piece outside the buffer the body is read into. */
    begin();
    assert_null(ck_piece(&b, buf, 1));
    assert_null(ck_piece(&b, buf + sizeof(buf), 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed),
        cmocka_unit_test(test_bare_lf),
        cmocka_unit_test(test_extension),
        cmocka_unit_test(test_out_of_sight),
    };
    return cmocka_run_group_tests_name("chunkcheck", tests, NULL, NULL);
}
