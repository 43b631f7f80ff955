#include "headcheck.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2: tchar. */
static int tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

static int digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

int hc_target_ok(const char *uri)
{
    for (const unsigned char *p = (const unsigned char *)uri; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            return 0;
    return *uri != 0;
}

size_t hc_unescape_none(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* The walk over the field lines, in the order they came. Addresses are
 * compared as integers: a folded name lives in another block than the head,
 * and comparing pointers into different objects is undefined in C. */
struct walk {
    uintptr_t next; /* where the next field line must start */
    uintptr_t end;  /* the head's end, its empty line's LF included */
    const char *why;
    int host, authz, te, cl;
    const char *te_value, *cl_value;
    int cl_bad, cl_differs;
};

/* One field line as the library cut it: NAME NUL OWS VALUE NUL NUL, the NULs
 * where the colon, the CR and the LF were. NULL, or what is wrong. */
static const char *field_line(struct walk *w, const char *key, size_t klen, const char *value, size_t vlen)
{
    uintptr_t k = (uintptr_t)key, v = (uintptr_t)value;
    if (k != w->next)
        return "a field line folded onto the one before (obs-fold), or one not ended by CRLF";
    if (!token(key, klen))
        return "a field name that is not a token (whitespace before the colon?)";
    if (v < k + klen + 1 || v + vlen + 2 > w->end)
        return "a field line the head does not hold";
    for (const char *p = key + klen + 1; p < value; p++)
        if (*p != ' ' && *p != '\t')
            return "a field line with more than whitespace after its colon";
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return "a control character in a field value (a bare CR?)";
    }
    if (value[vlen] || value[vlen + 1])
        return "a field line not ended by CRLF";
    w->next = v + vlen + 2;
    return NULL;
}

/* The fields whose count or value frames the message or names who asks. */
static void count(struct walk *w, const char *key, const char *value)
{
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        w->host++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0)
        w->authz++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        w->te++;
        w->te_value = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        /* The library parses only the first one; the others are ours. */
        if (!digits(value))
            w->cl_bad = 1;
        if (!w->cl++)
            w->cl_value = value;
        else if (strcmp(w->cl_value, value) != 0)
            w->cl_differs = 1;
    }
}

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t klen,
                                const char *value, size_t vlen)
{
    struct walk *w = cls;
    (void)kind;
    if (!value)
        value = "";
    if ((w->why = field_line(w, key, klen, value, vlen)) != NULL)
        return MHD_NO;
    count(w, key, value);
    return MHD_YES;
}

/* The request line: METHOD SP TARGET SP VERSION CRLF, cut in place. NULL, or
 * what is wrong; w->next set to where the first field line must start. */
static const char *request_line(const struct hc_head *h, struct walk *w)
{
    size_t mlen = strlen(h->method);
    uintptr_t m = (uintptr_t)h->method, u = (uintptr_t)h->url, v = (uintptr_t)h->version;
    if (!token(h->method, mlen))
        return "the method is not a token";
    /* Single spaces; and the target the URI callback measured ends where
     * the version starts: a NUL in the target ends it early. */
    if (u != m + mlen + 1 || v != u + h->raw_uri_len + 1)
        return "a request line not of three parts split by single spaces (a NUL in the path?)";
    if (strcmp(h->version, "HTTP/1.1") != 0 && strcmp(h->version, "HTTP/1.0") != 0)
        return "not HTTP/1.1 or HTTP/1.0";
    if (v + 10 > w->end || h->version[8] || h->version[9])
        return "a request line not ended by CRLF";
    w->next = v + 10;
    return NULL;
}

/* The message's framing and its single fields, RFC 9112 6.1-6.3 and 3.2. */
static const char *framing(const struct hc_head *h, const struct walk *w, unsigned *status)
{
    int http11 = strcmp(h->version, "HTTP/1.1") == 0;
    if (w->host > 1 || (http11 && w->host == 0))
        return "an HTTP/1.1 request needs exactly one Host field";
    if (w->authz > 1)
        return "Authorization given twice";
    if (w->te) {
        if (!http11)
            return "Transfer-Encoding in an HTTP/1.0 request";
        /* The library reads chunked only when the first field is exactly
         * that, and any other coding until the client closes. */
        if (w->te > 1 || strcasecmp(w->te_value, "chunked") != 0)
            return "a Transfer-Encoding other than chunked";
        if (w->cl)
            return "Content-Length and Transfer-Encoding together";
    }
    if (w->cl_bad)
        return "a Content-Length that is not a number";
    if (w->cl_differs)
        return "Content-Length given twice with different values";
    /* A GET or HEAD means nothing by a body (RFC 9110 9.3.1): one is either
     * read and dropped, or another request a proxy did not see. */
    if ((strcmp(h->method, "GET") == 0 || strcmp(h->method, "HEAD") == 0) &&
        (w->te || (w->cl && w->cl_value[strspn(w->cl_value, "0")])))
        return "a GET or HEAD with a body";
    if (!w->te && !w->cl && strcmp(h->method, "POST") == 0) {
        *status = MHD_HTTP_LENGTH_REQUIRED;
        return "a POST needs Content-Length or Transfer-Encoding: chunked";
    }
    return NULL;
}

const char *hc_check(struct MHD_Connection *conn, const struct hc_head *h, unsigned *status)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    struct walk w = { 0 };
    const char *why;
    *status = MHD_HTTP_BAD_REQUEST;
    if (!ci)
        return "a head that cannot be checked";
    w.end = (uintptr_t)h->method + ci->header_size;
    if ((why = request_line(h, &w)) != NULL)
        return why;
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, on_field, &w);
    if (w.why)
        return w.why;
    /* The empty line, and nothing between it and the last field line. */
    if (w.next + 2 != w.end || *(const char *)w.next || *((const char *)w.next + 1))
        return "a head not ended by an empty line after CRLF";
    return framing(h, &w, status);
}

const char *hc_check_trailers(struct MHD_Connection *conn, const char *start, size_t room)
{
    struct walk w = { .next = (uintptr_t)start, .end = (uintptr_t)start + room };
    const char *empty;
    MHD_get_connection_values_n(conn, MHD_FOOTER_KIND, on_field, &w);
    if (w.why)
        return w.why;
    /* The empty line that ends them: CRLF, both cut to NUL. */
    empty = start + (w.next - (uintptr_t)start);
    if (w.next + 2 > w.end || empty[0] || empty[1])
        return "a trailer section not ended by an empty line after CRLF";
    return NULL;
}
