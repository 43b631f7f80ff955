/* headcheck: a request head read as strictly as RFC 9112 asks, where
 * libmicrohttpd 0.9.75 is lenient, so that no proxy in front can see another
 * request boundary, path or field than the producer does (request smuggling).
 *
 * The library keys "Content-Length : 3" as "Content-Length ", glues an
 * obs-folded line to the name before it ("Content-Length3"), takes a bare LF
 * for a line end and keeps a bare CR inside a value, ignores a
 * Transfer-Encoding other than chunked (and then reads until the client
 * closes), checks nothing of Host, duplicates or the framing of a request
 * without a body length, and reads and drops a body on a GET. None of that
 * is an option of 0.9.75 (MHD_OPTION_STRICT_FOR_CLIENT only refuses a
 * missing Host, itself and with a broken answer), and it shows no raw bytes.
 * What it does show is its parse in place: the request line and the field
 * lines stay where they came, in one buffer from the method on, with NULs
 * for the separators it cut at and for each CR and LF, and
 * MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE is
 * the head's length from the method to its empty line. hc_check() walks
 * that: each field line must start where the one before ended after exactly
 * CRLF, and the last must end where the head does. A folded line, a bare LF
 * or any byte the library dropped breaks the chain. A library that parses
 * elsewhere (another version) breaks it for every request: every request is
 * refused, never one let through unchecked (tests/cli/test_http_strict.sh
 * shows which). A first Content-Length the library cannot read never gets
 * here: the library refuses it before the access handler, and clrefuse.h
 * answers it in the producer's words.
 *
 * Called on the HTTP thread from the access handler's first call of a
 * request (the head is whole), or its last (the trailers); keeps no state. */
#ifndef SECKILL_HEADCHECK_H
#define SECKILL_HEADCHECK_H

#include <microhttpd.h>
#include <stddef.h>

/* What the access handler was given, and what the URI callback saw. */
struct hc_head {
    const char *method;
    const char *url; /* as sent: hc_unescape_none() keeps every escape */
    const char *version;
    /* strlen() of the request target, query included, as
     * MHD_OPTION_URI_LOG_CALLBACK saw it */
    size_t raw_uri_len;
};

/* NULL when the head is sound; else why it is not (for the client), with
 * *status 400, or 411 for a POST without Content-Length or chunked. Every
 * refusal is a framing error: the caller closes the connection. */
const char *hc_check(struct MHD_Connection *conn, const struct hc_head *h, unsigned *status);

/* The trailer section of a chunked body (chunkcheck.h), at the body's end:
 * held to a head's rules. The library reads it from where it read the body
 * (start: the method plus the head's length), in place as a head, and keys
 * its fields MHD_FOOTER_KIND; each line must start where the one before
 * ended after CRLF, the first at start, and an empty line after CRLF must
 * end them, all within room bytes of start. NULL when sound; else why (400,
 * connection closed). */
const char *hc_check_trailers(struct MHD_Connection *conn, const char *start, size_t room);

/* The request target holds only the characters a URI may (RFC 3986:
 * visible ASCII): 1 or 0. For the URI callback, before the library cuts it. */
int hc_target_ok(const char *uri);

/* MHD_OPTION_UNESCAPE_CALLBACK: decodes nothing. A path is then matched as
 * sent: "/api/v1/seckill%00/../x", "%2F" for "/" or "%38" for "8" name no
 * resource rather than alias one (one order, one name), and a query value
 * with an escape is not a number. */
size_t hc_unescape_none(void *cls, struct MHD_Connection *conn, char *s);

#endif
