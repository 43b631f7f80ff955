/* chunkcheck: the chunk lines of a chunked request body read as strictly as
 * a head (headcheck.h), where libmicrohttpd 0.9.75 is lenient: it ends a
 * chunk size line, and the chunk data before the next one, at a bare LF,
 * and takes any bytes but LF as a chunk extension, as long as its read
 * buffer holds them. None of that is an option of 0.9.75 (its source marks
 * the bare LFs "TODO: Add MHD option to disallow";
 * MHD_OPTION_STRICT_FOR_CLIENT reaches neither chunks nor trailers).
 *
 * The library shows the data of each chunk, never its framing; but it
 * parses in place and does not change the bytes of a chunk line: the body
 * is read into one buffer that starts where the head ended (the method plus
 * MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE), each read appended to what is
 * left of the one before, which is moved back to that start. A piece of
 * data given past the start therefore has the chunk line that announced it
 * just before it, whole, and before that line the CRLF that ended the
 * chunk before, when they came in the same read. ck_piece() checks those.
 * A line the library took at the end of one read, with the data after it in
 * the next, is gone (written over by the next read) and cannot be checked;
 * nor can the last chunk's line, taken after the last data. So a chunked
 * request's connection is closed after its answer (ingress.c): whatever
 * follows its body is never read as a request. What is checked is only
 * what is certainly framing: a well-formed body is never refused, and a
 * library that reads elsewhere (another version) is refused nothing here.
 *
 * The trailer section is checked at the body's end: hc_check_trailers().
 *
 * Called on the HTTP thread from the access handler; the state is the
 * request's. */
#ifndef SECKILL_CHUNKCHECK_H
#define SECKILL_CHUNKCHECK_H

#include <stddef.h>
#include <stdint.h>

/* The longest chunk extension taken (";name=value..."): a buy's chunks
 * need none, and a long one only fills the buffer. */
#define CK_EXT_MAX 128

/* One chunked body's reading. */
struct ck_body {
    uintptr_t start; /* where the library reads the body into */
    size_t room;     /* how far past start a piece can be */
    uint64_t left;   /* data of the current chunk not given yet, as its line said */
    int pieces;      /* data pieces given so far */
    int lost;        /* the current chunk's line went by unseen: left is unknown */
};

/* The body is read from head + head_size on (the method as the access
 * handler got it, and the head's length); no piece lies room bytes or more
 * past that (the connection's memory). */
void ck_begin(struct ck_body *b, const char *head, size_t head_size, size_t room);

/* A piece of chunk data as the library gave it. NULL, or why the chunk
 * framing before it is refused (400, connection closed). */
const char *ck_piece(struct ck_body *b, const char *data, size_t len);

#endif
