/* pgarr: array parameters for libpq in PostgreSQL's binary format (the
 * server's array_send and array_recv): bigint[] and text[], one dimension,
 * no NULLs, lower bound 1.
 *
 * A batch sends thousands of ids: in binary the server copies them instead
 * of parsing decimal text, and the client formats none; a text element goes
 * as its bytes, so no word needs quoting (a reference spelled NULL stays a
 * word). Pass the array as a binary parameter (format 1: pgtrip_arrays) to a
 * statement whose parameter is cast to the same type ($1::bigint[],
 * $1::text[]): the server refuses an array whose element type is not the
 * parameter's.
 *
 * One array is built at a time in a struct pgarr: pgarr_begin, a
 * pgarr_add_* per element, pgarr_end; or pgarr_i64 for a whole int64_t
 * array. The buffer grows as needed and is kept for the next array, so a
 * caller that reuses its arrays allocates nothing once they have grown. A
 * failure to grow is remembered until the next pgarr_begin (failed), so
 * the caller checks once, at the end. A pgarr belongs to one thread;
 * zero-initialised it is empty and ready. */
#ifndef SECKILL_PGARR_H
#define SECKILL_PGARR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The element types, as the server's catalogue numbers them (pg_type: a
 * server header, so given here). */
enum pgarr_type {
    PGARR_INT8 = 20, /* bigint */
    PGARR_TEXT = 25, /* text */
};

struct pgarr {
    unsigned char *data; /* the parameter's bytes: data[0..len) */
    size_t len, cap;
    uint32_t n;          /* elements added since pgarr_begin */
    enum pgarr_type type;
    bool failed;         /* out of memory (or a text over 1 GiB) since pgarr_begin */
};

/* Start a new array of elements of type in a, dropping what it held. */
void pgarr_begin(struct pgarr *a, enum pgarr_type type);
/* One more element: v (a of PGARR_INT8), or the len bytes at s (a of
 * PGARR_TEXT; the server checks them against the client encoding). */
void pgarr_add_i64(struct pgarr *a, int64_t v);
void pgarr_add_text(struct pgarr *a, const char *s, size_t len);
/* The array done: its header says how many elements it has (an empty one is
 * the zero-dimension array '{}', as the server sends it). 0, or -1 when an
 * element could not be added (out of memory): then a must not be sent. */
int pgarr_end(struct pgarr *a);
/* The n values v as a bigint[]: pgarr_begin, each value, pgarr_end. 0 or -1. */
int pgarr_i64(struct pgarr *a, const int64_t *v, size_t n);
/* Free a's buffer; a is empty and ready again. */
void pgarr_free(struct pgarr *a);

#endif
